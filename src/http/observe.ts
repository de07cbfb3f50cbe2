import { createMiddleware } from "hono/factory";
import { routePath } from "hono/route";
import { log, withLogContext } from "../../durable-objects/stock-model";
import { flushMetricsSoon, increment, observeDuration } from "../observability/metrics";
import type { AppEnv } from "./context";
import { ApiError } from "./errors";

/** A request slower than this is always logged (wall time: the Workers clock moves only on I/O). */
const SLOW_REQUEST_MS = 1_000;

/**
 * The first middleware of every request: opens the log context with the request id (see
 * `requestId()` in app.ts: the caller's `X-Request-Id` when it is sane, else a new UUID, echoed
 * back), counts the response and its duration by route, and writes a `request` line for errors
 * (5xx), slow requests and a sample of the rest (`REQUEST_LOG_SAMPLE_RATE`).
 *
 * Not a line per request: a sold-out storm is thousands of identical 409s a second, and writing
 * each one cost more CPU than answering it (bench: /healthz 0.30× → 0.40× of a bare Worker without
 * it). Every response is still counted in /metrics, and the request id still reaches the stock
 * object's and the consumer's lines and the queue events, so a purchase can be followed end to end.
 */
export const observe = createMiddleware<AppEnv>(async (c, next) => {
  const started = performance.now();
  await withLogContext({ requestId: c.get("requestId") }, next);
  const ms = performance.now() - started;
  // The pattern of the route that answered, never the raw path (ids would make every path a series);
  // answers no route gave (404 for unknown paths, 405, 413 before the route) are "/*".
  const route = routePath(c) || "/*";
  const status = c.res.status;
  const method = c.req.method;
  observeDuration({ route, method }, ms / 1000);
  increment("flashgate_http_responses_total", { route, method, status });
  if (status >= 500 || ms >= SLOW_REQUEST_MS || Math.random() < Number(c.env.REQUEST_LOG_SAMPLE_RATE)) {
    // Written after `next` left the log context, so the request id is given here.
    log(status >= 500 ? "error" : "info", "request", {
      requestId: c.get("requestId"),
      method,
      route,
      path: c.req.path,
      status,
      code: c.error instanceof ApiError ? c.error.code : undefined,
      userId: c.get("userId"),
      ms: Math.round(ms * 10) / 10,
    });
  }
  flushMetricsSoon(c.env, (promise) => c.executionCtx.waitUntil(promise));
});
