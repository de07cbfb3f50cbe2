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
 * Issue #51, sizes in the pages (API.md v1.4 "Sizes (variants)") in a real headless Chromium against
 * `wrangler dev`: the console creates a SKU in sizes, edits one, and shows a refused cut at that
 * size's stock; the storefront offers the sizes with what each has left, greys a sold-out one, sends
 * a first choice with fallbacks, and its hold card says the size held.
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
const card = (sku: string) => `article[data-sku="${sku}"]`;
type AdminSize = { id: string; name: string; stock: Record<string, number> };
const sizesOf = async (sku: string) => (await api("GET", `/admin/skus/${sku}`)).json.variants as AdminSize[];

/** The dialog scrolled to its sizes, checked and shot at 1280 and at 420 px. */
async function formAtBothSizes(page: Page, what: string, name: string, docs: boolean) {
  const show = `document.getElementById("f-variants").scrollIntoView({ block: "start" })`;
  await expectSound(page, `${what}, 1280 px`);
  await page.evaluate(show);
  await screenshot(page, name, docs ? `${name}.png` : undefined, false);
  await page.setViewportSize(PHONE);
  await expectSound(page, `${what}, 420 px`);
  await page.evaluate(show);
  await screenshot(page, `${name}-phone`, docs ? `${name}-phone.png` : undefined, false);
  await page.setViewportSize(DESKTOP);
}

describe("sizes in the console (issue #51)", () => {
  it("creates a SKU in sizes, edits a size, adds one, and shows a refused cut at that size's stock", async () => {
    const sku = `shoe-${randomUUID().slice(0, 6)}`;
    const page = await newPage(day.browser, DESKTOP);
    await openDashboard(day.server, page);

    await page.click("#new-sku");
    await page.waitForSelector("#sku-dialog[open]");
    expect(await page.textContent("#f-variants-count")).toBe("(none: one stock)");
    expect(await page.isHidden("#f-variants-table")).toBe(true);
    await page.fill("#f-sku", sku);
    await page.fill("#f-name", "Runner sneaker");
    await page.fill("#f-price", "12000");
    const sizes = [
      ["42", "EU 42", "3"],
      ["42.5", "EU 42.5", "2"],
      ["43", "", "4"],
    ];
    for (const [i, [id, name, stock]] of sizes.entries()) {
      await page.click("#f-variants-add");
      // Add size puts the focus on the new row's id.
      expect(await page.evaluate("document.activeElement.id")).toBe(`f-variants-${i}-id`);
      await page.fill(`#f-variants-${i}-id`, id as string);
      await page.fill(`#f-variants-${i}-name`, name as string);
      await page.fill(`#f-variants-${i}-totalStock`, stock as string);
    }
    // A row added by mistake goes again while unsaved.
    await page.click("#f-variants-add");
    await page.click('[aria-label="Remove size 4 (not saved yet)"]');
    expect(await page.locator("#f-variants-list tr.size-row").count()).toBe(3);
    expect(await page.textContent("#f-variants-count")).toBe("(3 sizes of 100)");
    // The total is their sum, not typed.
    expect(await page.inputValue("#f-totalStock")).toBe("9");
    expect(await page.getAttribute("#f-totalStock", "readonly")).not.toBeNull();
    expect(await page.getByRole("spinbutton", { name: "Stock of size 42.5" }).inputValue()).toBe("2");
    await formAtBothSizes(page, "the new SKU in sizes", "console-sizes-1-new", true);
    await page.click("#sku-save");
    await page.waitForSelector("#sku-dialog", { ...WAIT, state: "hidden" });
    await expect
      .poll(() => page.textContent("#console-message"), WAIT)
      .toBe(`Created: Runner sneaker (${sku}), 9 units in 3 sizes, on sale.`);
    expect(await sizesOf(sku)).toEqual([
      { id: "42", name: "EU 42", stock: { total: 3, available: 3, held: 0, sold: 0 } },
      { id: "42.5", name: "EU 42.5", stock: { total: 2, available: 2, held: 0, sold: 0 } },
      { id: "43", name: "43", stock: { total: 4, available: 4, held: 0, sold: 0 } },
    ]);

    // Two shoppers hold a 42 each.
    for (const user of ["ana", "ben"]) {
      const auth = await shopper(day.server, `${user}-${sku}`);
      const token = await api("POST", `/api/skus/${sku}/tokens`, undefined, auth);
      const held = await api(
        "POST",
        `/api/skus/${sku}/reservations`,
        { token: token.json.token, quantity: 1, variants: ["42"] },
        auth,
      );
      expect(held.status, JSON.stringify(held.json)).toBe(202);
    }

    // Edit: the rows show held and sold; the saved ids are fixed; 42 cut to 1 is refused at its stock.
    await expect.poll(() => page.textContent(`${card(sku)} [data-field="held"]`), WAIT).toBe("2");
    expect(await page.textContent(`${card(sku)} [data-field="sizes"]`)).toBe(
      "EU 42: 1 of 3 left · EU 42.5: 2 of 2 left · 43: 4 of 4 left",
    );
    await page.click(`${card(sku)} [data-action="edit"]`);
    await page.waitForSelector("#sku-dialog[open]");
    expect(await page.inputValue("#f-variants-0-id")).toBe("42");
    expect(await page.getAttribute("#f-variants-0-id", "readonly")).not.toBeNull();
    expect(await page.inputValue("#f-variants-2-name")).toBe("");
    const cells = await page.$$eval("#f-variants-list tr.size-row:first-child td.figure", (tds) =>
      tds.map((td) => td.textContent),
    );
    expect(cells).toEqual(["2", "0"]);
    await page.fill("#f-variants-0-totalStock", "1");
    await page.click("#sku-save");
    await page.waitForSelector("#confirm-dialog[open]");
    expect(await page.textContent("#confirm-dialog")).toContain(
      "Size 42: stock 3 → 1 (lowers the stock: below what is held and sold, which the gateway refuses)",
    );
    await page.click("#confirm-ok");
    await expect.poll(() => page.getAttribute("#f-variants-0-totalStock", "aria-invalid"), WAIT).toBe("true");
    expect(await page.getAttribute("#f-variants-0-totalStock", "aria-describedby")).toBe(
      "f-variants-0-totalStock-error",
    );
    expect(await page.textContent("#f-variants-0-totalStock-error")).toBe(
      "Below the 2 units of 42 held or sold: set at least 2.",
    );
    expect(await page.evaluate("document.activeElement.id")).toBe("f-variants-0-totalStock");
    expect(await page.textContent("#sku-form-error")).toMatch(/^The gateway refused: INVALID_STATE: Variant 42/);
    // Nor the SKU's total, nor another size, is blamed.
    expect(await page.getAttribute("#f-totalStock", "aria-invalid")).toBeNull();
    expect(await page.getAttribute("#f-variants-1-totalStock", "aria-invalid")).toBeNull();
    await formAtBothSizes(page, "a refused cut", "console-sizes-2-refused", true);
    expect((await sizesOf(sku))[0]?.stock.total).toBe(3);

    // A bad id in a new row (sent as variants.0: only changed rows go) is marked at that row's id.
    await page.fill("#f-variants-0-totalStock", "3");
    await page.click("#f-variants-add");
    await page.fill("#f-variants-3-id", "44 wide");
    await page.fill("#f-variants-3-totalStock", "2");
    await page.click("#sku-save");
    await page.waitForSelector("#confirm-dialog[open]");
    await page.click("#confirm-ok");
    await expect.poll(() => page.getAttribute("#f-variants-3-id", "aria-invalid"), WAIT).toBe("true");
    expect(await page.getAttribute("#f-variants-0-totalStock", "aria-invalid")).toBeNull();
    expect(await page.textContent("#sku-form-error")).toMatch(/^The gateway refused: INVALID_REQUEST/);

    // Corrected: 42.5 gets a name and 1 more, 44 is added; 42 and 43 are not sent.
    await page.fill("#f-variants-3-id", "44");
    await page.fill("#f-variants-3-name", "EU 44");
    await page.fill("#f-variants-1-totalStock", "3");
    expect(await page.inputValue("#f-totalStock")).toBe("12");
    await page.click("#sku-save");
    await page.waitForSelector("#confirm-dialog[open]");
    const asked = (await page.textContent("#confirm-dialog")) ?? "";
    expect(asked).toContain("Size 42.5: stock 2 → 3");
    expect(asked).toContain("New size 44 (EU 44): stock 2");
    expect(asked).not.toContain("Size 42:");
    await page.click("#confirm-ok");
    await page.waitForSelector("#sku-dialog", { ...WAIT, state: "hidden" });
    await expect
      .poll(() => page.textContent(`${card(sku)} [data-field="message"]`), WAIT)
      .toBe(`Saved: sizes of ${sku} changed (the gateway answered 200).`);
    await expect
      .poll(() => page.textContent(`${card(sku)} [data-field="sizes"]`), WAIT)
      .toBe("EU 42: 1 of 3 left · EU 42.5: 3 of 3 left · 43: 4 of 4 left · EU 44: 2 of 2 left");
    await expectSound(page, "the card of a SKU in sizes, 1280 px");
    await page.evaluate(`document.querySelector('${card(sku)}').scrollIntoView({ block: "start" })`);
    await screenshot(page, "console-sizes-3-card", "console-sizes-3-card.png", false);
    expect(await sizesOf(sku)).toEqual([
      { id: "42", name: "EU 42", stock: { total: 3, available: 1, held: 2, sold: 0 } },
      { id: "42.5", name: "EU 42.5", stock: { total: 3, available: 3, held: 0, sold: 0 } },
      { id: "43", name: "43", stock: { total: 4, available: 4, held: 0, sold: 0 } },
      { id: "44", name: "EU 44", stock: { total: 2, available: 2, held: 0, sold: 0 } },
    ]);
    expect(unexpectedProblems(page)).toEqual([]);
    await page.close();
  }, 180_000);

  it("keeps a SKU without sizes as it was: the total typed and sent, no variants", async () => {
    const sku = `plain-${randomUUID().slice(0, 6)}`;
    expect((await api("PUT", `/admin/skus/${sku}`, { name: "Cap", totalStock: 5 })).status).toBe(200);
    const page = await newPage(day.browser, DESKTOP);
    await openDashboard(day.server, page);
    await page.waitForSelector(card(sku), WAIT);
    await page.click(`${card(sku)} [data-action="edit"]`);
    await page.waitForSelector("#sku-dialog[open]");
    expect(await page.getAttribute("#f-totalStock", "readonly")).toBeNull();
    await page.fill("#f-totalStock", "7");
    await page.click("#sku-save");
    // On sale now: the change is confirmed, as any change to a live sale.
    await page.waitForSelector("#confirm-dialog[open]");
    expect(await page.textContent("#confirm-dialog")).toContain("Total stock: 5 → 7");
    await page.click("#confirm-ok");
    await page.waitForSelector("#sku-dialog", { ...WAIT, state: "hidden" });
    const view = (await api("GET", `/admin/skus/${sku}`)).json;
    expect(view.stock).toMatchObject({ total: 7 });
    expect(view.variants).toBeUndefined();
    expect(await page.isHidden(`${card(sku)} [data-field="sizes"]`)).toBe(true);
    expect(unexpectedProblems(page)).toEqual([]);
    await page.close();
  }, 60_000);
});

describe("sizes in the storefront (issue #51)", () => {
  async function signedIn(sku: string, user: string): Promise<Page> {
    const page = await newPage(day.browser, DESKTOP);
    await page.goto(`${day.server.url}/?sku=${sku}`);
    await page.fill("#user", user);
    await page.click("#user-form button");
    await expect.poll(() => page.textContent("#who")).toContain(`Signed in as ${user}`);
    return page;
  }

  it("greys a sold-out size, holds the second choice when the first is gone, and shows the size held", async () => {
    const sku = `boot-${randomUUID().slice(0, 6)}`;
    const created = await api("PUT", `/admin/skus/${sku}`, {
      name: "Trail boot",
      perUserLimit: 1,
      price: 15000,
      variants: [
        { id: "41", name: "EU 41", totalStock: 1 },
        { id: "42", name: "EU 42", totalStock: 1 },
        { id: "42.5", name: "EU 42.5", totalStock: 2 },
        { id: "43", name: "EU 43", totalStock: 3 },
      ],
    });
    expect(created.status, JSON.stringify(created.json)).toBe(200);
    // Someone takes the only 41 before the page opens.
    const zed = await shopper(day.server, `zed-${sku}`);
    const token = await api("POST", `/api/skus/${sku}/tokens`, undefined, zed);
    const first = await api(
      "POST",
      `/api/skus/${sku}/reservations`,
      { token: token.json.token, quantity: 1, variants: ["41"] },
      zed,
    );
    expect(first.status, JSON.stringify(first.json)).toBe(202);

    const page = await signedIn(sku, `mia-${sku}`);
    await page.waitForSelector("#sizes:not([hidden])", WAIT);
    expect(await page.textContent("#sizes legend")).toBe("Size");
    await expect
      .poll(() => page.$$eval("#size-options label", (ls) => ls.map((l) => l.textContent)), WAIT)
      .toEqual(["EU 41 (sold out)", "EU 42 (1 left)", "EU 42.5 (2 left)", "EU 43 (3 left)"]);
    // The sold-out size cannot be picked; the first with units is.
    expect(await page.isDisabled('#size-options input[value="41"]')).toBe(true);
    expect(await page.isChecked('#size-options input[value="42"]')).toBe(true);
    expect(await page.getByRole("radio", { name: "EU 42 (1 left)" }).isChecked()).toBe(true);
    // The fallbacks: the first choice and the sold-out size are not offered; the third waits for a second.
    expect(await page.isDisabled("#size-3")).toBe(true);
    const offered = () => page.$$eval("#size-2 option:not([disabled])", (os) => os.map((o) => o.getAttribute("value")));
    expect(await offered()).toEqual(["", "42.5", "43"]);
    await page.getByRole("combobox", { name: "Second choice" }).selectOption("42.5");
    expect(await page.isDisabled("#size-3")).toBe(false);
    await page.getByRole("combobox", { name: "Third choice" }).selectOption("43");
    await formSound(page, "the size picker", "storefront-sizes", "#sizes");

    // The only 42 goes to someone else meanwhile: the hold takes the second choice. Meanwhile is after
    // the page's last read of the SKU: its reads (every second) wait from here until its hold is asked
    // for, else a read answered in between greys 42 and the picker moves the first choice to 42.5.
    let release = () => {};
    const released = new Promise<void>((resolve) => {
      release = resolve;
    });
    let reads = 0;
    const skuView = `**/api/skus/${sku}`;
    await page.route(skuView, async (route) => {
      reads++;
      await released;
      await route.continue();
    });
    await expect.poll(() => reads, WAIT).toBeGreaterThan(0);
    const ivy = await shopper(day.server, `ivy-${sku}`);
    const ivyToken = await api("POST", `/api/skus/${sku}/tokens`, undefined, ivy);
    const taken = await api(
      "POST",
      `/api/skus/${sku}/reservations`,
      { token: ivyToken.json.token, quantity: 1, variants: ["42"] },
      ivy,
    );
    expect(taken.status).toBe(202);
    const sent: unknown[] = [];
    page.on("request", (request) => {
      if (request.method() === "POST" && request.url().endsWith(`/api/skus/${sku}/reservations`))
        sent.push(request.postDataJSON());
    });
    await page.click("#buy");
    await page.waitForSelector("#reservation:not([hidden])", WAIT);
    release();
    await page.unrouteAll({ behavior: "wait" }); // once the held reads are sent on
    expect(sent).toEqual([expect.objectContaining({ quantity: 1, variants: ["42", "42.5", "43"] })]);
    await expect.poll(() => page.textContent("#res-size"), WAIT).toBe("EU 42.5 (your second choice: EU 42 was gone)");
    expect(await page.textContent("#message")).toMatch(/^Reserved 1 in size EU 42\.5:/);
    await expect.poll(() => page.textContent("#orders"), WAIT).toContain(`1 × ${sku}, size 42.5`);
    // The picker follows: 42 is now sold out too.
    await expect.poll(() => page.isDisabled('#size-options input[value="42"]'), WAIT).toBe(true);
    await formSound(page, "the hold of a size", "storefront-sizes-held", "#reservation");
    expect((await sizesOf(sku)).map((s) => [s.id, s.stock.held])).toEqual([
      ["41", 1],
      ["42", 1],
      ["42.5", 1],
      ["43", 0],
    ]);
    expect(unexpectedProblems(page)).toEqual([]);
    await page.close();
  }, 120_000);

  it("keeps the size the shopper picked when it sells out, rather than another they did not choose, with Buy off until a later choice has units", async () => {
    const sku = `pick-${randomUUID().slice(0, 6)}`;
    const created = await api("PUT", `/admin/skus/${sku}`, {
      name: "Pick boot",
      perUserLimit: 1,
      price: 9000,
      variants: [
        { id: "40", name: "EU 40", totalStock: 2 },
        { id: "42", name: "EU 42", totalStock: 1 },
      ],
    });
    expect(created.status, JSON.stringify(created.json)).toBe(200);
    const page = await signedIn(sku, `quin-${sku}`);
    await page.waitForSelector("#sizes:not([hidden])", WAIT);
    await page.getByRole("radio", { name: "EU 42 (1 left)" }).check();
    // Someone else takes the only 42; the page's next read greys it.
    const rex = await shopper(day.server, `rex-${sku}`);
    const token = await api("POST", `/api/skus/${sku}/tokens`, undefined, rex);
    const taken = await api(
      "POST",
      `/api/skus/${sku}/reservations`,
      { token: token.json.token, quantity: 1, variants: ["42"] },
      rex,
    );
    expect(taken.status, JSON.stringify(taken.json)).toBe(202);
    await expect
      .poll(() => page.$$eval("#size-options label", (ls) => ls.map((l) => l.textContent)), WAIT)
      .toEqual(["EU 40 (2 left)", "EU 42 (sold out)"]);
    // Still the shopper's 42, greyed: not EU 40, which they did not choose.
    expect(await page.isChecked('#size-options input[value="42"]')).toBe(true);
    expect(await page.isChecked('#size-options input[value="40"]')).toBe(false);
    // A Buy of it would only be refused: off, and the page says why. EU 40 still has units: no line.
    expect(await page.isDisabled("#buy")).toBe(true);
    expect(await page.textContent("#buy-note")).toBe("EU 42 is sold out: pick another size to buy.");
    expect(await page.isHidden("#waitlist")).toBe(true);
    await expectSound(page, "the size picked sold out, 1280 px");
    // As tall as the page: the status line (sticky at the bottom) then covers none of it.
    await page.setViewportSize({ width: DESKTOP.width, height: 1100 });
    await screenshot(page, "storefront-picked-size-gone");
    // A second choice with units turns Buy on again.
    await page.getByRole("combobox", { name: "Second choice" }).selectOption("40");
    await page.waitForSelector("#buy:not([disabled])", WAIT);
    expect(await page.isHidden("#buy-note")).toBe(true);
    await screenshot(page, "storefront-picked-size-gone-second-choice");
    expect(unexpectedProblems(page)).toEqual([]);
    await page.close();
  }, 60_000);

  it("with every size sold out, the picker chooses the sizes the line waits for", async () => {
    const sku = `cap-${randomUUID().slice(0, 6)}`;
    const created = await api("PUT", `/admin/skus/${sku}`, {
      name: "Drop cap",
      // Kids' sizes: ids "2" and "3" (the page's own ids must not clash with them).
      variants: [
        { id: "2", name: "Age 2", totalStock: 1 },
        { id: "3", name: "Age 3", totalStock: 1 },
      ],
    });
    expect(created.status, JSON.stringify(created.json)).toBe(200);
    for (const [user, size] of [
      ["kai", "2"],
      ["lou", "3"],
    ] as const) {
      const auth = await shopper(day.server, `${user}-${sku}`);
      const token = await api("POST", `/api/skus/${sku}/tokens`, undefined, auth);
      const held = await api(
        "POST",
        `/api/skus/${sku}/reservations`,
        { token: token.json.token, quantity: 1, variants: [size] },
        auth,
      );
      expect(held.status, JSON.stringify(held.json)).toBe(202);
    }
    const page = await signedIn(sku, `max-${sku}`);
    await page.waitForSelector("#join-waitlist:not([hidden])", WAIT);
    expect(await page.$$eval("#size-options label", (ls) => ls.map((l) => l.textContent))).toEqual([
      "Age 2 (sold out)",
      "Age 3 (sold out)",
    ]);
    // Nothing to buy, but each size can be waited for: the choices are the line's.
    expect(await page.isDisabled("#buy")).toBe(true);
    expect(await page.isDisabled('#size-options input[value="3"]')).toBe(false);
    await page.check('#size-options input[value="3"]');
    await page.getByRole("combobox", { name: "Second choice" }).selectOption("2");
    const sent: unknown[] = [];
    page.on("request", (request) => {
      if (request.method() === "POST" && request.url().endsWith(`/api/skus/${sku}/waitlist`))
        sent.push(request.postDataJSON());
    });
    await page.click("#join-waitlist");
    await expect.poll(() => page.textContent("#waitlist-status"), WAIT).toBe("You are number 1 on the waitlist for 1.");
    expect(sent).toEqual([{ quantity: 1, variants: ["3", "2"] }]);
    await expectSound(page, "sold out in every size, in line, 1280 px");
    expect(unexpectedProblems(page)).toEqual([]);
    await page.close();
  }, 60_000);

  it("sends a SKU without sizes no variants, and shows no picker", async () => {
    const sku = `tee-${randomUUID().slice(0, 6)}`;
    expect((await api("PUT", `/admin/skus/${sku}`, { name: "Tee", totalStock: 2 })).status).toBe(200);
    const page = await signedIn(sku, `ola-${sku}`);
    await page.waitForSelector("#buy:not([disabled])", WAIT);
    expect(await page.isHidden("#sizes")).toBe(true);
    await page.click("#buy");
    await page.waitForSelector("#reservation:not([hidden])", WAIT);
    expect(await page.isHidden("#res-size")).toBe(true);
    const held = await reserveByApi(day.server, await shopper(day.server, `pia-${sku}`), sku);
    expect(held.json.variant ?? null).toBeNull();
    expect(unexpectedProblems(page)).toEqual([]);
    await page.close();
  }, 60_000);
});

/** The storefront checked at 1280 and 420 px, shot for docs/screenshots as `name` and its -phone. */
async function formSound(page: Page, what: string, name: string, focus: string) {
  await expectSound(page, `${what}, 1280 px`);
  await page.setViewportSize({ width: DESKTOP.width, height: 1100 });
  await screenshot(page, name, `${name}.png`);
  await page.setViewportSize(PHONE);
  await expectSound(page, `${what}, 420 px`);
  await page.evaluate(`document.querySelector("${focus}").scrollIntoView({ block: "start" })`);
  await screenshot(page, `${name}-phone`, `${name}-phone.png`, false);
  await page.setViewportSize(DESKTOP);
}
