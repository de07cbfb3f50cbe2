import type { Hono } from "hono";
import indexHtml from "../../public/index.html";
import powWorkerJs from "../../public/static/pow-worker.js";
import receiptCheckJs from "../../public/static/receipt-check.js";
import storefrontJs from "../../public/static/storefront.js";
import type { AppEnv } from "../http/context";
import { DASHBOARD_FILES } from "../routes/dashboard";
import { HTML, JAVASCRIPT, type PageFiles, servePages } from "../routes/pages";

/**
 * The demo storefront at `/`, its script and its proof-of-work solver: harness only. It mints
 * shopper JWTs with `POST /dev/jwt` and pays with `POST /dev/pay`, which exist only here, so
 * production (src/routes/dashboard.ts) serves none of it and `wrangler deploy` bundles none of it.
 */
export const STOREFRONT_FILES = {
  "/": { body: indexHtml, type: HTML, turnstile: true },
  "/static/storefront.js": { body: storefrontJs, type: JAVASCRIPT },
  "/static/pow-worker.js": { body: powWorkerJs, type: JAVASCRIPT },
  "/static/receipt-check.js": { body: receiptCheckJs, type: JAVASCRIPT },
} as const satisfies PageFiles;

/** Where the dashboard's header has room for a link to the storefront (public/dashboard.html). */
const STOREFRONT_LINK_SLOT = "<!-- storefront link (harness only) -->";

/** The harness's pages: the storefront, and the dashboard with a link to it in its header. */
export const harnessPages: Hono<AppEnv> = servePages({
  ...DASHBOARD_FILES,
  "/dashboard": {
    ...DASHBOARD_FILES["/dashboard"],
    body: DASHBOARD_FILES["/dashboard"].body.replace(STOREFRONT_LINK_SLOT, '<a href="/">Storefront</a>'),
  },
  ...STOREFRONT_FILES,
});
