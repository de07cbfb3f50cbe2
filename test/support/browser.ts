import { copyFileSync, existsSync, mkdirSync } from "node:fs";
import { type BrowserContext, chromium, type Page } from "playwright-core";
import { expect } from "vitest";
import { type DevServer, startDevServer } from "../../tools/dev-server";
import { startWebhookReceiver, type WebhookReceiver } from "../../tools/webhook-receiver";
import { axeViolations, cardOverflows, pageOverflow, serious } from "./page-checks";

/**
 * What the browser tests share: a gateway under `wrangler dev` (dev tools on, http://127.0.0.1
 * webhook receivers allowed, one retry after 1 s so a delivery fails within seconds), Debian's
 * Chromium (never a downloaded one), a webhook receiver, and the calls, pages and checks they make.
 */

export const CHROMIUM = "/usr/bin/chromium";
const CHROMIUM_ARGS = [
  "--headless",
  "--no-sandbox",
  "--disable-gpu",
  "--disable-quic",
  "--no-first-run",
  "--disable-background-networking",
  "--disable-component-update",
  "--disable-sync",
];
export const ADMIN = { authorization: "Bearer dev-admin-token", "content-type": "application/json" };
export const DESKTOP = { width: 1280, height: 800 };
export const PHONE = { width: 420, height: 900 };
const RESULTS = new URL("../../test-results/", import.meta.url);
const DOCS_SCREENSHOTS = new URL("../../docs/screenshots/", import.meta.url);

/**
 * Debian's Chromium with one profile for all of a file's pages, which open as tabs of it: a context of
 * their own each (playwright's `browser.newPage()`) starts an off-the-record profile and its renderer
 * per page, several times a tab's CPU. The pages keep no shared state that matters: the storefront
 * keeps its shopper in the tab's sessionStorage, and nothing sets cookies or localStorage.
 */
export async function launchBrowser(): Promise<BrowserContext> {
  if (!existsSync(CHROMIUM)) {
    throw new Error(`${CHROMIUM} is missing: install Debian's chromium (apt-get install -y chromium)`);
  }
  // "": a temporary profile directory, removed when the browser closes.
  return chromium.launchPersistentContext("", {
    executablePath: CHROMIUM,
    args: CHROMIUM_ARGS,
    headless: true,
    permissions: ["clipboard-read", "clipboard-write"],
  });
}

export interface SaleDay {
  server: DevServer;
  browser: BrowserContext;
  receiver: WebhookReceiver;
  stop(): Promise<void>;
}

/** The gateway, Chromium and a webhook receiver, started together (`vars` added to the defaults). */
export async function startSaleDay(vars: Record<string, string> = {}): Promise<SaleDay> {
  mkdirSync(RESULTS, { recursive: true });
  mkdirSync(DOCS_SCREENSHOTS, { recursive: true });
  const [server, browser, receiver] = await Promise.all([
    startDevServer({
      vars: { DEV_TOOLS: "true", WEBHOOK_ALLOW_HTTP_LOCALHOST: "true", WEBHOOK_RETRY_SCHEDULE: "1", ...vars },
    }),
    launchBrowser(),
    startWebhookReceiver(),
  ]);
  return {
    server,
    browser,
    receiver,
    async stop() {
      await browser.close();
      await server.stop();
      await receiver.close();
    },
  };
}

/** One call to the gateway: its status and JSON answer (admin by default). */
export async function call(
  server: DevServer,
  method: string,
  path: string,
  body?: unknown,
  headers: Record<string, string> = ADMIN,
) {
  const response = await fetch(`${server.url}${path}`, {
    method,
    headers: { ...headers, "content-type": "application/json" },
    body: body === undefined ? null : JSON.stringify(body),
  });
  return { status: response.status, json: (await response.json()) as Record<string, unknown> };
}

/** The Authorization header of a shopper, from the dev-only JWT route. */
export async function shopper(server: DevServer, userId: string): Promise<Record<string, string>> {
  const jwt = await call(server, "POST", "/dev/jwt", { userId }, {});
  return { authorization: `Bearer ${jwt.json.token}` };
}

/** A reservation through the public API (a token, then the hold). */
export async function reserveByApi(server: DevServer, auth: Record<string, string>, sku: string, quantity = 1) {
  const token = await call(server, "POST", `/api/skus/${sku}/tokens`, undefined, auth);
  expect(token.status, JSON.stringify(token.json)).toBe(201);
  return call(server, "POST", `/api/skus/${sku}/reservations`, { token: token.json.token, quantity }, auth);
}

const problems = new Map<Page, string[]>();

/**
 * A page that records uncaught errors and console errors (CSP violations among them); a failed load
 * also names its method and URL, which Chromium's console text leaves out.
 */
export async function newPage(browser: BrowserContext, viewport: { width: number; height: number }): Promise<Page> {
  const page = await browser.newPage();
  await page.setViewportSize(viewport);
  const seen: string[] = [];
  problems.set(page, seen);
  page.on("pageerror", (error) => seen.push(String(error)));
  page.on("console", (message) => {
    if (message.type() === "error") seen.push(message.text());
  });
  page.on("response", (response) => {
    if (response.status() >= 500) seen.push(`${response.request().method()} ${response.url()}: ${response.status()}`);
  });
  return page;
}

/** What went wrong in the page, less the 4xx answers it asked for and handles. */
export function unexpectedProblems(page: Page): string[] {
  return (problems.get(page) ?? []).filter((p) => !/status of 4\d\d/.test(p));
}

/** A screenshot in test-results/, copied to docs/screenshots/ as `docsName` when given (the README's). */
export async function screenshot(page: Page, name: string, docsName?: string, fullPage = true) {
  const file = new URL(`${name}.png`, RESULTS);
  await page.screenshot({ path: file.pathname, fullPage });
  if (docsName) copyFileSync(file, new URL(docsName, DOCS_SCREENSHOTS));
}

/**
 * Opens the dashboard in `page`. Its load (the page, its style and two scripts, all from the dev
 * server) did not finish in 30 s in 3 of 5 whole-suite runs on a 2-core machine, in a fresh tab and
 * never with the file alone; the cause is not found (an open finding). The page is usable once its
 * DOM and deferred scripts are in (DOMContentLoaded), and a load that hangs is asked once more.
 */
export async function gotoDashboard(page: Page, url: string): Promise<void> {
  const target = `${url}/dashboard`;
  try {
    await page.goto(target, { waitUntil: "domcontentloaded" });
  } catch (err) {
    if (!(err instanceof Error && err.name === "TimeoutError")) throw err;
    console.warn(`the dashboard's load timed out, asked once more: ${err.message.split("\n")[0]}`);
    await page.goto(target, { waitUntil: "domcontentloaded" });
  }
}

/**
 * The dashboard, signed in with the local admin token. `beforeSignIn` runs once the page has loaded:
 * where a test routes the board's reads (`page.route`), so no interception is in place while the page
 * loads (a load under interception timed out at 30 s in two whole-suite runs; never one without).
 */
export async function openDashboard(
  server: DevServer,
  page: Page,
  beforeSignIn: () => Promise<unknown> = async () => {},
): Promise<void> {
  await gotoDashboard(page, server.url);
  await beforeSignIn();
  await page.waitForSelector("#login:not([hidden])");
  await page.fill("#token", "dev-admin-token");
  await page.click("#login button");
  await page.waitForSelector("#board:not([hidden])");
}

/** The page fits its screen and every card its content; axe-core finds nothing serious, no text below 4.5:1. */
export async function expectSound(page: Page, what: string) {
  expect(await pageOverflow(page), `${what}: sideways scroll`).toBe(0);
  expect(await cardOverflows(page), `${what}: content wider than its card`).toEqual([]);
  const findings = await axeViolations(page);
  expect(serious(findings), `${what}: axe-core`).toEqual([]);
  expect(
    findings.filter((f) => f.id === "color-contrast").flatMap((f) => f.nodes.map((n) => n.target)),
    `${what}: text below 4.5:1`,
  ).toEqual([]);
}
