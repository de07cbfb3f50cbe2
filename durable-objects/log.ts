import { AsyncLocalStorage } from "node:async_hooks";

/**
 * Structured logs: one JSON object per line, `{time, level, msg, requestId?, ...fields}`.
 *
 * The request id lives in an async context, so every line written while a request is being
 * served carries it without being handed down: the edge opens the context per request (from
 * `X-Request-Id`, or a new id), passes the id to the stock object with each call (where the
 * object opens it again), and the object writes it into the queue events it emits, so the
 * consumer's lines carry it too.
 */
export type LogLevel = "debug" | "info" | "warn" | "error";

export interface LogContext {
  requestId?: string | undefined;
  [field: string]: unknown;
}

const context = new AsyncLocalStorage<LogContext>();

/** Runs `fn` with these fields (a request id first of all) on every line it logs. */
export function withLogContext<T>(fields: LogContext, fn: () => T): T {
  return context.run({ ...context.getStore(), ...fields }, fn);
}

/** The request id of the work being done, if it started with a request. */
export function currentRequestId(): string | undefined {
  return context.getStore()?.requestId;
}

const METHOD = { debug: "debug", info: "log", warn: "warn", error: "error" } as const;

export function log(level: LogLevel, msg: string, fields: Record<string, unknown> = {}): void {
  const line = { time: new Date().toISOString(), level, msg, ...context.getStore(), ...fields };
  console[METHOD[level]](JSON.stringify(line));
}
