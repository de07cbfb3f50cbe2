import { Hono } from "hono";
import dashboardHtml from "../../public/dashboard.html";
import dashboardJs from "../../public/static/dashboard.js";
import dashboardConsoleJs from "../../public/static/dashboard-console.js";
import styleCss from "../../public/static/style.css";
import type { AppEnv } from "../http/context";
import { CSS, HTML, JAVASCRIPT, type PageFiles, servePages } from "./pages";

/** The operator dashboard, its scripts (the board, the console) and the stylesheet every page shares. */
export const DASHBOARD_FILES = {
  "/dashboard": { body: dashboardHtml, type: HTML },
  "/static/dashboard.js": { body: dashboardJs, type: JAVASCRIPT },
  "/static/dashboard-console.js": { body: dashboardConsoleJs, type: JAVASCRIPT },
  "/static/style.css": { body: styleCss, type: CSS },
} as const satisfies PageFiles;

/**
 * The pages of a deployed Worker: the operator dashboard, and `/` sending whoever opens the
 * Worker's URL there (`302` to `/dashboard`). The demo storefront is not among them: it buys
 * through the harness's `/dev/*` routes, so it is served by the harness entry only
 * (src/harness/storefront.ts), which puts it at `/`.
 */
export const operatorPages = new Hono<AppEnv>();
operatorPages.get("/", (c) => c.redirect("/dashboard", 302));
operatorPages.route("/", servePages(DASHBOARD_FILES));
