import { randomUUID } from "node:crypto";
import type { Page } from "playwright-core";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import {
  call,
  DESKTOP,
  expectSound,
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
 * and the README's console ones in docs/screenshots/.
 */

const WAIT = { timeout: 20_000, interval: 250 };

let day: SaleDay;

beforeAll(async () => {
  day = await startSaleDay();
});
afterAll(async () => {
  await day?.stop();
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
