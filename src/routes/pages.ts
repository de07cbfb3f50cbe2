import { Hono } from "hono";
import { fnv1a } from "../../durable-objects/support";
import dashboardHtml from "../../public/dashboard.html";
import indexHtml from "../../public/index.html";
import dashboardJs from "../../public/static/dashboard.js";
import powWorkerJs from "../../public/static/pow-worker.js";
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

/** Where the Turnstile widget's script and frame come from, when the storefront renders it. */
const TURNSTILE_ORIGIN = "https://challenges.cloudflare.com";

/**
 * The pages load their own scripts (the proof-of-work solver in a Web Worker) and style and talk
 * only to this origin; with a Turnstile site key, the storefront also loads the widget from Cloudflare.
 */
function contentSecurityPolicy(turnstile: boolean): string {
  const widget = turnstile ? ` ${TURNSTILE_ORIGIN}` : "";
  return (
    `default-src 'none'; script-src 'self'${widget}; worker-src 'self'; style-src 'self'; connect-src 'self'; ` +
    `img-src 'self' data:; ${turnstile ? `frame-src ${TURNSTILE_ORIGIN}; ` : ""}` +
    "base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
  );
}

const PAGE_HEADERS: Record<string, string> = {
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
  "/static/pow-worker.js": { body: powWorkerJs, type: "text/javascript; charset=utf-8" },
  "/static/style.css": { body: styleCss, type: "text/css; charset=utf-8" },
};

/** A page as served under one site key (the storefront carries it for its Turnstile widget). */
interface Served {
  body: string;
  etag: string;
  csp: string;
}

for (const [path, file] of Object.entries(FILES)) {
  // Made on first use and again only when the site key changes: once per isolate, not per request.
  let served: (Served & { siteKey: string }) | undefined;
  pages.get(path, (c) => {
    const siteKey = path === "/" ? (c.env.TURNSTILE_SITE_KEY ?? "") : "";
    if (served?.siteKey !== siteKey) {
      const body = siteKey
        ? file.body.replace('data-turnstile-site-key=""', `data-turnstile-site-key="${escapeAttribute(siteKey)}"`)
        : file.body;
      // FNV-1a of the text and its length.
      served = {
        siteKey,
        body,
        etag: `"${fnv1a(body).toString(16)}-${body.length.toString(16)}"`,
        csp: contentSecurityPolicy(siteKey !== ""),
      };
    }
    const headers = {
      ...PAGE_HEADERS,
      "Content-Security-Policy": served.csp,
      ETag: served.etag,
      "Content-Type": file.type,
    };
    if (c.req.header("if-none-match") === served.etag) return c.body(null, 304, headers);
    return c.body(served.body, 200, headers);
  });
}

function escapeAttribute(text: string): string {
  return text.replace(/[&"<>]/g, (ch) => `&#${ch.charCodeAt(0)};`);
}
