import { Hono } from "hono";
import { fnv1a } from "../../durable-objects/shared/fnv1a";
import type { AppEnv } from "../http/context";

/**
 * How a Worker serves its pages: a table of files, each answered at its path from the Worker's own
 * bundle (wrangler.toml imports the files of public/ as text), with an ETag, a Content-Security-Policy
 * and revalidation on every load. Which files go in the table is the entry's choice: production
 * serves the operator dashboard (src/routes/dashboard.ts), the harness entry the demo storefront
 * beside it (src/harness/storefront.ts).
 *
 * Not an `[assets]` binding: with `run_worker_first` (needed so /api/* and unknown paths keep the
 * contract's JSON 404/405), every request, API calls included, first passed the asset router, and
 * locally that router is a worker of its own in workerd, which every API request paid for (commit
 * e7dcb88). Served from the bundle, a page is one more route and an API request pays nothing for
 * the pages. On Cloudflare the asset router is not billed, but this costs little either: a page view
 * is one short Worker invocation, and the bundle grows by the pages' size.
 */

/** One file of a page table. */
export interface PageFile {
  body: string;
  type: string;
  /**
   * The page renders the Turnstile widget: its `data-turnstile-site-key=""` is filled with the var
   * TURNSTILE_SITE_KEY, and while that is set its policy lets the widget load from Cloudflare.
   */
  turnstile?: true;
}

/** Files by the path they are served at. */
export type PageFiles = Record<string, PageFile>;

export const HTML = "text/html; charset=utf-8";
export const JAVASCRIPT = "text/javascript; charset=utf-8";
export const CSS = "text/css; charset=utf-8";

/** Where the Turnstile widget's script and frame come from, when a page renders it. */
const TURNSTILE_ORIGIN = "https://challenges.cloudflare.com";

/**
 * The pages load their own scripts (the proof-of-work solver in a Web Worker) and style and talk
 * only to this origin; with a Turnstile site key, a page that renders the widget also loads it from Cloudflare.
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

/** A page as served under one site key (a page with the Turnstile widget carries it). */
interface Served {
  body: string;
  etag: string;
  csp: string;
}

/** The routes that serve `files`, one GET (and so HEAD) route per path. */
export function servePages(files: PageFiles): Hono<AppEnv> {
  const pages = new Hono<AppEnv>();
  for (const [path, file] of Object.entries(files)) {
    // Made on first use and again only when the site key changes: once per isolate, not per request.
    let served: (Served & { siteKey: string }) | undefined;
    pages.get(path, (c) => {
      const siteKey = file.turnstile ? (c.env.TURNSTILE_SITE_KEY ?? "") : "";
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
  return pages;
}

function escapeAttribute(text: string): string {
  return text.replace(/[&"<>]/g, (ch) => `&#${ch.charCodeAt(0)};`);
}
