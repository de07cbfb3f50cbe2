import type { MiddlewareHandler } from "hono";
import { cors } from "hono/cors";
import type { AppEnv } from "./context";

/**
 * CORS for the shopper routes (API.md v1.4 "Browser clients and the buy button"): a page on one of
 * `ALLOWED_ORIGINS` may call `/api/*` from the browser. Hono's `cors` writes the headers; it runs only
 * for an origin on the list, because by itself it would answer any origin's preflight `204` and send
 * `Access-Control-Expose-Headers` to all: here another origin gets no CORS header at all, and its
 * preflight falls through to the routes (`405`/`404`), which the browser refuses. A preflight is
 * answered here, before any route, so it never reaches a stock object. Admin, webhook and metrics
 * routes are not under `/api/` and never answer CORS.
 */

/** Request headers a shopper's page sends (the contract's list). */
const ALLOW_HEADERS = ["Authorization", "Content-Type", "Access-Code", "CF-Turnstile-Response", "Proof-Of-Work"];
/** Response headers a page may read. */
const EXPOSE_HEADERS = ["Retry-After", "Idempotent-Replayed"];
const ALLOW_METHODS = ["GET", "POST", "DELETE", "OPTIONS"];
/** How long a browser keeps a preflight's answer. */
const MAX_AGE_SECONDS = 600;

const headers = cors({
  origin: (origin) => origin,
  allowMethods: ALLOW_METHODS,
  allowHeaders: ALLOW_HEADERS,
  exposeHeaders: EXPOSE_HEADERS,
  maxAge: MAX_AGE_SECONDS,
});

/** Each `ALLOWED_ORIGINS` value parsed once: the origins it lists, as a browser sends them. */
let parsed: { from: string; origins: ReadonlySet<string> } | undefined;

/**
 * The origins of a comma-separated list, each as `new URL(...).origin` writes it (scheme and host in
 * lower case, no default port, no path). An entry that is no http(s) origin is a deployment error.
 */
export function allowedOrigins(list: string | undefined): ReadonlySet<string> {
  const from = list ?? "";
  if (parsed?.from === from) return parsed.origins;
  const origins = new Set<string>();
  for (const entry of from.split(",").map((e) => e.trim())) {
    if (entry === "") continue;
    let url: URL;
    try {
      url = new URL(entry);
    } catch {
      throw new Error(`ALLOWED_ORIGINS: ${JSON.stringify(entry)} is not an origin (like https://shop.example)`);
    }
    if ((url.protocol !== "https:" && url.protocol !== "http:") || url.pathname !== "/" || url.search || url.hash) {
      throw new Error(`ALLOWED_ORIGINS: ${JSON.stringify(entry)} is not an origin (like https://shop.example)`);
    }
    origins.add(url.origin);
  }
  parsed = { from, origins };
  return origins;
}

/**
 * Whether a request gets CORS: under `/api/` (as Hono matches `/api/*`, `/api` itself included),
 * with an `Origin` exactly one the deployment allows. The header is read only under `/api/`.
 */
export function wantsCors(path: string, headers: Headers, list: string | undefined): boolean {
  if (path !== "/api" && !path.startsWith("/api/")) return false;
  const origin = headers.get("Origin");
  return origin !== null && allowedOrigins(list).has(origin);
}

/** CORS for a request {@link wantsCors} picked: its headers, or the preflight's `204`. */
export const shopperCors: MiddlewareHandler<AppEnv> = headers;
