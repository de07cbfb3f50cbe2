import type { Context } from "hono";
import { createMiddleware } from "hono/factory";
import { routePath } from "hono/route";
import { log } from "../../durable-objects/shared/log";
import { countResponse, flushMetricsSoon } from "../observability/metrics";
import { carriesRequestId, REQUEST_ID_HEADER } from "./answer";
import type { AppEnv } from "./context";
import { shopperCors, wantsCors } from "./cors";
import { ApiError } from "./errors";

/** A request slower than this is always logged (wall time: the Workers clock moves only on I/O). */
const SLOW_REQUEST_MS = 1_000;
const MAX_REQUEST_ID_LENGTH = 128;
/** A caller's id is echoed only when it is this plain: it ends up in log lines and queue events. */
const SANE_REQUEST_ID = /^[\w\-=]+$/;

/**
 * What every request passes, once: a contract route's one handler calls {@link observeRequest}
 * itself (register.ts), anything else passes this middleware (src/app.ts). It gives the request its
 * id (the caller's `X-Request-Id` when it is sane, else a new UUID, echoed back), counts the response
 * and its duration by route, and writes a `request` line for errors (5xx), slow requests and a
 * sample of the rest (`REQUEST_LOG_SAMPLE_RATE`).
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
  await observeRequest(c, undefined, next);
});

/**
 * {@link observe}'s work around `next`, for a caller that is not a layer of Hono's: a contract
 * route's one handler (register.ts), which passes its pattern as `route`. Answers the response.
 */
export async function observeRequest(
  c: Context<AppEnv>,
  route: string | undefined,
  next: () => Promise<void>,
): Promise<Response> {
  const started = performance.now();
  const headers = c.req.raw.headers;
  let requestId = headers.get(REQUEST_ID_HEADER);
  if (!requestId || requestId.length > MAX_REQUEST_ID_LENGTH || !SANE_REQUEST_ID.test(requestId)) {
    requestId = crypto.randomUUID();
  }
  c.set("requestId", requestId);
  // CORS is this middleware's to call (not a layer of its own on `/api/*`): most requests carry no
  // allowed `Origin`, and every layer costs each request a dispatch.
  if (wantsCors(c.req.path, headers, c.env.ALLOWED_ORIGINS)) {
    const preflight = await shopperCors(c, next);
    if (preflight && !c.finalized) c.res = preflight;
  } else await next();
  const res = c.res;
  // Set on the finished response (one header write), not before it: a header set ahead of the route
  // makes every answer merge a prepared header set into its own. An answer made with it has it.
  if (!carriesRequestId(res)) res.headers.set(REQUEST_ID_HEADER, requestId);
  const ms = performance.now() - started;
  // The pattern of the route that answered, never the raw path (ids would make every path a series);
  // answers no route gave (404 for unknown paths, 405, 413 before the route) are "/*".
  const pattern = route ?? (routePath(c) || "/*");
  const status = res.status;
  const method = c.req.method;
  countResponse(pattern, method, status, ms / 1000);
  if (status >= 500 || ms >= SLOW_REQUEST_MS || Math.random() < Number(c.env.REQUEST_LOG_SAMPLE_RATE)) {
    log(status >= 500 ? "error" : "info", "request", {
      requestId,
      method,
      route: pattern,
      path: c.req.path,
      status,
      code: c.error instanceof ApiError ? c.error.code : undefined,
      userId: c.get("userId"),
      ms: Math.round(ms * 10) / 10,
    });
  }
  flushMetricsSoon(c.env, (promise) => c.executionCtx.waitUntil(promise));
  return res;
}
