import { Hono } from "hono";
import { fnv1a } from "../../durable-objects/shared/fnv1a";
import flashgateJs from "../../public/embed/flashgate.js";
import powWorkerJs from "../../public/static/pow-worker.js";
import receiptCheckJs from "../../public/static/receipt-check.js";
import type { AppEnv } from "../http/context";
import { JAVASCRIPT } from "./pages";

/**
 * The buy button any shop page may embed (API.md v1.4 "Browser clients and the buy button"):
 * `GET /embed/flashgate.js`, the `<flashgate-buy>` element as an ES module, and
 * `GET /embed/pow-worker.js`, the proof-of-work solver it runs in a Web Worker (a worker must be
 * same-origin with the page, so the element fetches this text and starts it from a Blob URL), and
 * `GET /embed/receipt-check.js`, the module that checks a receipt against the log's key, which the
 * element imports from beside itself.
 *
 * Served by every entry, production's included, from the Worker's bundle (wrangler.toml imports them
 * as text), with `Access-Control-Allow-Origin: *`: the files are public, carry no credentials, and any
 * page may import them (a module script from another origin is fetched in CORS mode). The API calls
 * the element makes are what ALLOWED_ORIGINS guards. No page policy (CSP): these are scripts run in
 * the shop's page, under the shop's own policy.
 */
const FILES: Record<string, string> = {
  "/embed/flashgate.js": flashgateJs,
  "/embed/pow-worker.js": powWorkerJs,
  "/embed/receipt-check.js": receiptCheckJs,
};

export const embed = new Hono<AppEnv>();

for (const [path, body] of Object.entries(FILES)) {
  const etag = `"${fnv1a(body).toString(16)}-${body.length.toString(16)}"`;
  const headers = {
    "Content-Type": JAVASCRIPT,
    "Access-Control-Allow-Origin": "*",
    "Cross-Origin-Resource-Policy": "cross-origin",
    "X-Content-Type-Options": "nosniff",
    // Revalidated on every load (the ETag makes that a 304), so a deploy's element is used at once.
    "Cache-Control": "no-cache",
    ETag: etag,
  };
  embed.get(path, (c) => {
    if (c.req.header("if-none-match") === etag) return c.body(null, 304, headers);
    return c.body(body, 200, headers);
  });
}
