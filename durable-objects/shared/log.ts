import { AsyncLocalStorage } from "node:async_hooks";

/**
 * Structured logs: one JSON object per line, `{time, level, msg, requestId?, ...fields}`.
 *
 * The request id follows a purchase end to end: the edge gives each request one (from
 * `X-Request-Id`, or a new id; src/http/observe.ts) and hands it to the stock object with each
 * call, as an argument. The object opens a log context with it, so every line written while it
 * serves the call carries the id without being handed down, and writes it into the queue events it
 * emits, so the consumer's lines carry it too. The edge passes the id to its own lines as a field
 * rather than opening a context per request, which cost more than the rest of its request
 * bookkeeping (src/http/observe.ts).
 */
export type LogLevel = "debug" | "info" | "warn" | "error";

interface LogContext {
  requestId?: string | undefined;
  [field: string]: unknown;
}

const context = new AsyncLocalStorage<LogContext>();

/** Runs `fn` with these fields (a request id first of all) on every line it logs. */
export function withLogContext<T>(fields: LogContext, fn: () => T): T {
  return context.run({ ...context.getStore(), ...fields }, fn);
}

const METHOD = { debug: "debug", info: "log", warn: "warn", error: "error" } as const;

export function log(level: LogLevel, msg: string, fields: Record<string, unknown> = {}): void {
  const line = { time: new Date().toISOString(), level, msg, ...context.getStore(), ...fields };
  console[METHOD[level]](JSON.stringify(line));
}
