import { createMiddleware } from "hono/factory";
import { routePath } from "hono/route";
import { log } from "../../durable-objects/shared/log";
import { countResponse, flushMetricsSoon } from "../observability/metrics";
import type { AppEnv } from "./context";
import { shopperCors, wantsCors } from "./cors";
import { ApiError } from "./errors";

/** A request slower than this is always logged (wall time: the Workers clock moves only on I/O). */
const SLOW_REQUEST_MS = 1_000;
const REQUEST_ID_HEADER = "X-Request-Id";
const MAX_REQUEST_ID_LENGTH = 128;
/** A caller's id is echoed only when it is this plain: it ends up in log lines and queue events. */
const SANE_REQUEST_ID = /^[\w\-=]+$/;

/**
 * The one middleware of every request. It gives the request its id (the caller's `X-Request-Id`
 * when it is sane, else a new UUID, echoed back), counts the response and its duration by route,
 * and writes a `request` line for errors (5xx), slow requests and a sample of the rest
 * (`REQUEST_LOG_SAMPLE_RATE`).
 *
 * The id is a context variable (`c.get("requestId")`) that the routes hand to the stock object with
 * each call; the object writes it on its lines and into the queue events it emits, so the consumer's
 * lines carry it too and a purchase can be followed end to end. At the edge it is passed, not held
 * in an async context: without an `AsyncLocalStorage` frame per request, and with this one middleware
 * in place of four (Hono's request id, 405 and body limit; the 405 is now the not-found handler's,
 * the body limit the routes' that take a body), a request costs less (docs/PERFORMANCE.md).
 *
 * Not a line per request: a sold-out storm is thousands of identical 409s a second, and writing
 * each one cost more CPU than answering it. Every response is still counted in /metrics.
 */
export const observe = createMiddleware<AppEnv>(async (c, next) => {
  const started = performance.now();
  let requestId = c.req.raw.headers.get(REQUEST_ID_HEADER);
  if (!requestId || requestId.length > MAX_REQUEST_ID_LENGTH || !SANE_REQUEST_ID.test(requestId)) {
    requestId = crypto.randomUUID();
  }
  c.set("requestId", requestId);
  // CORS is this middleware's to call (not a layer of its own on `/api/*`): most requests carry no
  // allowed `Origin`, and every layer costs each request a dispatch.
  if (wantsCors(c.req.path, c.req.raw.headers, c.env.ALLOWED_ORIGINS)) {
    const preflight = await shopperCors(c, next);
    if (preflight && !c.finalized) c.res = preflight;
  } else await next();
  const res = c.res;
  // Set on the finished response (one header write), not before it: a header set ahead of the route
  // makes every answer merge a prepared header set into its own.
  res.headers.set(REQUEST_ID_HEADER, requestId);
  const ms = performance.now() - started;
  // The pattern of the route that answered, never the raw path (ids would make every path a series);
  // answers no route gave (404 for unknown paths, 405, 413 before the route) are "/*".
  const route = routePath(c) || "/*";
  const status = res.status;
  const method = c.req.method;
  countResponse(route, method, status, ms / 1000);
  if (status >= 500 || ms >= SLOW_REQUEST_MS || Math.random() < Number(c.env.REQUEST_LOG_SAMPLE_RATE)) {
    log(status >= 500 ? "error" : "info", "request", {
      requestId,
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
