import { randomUUID } from "node:crypto";
import type { Page } from "playwright-core";
import Stripe from "stripe";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { readDevVars } from "../tools/dev-vars";
import { STRIPE_TEST_KEY, type StripeStandIn, startStripe } from "../tools/stripe-api";
import { stripeEnvelope } from "../tools/stripe-event";
import {
  call,
  DESKTOP,
  expectSound,
  gotoDashboard,
  newPage,
  openDashboard,
  PHONE,
  reserveByApi,
  type SaleDay,
  screenshot,
  shopper,
  startSaleDay,
  unexpectedProblems,
} from "./support/browser";

/**
 * Issue #40, the operator's console in a real headless Chromium against `wrangler dev`: a sale run
 * from the dashboard alone (create, a shopper buys, pause, resume, a lower stock, archive), each
 * change confirmed in a dialog that names it, each answer of the server shown, and checked against
 * what the API then says. axe-core clean at 1280 and 420 px, dialogs open. Screenshots: test-results/,
 * and docs/PAGES.md's console ones in docs/screenshots/.
 */

const WAIT = { timeout: 20_000, interval: 250 };

let day: SaleDay;
/** Stripe's API, as the gateway calls it for refunds (tools/stripe-api.ts). */
let stripe: StripeStandIn;

beforeAll(async () => {
  stripe = await startStripe();
  day = await startSaleDay({ STRIPE_SECRET_KEY: STRIPE_TEST_KEY, STRIPE_API_URL: stripe.url });
});
afterAll(async () => {
  await day?.stop();
  await stripe?.close();
});

const api = (method: string, path: string, body?: unknown, headers?: Record<string, string>) =>
  call(day.server, method, path, body, headers);

/** The SKU's card, and one of its fields. */
const card = (sku: string) => `article[data-sku="${sku}"]`;
const cardField = (sku: string, name: string) => `${card(sku)} [data-field="${name}"]`;

/** Opens the confirm dialog from a card's button; resolves with what the dialog says will change. */
async function askConfirm(page: Page, selector: string): Promise<string> {
  await page.click(selector);
  await page.waitForSelector("#confirm-dialog[open]");
  return (await page.textContent("#confirm-dialog")) ?? "";
}

describe("the operator's console", () => {
  it("runs a sale from the dashboard: create, sell, pause, resume, lower the stock, archive", async () => {
    const sku = `drop-${randomUUID().slice(0, 6)}`;
    const page = await newPage(day.browser, DESKTOP);
    await openDashboard(day.server, page);

    // By keyboard: New SKU opens the form on its first field, with a visible focus ring; Escape closes
    // it and gives the focus back to the button.
    await page.focus("#new-sku");
    await page.keyboard.press("Enter");
    await page.waitForSelector("#sku-dialog[open]");
    expect(await page.evaluate("document.activeElement.id")).toBe("f-sku");
    await page.keyboard.press("Tab");
    expect(await page.evaluate("document.activeElement.id")).toBe("f-name");
    expect(await page.evaluate("getComputedStyle(document.activeElement).outlineStyle")).toBe("solid");
    await page.keyboard.press("Escape");
    await page.waitForSelector("#sku-dialog", { state: "hidden" });
    expect(await page.evaluate("document.activeElement.id")).toBe("new-sku");

    // New SKU: the server's refusal is shown at the field it names, which says it is invalid.
    await page.click("#new-sku");
    await page.waitForSelector("#sku-dialog[open]");
    await page.fill("#f-sku", sku);
    await page.fill("#f-name", "Winter drop jacket");
    await page.fill("#f-totalStock", "10");
    await page.fill("#f-perUserLimit", "2");
    await page.fill("#f-holdSeconds", "5");
    await page.fill("#f-price", "2500");
    await page.fill("#f-currency", "eur");
    expect(await page.textContent("#f-price-hint")).toBe("2500 minor units = €25.00 a unit.");
    await page.click("#sku-save");
    await expect.poll(() => page.getAttribute("#f-holdSeconds", "aria-invalid"), WAIT).toBe("true");
    const described = (await page.getAttribute("#f-holdSeconds", "aria-describedby")) ?? "";
    expect(described.split(" ")).toContain("f-holdSeconds-error");
    expect(await page.textContent("#f-holdSeconds-error")).toMatch(/10/);
    expect(await page.textContent("#sku-form-error")).toMatch(/^The gateway refused: INVALID_REQUEST: .*holdSeconds/);
    expect(await page.evaluate("document.activeElement.id")).toBe("f-holdSeconds");
    expect((await api("GET", `/admin/skus/${sku}`)).status).toBe(404);
    await expectSound(page, "the SKU form with a refused field, 1280 px");
    await screenshot(page, "console-1-form-refused", "console-form.png", false);
    await page.setViewportSize(PHONE);
    await expectSound(page, "the SKU form with a refused field, 420 px");
    await screenshot(page, "console-1-form-refused-phone", "console-form-phone.png", false);
    await page.setViewportSize(DESKTOP);

    // Corrected, it is created: the card shows it, with its price in euros; the API has it so.
    await page.fill("#f-holdSeconds", "600");
    await page.click("#sku-save");
    await page.waitForSelector("#sku-dialog", { ...WAIT, state: "hidden" });
    await expect
      .poll(() => page.textContent("#console-message"), WAIT)
      .toBe(`Created: Winter drop jacket (${sku}), 10 units, on sale.`);
    await page.waitForSelector(card(sku), WAIT);
    expect(await page.textContent(cardField(sku, "price"))).toBe("€25.00 a unit");
    expect(await page.getAttribute("#f-holdSeconds", "aria-invalid")).toBeNull();
    const created = (await api("GET", `/admin/skus/${sku}`)).json;
    expect(created).toMatchObject({
      name: "Winter drop jacket",
      status: "on_sale",
      perUserLimit: 2,
      holdSeconds: 600,
      price: 2500,
      currency: "eur",
      stock: { total: 10 },
    });

    // A shopper buys through the API and pays: the card counts it from D1 (and the revenue, when reported).
    const ines = await shopper(day.server, "ines");
    const reserved = await reserveByApi(day.server, ines, sku);
    expect(reserved.status).toBe(202);
    const paid = await api(
      "POST",
      "/dev/pay",
      { reservationId: reserved.json.reservationId, outcome: "succeeded" },
      {},
    );
    expect(paid.json).toMatchObject({ reservationStatus: "paid" });
    await expect.poll(() => page.textContent(cardField(sku, "units-sold")), WAIT).toBe("1");
    await expect.poll(() => page.textContent(cardField(sku, "revenue")), WAIT).toBe("€25.00 from 1 paid unit");

    // The same order paid a second time: the panel of payments owed back says whom to refund, and why.
    const again = await api(
      "POST",
      "/dev/pay",
      { reservationId: reserved.json.reservationId, outcome: "succeeded" },
      {},
    );
    expect(again.json).toMatchObject({ outcome: "refund_required" });
    const refund = `#refund-list li[data-id="${reserved.json.reservationId}"]`;
    await page.waitForSelector(refund, { timeout: 30_000 });
    expect(await page.textContent(refund)).toContain(`Refund €25.00 to ines · ${sku}`);
    expect(await page.textContent(refund)).toContain("a second payment for an order already paid");
    await expect
      .poll(() => page.textContent(cardField(sku, "rate")), WAIT)
      .toMatch(/ · 1 made in all \(orders in D1\)$/);

    // Pause asks first, naming the change; "keep it as it is" sends nothing.
    const pause = `${card(sku)} [data-action="pause"]`;
    expect(await page.getAttribute(pause, "aria-label")).toBe(`Pause the sale of Winter drop jacket (${sku})`);
    let asked = await askConfirm(page, pause);
    expect(asked).toContain(`Pause the sale of Winter drop jacket (${sku})?`);
    expect(asked).toContain("Status: on sale → paused.");
    // The safe choice has the focus: Enter keeps things as they are.
    expect(await page.evaluate("document.activeElement.id")).toBe("confirm-cancel");
    await expectSound(page, "the pause confirmation, 1280 px");
    await screenshot(page, "console-2-confirm-pause", "console-confirm.png", false);
    await page.setViewportSize(PHONE);
    await expectSound(page, "the pause confirmation, 420 px");
    await screenshot(page, "console-2-confirm-pause-phone", "console-confirm-phone.png", false);
    await page.setViewportSize(DESKTOP);
    await page.keyboard.press("Enter");
    await page.waitForSelector("#confirm-dialog", { state: "hidden" });
    expect((await api("GET", `/api/skus/${sku}`, undefined, {})).json.status).toBe("on_sale");
    expect(await page.evaluate("document.activeElement.dataset.action")).toBe("pause");

    // Confirmed: the card says what the server answered, and shoppers are refused.
    await askConfirm(page, pause);
    await page.click("#confirm-ok");
    await expect
      .poll(() => page.textContent(cardField(sku, "message")), WAIT)
      .toBe(`Paused: the gateway now has ${sku} paused.`);
    await expect.poll(() => page.textContent(cardField(sku, "status")), WAIT).toBe("paused");
    expect((await api("GET", `/api/skus/${sku}`, undefined, {})).json.status).toBe("paused");
    const refused = await api("POST", `/api/skus/${sku}/tokens`, undefined, ines);
    expect(refused.status).toBe(403);
    expect((await api("GET", `/admin/skus/${sku}`)).json).toMatchObject({ stock: { total: 10, sold: 1 }, price: 2500 });

    // Resume.
    await expect.poll(() => page.textContent(pause)).toBe("Resume…");
    asked = await askConfirm(page, pause);
    expect(asked).toContain("Status: paused → on sale.");
    await page.click("#confirm-ok");
    await expect.poll(() => page.textContent(cardField(sku, "status")), WAIT).toBe("on sale");
    expect((await api("GET", `/api/skus/${sku}`, undefined, {})).json.status).toBe("on_sale");

    // Edit a live sale: lowering the stock below what is sold is refused, at the field; 8 is taken.
    await page.click(`${card(sku)} [data-action="edit"]`);
    await page.waitForSelector("#sku-dialog[open]");
    expect(await page.inputValue("#f-totalStock")).toBe("10");
    expect(await page.inputValue("#f-price")).toBe("2500");
    // A resize while a unit is sold: the dialog says what it does, the server refuses it at "Shards".
    await page.fill("#f-shards", "2");
    await page.click("#sku-save");
    asked = (await page.textContent("#confirm-dialog")) ?? "";
    expect(asked).toContain("Shards: 1 → 2 (moves the stock between stock objects");
    await page.click("#confirm-ok");
    await expect.poll(() => page.getAttribute("#f-shards", "aria-invalid"), WAIT).toBe("true");
    expect(await page.textContent("#f-shards-error")).toMatch(/held or sold/);
    expect((await api("GET", `/admin/skus/${sku}`)).json).toMatchObject({ shards: 1 });
    await page.fill("#f-shards", "1");
    await page.fill("#f-totalStock", "0");
    await page.click("#sku-save");
    asked = (await page.textContent("#confirm-dialog")) ?? "";
    expect(asked).toContain("It is on sale now: shoppers see the change at once.");
    expect(asked).toContain("Total stock: 10 → 0 (lowers the stock: below what is held and sold");
    await page.click("#confirm-ok");
    await expect.poll(() => page.getAttribute("#f-totalStock", "aria-invalid"), WAIT).toBe("true");
    expect(await page.textContent("#sku-form-error")).toMatch(/^The gateway refused: INVALID_STATE: /);
    expect((await api("GET", `/admin/skus/${sku}`)).json).toMatchObject({ stock: { total: 10 } });
    await page.fill("#f-totalStock", "8");
    await page.click("#sku-save");
    asked = (await page.textContent("#confirm-dialog")) ?? "";
    expect(asked).toContain("Total stock: 10 → 8 (lowers the stock: 7 left to sell)");
    await page.click("#confirm-ok");
    await page.waitForSelector("#sku-dialog", { ...WAIT, state: "hidden" });
    await expect
      .poll(() => page.textContent(cardField(sku, "message")), WAIT)
      .toBe(`Saved: total stock of ${sku} changed (the gateway answered 200).`);
    expect((await api("GET", `/admin/skus/${sku}`)).json).toMatchObject({ stock: { total: 8, sold: 1, available: 7 } });
    await expect.poll(() => page.textContent(cardField(sku, "total")), WAIT).toBe("8");

    // The board at both widths, with the console's panels.
    await expectSound(page, "the console at 1280 px");
    await page.evaluate("window.scrollTo(0, 0)");
    await screenshot(page, "console-3-board", "console.png", false);
    await page.setViewportSize(PHONE);
    await expectSound(page, "the console at 420 px");
    await page.evaluate(`document.querySelector('${card(sku)}').scrollIntoView({ block: "start" })`);
    await screenshot(page, "console-3-board-phone", "console-phone.png", false);

    // Find the order by its user, then by its reservation id.
    await page.fill("#lookup-q", "ines");
    await page.click("#lookup-form button");
    await expect.poll(() => page.textContent("#lookup-status"), WAIT).toMatch(/^1 order of ines in D1/);
    expect(await page.textContent("#lookup-results")).toContain(`1 × ${sku} · €25.00 · user ines`);
    await page.fill("#lookup-q", String(reserved.json.reservationId));
    await page.click("#lookup-form button");
    await expect
      .poll(() => page.getAttribute("#lookup-results li", "data-id"), WAIT)
      .toBe(String(reserved.json.reservationId));
    await expectSound(page, "an order found, 420 px");
    await page.setViewportSize(DESKTOP);

    // Archive: only once its id is typed; then it leaves the board and is no longer sold.
    const archive = `${card(sku)} [data-action="archive"]`;
    asked = await askConfirm(page, archive);
    expect(asked).toContain(`Archive Winter drop jacket (${sku})?`);
    expect(asked).toContain("It cannot be undone");
    expect(await page.isDisabled("#confirm-ok")).toBe(true);
    await page.fill("#confirm-type-input", "drop");
    expect(await page.isDisabled("#confirm-ok")).toBe(true);
    await page.fill("#confirm-type-input", sku);
    await expectSound(page, "the archive confirmation, 1280 px");
    await screenshot(page, "console-4-confirm-archive", "console-archive.png", false);
    await page.click("#confirm-ok");
    await expect
      .poll(() => page.textContent("#console-message"), WAIT)
      .toBe(`Archived: Winter drop jacket (${sku}) is archived and no longer sold.`);
    await expect.poll(() => page.locator(card(sku)).count(), WAIT).toBe(0);
    expect((await api("GET", `/api/skus/${sku}`, undefined, {})).json).toMatchObject({
      error: { code: "SKU_NOT_FOUND" },
    });
    expect((await api("GET", `/admin/skus/${sku}`)).json).toMatchObject({ status: "archived" });
    await expect.poll(() => page.textContent("#archived-list"), WAIT).toContain(sku);
    expect(unexpectedProblems(page)).toEqual([]);
    await page.close();
  });
});

describe("payments owed back, from the console (issue #54)", () => {
  /** Stripe's `checkout.session.completed` for a reservation, signed as Stripe signs it, to /webhooks/stripe. */
  async function paidThroughStripe(reservationId: string, amount: number) {
    const suffix = randomUUID().replaceAll("-", "").slice(0, 16);
    const event = stripeEnvelope(`evt_test_${suffix}`, "checkout.session.completed", {
      id: `cs_test_${suffix}`,
      object: "checkout.session",
      amount_total: amount,
      currency: "usd",
      client_reference_id: reservationId,
      metadata: {},
      payment_status: "paid",
      payment_intent: `pi_test_${suffix}`,
      status: "complete",
    });
    const payload = JSON.stringify(event);
    const secret = readDevVars().STRIPE_WEBHOOK_SECRET ?? "dev-stripe-secret";
    const signature = new Stripe("sk_test_console").webhooks.generateTestHeaderString({ payload, secret });
    const answer = await fetch(`${day.server.url}/webhooks/stripe`, {
      method: "POST",
      headers: { "content-type": "application/json", "stripe-signature": signature },
      body: payload,
    });
    return (await answer.json()) as Record<string, unknown>;
  }

  it("refunds one via Stripe and marks one refunded, and says what is still owed", async () => {
    const sku = `owed-${randomUUID().slice(0, 6)}`;
    const created = await api("PUT", `/admin/skus/${sku}`, {
      name: "Owed tee",
      totalStock: 5,
      perUserLimit: 2,
      price: 1500,
      currency: "usd",
    });
    expect(created.status).toBe(200);
    // Uma pays twice through Stripe (two Checkout Sessions): the second is owed back.
    const uma = await reserveByApi(day.server, await shopper(day.server, "uma"), sku);
    const umaId = String(uma.json.reservationId);
    expect(await paidThroughStripe(umaId, 1500)).toMatchObject({ outcome: "applied" });
    expect(await paidThroughStripe(umaId, 1500)).toMatchObject({ outcome: "refund_required" });
    // Vic pays twice elsewhere (the payment webhook): owed back, refunded outside Flashgate.
    const vic = await reserveByApi(day.server, await shopper(day.server, "vic"), sku);
    const vicId = String(vic.json.reservationId);
    for (const expected of ["applied", "refund_required"]) {
      const paid = await api("POST", "/dev/pay", { reservationId: vicId, outcome: "succeeded" }, {});
      expect(paid.json).toMatchObject({ outcome: expected });
    }

    const page = await newPage(day.browser, DESKTOP);
    await openDashboard(day.server, page);
    const umaItem = `#refund-list li[data-id="${umaId}"]`;
    const vicItem = `#refund-list li[data-id="${vicId}"]`;
    await page.waitForSelector(umaItem, { timeout: 30_000 });
    await page.waitForSelector(vicItem, { timeout: 30_000 });
    await expect
      .poll(() => page.textContent("#refund-owed"), WAIT)
      .toMatch(/^Still owed: .*\$\d[\d,.]* to \d+ buyers\.$/);
    const owedBefore = (await page.textContent("#refund-owed")) ?? "";
    // A Stripe payment offers both; one paid elsewhere only Mark refunded.
    expect(await page.getAttribute(`${umaItem} [data-action="refund"]`, "aria-label")).toMatch(
      /^Refund via Stripe: \$15\.00 to uma \(event /,
    );
    expect(await page.locator(`${vicItem} [data-action="refund"]`).count()).toBe(0);
    await page.evaluate(`document.querySelector('#refunds').scrollIntoView({ block: "start" })`);
    await expectSound(page, "payments owed back, 1280 px");
    await screenshot(page, "console-5-refunds", "console-refunds.png", false);

    // Refund via Stripe: confirmed in the dialog, then Stripe's refund of the payment intent, once.
    // Stripe answers it pending: the item stays, and asking again reads where it stands.
    stripe.pendingRefunds = true;
    let asked = await askConfirm(page, `${umaItem} [data-action="refund"]`);
    expect(asked).toContain("Refund $15.00 to uma via Stripe?");
    expect(await page.evaluate("document.activeElement.id")).toBe("confirm-cancel");
    await page.click("#confirm-ok");
    await expect
      .poll(() => page.textContent("#refund-message"), WAIT)
      .toBe("Refund of $15.00 to uma sent to Stripe: pending there.");
    stripe.pendingRefunds = false;
    const ask = `${umaItem} [data-action="refund-status"]`;
    await page.waitForSelector(ask, WAIT);
    expect(await page.textContent(umaItem)).toMatch(/Refund pending at Stripe \(re_test_[0-9a-f]+\)/);
    await page.click(ask);
    await expect
      .poll(() => page.textContent("#refund-message"), WAIT)
      .toBe("Stripe still has the refund of $15.00 to uma pending.");
    await screenshot(page, "console-5-refund-pending");
    const refunds = stripe.requests.filter((r) => r.method === "POST" && r.path === "/v1/refunds");
    expect(refunds).toHaveLength(1);
    expect(refunds[0]?.params.payment_intent).toMatch(/^pi_test_/);
    // Stripe settles it (no event sent here): asked again, the console shows it refunded.
    const refundId = [...stripe.refunds.keys()].at(-1);
    const settled = await fetch(`${stripe.url}/__standin/refunds/${refundId}`, {
      method: "POST",
      headers: { "content-type": "application/x-www-form-urlencoded" },
      body: "status=succeeded",
    });
    expect(settled.status).toBe(200);
    await page.click(ask);
    await expect
      .poll(() => page.textContent("#refund-message"), WAIT)
      .toBe(`Refunded $15.00 to uma via Stripe (${refundId}).`);
    await expect.poll(() => page.locator(umaItem).count(), WAIT).toBe(0);
    expect(stripe.requests.filter((r) => r.method === "POST" && r.path === "/v1/refunds")).toHaveLength(1);

    // Mark refunded: the other one leaves the list; the total follows.
    await page.setViewportSize(PHONE);
    asked = await askConfirm(page, `${vicItem} [data-action="mark-refunded"]`);
    expect(asked).toContain("Mark $15.00 to vic as refunded?");
    await expectSound(page, "the mark-refunded confirmation, 420 px");
    await page.click("#confirm-ok");
    await expect.poll(() => page.textContent("#refund-message"), WAIT).toBe("Marked $15.00 to vic as refunded.");
    await expect.poll(() => page.locator(vicItem).count(), WAIT).toBe(0);
    await expect.poll(() => page.textContent("#refund-owed"), WAIT).not.toBe(owedBefore);
    await expectSound(page, "payments owed back, 420 px");
    await screenshot(page, "console-5-refunds-phone", "console-refunds-phone.png", false);

    // The gateway lists both as refunded, each as it was done.
    const done = await api("GET", "/admin/payments?outcome=refund_required&refunded=true&limit=1000");
    const mine = (done.json.payments as { reservationId: string; refund: { via: string; status: string } }[]).filter(
      (p) => p.reservationId === umaId || p.reservationId === vicId,
    );
    expect(mine.map((p) => [p.reservationId, p.refund.via, p.refund.status]).sort()).toEqual(
      [
        [umaId, "stripe", "refunded"],
        [vicId, "marked", "refunded"],
      ].sort(),
    );
    expect(unexpectedProblems(page)).toEqual([]);
    await page.close();
  });

  it("Ask Stripe again on a refund that failed meanwhile makes no new refund unasked", async () => {
    const sku = `ask-${randomUUID().slice(0, 6)}`;
    expect(
      (
        await api("PUT", `/admin/skus/${sku}`, {
          name: "Ask tee",
          totalStock: 5,
          perUserLimit: 2,
          price: 1500,
          currency: "usd",
        })
      ).status,
    ).toBe(200);
    const wes = await reserveByApi(day.server, await shopper(day.server, "wes"), sku);
    const wesId = String(wes.json.reservationId);
    expect(await paidThroughStripe(wesId, 1500)).toMatchObject({ outcome: "applied" });
    expect(await paidThroughStripe(wesId, 1500)).toMatchObject({ outcome: "refund_required" });
    const page = await newPage(day.browser, DESKTOP);
    await openDashboard(day.server, page);
    const item = `#refund-list li[data-id="${wesId}"]`;
    await page.waitForSelector(item, { timeout: 30_000 });
    stripe.pendingRefunds = true;
    await askConfirm(page, `${item} [data-action="refund"]`);
    await page.click("#confirm-ok");
    await expect
      .poll(() => page.textContent("#refund-message"), WAIT)
      .toBe("Refund of $15.00 to wes sent to Stripe: pending there.");
    stripe.pendingRefunds = false;
    const ask = `${item} [data-action="refund-status"]`;
    await page.waitForSelector(ask, WAIT);
    const made = () => stripe.requests.filter((r) => r.method === "POST" && r.path === "/v1/refunds").length;
    const before = made();
    // Stripe fails it, and its refund event reaches the gateway while the page still shows it pending.
    const refundId = [...stripe.refunds.keys()].at(-1);
    const settled = await fetch(`${stripe.url}/__standin/refunds/${refundId}`, {
      method: "POST",
      headers: { "content-type": "application/x-www-form-urlencoded" },
      body: "status=failed",
    });
    const [event] = ((await settled.json()) as { events: unknown[] }).events;
    const payload = JSON.stringify(event);
    const secret = readDevVars().STRIPE_WEBHOOK_SECRET ?? "dev-stripe-secret";
    const signature = new Stripe("sk_test_console").webhooks.generateTestHeaderString({ payload, secret });
    const sent = await fetch(`${day.server.url}/webhooks/stripe`, {
      method: "POST",
      headers: { "content-type": "application/json", "stripe-signature": signature },
      body: payload,
    });
    expect(((await sent.json()) as { payment: { refund: { status: string } } }).payment.refund.status).toBe("failed");
    // "Nothing moves money, so nothing to confirm": asking where it stands must not refund again.
    await page.click(ask);
    await expect
      .poll(() => page.textContent("#refund-message"), WAIT)
      .not.toBe("Refund of $15.00 to wes sent to Stripe: pending there.");
    expect(await page.textContent("#refund-message")).not.toMatch(/^Refunded \$15\.00 to wes via Stripe/);
    expect(made()).toBe(before);
    expect(await page.textContent("#refund-message")).toBe(
      "Stripe's refund of $15.00 to wes failed meanwhile: nothing was asked.",
    );
    // The item now offers what a failed refund does: Refund via Stripe (confirmed) or Mark refunded.
    await page.waitForSelector(`${item} [data-action="refund"]`, WAIT);
    expect(await page.locator(ask).count()).toBe(0);
  });
});

/** A count said with a plural noun where the singular is due ("1 units", "1 paid orders"). */
const ONE_PLURAL =
  /(^|[^\d.,:])1 (units|orders|paid orders|available units|entrants|differences|SKUs|shoppers|deliveries|endpoints|attempts)\b/;

/** The element's box, as the page lays it out now. */
const box = (page: Page, selector: string) =>
  page.evaluate(
    `(() => { const r = document.querySelector(${JSON.stringify(selector)}).getBoundingClientRect(); return { top: r.top, bottom: r.bottom, lines: document.querySelector(${JSON.stringify(selector)}).getClientRects().length }; })()`,
  ) as Promise<{ top: number; bottom: number; lines: number }>;

describe("the console, as a newcomer finds it (issue #50)", () => {
  it("keeps the token whole, graphs the rate, says 1 unit, refuses '..' and lists an archive at once", async () => {
    // The login hint: the token is one piece of text at 420 px (it broke as "dev-admin-to ken").
    const page = await newPage(day.browser, PHONE);
    await gotoDashboard(page, day.server.url);
    await page.waitForSelector("#login:not([hidden])");
    const token = "#login code:nth-of-type(2)";
    expect(await page.textContent(token)).toBe("dev-admin-token");
    expect((await box(page, token)).lines, "dev-admin-token on one line at 420 px").toBe(1);
    await expectSound(page, "the login at 420 px");
    await screenshot(page, "console-5-login-phone", "console-login-phone.png", false);
    await page.setViewportSize(DESKTOP);
    expect((await box(page, token)).lines, "dev-admin-token on one line at 1280 px").toBe(1);
    await expectSound(page, "the login at 1280 px");
    await screenshot(page, "console-5-login", undefined, false);
    await page.fill("#token", "dev-admin-token");
    await page.click("#login button");
    await page.waitForSelector("#board:not([hidden])");

    // A SKU nobody has reserved yet: its graph says so in its box and beside it, never an empty box.
    const sku = `cap-${randomUUID().slice(0, 6)}`;
    expect(
      (await api("PUT", `/admin/skus/${sku}`, { name: "Rate cap", totalStock: 3, perUserLimit: 1, price: 900 })).status,
    ).toBe(200);
    await page.waitForSelector(card(sku), WAIT);
    const empty = `${card(sku)} [data-field="spark-empty"]`;
    await expect
      .poll(() => page.textContent(cardField(sku, "rate")), WAIT)
      .toMatch(/^no reservations in the last \d+ s · 0 made in all/);
    expect(await page.isVisible(empty)).toBe(true);
    expect(await page.textContent(empty)).toMatch(/^none in \d+ s$/);
    await page.evaluate(`document.querySelector('${card(sku)}').scrollIntoView({ block: "start" })`);
    await screenshot(page, "console-6-rate-none", undefined, false);

    // One paid, one held: the graph draws the rate (a line above the box's floor), the label goes.
    const bought = await reserveByApi(day.server, await shopper(day.server, "pia"), sku);
    expect(bought.status).toBe(202);
    expect((await api("POST", "/dev/pay", { reservationId: bought.json.reservationId }, {})).json).toMatchObject({
      reservationStatus: "paid",
    });
    expect((await reserveByApi(day.server, await shopper(day.server, "quin"), sku)).status).toBe(202);
    await expect
      .poll(() => page.textContent(cardField(sku, "rate")), WAIT)
      .toMatch(/^now \d+\.\d\/s · peak (0\.[1-9]|[1-9]\d*\.\d)\/s over the last /);
    expect(await page.isVisible(empty)).toBe(false);
    // One column per read with reservations: the peak's reaches the top of the box, clear of its right edge.
    const columns = [
      ...((await page.getAttribute(`${card(sku)} svg path`, "d")) ?? "").matchAll(
        /M([\d.]+) 40V([\d.]+)H([\d.]+)V40Z/g,
      ),
    ];
    expect(columns.length).toBeGreaterThan(0);
    expect(Math.min(...columns.map((c) => Number(c[2])))).toBe(4);
    expect(Math.max(...columns.map((c) => Number(c[3])))).toBeLessThan(240);
    await expect.poll(() => page.textContent(cardField(sku, "units-held")), WAIT).toBe("1");
    await page.evaluate(`document.querySelector('${card(sku)}').scrollIntoView({ block: "start" })`);
    await expectSound(page, "a card with its rate graph, 1280 px");
    await screenshot(page, "console-6-rate", "console-rate.png", false);
    await page.setViewportSize(PHONE);
    await page.evaluate(`document.querySelector('${card(sku)} .spark').scrollIntoView({ block: "center" })`);
    await expectSound(page, "a card with its rate graph, 420 px");
    await screenshot(page, "console-6-rate-phone", "console-rate-phone.png", false);
    await page.setViewportSize(DESKTOP);

    // 1 unit held, 1 available: every line of the dialogs in the singular where it is one.
    const pause = `${card(sku)} [data-action="pause"]`;
    let asked = await askConfirm(page, pause);
    expect(asked).toContain("The 1 unit held now keeps its course: it can still be paid until it lapses.");
    expect(asked).not.toMatch(ONE_PLURAL);
    await page.click("#confirm-ok");
    await expect.poll(() => page.textContent(cardField(sku, "status")), WAIT).toBe("paused");
    asked = await askConfirm(page, pause);
    expect(asked).toContain("1 unit is available.");
    await page.click("#confirm-ok");
    await expect.poll(() => page.textContent(cardField(sku, "status")), WAIT).toBe("on sale");
    expect(await page.evaluate("document.body.innerText")).not.toMatch(ONE_PLURAL);

    // "." and "..": no URL can carry them as an id (the browser resolves /admin/users/../orders to the
    // order feed): the page says so and asks nothing; no other shopper's order is listed.
    const asked50: string[] = [];
    page.on("request", (request) => {
      if (new URL(request.url()).pathname.startsWith("/admin/orders") || request.url().includes("/admin/users/"))
        asked50.push(request.url());
    });
    for (const id of ["..", "."]) {
      await page.fill("#lookup-q", id);
      await page.click("#lookup-form button");
      await expect.poll(() => page.textContent("#lookup-status"), WAIT).toContain(`"${id}" cannot be looked up`);
      expect(await page.locator("#lookup-results li").count()).toBe(0);
      expect(await page.textContent("#lookup-results")).not.toContain("user pia");
    }
    expect(asked50).toEqual([]);
    // An id that needs encoding still reaches its own route, as one segment.
    await page.fill("#lookup-q", "pia/../quin");
    await page.click("#lookup-form button");
    await expect.poll(() => page.textContent("#lookup-status"), WAIT).toMatch(/^No order of pia\/\.\.\/quin in D1/);
    expect(asked50.some((url) => url.includes("/admin/users/pia%2F..%2Fquin/orders"))).toBe(true);
    await page.fill("#lookup-q", "pia");
    await page.click("#lookup-form button");
    await expect.poll(() => page.textContent("#lookup-status"), WAIT).toMatch(/^1 order of pia in D1/);
    await expectSound(page, "the lookup, 1280 px");

    // Archive: the SKU is under Archived as the message says it is archived, not 10 s later.
    asked = await askConfirm(page, `${card(sku)} [data-action="archive"]`);
    expect(asked).toContain("1 available unit is no longer offered");
    expect(asked).toContain("The 1 unit held now keeps its course");
    expect(asked).not.toMatch(ONE_PLURAL);
    await page.fill("#confirm-type-input", sku);
    await page.click("#confirm-ok");
    await expect.poll(() => page.textContent("#console-message"), WAIT).toMatch(/^Archived: Rate cap/);
    const archived = `#archived-list li[data-sku="${sku}"]`;
    expect(await page.locator(archived).count(), "listed under Archived when the message says so").toBe(1);
    expect(await page.textContent(archived)).toContain("1 paid order · $9.00 from 1 paid unit");
    expect(await page.evaluate("document.body.innerText")).not.toMatch(ONE_PLURAL);
    expect(unexpectedProblems(page)).toEqual([]);
    await page.close();
  });
});
