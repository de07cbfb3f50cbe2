import { randomUUID } from "node:crypto";
import { createServer, type IncomingMessage, type Server, type ServerResponse } from "node:http";
import type { AddressInfo } from "node:net";
import type { Page } from "playwright-core";
import { afterAll, beforeAll, describe, expect, it, onTestFinished } from "vitest";
import { schemaText } from "../clients/typescript/scripts/schema-text";
import { createFlashgateClient } from "../clients/typescript/src/index";
import { mintPurchaseToken, newNonce } from "../src/edge/purchase-token";
import { readDevVars } from "../tools/dev-vars";
import { shopperJwt } from "../tools/jwt";
import { solveProofOfWork } from "../tools/proof-of-work";
import { STRIPE_TEST_KEY, type StripeStandIn, startStripe } from "../tools/stripe-api";
import {
  ADMIN,
  call,
  DESKTOP,
  expectSound,
  newPage,
  PHONE,
  type SaleDay,
  screenshot,
  shopper,
  startSaleDay,
  unexpectedProblems,
} from "./support/browser";

/**
 * The buy button in a shop's own page (issue #54; API.md v1.4 "Browser clients and the buy button"),
 * in Chromium: a host page served from a second local origin, with its own small endpoint that mints
 * the shopper's JWT with the gateway's AUTH_SECRET, imports `/embed/flashgate.js` from the gateway
 * (started with that origin in ALLOWED_ORIGINS and proof of work on) and buys through it. The same
 * page from an origin not allowed gets nothing: the browser refuses the gateway's answers.
 * The calls from Node go through the typed client (clients/typescript), whose types are checked
 * against the /openapi.json this gateway serves.
 */

const AUTH_SECRET = readDevVars().AUTH_SECRET ?? "dev-auth-secret";
const TOKEN_SECRET = readDevVars().TOKEN_SECRET ?? "dev-token-secret";

/** The shop: a page with the element, and POST /jwt?user=… minting that shopper's JWT. */
function hostPage(gateway: string, sku: string, user: string, takeover: boolean): string {
  return `<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>Tee shop</title>
<script type="module" src="${gateway}/embed/flashgate.js"></script>
<style>
  body { font-family: system-ui, sans-serif; margin: 0; color: #1d1d1f; background: #f4f4f6; }
  header { background: #1d1d1f; color: #fff; padding: 1rem 1.5rem; }
  main { padding: 1.5rem; display: grid; gap: 1rem; max-width: 40rem; overflow-wrap: anywhere; }
  flashgate-buy { --flashgate-accent: #6b2bd9; --flashgate-radius: 12px; }
  flashgate-buy::part(buy) { font-weight: 700; }
</style>
</head>
<body>
<header><h1>Tee shop</h1></header>
<main>
  <p>Signed in as ${user}. The drop opens below.</p>
  <flashgate-buy sku="${sku}" api="${gateway}"></flashgate-buy>
  <p id="shop-checkout" hidden></p>
</main>
<script type="module">
  window.events = [];
  const button = document.querySelector("flashgate-buy");
  button.getToken = () => fetch("/jwt?user=${encodeURIComponent(user)}", { method: "POST" }).then((r) => r.text());
  for (const type of ["flashgate:held", "flashgate:sold-out", "flashgate:error"]) {
    document.addEventListener(type, (event) => window.events.push({ type, detail: event.detail }));
  }
  ${
    takeover
      ? `document.addEventListener("flashgate:held", (event) => {
    event.preventDefault();
    const note = document.getElementById("shop-checkout");
    note.textContent = "Reservation " + event.detail.reservationId + " is held: continue to the shop's checkout.";
    note.hidden = false;
  });`
      : ""
  }
</script>
</body>
</html>`;
}

interface Shop {
  origin: string;
  server: Server;
}

async function startShop(page: (url: URL) => string): Promise<Shop> {
  const server = createServer((req: IncomingMessage, res: ServerResponse) => {
    const url = new URL(req.url ?? "/", "http://shop");
    void (async () => {
      if (req.method === "POST" && url.pathname === "/jwt") {
        // The shop's own server signs its signed-in shopper's JWT (docs/EMBED.md).
        const jwt = await shopperJwt(url.searchParams.get("user") ?? "", AUTH_SECRET, 600);
        res.writeHead(200, { "content-type": "text/plain" }).end(jwt);
      } else if (req.method === "GET" && url.pathname === "/") {
        res.writeHead(200, { "content-type": "text/html; charset=utf-8" }).end(page(url));
      } else {
        res.writeHead(404).end();
      }
    })();
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  return { origin: `http://127.0.0.1:${(server.address() as AddressInfo).port}`, server };
}

let day: SaleDay;
let stripe: StripeStandIn;
let shop: Shop;
let stranger: Shop;
let gateway = "";

/** The host page as the shop serves it: ?sku=…&user=…&takeover=1 (preventDefault on flashgate:held). */
const shopPage = (url: URL) =>
  hostPage(
    gateway,
    url.searchParams.get("sku") ?? "",
    url.searchParams.get("user") ?? "",
    url.searchParams.get("takeover") === "1",
  );

beforeAll(async () => {
  [shop, stranger, stripe] = await Promise.all([startShop(shopPage), startShop(shopPage), startStripe()]);
  day = await startSaleDay({
    ALLOWED_ORIGINS: shop.origin,
    POW_BITS: "8",
    STRIPE_SECRET_KEY: STRIPE_TEST_KEY,
    STRIPE_API_URL: stripe.url,
  });
  gateway = day.server.url;
}, 120_000);

afterAll(async () => {
  await day?.stop();
  await stripe?.close();
  for (const s of [shop, stranger]) if (s) await new Promise((resolve) => s.server.close(resolve));
});

type Seen = { type: string; detail: Record<string, unknown> & { error?: { code: string; message: string } } };
const events = (page: Page) => page.evaluate("window.events") as Promise<Seen[]>;
const text = async (page: Page, selector: string) => ((await page.textContent(selector)) ?? "").trim();
/** A press has ended: in a hold, or in words (which one is then checked). */
const heldOrRefused = async (page: Page) =>
  (await page.isVisible("flashgate-buy .hold")) || (await text(page, "flashgate-buy .error")) !== "";

async function open(origin: string, sku: string, user: string, viewport = DESKTOP, takeover = true): Promise<Page> {
  const page = await newPage(day.browser, viewport);
  await page.goto(`${origin}/?sku=${sku}&user=${user}${takeover ? "&takeover=1" : ""}`);
  return page;
}

/**
 * The shop's page with its clock in the test's hands (Playwright's clock.install): the element reads
 * the view, the line and receipts when the test moves the clock on, not on the machine's timers.
 */
async function openOnClock(origin: string, sku: string, user: string, viewport = DESKTOP): Promise<Page> {
  const page = await newPage(day.browser, viewport);
  await page.clock.install();
  // The clock is the browser context's, which every test's page shares: moved on here, it is set back
  // to the time of day once the test ends, so a later page's clock is not ahead.
  onTestFinished(() => day.browser.clock.setSystemTime(Date.now()));
  await page.goto(`${origin}/?sku=${sku}&user=${user}&takeover=1`);
  return page;
}

/** Moves the page's clock one read of the view on (VIEW_POLL_MS) while `answered` waits for that read. */
const nextViewRead = async <T>(page: Page, answered: Promise<T>): Promise<T> =>
  (await Promise.all([answered, page.clock.runFor(5_000)]))[0];

/**
 * Looks until `look` gives what the test expects, moving the page's clock on by `ms` (a read of the
 * line: LINE_POLL_MS) before each look: what the element does on its timers comes at once.
 */
const onClock = <T>(page: Page, look: () => Promise<T>, ms = 2_000, timeout = 15_000) =>
  expect.poll(
    async () => {
      await page.clock.runFor(ms);
      return look();
    },
    { interval: 500, timeout },
  );

/** A sneaker in EU 40 (2) and EU 42 (1) on the shop's page, on a phone, with EU 42 picked. */
async function sneakerPicked(
  prefix: string,
  name: string,
  user: string,
  onItsClock = false,
): Promise<{ sku: string; page: Page }> {
  const sku = `${prefix}-${randomUUID().slice(0, 6)}`;
  const created = await call(day.server, "PUT", `/admin/skus/${sku}`, {
    name,
    price: 9000,
    currency: "usd",
    variants: [
      { id: "40", name: "EU 40", totalStock: 2 },
      { id: "42", name: "EU 42", totalStock: 1 },
    ],
  });
  expect(created.status, JSON.stringify(created.json)).toBe(200);
  const page = onItsClock
    ? await openOnClock(shop.origin, sku, user, PHONE)
    : await open(shop.origin, sku, user, PHONE);
  const sizes = page.locator("flashgate-buy .size-options label");
  await expect.poll(() => sizes.allTextContents(), { timeout: 15_000 }).toEqual(["EU 40 (2 left)", "EU 42 (1 left)"]);
  await page.getByRole("radio", { name: "EU 42 (1 left)" }).check();
  return { sku, page };
}

/** A tee of 5, 1 per person, on sale on the shop's page, shown. */
async function teeOnSale(prefix: string, name: string, user: string): Promise<{ sku: string; page: Page }> {
  const sku = `${prefix}-${randomUUID().slice(0, 6)}`;
  const created = await call(day.server, "PUT", `/admin/skus/${sku}`, {
    name,
    totalStock: 5,
    perUserLimit: 1,
    price: 1500,
    currency: "usd",
  });
  expect(created.status, JSON.stringify(created.json)).toBe(200);
  const page = await open(shop.origin, sku, user);
  await expect.poll(() => text(page, "flashgate-buy .availability"), { timeout: 15_000 }).toContain("5 left");
  return { sku, page };
}

/** The shopper's own client (the typed one), with the JWT the shop would mint. */
function shopperClient(user: string) {
  return createFlashgateClient({ baseUrl: gateway, token: () => shopperJwt(user, AUTH_SECRET, 600) });
}

/** A hold through the API, with the proof of work this gateway asks. */
async function holdByApi(auth: Record<string, string>, sku: string, variants?: string[]) {
  const pow = await call(day.server, "GET", `/api/skus/${sku}/challenge`, undefined, auth);
  expect(pow.status, JSON.stringify(pow.json)).toBe(200);
  const { challenge, bits } = pow.json as { challenge: string; bits: number };
  const token = await call(day.server, "POST", `/api/skus/${sku}/tokens`, undefined, {
    ...auth,
    "proof-of-work": solveProofOfWork(challenge, bits),
  });
  expect(token.status, JSON.stringify(token.json)).toBe(201);
  const hold = await call(
    day.server,
    "POST",
    `/api/skus/${sku}/reservations`,
    { token: token.json.token, quantity: 1, ...(variants && { variants }) },
    auth,
  );
  expect(hold.status, JSON.stringify(hold.json)).toBe(202);
  return hold;
}

describe("the buy button on a shop's page", () => {
  it("is typed by the contract this gateway serves", async () => {
    const served = (await (await fetch(`${gateway}/openapi.json`)).json()) as object;
    const { readFileSync } = await import("node:fs");
    const committed = readFileSync(new URL("../clients/typescript/src/schema.d.ts", import.meta.url), "utf8");
    expect(await schemaText(served)).toBe(committed);
    const answer = await fetch(`${gateway}/embed/flashgate.js`, { headers: { origin: stranger.origin } });
    expect(answer.headers.get("access-control-allow-origin")).toBe("*");
  });

  it("buys through a proof of work, holds, refuses past the limit, and sends the line its hold", async () => {
    const sku = `drop-${randomUUID().slice(0, 6)}`;
    const created = await call(day.server, "PUT", `/admin/skus/${sku}`, {
      name: "Glow tee",
      totalStock: 2,
      perUserLimit: 1,
      price: 2500,
      currency: "usd",
    });
    expect(created.status, JSON.stringify(created.json)).toBe(200);

    // Ana buys: price and stock shown, the proof of work solved in the page, the hold and its timer.
    const ana = await open(shop.origin, sku, "ana");
    const workers: string[] = [];
    ana.on("worker", (worker) => workers.push(worker.url()));
    await expect.poll(() => text(ana, "flashgate-buy .price"), { timeout: 15_000 }).toBe("$25.00");
    expect(await text(ana, "flashgate-buy .availability")).toContain("2 left");
    expect(await ana.getAttribute("flashgate-buy .buy", "part")).toBe("buy");
    await expectSound(ana, "shop page, before buying");
    await ana.click("flashgate-buy .buy");
    await ana.waitForSelector("flashgate-buy .hold:not([hidden])", { timeout: 30_000 });
    expect(await text(ana, "flashgate-buy .hold-what")).toBe("Held for you: 1 × Glow tee.");
    expect(await text(ana, "flashgate-buy .timer")).toMatch(/^1?\d:\d\d$/);
    expect(await text(ana, "flashgate-buy .status")).toContain("Reserved.");
    await expect.poll(() => text(ana, "flashgate-buy .availability"), { timeout: 10_000 }).toContain("1 left");
    // The gateway asks 8 bits of work: solved in a Web Worker the element started from a Blob URL of
    // the gateway's solver (a worker script must be same-origin with the page).
    expect(workers).toEqual([expect.stringMatching(/^blob:http:\/\/127\.0\.0\.1:/)]);
    const held = (await events(ana)).find((e) => e.type === "flashgate:held");
    expect(held?.detail).toMatchObject({ sku, quantity: 1, status: "held" });
    const reservationId = String(held?.detail.reservationId);
    // The shop took over (preventDefault): its own note, no Checkout.
    expect(await text(ana, "#shop-checkout")).toContain(reservationId);
    expect(ana.url()).toContain(shop.origin);
    // The gateway shows that reservation to its owner.
    const { data: shown } = await shopperClient("ana").GET("/api/reservations/{id}", {
      params: { path: { id: reservationId } },
    });
    expect(shown).toMatchObject({ reservationId, sku, status: "held" });
    await expectSound(ana, "shop page, held");
    await screenshot(ana, "embed-held", "embed-held.png");

    // A second unit passes the per-user limit: the contract's message, in words, and flashgate:error.
    await ana.click("flashgate-buy .buy");
    await expect.poll(() => text(ana, "flashgate-buy .error"), { timeout: 30_000 }).not.toBe("");
    const refused = (await events(ana)).find((e) => e.type === "flashgate:error");
    expect(refused?.detail.error?.code).toBe("LIMIT_EXCEEDED");
    expect(await text(ana, "flashgate-buy .error")).toBe(refused?.detail.error?.message);
    await screenshot(ana, "embed-limit");

    // Bo takes the last unit on a phone, and the shop lets the element send him to Stripe Checkout.
    const bo = await open(shop.origin, sku, "bo", PHONE, false);
    await expect.poll(() => text(bo, "flashgate-buy .availability"), { timeout: 15_000 }).toContain("1 left");
    await bo.click("flashgate-buy .buy");
    await bo.waitForURL(`${stripe.url}/c/pay/**`, { timeout: 30_000 });
    const session = [...stripe.sessions.values()].at(-1);
    expect(session).toMatchObject({ success_url: expect.stringContaining(shop.origin) });
    // He leaves Checkout (its cancel URL is the shop's page): the element finds his hold again and
    // offers Pay now, which opens the same session (the gateway answers it again while it is open).
    await bo.goto(String(session?.cancel_url));
    await bo.waitForSelector("flashgate-buy .pay:not([hidden])", { timeout: 15_000 });
    expect(await text(bo, "flashgate-buy .hold-what")).toBe("Held for you: 1 × Glow tee.");
    expect(await text(bo, "flashgate-buy .status")).toBe("You hold this: pay before the timer runs out.");
    const again = (await events(bo)).filter((e) => e.type === "flashgate:held");
    expect(again.map((e) => e.detail.reservationId)).toEqual([session?.client_reference_id]);
    expect(await bo.isHidden("flashgate-buy .join")).toBe(true);
    await expectSound(bo, "shop page, back from Checkout (phone)");
    await screenshot(bo, "embed-back-from-checkout-phone", "embed-pay-phone.png");
    const sessions = stripe.sessions.size;
    await bo.click("flashgate-buy .pay");
    await bo.waitForURL(String(session?.url), { timeout: 30_000 });
    expect(stripe.sessions.size).toBe(sessions);

    // Cy finds it sold out, joins the line and watches the place.
    const cy = await open(shop.origin, sku, "cy", PHONE);
    await cy.waitForSelector("flashgate-buy .join:not([hidden])", { timeout: 15_000 });
    expect(await text(cy, "flashgate-buy .availability")).toContain("Sold out");
    expect((await events(cy)).map((e) => e.type)).toContain("flashgate:sold-out");
    // By keyboard: the element's controls are the page's own buttons in its tab order.
    await cy.focus("flashgate-buy .join");
    await cy.keyboard.press("Enter");
    await expect.poll(() => text(cy, "flashgate-buy .line"), { timeout: 15_000 }).toBe("In line: number 1.");
    expect(await cy.isVisible("flashgate-buy .leave")).toBe(true);
    await expectSound(cy, "shop page, in line (phone)");
    await screenshot(cy, "embed-line-phone", "embed-line-phone.png");

    // Ana lets her hold go: the line gives its unit to Cy, whose page shows the hold and tells the shop.
    await ana.click("flashgate-buy .cancel");
    await expect.poll(() => text(ana, "flashgate-buy .status"), { timeout: 15_000 }).toBe("Hold released.");
    await cy.waitForSelector("flashgate-buy .hold:not([hidden])", { timeout: 30_000 });
    const cyHeld = (await events(cy)).find((e) => e.type === "flashgate:held");
    const cyReservation = String(cyHeld?.detail.reservationId);
    const { data: cyShown } = await shopperClient("cy").GET("/api/reservations/{id}", {
      params: { path: { id: cyReservation } },
    });
    expect(cyShown).toMatchObject({ reservationId: cyReservation, sku, status: "held" });
    expect(await cy.isHidden("flashgate-buy .join")).toBe(true);
    await expectSound(cy, "shop page, held from the line (phone)");
    await screenshot(cy, "embed-line-held-phone", "embed-held-phone.png");
    await screenshot(ana, "embed-released");

    for (const page of [ana, cy]) {
      expect(unexpectedProblems(page)).toEqual([]);
      await page.close();
    }
    await bo.close();
  }, 180_000);

  it("counts down to the start, and offers the sizes the public view lists", async () => {
    const sku = `later-${randomUUID().slice(0, 6)}`;
    const startsAt = new Date(Date.now() + 3_600_000).toISOString();
    const created = await call(day.server, "PUT", `/admin/skus/${sku}`, {
      name: "Late tee",
      startsAt,
      price: 1000,
      currency: "usd",
      variants: [
        { id: "s", name: "Small", totalStock: 3 },
        { id: "m", name: "Medium", totalStock: 0 },
      ],
    });
    expect(created.status, JSON.stringify(created.json)).toBe(200);
    const page = await newPage(day.browser, PHONE);
    await page.goto(`${shop.origin}/?sku=${sku}&user=eve`);
    await expect
      .poll(() => text(page, "flashgate-buy .countdown"), { timeout: 15_000 })
      .toMatch(/^Opens in (1:00:00|59:\d\d)$/);
    expect(await page.isDisabled("flashgate-buy .buy")).toBe(true);
    expect(await text(page, "flashgate-buy .sizes legend")).toBe("Size");
    const sizes = page.locator("flashgate-buy .size-options label");
    expect(await sizes.allTextContents()).toEqual(["Small (3 left)", "Medium (sold out)"]);
    expect(await page.isChecked('flashgate-buy input[value="s"]')).toBe(true);
    // A sold-out size is greyed and cannot be picked.
    expect(await page.isDisabled('flashgate-buy input[value="m"]')).toBe(true);
    await expectSound(page, "shop page, before the start (phone)");
    await screenshot(page, "embed-countdown-phone", "embed-countdown-phone.png");
    expect(unexpectedProblems(page)).toEqual([]);
    await page.close();
  });

  it("holds the second size picked when the first is gone, and says the size held", async () => {
    const sku = `kicks-${randomUUID().slice(0, 6)}`;
    const created = await call(day.server, "PUT", `/admin/skus/${sku}`, {
      name: "Glow sneaker",
      perUserLimit: 1,
      price: 9000,
      currency: "usd",
      variants: [
        { id: "40", name: "EU 40", totalStock: 1 },
        { id: "41", name: "EU 41", totalStock: 2 },
        { id: "42", name: "EU 42", totalStock: 0 },
        { id: "43", name: "EU 43", totalStock: 2 },
      ],
    });
    expect(created.status, JSON.stringify(created.json)).toBe(200);
    const page = await open(shop.origin, sku, "fay");
    const sizes = page.locator("flashgate-buy .size-options label");
    await expect
      .poll(() => sizes.allTextContents(), { timeout: 15_000 })
      .toEqual(["EU 40 (1 left)", "EU 41 (2 left)", "EU 42 (sold out)", "EU 43 (2 left)"]);
    expect(await page.isChecked('flashgate-buy input[value="40"]')).toBe(true);
    // The third choice waits for a second; a chosen or sold-out size is not offered again.
    expect(await page.isDisabled("flashgate-buy .size-3")).toBe(true);
    await page.getByRole("combobox", { name: "Second choice" }).selectOption("41");
    await page.getByRole("combobox", { name: "Third choice" }).selectOption("43");
    const offered = await page.$$eval("flashgate-buy >> .size-3 option:not([disabled])", (os) =>
      os.map((o) => o.getAttribute("value")),
    );
    expect(offered).toEqual(["", "43"]);
    await expectSound(page, "shop page, sizes picked");
    await screenshot(page, "embed-sizes", "embed-sizes.png");

    // 40 goes off sale meanwhile (the shop sets it to 0): the hold takes 41, as the shopper asked.
    const cut = await call(day.server, "PUT", `/admin/skus/${sku}`, { variants: [{ id: "40", totalStock: 0 }] });
    expect(cut.status, JSON.stringify(cut.json)).toBe(200);
    const sent: unknown[] = [];
    page.on("request", (request) => {
      if (request.method() === "POST" && request.url().endsWith(`/api/skus/${sku}/reservations`))
        sent.push(request.postDataJSON());
    });
    await page.click("flashgate-buy .buy");
    await page.waitForSelector("flashgate-buy .hold:not([hidden])", { timeout: 30_000 });
    expect(sent).toEqual([expect.objectContaining({ quantity: 1, variants: ["40", "41", "43"] })]);
    expect(await text(page, "flashgate-buy .hold-what")).toBe("Held for you: 1 × Glow sneaker, size EU 41.");
    const held = (await events(page)).find((e) => e.type === "flashgate:held");
    expect(held?.detail).toMatchObject({ sku, quantity: 1, status: "held", variant: "41" });
    await expect
      .poll(() => sizes.allTextContents(), { timeout: 15_000 })
      .toEqual(["EU 40 (sold out)", "EU 41 (1 left)", "EU 42 (sold out)", "EU 43 (2 left)"]);
    await page.setViewportSize(PHONE);
    await expectSound(page, "shop page, a size held (phone)");
    await screenshot(page, "embed-sizes-held-phone", "embed-sizes-held-phone.png");
    expect(unexpectedProblems(page)).toEqual([]);
    await page.close();
  }, 120_000);

  it("keeps the size the shopper picked when it sells out, and offers its line rather than another size", async () => {
    const { sku, page } = await sneakerPicked("pick", "Pick sneaker", "quin");

    // Rex takes the last EU 42 meanwhile.
    const rex = await shopper(day.server, "rex");
    const pow = await call(day.server, "GET", `/api/skus/${sku}/challenge`, undefined, rex);
    const { challenge, bits } = pow.json as { challenge: string; bits: number };
    const token = await call(day.server, "POST", `/api/skus/${sku}/tokens`, undefined, {
      ...rex,
      "proof-of-work": solveProofOfWork(challenge, bits),
    });
    expect(token.status, JSON.stringify(token.json)).toBe(201);
    const taken = await call(
      day.server,
      "POST",
      `/api/skus/${sku}/reservations`,
      { token: token.json.token, quantity: 1, variants: ["42"] },
      rex,
    );
    expect(taken.status, JSON.stringify(taken.json)).toBe(202);

    // Quin's pick stays EU 42, shown sold out: no Buy that would hold an EU 40 she did not choose.
    await expect
      .poll(() => page.locator("flashgate-buy .size-options label").allTextContents(), { timeout: 15_000 })
      .toEqual(["EU 40 (2 left)", "EU 42 (sold out)"]);
    expect(await page.isChecked('flashgate-buy input[value="42"]')).toBe(true);
    expect(await page.isChecked('flashgate-buy input[value="40"]')).toBe(false);
    expect(await page.isVisible("flashgate-buy .buy")).toBe(false);
    // Said in words: another size, or this one's line.
    expect(await text(page, "flashgate-buy .size-gone")).toBe(
      "EU 42 is sold out: pick another size, or join its line.",
    );
    const lines: unknown[] = [];
    page.on("request", (request) => {
      if (request.method() === "POST" && request.url().endsWith(`/api/skus/${sku}/waitlist`))
        lines.push(request.postDataJSON());
    });
    await page.click("flashgate-buy .join");
    await expect.poll(() => text(page, "flashgate-buy .line"), { timeout: 15_000 }).toBe("In line: number 1.");
    expect(lines).toEqual([{ quantity: 1, variants: ["42"] }]);
    expect(await text(page, "flashgate-buy .size-gone")).toBe("EU 42 is sold out: pick another size.");
    await expectSound(page, "shop page, the picked size sold out (phone)");
    await screenshot(page, "embed-picked-size-gone-phone");
    const { data: mine } = await shopperClient("quin").GET("/api/me/reservations");
    expect(mine?.reservations).toEqual([]);
    await page.close();
  }, 120_000);

  it("keeps reading the line after a read that failed, and shows the hold the line then gives", async () => {
    const sku = `line-${randomUUID().slice(0, 6)}`;
    const created = await call(day.server, "PUT", `/admin/skus/${sku}`, {
      name: "Line tee",
      totalStock: 1,
      perUserLimit: 1,
      price: 2000,
      currency: "usd",
    });
    expect(created.status, JSON.stringify(created.json)).toBe(200);
    // Gus holds the only unit.
    const gus = await shopper(day.server, "gus");
    const gusHold = await holdByApi(gus, sku);

    const page = await openOnClock(shop.origin, sku, "hal", PHONE);
    await page.waitForSelector("flashgate-buy .join:not([hidden])", { timeout: 15_000 });
    await page.click("flashgate-buy .join");
    await expect.poll(() => text(page, "flashgate-buy .line"), { timeout: 15_000 }).toBe("In line: number 1.");

    // One read of the place gets no answer (the phone's connection drops for a moment).
    let dropped = 0;
    await page.route(`${gateway}/api/skus/${sku}/waitlist`, async (route) => {
      if (route.request().method() !== "GET" || dropped > 0) return route.fallback();
      dropped++;
      await route.abort("internetdisconnected");
    });
    await onClock(page, async () => dropped).toBe(1);
    await expect.poll(() => text(page, "flashgate-buy .error"), { timeout: 15_000 }).toContain("Could not reach");

    // Gus lets his unit go: the line gives it to Hal, whose element is still reading his place.
    const released = await call(day.server, "POST", `/api/reservations/${gusHold.json.reservationId}/cancel`, {}, gus);
    expect(released.status, JSON.stringify(released.json)).toBe(200);
    await onClock(page, () => page.isVisible("flashgate-buy .hold"), 2_000, 30_000).toBe(true);
    expect(await text(page, "flashgate-buy .hold-what")).toBe("Held for you: 1 × Line tee.");
    expect((await events(page)).filter((e) => e.type === "flashgate:held")).toHaveLength(1);
    // The connection came back: no stale error under the hold.
    expect(await text(page, "flashgate-buy .error")).toBe("");
    await expectSound(page, "shop page, held from the line after a dropped read (phone)");
    await screenshot(page, "embed-line-after-drop-phone");
    await page.close();
  }, 120_000);

  it("takes back only the line's own error once the line is read again, not a Buy's refused meanwhile", async () => {
    const { sku, page } = await sneakerPicked("mixed", "Mixed sneaker", "wes", true);
    // Xia takes the last EU 42: Wes joins its line.
    await holdByApi(await shopper(day.server, "xia"), sku, ["42"]);
    await page.waitForSelector("flashgate-buy .join:not([hidden])", { timeout: 15_000 });
    await page.click("flashgate-buy .join");
    await expect.poll(() => text(page, "flashgate-buy .line"), { timeout: 15_000 }).toBe("In line: number 1.");

    // The reads of his place get no answer for a while (the phone's connection drops).
    let dropping = true;
    await page.route(`${gateway}/api/skus/${sku}/waitlist`, async (route) => {
      if (route.request().method() !== "GET" || !dropping) return route.fallback();
      await route.abort("internetdisconnected");
    });
    await onClock(page, () => text(page, "flashgate-buy .error")).toContain("Could not reach");

    // Meanwhile he tries EU 40, which the shop takes off sale just after the element read it: refused.
    await page.getByRole("radio", { name: "EU 40 (2 left)" }).check();
    await nextViewRead(
      page,
      page.waitForResponse((r) => r.request().method() === "GET" && r.url() === `${gateway}/api/skus/${sku}`),
    );
    const cut = await call(day.server, "PUT", `/admin/skus/${sku}`, { variants: [{ id: "40", totalStock: 0 }] });
    expect(cut.status, JSON.stringify(cut.json)).toBe(200);
    await page.click("flashgate-buy .buy");
    const lastError = async () => (await events(page)).filter((e) => e.type === "flashgate:error").at(-1);
    await expect.poll(async () => (await lastError())?.detail.error?.code, { timeout: 30_000 }).toBe("SOLD_OUT");
    const refused = await lastError();
    expect(await text(page, "flashgate-buy .error")).toBe(refused?.detail.error?.message);

    // The connection is back: the line is read again, and the Buy's refusal stays on screen.
    dropping = false;
    // Two reads answered: the element asks again only once it has taken the first answer in.
    for (let read = 0; read < 2; read++)
      await Promise.all([
        page.waitForResponse(
          (r) =>
            r.request().method() === "GET" && r.url() === `${gateway}/api/skus/${sku}/waitlist` && r.status() === 200,
          { timeout: 15_000 },
        ),
        page.clock.runFor(2_000),
      ]);
    expect(await text(page, "flashgate-buy .line")).toBe("In line: number 1.");
    expect(await text(page, "flashgate-buy .error")).toBe(refused?.detail.error?.message);
    await page.close();
  }, 120_000);

  it("shows the hold the line gives when the shopper's reservations list it a moment after the place is gone (second reading)", async () => {
    const sku = `lag-${randomUUID().slice(0, 6)}`;
    const created = await call(day.server, "PUT", `/admin/skus/${sku}`, {
      name: "Lag tee",
      totalStock: 1,
      perUserLimit: 1,
      price: 2000,
      currency: "usd",
    });
    expect(created.status, JSON.stringify(created.json)).toBe(200);
    const gus = await shopper(day.server, "gus2");
    const gusHold = await holdByApi(gus, sku);

    const page = await openOnClock(shop.origin, sku, "hal2", PHONE);
    await page.waitForSelector("flashgate-buy .join:not([hidden])", { timeout: 15_000 });
    await page.click("flashgate-buy .join");
    await expect.poll(() => text(page, "flashgate-buy .line"), { timeout: 15_000 }).toBe("In line: number 1.");

    // The order row of the line's hold reaches D1 through the queue: the first two looks find nothing yet.
    let looks = 0;
    await page.route(`${gateway}/api/me/reservations`, async (route) => {
      if (route.request().method() !== "GET" || looks >= 2) return route.fallback();
      looks++;
      const response = await route.fetch(); // its CORS headers, not its body
      await route.fulfill({ response, json: { reservations: [] } });
    });
    const released = await call(day.server, "POST", `/api/reservations/${gusHold.json.reservationId}/cancel`, {}, gus);
    expect(released.status, JSON.stringify(released.json)).toBe(200);
    await onClock(page, () => page.isVisible("flashgate-buy .hold"), 2_000, 30_000).toBe(true);
    expect(looks).toBe(2);
    expect(await text(page, "flashgate-buy .hold-what")).toBe("Held for you: 1 × Lag tee.");
    expect((await events(page)).filter((e) => e.type === "flashgate:held")).toHaveLength(1);
    await page.close();
  }, 120_000);

  it("takes back its sold-out error once stock returns, and says sold out again when it is", async () => {
    const sku = `back-${randomUUID().slice(0, 6)}`;
    const created = await call(day.server, "PUT", `/admin/skus/${sku}`, {
      name: "Back tee",
      totalStock: 1,
      price: 1200,
      currency: "usd",
    });
    expect(created.status, JSON.stringify(created.json)).toBe(200);
    const page = await openOnClock(shop.origin, sku, "kim", PHONE);
    const viewRead = () =>
      nextViewRead(
        page,
        page.waitForResponse((r) => r.request().method() === "GET" && r.url() === `${gateway}/api/skus/${sku}`),
      );
    // The view may lag the stock by a second (each isolate's display memo): read until it shows.
    const onReads = <T>(look: () => Promise<T>) =>
      expect.poll(
        async () => {
          await viewRead();
          return look();
        },
        { interval: 250 },
      );
    await expect.poll(() => text(page, "flashgate-buy .availability"), { timeout: 15_000 }).toContain("1 left");

    // Just after the element read "1 left", Lee takes the unit; Kim presses Buy on what she sees.
    await viewRead();
    const lee = await shopper(day.server, "lee");
    const leeHold = await holdByApi(lee, sku);
    await page.click("flashgate-buy .buy");
    await expect.poll(() => text(page, "flashgate-buy .error"), { timeout: 30_000 }).not.toBe("");
    expect((await events(page)).find((e) => e.type === "flashgate:error")?.detail.error?.code).toBe("SOLD_OUT");
    await onReads(() => page.isVisible("flashgate-buy .join")).toBe(true);

    // Lee lets it go: the element shows it on sale again, and no longer says it is sold out.
    const released = await call(day.server, "POST", `/api/reservations/${leeHold.json.reservationId}/cancel`, {}, lee);
    expect(released.status, JSON.stringify(released.json)).toBe(200);
    await onReads(() => text(page, "flashgate-buy .availability")).toContain("1 left");
    expect(await page.isVisible("flashgate-buy .buy")).toBe(true);
    expect(await text(page, "flashgate-buy .error")).toBe("");
    await expectSound(page, "shop page, back on sale after a sold-out (phone)");
    await screenshot(page, "embed-back-on-sale-phone");

    // Lee takes it again: the shop hears that Kim finds it sold out again.
    await holdByApi(lee, sku);
    await onReads(async () => (await events(page)).filter((e) => e.type === "flashgate:sold-out").length).toBe(2);
    await page.close();
  }, 120_000);

  it("offers nothing of a SKU archived while shown, and says so once, not at every read", async () => {
    const sku = `gone-${randomUUID().slice(0, 6)}`;
    const created = await call(day.server, "PUT", `/admin/skus/${sku}`, {
      name: "Gone tee",
      totalStock: 3,
      price: 100,
      currency: "usd",
    });
    expect(created.status, JSON.stringify(created.json)).toBe(200);
    const page = await openOnClock(shop.origin, sku, "moe");
    await expect.poll(() => text(page, "flashgate-buy .availability"), { timeout: 15_000 }).toContain("3 left");
    const archived = await call(day.server, "DELETE", `/admin/skus/${sku}`);
    expect(archived.status, JSON.stringify(archived.json)).toBe(200);
    const gone = () => page.waitForResponse((r) => r.url() === `${gateway}/api/skus/${sku}` && r.status() === 404);
    // An isolate may show the SKU up to a second after its archive: a read or two later, it is gone.
    await expect
      .poll(async () => {
        await nextViewRead(
          page,
          page.waitForResponse((r) => r.url() === `${gateway}/api/skus/${sku}`),
        );
        return text(page, "flashgate-buy .error");
      })
      .not.toBe("");
    expect(await text(page, "flashgate-buy .availability")).toBe("");
    expect(await text(page, "flashgate-buy .price")).toBe("");
    expect(await page.isVisible("flashgate-buy .buy")).toBe(false);
    // The next read of the view finds it gone again: the page is not told twice.
    await nextViewRead(page, gone());
    const errors = (await events(page)).filter((e) => e.type === "flashgate:error");
    expect(errors.map((e) => e.detail.error?.code)).toEqual(["SKU_NOT_FOUND"]);
    await page.close();
  }, 60_000);

  it("takes back a view's 404 once the view answers again, and offers the SKU as before", async () => {
    const sku = `blip-${randomUUID().slice(0, 6)}`;
    const created = await call(day.server, "PUT", `/admin/skus/${sku}`, {
      name: "Blip tee",
      totalStock: 3,
      price: 100,
      currency: "usd",
    });
    expect(created.status, JSON.stringify(created.json)).toBe(200);
    const page = await openOnClock(shop.origin, sku, "ola");
    await expect.poll(() => text(page, "flashgate-buy .availability"), { timeout: 15_000 }).toContain("3 left");
    // One read of the view answered 404 on its way (a proxy's blip): then the gateway's answers again.
    const view = `${gateway}/api/skus/${sku}`;
    await page.route(view, (route) =>
      route.fulfill({
        status: 404,
        contentType: "application/json",
        headers: { "access-control-allow-origin": shop.origin },
        body: JSON.stringify({ error: { code: "SKU_NOT_FOUND", message: "No such SKU." } }),
      }),
    );
    await nextViewRead(
      page,
      page.waitForResponse((r) => r.url() === view && r.status() === 404),
    );
    await expect.poll(() => text(page, "flashgate-buy .error")).toBe("No such SKU.");
    await page.unroute(view);
    await nextViewRead(
      page,
      page.waitForResponse((r) => r.url() === view && r.status() === 200),
    );
    await expect.poll(() => text(page, "flashgate-buy .error")).toBe("");
    expect(await text(page, "flashgate-buy .availability")).toContain("3 left");
    expect(await page.isVisible("flashgate-buy .buy")).toBe(true);
    await page.close();
  }, 60_000);

  it("says a dropped connection to the view once and takes it back when reads succeed; a Buy's refusal made while the view failed stays", async () => {
    const sku = `drop-${randomUUID().slice(0, 6)}`;
    const created = await call(day.server, "PUT", `/admin/skus/${sku}`, {
      name: "Drop tee",
      totalStock: 3,
      price: 100,
      currency: "usd",
    });
    expect(created.status, JSON.stringify(created.json)).toBe(200);
    const page = await openOnClock(shop.origin, sku, "pia");
    await expect.poll(() => text(page, "flashgate-buy .availability"), { timeout: 15_000 }).toContain("3 left");
    const view = `${gateway}/api/skus/${sku}`;
    const nextRead = <T>(answered: Promise<T>) => nextViewRead(page, answered);
    const dropped = () => nextRead(page.waitForEvent("requestfailed", (r) => r.url() === view));
    const readAgain = () => nextRead(page.waitForResponse((r) => r.url() === view && r.status() === 200));
    const networkErrors = async () =>
      (await events(page)).filter((e) => e.type === "flashgate:error" && e.detail.error?.code === "NETWORK_ERROR")
        .length;

    // The connection drops for two reads of the view: said once, then taken back once a read succeeds.
    await page.route(view, (route) => route.abort("internetdisconnected"));
    await dropped();
    await dropped();
    await expect.poll(() => text(page, "flashgate-buy .error")).toContain("Could not reach the sale");
    expect(await networkErrors()).toBe(1);
    await page.unroute(view);
    await readAgain();
    await expect.poll(() => text(page, "flashgate-buy .error")).toBe("");
    expect(await text(page, "flashgate-buy .availability")).toContain("3 left");

    // The view answers 503 for a while, and a Buy pressed meanwhile is refused for a reason of its
    // own: once the view is read again, that refusal is still what the shopper reads.
    await page.route(view, (route) =>
      route.fulfill({
        status: 503,
        contentType: "application/json",
        headers: { "access-control-allow-origin": shop.origin, "retry-after": "1" },
        body: JSON.stringify({ error: { code: "BUSY", message: "The sale is busy: try again in a moment." } }),
      }),
    );
    await nextRead(page.waitForResponse((r) => r.url() === view && r.status() === 503));
    await expect.poll(() => text(page, "flashgate-buy .error")).toContain("busy");
    const busy = "Too many requests from you: try again in a second.";
    await page.route(`${view}/*`, (route) =>
      route.fulfill({
        status: 429,
        contentType: "application/json",
        headers: { "access-control-allow-origin": shop.origin, "retry-after": "1" },
        body: JSON.stringify({ error: { code: "RATE_LIMITED", message: busy } }),
      }),
    );
    await page.click("flashgate-buy .buy");
    await expect.poll(() => text(page, "flashgate-buy .error")).toBe(busy);
    await page.unroute(view);
    // Two reads: the first has surely been taken in by the time the second is answered.
    await readAgain();
    await readAgain();
    expect(await text(page, "flashgate-buy .error")).toBe(busy);
    await page.close();
  }, 60_000);

  it("sends the same purchase token again when a hold's answer was lost: one hold, shown", async () => {
    const sku = `lost-${randomUUID().slice(0, 6)}`;
    const created = await call(day.server, "PUT", `/admin/skus/${sku}`, {
      name: "Lost tee",
      totalStock: 5,
      perUserLimit: 2,
      price: 1500,
      currency: "usd",
    });
    expect(created.status, JSON.stringify(created.json)).toBe(200);
    const page = await open(shop.origin, sku, "ivy");
    await expect.poll(() => text(page, "flashgate-buy .availability"), { timeout: 15_000 }).toContain("5 left");

    // The first hold reaches the gateway, but its answer never reaches the phone.
    const tokens: string[] = [];
    const holds: unknown[] = [];
    page.on("request", (request) => {
      if (request.method() !== "POST") return;
      if (request.url().endsWith(`/api/skus/${sku}/tokens`)) tokens.push(request.url());
      if (request.url().endsWith(`/api/skus/${sku}/reservations`)) holds.push(request.postDataJSON());
    });
    let lost = 0;
    await page.route(`${gateway}/api/skus/${sku}/reservations`, async (route) => {
      if (route.request().method() !== "POST" || lost > 0) return route.fallback();
      lost++;
      await route.fetch();
      await route.abort("connectionreset");
    });
    await page.click("flashgate-buy .buy");
    await expect.poll(() => text(page, "flashgate-buy .error"), { timeout: 30_000 }).toContain("Could not reach");
    expect((await events(page)).find((e) => e.type === "flashgate:error")?.detail.error?.code).toBe("NETWORK_ERROR");

    // The shopper presses Buy again: the element asks for that same hold, and gets it.
    await page.click("flashgate-buy .buy");
    await page.waitForSelector("flashgate-buy .hold:not([hidden])", { timeout: 30_000 });
    const view = await call(day.server, "GET", `/admin/skus/${sku}`, undefined, ADMIN);
    expect(view.json).toMatchObject({ stock: { available: 4, held: 1 } });
    expect(await text(page, "flashgate-buy .error")).toBe("");
    expect(tokens).toHaveLength(1);
    expect(holds).toHaveLength(2);
    expect(holds[1]).toEqual(holds[0]);
    const held = (await events(page)).filter((e) => e.type === "flashgate:held");
    expect(held).toHaveLength(1);
    const { data: mine } = await shopperClient("ivy").GET("/api/me/reservations");
    expect(mine?.reservations.map((r) => r.reservationId)).toEqual([held[0]?.detail.reservationId]);
    expect(await text(page, "flashgate-buy .hold-what")).toBe("Held for you: 1 × Lost tee.");
    await screenshot(page, "embed-lost-answer");
    await page.close();
  }, 120_000);

  it("finds the hold a lost answer made once its purchase token has expired, and holds nothing more", async () => {
    const { sku, page } = await teeOnSale("late", "Late tee", "uli");
    const tokens: string[] = [];
    page.on("response", async (response) => {
      if (response.request().method() === "POST" && response.url().endsWith(`/api/skus/${sku}/tokens`))
        tokens.push(String((await response.json()).expiresAt));
    });
    // The hold is made, but its answer never reaches the phone.
    let lost = 0;
    await page.route(`${gateway}/api/skus/${sku}/reservations`, async (route) => {
      if (route.request().method() !== "POST" || lost++ > 0) return route.fallback();
      await route.fetch();
      await route.abort("connectionreset");
    });
    await page.click("flashgate-buy .buy");
    await expect.poll(() => text(page, "flashgate-buy .error"), { timeout: 30_000 }).toContain("Could not reach");

    // The shopper presses Buy again once the token has expired (the phone's clock a second past it):
    // its hold is found, not a TOKEN_EXPIRED.
    // The expired token is not sent again (the gateway, its clock there too, would answer TOKEN_EXPIRED).
    await page.clock.setFixedTime(Date.parse(String(tokens[0])) + 1_000);
    await page.click("flashgate-buy .buy");
    await expect.poll(() => heldOrRefused(page), { timeout: 30_000 }).toBe(true);
    expect(await text(page, "flashgate-buy .error")).toBe("");
    await page.waitForSelector("flashgate-buy .hold:not([hidden])");
    expect(await text(page, "flashgate-buy .hold-what")).toBe("Held for you: 1 × Late tee.");
    const errors = (await events(page)).filter((e) => e.type === "flashgate:error");
    expect(errors.map((e) => e.detail.error?.code)).toEqual(["NETWORK_ERROR"]);
    expect(tokens).toHaveLength(1);
    expect(lost).toBe(1);
    const view = await call(day.server, "GET", `/admin/skus/${sku}`, undefined, ADMIN);
    expect(view.json).toMatchObject({ stock: { available: 4, held: 1 } });
    const held = (await events(page)).filter((e) => e.type === "flashgate:held");
    const { data: mine } = await shopperClient("uli").GET("/api/me/reservations");
    expect(mine?.reservations.map((r) => r.reservationId)).toEqual([held[0]?.detail.reservationId]);
    await page.close();
  }, 120_000);

  it("mints a new purchase token in the same press when the kept one is answered TOKEN_EXPIRED", async () => {
    const { sku, page } = await teeOnSale("skew", "Skew tee", "vic");
    // This phone's clock runs behind the gateway's: its first token, expired by the gateway's clock,
    // looks good to it for an hour more (a token as the gateway mints it, already past its expiry).
    let minted = 0;
    await page.route(`${gateway}/api/skus/${sku}/tokens`, async (route) => {
      const response = await route.fetch();
      if (minted++ > 0) return route.fulfill({ response });
      const claims = { sku, userId: "vic", shard: 0, shards: 1, nonce: newNonce(), expiresAt: Date.now() - 1_000 };
      const token = await mintPurchaseToken(claims, TOKEN_SECRET);
      await route.fulfill({ response, json: { token, expiresAt: new Date(Date.now() + 3_600_000).toISOString() } });
    });
    const holds: unknown[] = [];
    page.on("request", (request) => {
      if (request.method() === "POST" && request.url().endsWith(`/api/skus/${sku}/reservations`))
        holds.push(request.postDataJSON());
    });
    // The first hold never reaches the gateway.
    let lost = 0;
    await page.route(`${gateway}/api/skus/${sku}/reservations`, async (route) => {
      if (route.request().method() !== "POST" || lost > 0) return route.fallback();
      lost++;
      await route.abort("connectionreset");
    });
    await page.click("flashgate-buy .buy");
    await expect.poll(() => text(page, "flashgate-buy .error"), { timeout: 30_000 }).toContain("Could not reach");

    // One press: the kept token is answered TOKEN_EXPIRED, and a new one holds.
    await page.click("flashgate-buy .buy");
    await expect.poll(() => heldOrRefused(page), { timeout: 30_000 }).toBe(true);
    expect(await text(page, "flashgate-buy .error")).toBe("");
    await page.waitForSelector("flashgate-buy .hold:not([hidden])");
    expect(await text(page, "flashgate-buy .hold-what")).toBe("Held for you: 1 × Skew tee.");
    const errors = (await events(page)).filter((e) => e.type === "flashgate:error");
    expect(errors.map((e) => e.detail.error?.code)).toEqual(["NETWORK_ERROR"]);
    expect(minted).toBe(2);
    expect(holds).toHaveLength(3);
    expect(holds[1]).toEqual(holds[0]);
    expect(holds[2]).not.toEqual(holds[0]);
    const view = await call(day.server, "GET", `/admin/skus/${sku}`, undefined, ADMIN);
    expect(view.json).toMatchObject({ stock: { available: 4, held: 1 } });
    await page.close();
  }, 120_000);

  it("gets nothing from a page whose origin is not allowed: the browser refuses, the element says so", async () => {
    const sku = `elsewhere-${randomUUID().slice(0, 6)}`;
    expect((await call(day.server, "PUT", `/admin/skus/${sku}`, { name: "Cap", totalStock: 3 })).status).toBe(200);
    const page = await open(stranger.origin, sku, "dee");
    await expect
      .poll(() => text(page, "flashgate-buy .error"), { timeout: 15_000 })
      .toContain("is not one the sale allows");
    const failed = (await events(page)).find((e) => e.type === "flashgate:error");
    expect(failed?.detail.error?.code).toBe("NETWORK_ERROR");
    expect(await text(page, "flashgate-buy .price")).toBe("");
    expect(await page.isDisabled("flashgate-buy .buy")).toBe(true);
    // Nothing was held for anyone.
    const view = await call(day.server, "GET", `/admin/skus/${sku}`, undefined, ADMIN);
    expect(view.json).toMatchObject({ stock: { available: 3, held: 0 } });
    await screenshot(page, "embed-blocked");
    await page.close();
  });
});
