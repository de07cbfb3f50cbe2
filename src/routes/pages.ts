import { Hono } from "hono";
import { fnv1a } from "../../durable-objects/support";
import dashboardHtml from "../../public/dashboard.html";
import indexHtml from "../../public/index.html";
import dashboardJs from "../../public/static/dashboard.js";
import storefrontJs from "../../public/static/storefront.js";
import styleCss from "../../public/static/style.css";
import type { AppEnv } from "../http/context";

/**
 * The demo storefront (`/`) and the operator dashboard (`/dashboard`), with their script and style,
 * served from the Worker's own bundle: wrangler.toml imports the files of public/ as text.
 *
 * Not an `[assets]` binding: with `run_worker_first` (needed so /api/* and unknown paths keep the
 * contract's JSON 404/405), every request, API calls included, first passed the asset router, and
 * locally that router is a worker of its own in workerd, which every API request paid for (commit
 * e7dcb88). Served from the bundle, a page is one more route and an API request pays nothing for
 * the pages. On Cloudflare the asset router is not billed, but this costs little either: a page view
 * is one short Worker invocation, and the bundle grows by the pages' size.
 */
export const pages = new Hono<AppEnv>();

/** The pages load their own script and style and talk only to this origin. */
const PAGE_HEADERS: Record<string, string> = {
  "Content-Security-Policy":
    "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; img-src 'self' data:; " +
    "base-uri 'none'; form-action 'none'; frame-ancestors 'none'",
  "Referrer-Policy": "no-referrer",
  "X-Content-Type-Options": "nosniff",
  // Revalidated on every load (the ETag makes that a 304), so a deploy is seen at once.
  "Cache-Control": "no-cache",
};

const FILES: Record<string, { body: string; type: string }> = {
  "/": { body: indexHtml, type: "text/html; charset=utf-8" },
  "/dashboard": { body: dashboardHtml, type: "text/html; charset=utf-8" },
  "/static/storefront.js": { body: storefrontJs, type: "text/javascript; charset=utf-8" },
  "/static/dashboard.js": { body: dashboardJs, type: "text/javascript; charset=utf-8" },
  "/static/style.css": { body: styleCss, type: "text/css; charset=utf-8" },
};

for (const [path, file] of Object.entries(FILES)) {
  let etag: string | undefined; // FNV-1a of the text and its length: computed on first use, once per isolate
  pages.get(path, (c) => {
    etag ??= `"${fnv1a(file.body).toString(16)}-${file.body.length.toString(16)}"`;
    const headers = { ...PAGE_HEADERS, ETag: etag, "Content-Type": file.type };
    if (c.req.header("if-none-match") === etag) return c.body(null, 304, headers);
    return c.body(file.body, 200, headers);
  });
}
