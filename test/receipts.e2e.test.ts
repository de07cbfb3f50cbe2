import { execFile } from "node:child_process";
import { randomUUID } from "node:crypto";
import { readFileSync } from "node:fs";
import { createServer, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import { promisify } from "node:util";
import type { Page } from "playwright-core";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { readDevVars } from "../tools/dev-vars";
import { shopperJwt } from "../tools/jwt";
import {
  call,
  DESKTOP,
  expectSound,
  newPage,
  openDashboard,
  PHONE,
  type SaleDay,
  screenshot,
  shopper,
  startSaleDay,
  unexpectedProblems,
} from "./support/browser";

/**
 * The verifiable sale in the pages (issue #52; API.md v1.4 "The verifiable sale", docs/VERIFY.md), in
 * headless Chromium against `wrangler dev` (which keeps a log: .dev.vars has LOG_SIGNING_KEY): the
 * storefront's hold card and the buy button (issue #54) say "Verified: entry N of M in the signed
 * log" once the reservation's receipt is there and the page checked it against the log's key (GET
 * /api/log/key: the inclusion proof and the checkpoint's signature; N the proof's index + 1, M its
 * checkpoint's tree size), a receipt that does not check out is never called verified, and the
 * console's SKU card shows the log's size from the public checkpoint.
 */

const WAIT = { timeout: 20_000, interval: 250 };
const AUTH_SECRET = readDevVars().AUTH_SECRET ?? "dev-auth-secret";
const run = promisify(execFile);
/**
 * `npm run verify-sale`'s script, run by node with tsx's loader (as package.json's `dev` runs): the
 * same code without npx and tsx's own process in front (about 0.7 CPU-s a run, issue #56).
 */
const VERIFY_SALE = ["--import", "tsx", "scripts/verify-sale.ts"];
const VERIFIED = /^Verified: entry ([\d,]+) of ([\d,]+) in the signed log\.?$/;

let day: SaleDay;
let shop: Server;
let shopOrigin = "";

/** The shop's page with the buy button, and POST /jwt?user=… minting that shopper's JWT (docs/EMBED.md). */
function startShop(): Promise<Server> {
  const server = createServer((req, res) => {
    const url = new URL(req.url ?? "/", "http://shop");
    void (async () => {
      if (req.method === "POST" && url.pathname === "/jwt") {
        const jwt = await shopperJwt(url.searchParams.get("user") ?? "", AUTH_SECRET, 600);
        res.writeHead(200, { "content-type": "text/plain" }).end(jwt);
        return;
      }
      const sku = url.searchParams.get("sku") ?? "";
      const user = url.searchParams.get("user") ?? "";
      res.writeHead(200, { "content-type": "text/html; charset=utf-8" }).end(`<!doctype html>
<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1">
<title>Tee shop</title><script type="module" src="${day.server.url}/embed/flashgate.js"></script>
<style>body { font-family: system-ui, sans-serif; margin: 0; color: #1d1d1f; background: #f4f4f6; }
header { background: #1d1d1f; color: #fff; padding: 1rem 1.5rem; } main { padding: 1.5rem; max-width: 40rem; }</style>
</head><body><header><h1>Tee shop</h1></header><main><p>Signed in as ${user}.</p>
<flashgate-buy sku="${sku}" api="${day.server.url}"></flashgate-buy></main>
<script type="module">
  const button = document.querySelector("flashgate-buy");
  button.getToken = () => fetch("/jwt?user=${encodeURIComponent(user)}", { method: "POST" }).then((r) => r.text());
  document.addEventListener("flashgate:held", (event) => event.preventDefault());
</script></body></html>`);
    })();
  });
  return new Promise((resolve) => server.listen(0, "127.0.0.1", () => resolve(server)));
}

beforeAll(async () => {
  shop = await startShop();
  shopOrigin = `http://127.0.0.1:${(shop.address() as AddressInfo).port}`;
  day = await startSaleDay({ ALLOWED_ORIGINS: shopOrigin });
}, 120_000);
afterAll(async () => {
  await day?.stop();
  if (shop) await new Promise((resolve) => shop.close(resolve));
});

const api = (method: string, path: string, body?: unknown, headers?: Record<string, string>) =>
  call(day.server, method, path, body, headers);

type Receipt = { entry: string; index: number; proof: string };

/** The reservation's receipt of `entry` as the gateway serves it, and its checkpoint's tree size. */
async function receiptOf(user: string, id: string, entry: string) {
  const view = await api("GET", `/api/reservations/${id}`, undefined, await shopper(day.server, user));
  const receipt = (view.json.receipts as Receipt[]).find((r) => r.entry === entry);
  if (!receipt) throw new Error(`no ${entry} receipt in ${JSON.stringify(view.json)}`);
  const lines = receipt.proof.split("\n");
  const size = Number(lines[lines.indexOf("", lines.indexOf(`index ${receipt.index}`)) + 2]);
  return { ...receipt, size };
}

/**
 * A receipt with one byte changed: the first hash of its inclusion proof, or the checkpoint's
 * signature (past its 4-byte key id).
 */
function tamper(proof: string, what: "hash" | "signature"): string {
  const lines = proof.split("\n");
  const at =
    what === "hash" ? lines.findIndex((l) => l.startsWith("index ")) + 1 : lines.findIndex((l) => l.startsWith("— "));
  const words = (lines[at] ?? "").split(" ");
  const bytes = Buffer.from(words.at(-1) ?? "", "base64");
  const flip = what === "hash" ? 0 : 10;
  expect(bytes.length, `the receipt's ${what}`).toBe(what === "hash" ? 32 : 68);
  bytes[flip] = (bytes[flip] ?? 0) ^ 1;
  lines[at] = [...words.slice(0, -1), bytes.toString("base64")].join(" ");
  return lines.join("\n");
}

/** The page reads every reservation (GET /api/reservations/:id) with its receipts tampered with. */
function tamperReceipts(page: Page, what: "hash" | "signature") {
  return page.route(
    (url) => /^\/api\/reservations\/[^/]+$/.test(url.pathname),
    async (route) => {
      if (route.request().method() !== "GET") return route.continue();
      const response = await route.fetch();
      const body = await response.json();
      for (const receipt of (body.receipts ?? []) as Receipt[]) receipt.proof = tamper(receipt.proof, what);
      await route.fulfill({ response, json: body });
    },
  );
}

/** The page's requests for the log's key (GET /api/log/key), counted. */
function keyRequests(page: Page) {
  const seen = { count: 0 };
  page.on("request", (request) => {
    if (new URL(request.url()).pathname === "/api/log/key") seen.count++;
  });
  return seen;
}

/** "entry N of M" read off a line, as numbers. */
function place(text: string | null) {
  const match = VERIFIED.exec((text ?? "").trim());
  return match ? { n: Number(match[1]?.replace(/,/g, "")), of: Number(match[2]?.replace(/,/g, "")) } : null;
}

async function newSku(prefix: string) {
  const sku = `${prefix}-${randomUUID().slice(0, 6)}`;
  const created = await api("PUT", `/admin/skus/${sku}`, {
    name: "Log tee",
    totalStock: 5,
    perUserLimit: 2,
    price: 2500,
  });
  expect(created.status, JSON.stringify(created.json)).toBe(200);
  return sku;
}

describe("the verifiable sale in the pages (issue #52)", () => {
  it("the storefront's hold card shows the hold's receipt, then the payment's, and how to check them", async () => {
    const sku = await newSku("logtee");
    // Another shopper's hold first: the page's is not the log's second entry by chance.
    const other = await shopper(day.server, `ola-${sku}`);
    const token = await api("POST", `/api/skus/${sku}/tokens`, undefined, other);
    expect(
      (await api("POST", `/api/skus/${sku}/reservations`, { token: token.json.token, quantity: 1 }, other)).status,
    ).toBe(202);

    const user = `rita-${sku}`;
    const page = await newPage(day.browser, DESKTOP);
    const key = keyRequests(page);
    await page.goto(`${day.server.url}/?sku=${sku}`);
    await page.fill("#user", user);
    await page.click("#user-form button");
    await expect.poll(() => page.textContent("#who"), WAIT).toContain(`Signed in as ${user}`);
    await page.waitForSelector("#buy:not([disabled])", WAIT);
    await page.click("#buy");
    await page.waitForSelector("#reservation:not([hidden])", WAIT);
    const id = ((await page.textContent("#res-id")) ?? "").trim();

    // The 202 has no receipt yet; the card shows one once the log signed a checkpoint with the hold.
    await page.waitForSelector("#res-receipt:not([hidden])", WAIT);
    const hold = await receiptOf(user, id, "hold");
    const shown = place(await page.textContent("#res-receipt-text"));
    expect(shown, "the receipt's line").not.toBeNull();
    expect(shown?.n).toBe(hold.index + 1);
    expect(hold.index).toBeGreaterThanOrEqual(2); // the configuration, the other hold, then this one
    expect(shown?.of).toBeGreaterThanOrEqual(hold.index + 1);
    expect(await page.getAttribute("#res-receipt", "data-entry")).toBe("hold");
    // Checked against the log's key before it said so.
    expect(await page.getAttribute("#res-receipt", "data-verified")).toBe("true");
    expect(key.count, "GET /api/log/key").toBe(1);
    // How to check it: the receipt as a file, the command for this gateway, SKU and file, and the
    // public checkpoint it links to.
    const holdFile = `${sku}-${id.slice(-8)}-hold.tlog-proof`;
    expect(await page.textContent("#res-verify-command")).toBe(
      `npm run verify-sale -- ${day.server.url} ${sku} --receipt ${holdFile}`,
    );
    expect(await page.getAttribute("#res-receipt-file", "download")).toBe(holdFile);
    const href = (await page.getAttribute("#res-checkpoint", "href")) ?? "";
    expect(href).toBe(`/api/skus/${sku}/log/checkpoint`);
    const checkpoint = await fetch(`${day.server.url}${href}`);
    expect(checkpoint.status).toBe(200);
    expect((await checkpoint.text()).split("\n")[0]).toBe(
      `127.0.0.1:${new URL(day.server.url).port}/api/skus/${sku}/log`,
    );
    await page.click("#reservation summary");
    await expectSound(page, "the hold's receipt, 1280 px");

    // Paid: the payment's receipt replaces it, a later entry.
    await page.click("#pay");
    await expect.poll(() => page.getAttribute("#res-receipt", "data-entry"), WAIT).toBe("paid");
    const paid = await receiptOf(user, id, "paid");
    const shownPaid = place(await page.textContent("#res-receipt-text"));
    expect(shownPaid?.n).toBe(paid.index + 1);
    expect(paid.index).toBeGreaterThan(hold.index);
    expect(shownPaid?.of).toBe(paid.size);
    expect(await page.getAttribute("#res-receipt", "data-verified")).toBe("true");
    expect(key.count, "the key, fetched once a page").toBe(1);
    // The saved receipt is the payment's proof, and the command the page gives verifies it.
    const [download] = await Promise.all([page.waitForEvent("download"), page.click("#res-receipt-file")]);
    const paidFile = `${sku}-${id.slice(-8)}-paid.tlog-proof`;
    expect(download.suggestedFilename()).toBe(paidFile);
    const saved = new URL(`../test-results/${paidFile}`, import.meta.url).pathname;
    await download.saveAs(saved);
    expect(readFileSync(saved, "utf8")).toBe(paid.proof);
    const command = ((await page.textContent("#res-verify-command")) ?? "").split(" ");
    expect(command.slice(0, 4)).toEqual(["npm", "run", "verify-sale", "--"]);
    const { stdout } = await run(process.execPath, [...VERIFY_SALE, ...command.slice(4, -1), saved], {
      timeout: 60_000,
    });
    expect(JSON.parse(stdout).receipt).toMatchObject({ index: paid.index, entry: "paid" });
    await expectSound(page, "the payment's receipt, 1280 px");
    await page.setViewportSize({ width: DESKTOP.width, height: 1100 });
    await screenshot(page, "storefront-receipt", "storefront-receipt.png");
    await page.setViewportSize(PHONE);
    await expectSound(page, "the payment's receipt, 420 px");
    await page.evaluate(`document.querySelector("#reservation").scrollIntoView({ block: "start" })`);
    await screenshot(page, "storefront-receipt-phone", "storefront-receipt-phone.png", false);
    expect(unexpectedProblems(page)).toEqual([]);
    await page.close();
  }, 90_000);

  it("the buy button shows the hold's receipt in its shadow root once the log has it", async () => {
    const sku = await newSku("logbtn");
    const user = `uma-${sku}`;
    const page = await newPage(day.browser, PHONE);
    // The log's key is held back until the element has the receipt: until it checked it, it says nothing.
    let release = () => {};
    const gate = new Promise<void>((resolve) => {
      release = resolve;
    });
    const key = keyRequests(page);
    await page.route(`${day.server.url}/api/log/key`, async (route) => {
      await gate;
      await route.continue();
    });
    const checker = page.waitForRequest(`${day.server.url}/embed/receipt-check.js`, WAIT);
    checker.catch(() => {}); // awaited below; a test failing before that has its own error
    await page.goto(`${shopOrigin}/?sku=${sku}&user=${user}`);
    const buy = page.locator("flashgate-buy [part=buy]");
    await expect.poll(() => buy.isEnabled(), WAIT).toBe(true);
    await buy.click();
    await page.locator("flashgate-buy .hold").waitFor({ state: "visible", ...WAIT });
    const receipt = page.locator("flashgate-buy [part=receipt]");
    // The checker comes from beside the element, on the gateway; it asks for the key once it has a receipt.
    await checker;
    await expect.poll(() => key.count, WAIT).toBe(1);
    expect(await receipt.isHidden(), "the receipt's line before its check").toBe(true);
    release();
    await receipt.waitFor({ state: "visible", ...WAIT });
    const reservationId = (await page.evaluate(
      `document.querySelector("flashgate-buy").reservation.reservationId`,
    )) as string;
    const hold = await receiptOf(user, reservationId, "hold");
    const shown = place(await receipt.textContent());
    expect(shown?.n).toBe(hold.index + 1);
    expect(shown?.of).toBeGreaterThanOrEqual(hold.index + 1);
    expect(key.count).toBe(1);
    await expectSound(page, "the buy button's receipt, 420 px");
    await screenshot(page, "embed-receipt-phone", "embed-receipt-phone.png");
    await page.setViewportSize(DESKTOP);
    await expectSound(page, "the buy button's receipt, 1280 px");
    expect(unexpectedProblems(page)).toEqual([]);
    await page.close();
  }, 60_000);

  it("the buy button checks a receipt again once the log's key loads, after it could not", async () => {
    const sku = await newSku("logretry");
    const page = await newPage(day.browser, PHONE);
    // The first ask for the key fails as a network blip would; the next goes through.
    let asked = 0;
    await page.route(`${day.server.url}/api/log/key`, async (route) => {
      asked++;
      if (asked === 1) await route.fulfill({ status: 503, body: "" });
      else await route.continue();
    });
    await page.goto(`${shopOrigin}/?sku=${sku}&user=${`vic-${sku}`}`);
    const buy = page.locator("flashgate-buy [part=buy]");
    await expect.poll(() => buy.isEnabled(), WAIT).toBe(true);
    await buy.click();
    const receipt = page.locator("flashgate-buy [part=receipt]");
    await expect
      .poll(async () => (await receipt.textContent())?.trim(), WAIT)
      .toMatch(/^Not verified: the receipt could not be checked here/);
    await expect
      .poll(async () => place(await receipt.textContent()), { timeout: 30_000, interval: 500 })
      .not.toBeNull();
    expect(asked).toBe(2);
    await page.close();
  }, 60_000);

  it("a receipt that does not check out against the log's key is not called verified, in either page", async () => {
    // The storefront, its receipt's inclusion proof one byte off: it leads to another root.
    const sku = await newSku("logbad");
    const other = await shopper(day.server, `ola-${sku}`);
    const token = await api("POST", `/api/skus/${sku}/tokens`, undefined, other);
    expect(
      (await api("POST", `/api/skus/${sku}/reservations`, { token: token.json.token, quantity: 1 }, other)).status,
    ).toBe(202);
    const page = await newPage(day.browser, DESKTOP);
    const key = keyRequests(page);
    await tamperReceipts(page, "hash");
    await page.goto(`${day.server.url}/?sku=${sku}`);
    await page.fill("#user", `rex-${sku}`);
    await page.click("#user-form button");
    await page.waitForSelector("#buy:not([disabled])", WAIT);
    await page.click("#buy");
    await page.waitForSelector("#res-receipt:not([hidden])", WAIT);
    const line = ((await page.textContent("#res-receipt-text")) ?? "").trim();
    expect(place(line), line).toBeNull();
    expect(line).toBe(
      "This receipt does not check out against the log's key: its proof does not lead to the signed checkpoint's root",
    );
    expect(await page.getAttribute("#res-receipt", "data-verified")).toBe("false");
    expect(key.count).toBe(1);
    expect(unexpectedProblems(page)).toEqual([]);
    await page.close();

    // The buy button, its receipt's checkpoint signature one byte off.
    const sku2 = await newSku("logbadbtn");
    const shopPage = await newPage(day.browser, PHONE);
    await tamperReceipts(shopPage, "signature");
    await shopPage.goto(`${shopOrigin}/?sku=${sku2}&user=uma-${sku2}`);
    const buy = shopPage.locator("flashgate-buy [part=buy]");
    await expect.poll(() => buy.isEnabled(), WAIT).toBe(true);
    await buy.click();
    const receipt = shopPage.locator("flashgate-buy [part=receipt]");
    await receipt.waitFor({ state: "visible", ...WAIT });
    const said = ((await receipt.textContent()) ?? "").trim();
    expect(place(said), said).toBeNull();
    expect(said).toMatch(
      /^This receipt does not check out against the sale log's key: its checkpoint has no valid signature by \S+\.$/,
    );
    expect(unexpectedProblems(shopPage)).toEqual([]);
    await shopPage.close();
  }, 60_000);

  it("the console's SKU card shows the log's size from its signed checkpoint, and nothing without one", async () => {
    const sku = await newSku("logcard");
    const nolog = await newSku("lognone");
    const held = await api(
      "POST",
      `/api/skus/${sku}/reservations`,
      {
        token: (await api("POST", `/api/skus/${sku}/tokens`, undefined, await shopper(day.server, `vic-${sku}`))).json
          .token,
        quantity: 1,
      },
      await shopper(day.server, `vic-${sku}`),
    );
    expect(held.status).toBe(202);
    const size = async () => {
      const answer = await fetch(`${day.server.url}/api/skus/${sku}/log/checkpoint`);
      return answer.ok ? Number((await answer.text()).split("\n")[1]) : 0;
    };
    await expect.poll(size, WAIT).toBe(2); // the configuration and the hold
    const page = await newPage(day.browser, DESKTOP);
    // A SKU whose log has no checkpoint yet: its checkpoint answers 404 (the board reads it once signed in).
    await openDashboard(day.server, page, () =>
      page.route(`**/api/skus/${nolog}/log/checkpoint`, (route) =>
        route.fulfill({
          status: 404,
          contentType: "application/json",
          body: JSON.stringify({ error: { code: "NOT_FOUND", message: "No checkpoint yet." } }),
        }),
      ),
    );
    const card = (s: string) => `article[data-sku="${s}"]`;
    await expect
      .poll(() => page.textContent(`${card(sku)} [data-field="log"]`), WAIT)
      .toMatch(/^2 entries · signed checkpoint seen \d{1,2}:\d\d:\d\d( [AP]M)? · root \S{12}…$/);
    expect(await page.isVisible(`${card(sku)} [data-field="log-label"]`)).toBe(true);
    await page.waitForSelector(`${card(nolog)} [data-field="mirror"]`, WAIT);
    expect(await page.isHidden(`${card(nolog)} [data-field="log"]`)).toBe(true);
    expect(await page.isHidden(`${card(nolog)} [data-field="log-label"]`)).toBe(true);
    // The card follows the log: a payment is one more entry.
    const pay = await api("POST", "/dev/pay", { reservationId: held.json.reservationId, outcome: "succeeded" }, {});
    expect(pay.status, JSON.stringify(pay.json)).toBe(200);
    await expect.poll(() => page.textContent(`${card(sku)} [data-field="log"]`), WAIT).toMatch(/^3 entries · /);
    await expectSound(page, "a SKU card with its sale log, 1280 px");
    await page.evaluate(`document.querySelector('${card(sku)}').scrollIntoView({ block: "start" })`);
    await screenshot(page, "console-log-card", "console-log-card.png", false);
    await page.setViewportSize(PHONE);
    await expectSound(page, "a SKU card with its sale log, 420 px");
    expect(unexpectedProblems(page)).toEqual([]);
    await page.close();
  }, 60_000);
});
