import { randomUUID } from "node:crypto";
import { readFileSync } from "node:fs";
import { beforeAll, describe, expect, it } from "vitest";
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
  unexpectedProblems,
} from "../support/browser";

/**
 * Issue #51, the operator's half: early access from the console in a real headless Chromium against
 * `wrangler dev`. Tiers are added, edited and removed in the SKU form (API.md v1.3 "Early access"),
 * a refused tier is marked at its own input, and a tier's access codes are minted, shown once in a
 * dialog, downloaded as CSV and copied; one of them then admits a shopper before the public start.
 * It runs first in test/storefront-line.e2e.test.ts's sale day (issue #56: one `wrangler dev` and one
 * Chromium for both): the console lists every SKU, and there it finds only its own.
 */

const WAIT = { timeout: 20_000, interval: 250 };

let day: SaleDay;

const api = (method: string, path: string, body?: unknown, headers?: Record<string, string>) =>
  call(day.server, method, path, body, headers);

/** A time as the form's datetime-local inputs take it: this machine's time (Chromium's), whole seconds. */
function local(ms: number): string {
  const d = new Date(ms);
  const pad = (n: number) => String(n).padStart(2, "0");
  return `${d.getFullYear()}-${pad(d.getMonth() + 1)}-${pad(d.getDate())}T${pad(d.getHours())}:${pad(d.getMinutes())}:${pad(d.getSeconds())}`;
}
/** local(ms) as a datetime-local input gives it back: Chromium leaves out ":00" seconds. */
const shown = (ms: number) => local(ms).replace(/:00$/, "");
/** The ISO time the form sends for local(ms). */
const iso = (ms: number) => new Date(Math.floor(ms / 1000) * 1000).toISOString();

const card = (sku: string) => `article[data-sku="${sku}"]`;

/** The suite, on `sale()`: the host file's gateway, Chromium and webhook receiver. */
export function consoleAccess(sale: () => SaleDay) {
  describe("early access from the console (issue #51)", () => {
    beforeAll(() => {
      day = sale();
    });

    it("adds, edits and removes tiers, marks a refused tier, mints codes shown once, and a code admits", async () => {
      const sku = `pre-${randomUUID().slice(0, 6)}`;
      const now = Date.now();
      const publicStart = now + 2 * 3600_000;
      const vipAt = now + 3600_000;
      const friendsAt = now + 90 * 60_000;
      const page = await newPage(day.browser, DESKTOP);
      await openDashboard(day.server, page);

      // New SKU with two tiers, the second admitting by a claim. Add a tier puts the focus on its name.
      await page.click("#new-sku");
      await page.waitForSelector("#sku-dialog[open]");
      expect(await page.textContent("#f-access-count")).toBe("(no tier)");
      await page.fill("#f-sku", sku);
      await page.fill("#f-name", "Presale sneaker");
      await page.fill("#f-totalStock", "20");
      await page.fill("#f-startsAt", local(publicStart));
      await page.click("#f-access-add");
      expect(await page.evaluate("document.activeElement.id")).toBe("f-access-0-name");
      await page.fill("#f-access-0-name", "vip");
      await page.fill("#f-access-0-startsAt", local(vipAt));
      await page.click("#f-access-add");
      await page.fill("#f-access-1-name", "friends");
      await page.fill("#f-access-1-startsAt", local(friendsAt));
      await page.fill("#f-access-1-claim-name", "group");
      await page.fill("#f-access-1-claim-value", "friends");
      expect(await page.textContent("#f-access-count")).toBe("(2 tiers of 8)");
      expect(await page.getAttribute("#f-access-1-startsAt", "aria-describedby")).toBe("f-time-hint");
      // Each input is named with its tier: the rows share their labels.
      expect(await page.getByRole("textbox", { name: "Claim value Tier 2: friends" }).inputValue()).toBe("friends");
      expect(await page.getAttribute('[data-part="remove"] >> nth=1', "aria-label")).toBe("Remove tier 2 (friends)");
      await expectSound(page, "the SKU form with two tiers, 1280 px");
      await page.evaluate(`document.getElementById("f-access").scrollIntoView({ block: "start" })`);
      await screenshot(page, "console-access-1-form", undefined, false);
      await page.setViewportSize(PHONE);
      await expectSound(page, "the SKU form with two tiers, 420 px");
      await page.evaluate(`document.getElementById("f-access").scrollIntoView({ block: "start" })`);
      await screenshot(page, "console-access-1-form-phone", undefined, false);
      await page.setViewportSize(DESKTOP);
      await page.click("#sku-save");
      await page.waitForSelector("#sku-dialog", { ...WAIT, state: "hidden" });
      await expect.poll(() => page.textContent("#console-message"), WAIT).toMatch(/^Created: Presale sneaker/);
      expect((await api("GET", `/admin/skus/${sku}`)).json.access).toEqual([
        { name: "vip", startsAt: iso(vipAt) },
        { name: "friends", startsAt: iso(friendsAt) },
      ]);
      await page.waitForSelector(card(sku), WAIT);
      await expect
        .poll(() => page.textContent(`${card(sku)} [data-field="access"]`), WAIT)
        .toMatch(/^2 tiers: vip from .*, friends from /);
      expect(await page.isVisible(`${card(sku)} [data-action="mint"]`)).toBe(true);

      // Edit: vip opening after the public start is refused by the gateway, at vip's own input.
      await page.click(`${card(sku)} [data-action="edit"]`);
      await page.waitForSelector("#sku-dialog[open]");
      expect(await page.inputValue("#f-access-0-name")).toBe("vip");
      expect(await page.inputValue("#f-access-1-startsAt")).toBe(shown(friendsAt));
      expect(await page.isVisible("#f-access-claims")).toBe(true);
      await page.fill("#f-access-0-startsAt", local(publicStart + 60_000));
      await page.click("#sku-save");
      await page.waitForSelector("#confirm-dialog[open]");
      const asked = (await page.textContent("#confirm-dialog")) ?? "";
      expect(asked).toContain("Early access: vip from");
      // The gateway never shows a claim: the dialog says that tiers sent without one admit by code only.
      expect(asked).toContain("vip, friends: sent without a claim, so they admit by access code only");
      await page.click("#confirm-ok");
      await expect.poll(() => page.getAttribute("#f-access-0-startsAt", "aria-invalid"), WAIT).toBe("true");
      expect(((await page.getAttribute("#f-access-0-startsAt", "aria-describedby")) ?? "").split(" ")).toContain(
        "f-access-0-startsAt-error",
      );
      expect(await page.textContent("#f-access-0-startsAt-error")).toBe("before the public startsAt");
      expect(await page.getAttribute("#f-access-1-startsAt", "aria-invalid")).toBeNull();
      expect(await page.evaluate("document.activeElement.id")).toBe("f-access-0-startsAt");
      expect(await page.textContent("#sku-form-error")).toMatch(
        /^The gateway refused: INVALID_REQUEST: Early access tier vip/,
      );
      await expectSound(page, "a refused tier, 1280 px");
      await screenshot(page, "console-access-2-refused", undefined, false);
      expect((await api("GET", `/admin/skus/${sku}`)).json.access).toHaveLength(2);

      // Corrected: vip opens a minute ago (open now, the public sale not yet); friends is removed.
      const vipOpen = Date.now() - 60_000;
      await page.fill("#f-access-0-startsAt", local(vipOpen));
      await page.click('[aria-label="Remove tier 2 (friends)"]');
      expect(await page.textContent("#f-access-count")).toBe("(1 tier of 8)");
      expect(await page.locator("#f-access-1-name").count()).toBe(0);
      // The focus stays in the tiers: on the remaining tier's remove button.
      expect(await page.evaluate("document.activeElement.getAttribute('aria-label')")).toBe("Remove tier 1 (vip)");
      await page.click("#sku-save");
      await page.waitForSelector("#confirm-dialog[open]");
      await page.click("#confirm-ok");
      await page.waitForSelector("#sku-dialog", { ...WAIT, state: "hidden" });
      await expect
        .poll(() => page.textContent(`${card(sku)} [data-field="message"]`), WAIT)
        .toBe(`Saved: early access of ${sku} changed (the gateway answered 200).`);
      expect((await api("GET", `/admin/skus/${sku}`)).json.access).toEqual([{ name: "vip", startsAt: iso(vipOpen) }]);
      await expect
        .poll(() => page.textContent(`${card(sku)} [data-field="access"]`), WAIT)
        .toMatch(/^1 tier: vip from /);

      // Mint 5 codes of vip: shown once in a dialog, downloadable, copyable; closing forgets them.
      await page.click(`${card(sku)} [data-action="mint"]`);
      await page.waitForSelector("#mint-dialog[open]");
      expect(await page.evaluate("document.activeElement.id")).toBe("mint-tier");
      await page.fill("#mint-count", "0");
      await page.click("#mint-ok");
      expect(await page.textContent("#mint-error")).toBe("How many: a whole number from 1 to 10000.");
      expect(await page.getAttribute("#mint-count", "aria-invalid")).toBe("true");
      await page.fill("#mint-count", "5");
      await page.click("#mint-ok");
      await page.waitForSelector("#mint-shown:not([hidden])", WAIT);
      expect(await page.textContent("#mint-shown-title")).toBe(`5 access codes for tier vip of ${sku}`);
      expect(await page.evaluate("document.activeElement.id")).toBe("mint-shown-title");
      const codes = await page.$$eval("#mint-codes code", (els) => els.map((el) => el.textContent ?? ""));
      expect(codes).toHaveLength(5);
      expect(new Set(codes).size).toBe(5);
      await expectSound(page, "five codes shown once, 1280 px");
      await screenshot(page, "console-access-3-codes", "console-access.png", false);
      await page.setViewportSize(PHONE);
      await expectSound(page, "five codes shown once, 420 px");
      await screenshot(page, "console-access-3-codes-phone", "console-access-phone.png", false);
      await page.setViewportSize(DESKTOP);

      const [download] = await Promise.all([page.waitForEvent("download"), page.click("#mint-download")]);
      expect(download.suggestedFilename()).toBe(`${sku}-vip-codes.csv`);
      const csv = readFileSync((await download.path()) as string, "utf8");
      const lines = csv.trimEnd().split("\n");
      expect(lines).toHaveLength(5);
      expect(lines).toEqual(codes.map((code) => `vip,${code}`));
      await expect.poll(() => page.textContent("#mint-said"), WAIT).toBe(`Downloading ${sku}-vip-codes.csv (5 codes).`);
      await page.click("#mint-copy");
      await expect.poll(() => page.textContent("#mint-said"), WAIT).toBe("5 codes on the clipboard, one a line.");
      expect(await page.evaluate("navigator.clipboard.readText()")).toBe(codes.join("\n"));

      // Closed (Escape here), the codes leave the page: not in its DOM, not in its storage.
      await page.keyboard.press("Escape");
      await page.waitForSelector("#mint-dialog", { state: "hidden" });
      // The dialog's close event is a task queued after it hides: wait for it, not for the hiding.
      await expect.poll(() => page.locator("#mint-codes li").count(), WAIT).toBe(0);
      expect(await page.evaluate("document.activeElement.dataset.action")).toBe("mint");
      const html = await page.content();
      const stored = await page.evaluate("JSON.stringify({ ...sessionStorage, ...localStorage })");
      for (const code of codes) {
        expect(html).not.toContain(code);
        expect(stored).not.toContain(code);
      }

      // One code admits a shopper while vip is open and the public sale is not: without it, 403.
      const ana = await shopper(day.server, `ana-${sku}`);
      const refused = await api("POST", `/api/skus/${sku}/tokens`, undefined, ana);
      expect(refused.status).toBe(403);
      const admitted = await api("POST", `/api/skus/${sku}/tokens`, undefined, {
        ...ana,
        "access-code": codes[0] as string,
      });
      expect(admitted.status, JSON.stringify(admitted.json)).toBe(201);
      expect(Date.now()).toBeLessThan(publicStart);
      expect(await page.evaluate("document.body.innerText")).not.toMatch(/(^|[^\d.,:])1 (tiers|codes|access codes)\b/);
      expect(unexpectedProblems(page)).toEqual([]);
      await page.close();
    }, 180_000);

    it("shows a 409 for a tier whose opening window is open at that tier's time", async () => {
      // A tier opening in 4 s with a 10-s draw window: moving it while the window is open is refused.
      const sku = `win-${randomUUID().slice(0, 6)}`;
      const opensAt = Date.now() + 4000;
      const created = await api("PUT", `/admin/skus/${sku}`, {
        name: "Drawn presale",
        totalStock: 5,
        startsAt: new Date(Date.now() + 3600_000).toISOString(),
        openingWindowMs: 10_000,
        access: [{ name: "early", startsAt: new Date(opensAt).toISOString() }],
      });
      expect(created.status, JSON.stringify(created.json)).toBe(200);
      const page = await newPage(day.browser, DESKTOP);
      await openDashboard(day.server, page);
      await page.waitForSelector(card(sku), WAIT);
      await page.click(`${card(sku)} [data-action="edit"]`);
      await page.waitForSelector("#sku-dialog[open]");
      await page.fill("#f-access-0-startsAt", local(opensAt + 30 * 60_000));
      await new Promise((resolve) => setTimeout(resolve, Math.max(0, opensAt + 500 - Date.now())));
      await page.click("#sku-save");
      await page.waitForSelector("#confirm-dialog[open]");
      await page.click("#confirm-ok");
      await expect.poll(() => page.getAttribute("#f-access-0-startsAt", "aria-invalid"), WAIT).toBe("true");
      expect(await page.textContent("#f-access-0-startsAt-error")).toBe(
        "Its opening window is open: the tier cannot change until the window closes and its draw is decided. Try again then.",
      );
      expect(await page.textContent("#sku-form-error")).toMatch(
        /^The gateway refused: INVALID_STATE: Early access tier early's opening window is open/,
      );
      expect(await page.evaluate("document.activeElement.id")).toBe("f-access-0-startsAt");
      // The public start's field is not blamed.
      expect(await page.getAttribute("#f-startsAt", "aria-invalid")).toBeNull();
      await expectSound(page, "a tier's 409, 1280 px");
      await screenshot(page, "console-access-4-window-open", undefined, false);
      expect((await api("GET", `/admin/skus/${sku}`)).json.access).toEqual([
        { name: "early", startsAt: new Date(opensAt).toISOString() },
      ]);
      expect(unexpectedProblems(page)).toEqual([]);
      await page.close();
    }, 120_000);
  });
}
