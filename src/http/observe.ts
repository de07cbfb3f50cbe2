import { createMiddleware } from "hono/factory";
import { routePath } from "hono/route";
import { log, withLogContext } from "../observability/log";
import { flushMetricsSoon, increment, observeDuration } from "../observability/metrics";
import type { AppEnv } from "./context";
import { ApiError } from "./errors";

/**
 * The first middleware of every request: opens the log context with the request id (see
 * `requestId()` in app.ts: the caller's `X-Request-Id` when it is sane, else a new UUID, echoed
 * back), then writes one `request` line and counts the response and its duration by route.
 */
export const observe = createMiddleware<AppEnv>(async (c, next) => {
  const started = performance.now();
  await withLogContext({ requestId: c.get("requestId") }, next);
  const seconds = (performance.now() - started) / 1000;
  // The pattern of the route that answered, never the raw path (ids would make every path a series);
  // answers no route gave (404 for unknown paths, 405, 413 before the route) are "/*".
  const route = routePath(c) || "/*";
  const status = c.res.status;
  observeDuration({ route, method: c.req.method }, seconds);
  increment("flashgate_http_responses_total", { route, method: c.req.method, status });
  // Written after `next` left the log context, so the request id is given here.
  log(status >= 500 ? "error" : "info", "request", {
    requestId: c.get("requestId"),
    method: c.req.method,
    route,
    path: c.req.path,
    status,
    code: c.error instanceof ApiError ? c.error.code : undefined,
    userId: c.get("userId"),
    ms: Math.round(seconds * 1000 * 10) / 10,
  });
  flushMetricsSoon(c.env, (promise) => c.executionCtx.waitUntil(promise));
});
