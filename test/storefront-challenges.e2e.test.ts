import { randomUUID } from "node:crypto";
import { mkdirSync } from "node:fs";
import type { BrowserContext, Page } from "playwright-core";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { type DevServer, startDevServer } from "../tools/dev-server";
import { launchBrowser } from "./support/browser";

/**
 * The storefront's side of the bot challenges (API.md "Bots") in headless Chromium against
 * `wrangler dev`: a shopper buys through a proof of work (12 bits, solved in the page's Web Worker,
 * its progress shown, cancellable), and with a Turnstile site key the page renders the widget's
 * place and says clearly when its script cannot load (it comes from Cloudflare; this machine is
 * offline to it).
 */

const ADMIN = { authorization: "Bearer dev-admin-token", "content-type": "application/json" };
const RESULTS = new URL("../test-results/", import.meta.url);

let server: DevServer;
let browser: BrowserContext;

beforeAll(async () => {
  mkdirSync(RESULTS, { recursive: true });
  [server, browser] = await Promise.all([
    startDevServer({
      vars: { DEV_TOOLS: "true", POW_BITS: "12", TURNSTILE_SITE_KEY: "1x00000000000000000000AA" },
    }),
    launchBrowser(),
  ]);
});
afterAll(async () => {
  await browser?.close();
  await server?.stop();
});

async function createSku(totalStock: number): Promise<string> {
  const sku = `pow-${randomUUID().slice(0, 6)}`;
  const response = await fetch(`${server.url}/admin/skus/${sku}`, {
    method: "PUT",
    headers: ADMIN,
    body: JSON.stringify({ name: "Drop", totalStock, perUserLimit: 2 }),
  });
  expect(response.status).toBe(200);
  return sku;
}

async function signedIn(sku: string, user: string): Promise<Page> {
  const page = await browser.newPage();
  await page.setViewportSize({ width: 1000, height: 1100 });
  // No Turnstile widget can load here: the page would refuse to buy. This stands in for the solved
  // widget, so the token request carries an answer; the Worker has no Turnstile secret, so only the
  // proof of work is checked.
  await page.route("https://challenges.cloudflare.com/**", (route) => route.abort());
  await page.goto(`${server.url}/?sku=${sku}`);
  await page.fill("#user", user);
  await page.click("#user-form button");
  await expect.poll(() => page.textContent("#who")).toContain(`Signed in as ${user}`);
  await page.waitForSelector("#buy:not([disabled])", { timeout: 15_000 });
  return page;
}

describe("storefront challenges", () => {
  it("says plainly when the Turnstile widget cannot load", async () => {
    const sku = await createSku(5);
    const page = await signedIn(sku, "tess");
    await expect.poll(() => page.getAttribute("body", "data-turnstile")).toBe("unavailable");
    expect(await page.textContent("#turnstile-status")).toContain("could not load from challenges.cloudflare.com");
    await page.screenshot({ path: new URL("storefront-turnstile-unavailable.png", RESULTS).pathname });
    await page.close();
  });

  it("buys through a proof of work solved in a Web Worker, and cancels one", async () => {
    const sku = await createSku(5);
    const page = await signedIn(sku, "pia");
    // The widget's answer as a solved widget would give it (the Worker checks no Turnstile answer here).
    await page.evaluate('window.turnstile = { getResponse: () => "XXXX.DUMMY.TOKEN.XXXX", reset: () => undefined }');
    await page.click("#buy");
    await expect.poll(() => page.textContent("#res-status"), { timeout: 30_000 }).toBe("held");
    const solvedMs = Number(await page.getAttribute("body", "data-pow-ms"));
    expect(solvedMs).toBeGreaterThan(0);
    expect(await page.isHidden("#pow")).toBe(true);

    // A cancelled check mints nothing: the stock stays as it was.
    // A worker that never answers, so the check is still running when Cancel is pressed.
    await page.evaluate("window.Worker = class extends window.Worker { postMessage() {} }");
    await page.click("#buy");
    await page.waitForSelector("#pow:not([hidden])");
    expect(await page.textContent("#pow-status")).toContain("Checking you are not a bot (about 4,096 tries)");
    await page.screenshot({ path: new URL("storefront-pow-running.png", RESULTS).pathname });
    await page.click("#pow-cancel");
    await expect.poll(() => page.textContent("#message")).toContain("Cancelled");
    const view = (await (await fetch(`${server.url}/admin/skus/${sku}`, { headers: ADMIN })).json()) as {
      stock: { held: number };
    };
    expect(view.stock.held).toBe(1);
    await page.close();
  });
});
