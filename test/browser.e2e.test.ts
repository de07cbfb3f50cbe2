import { execFile } from "node:child_process";
import { randomUUID } from "node:crypto";
import { mkdirSync } from "node:fs";
import { promisify } from "node:util";
import type { BrowserContext } from "playwright-core";
import { afterAll, beforeAll, describe, expect, it, onTestFinished } from "vitest";
import { type DevServer, startDevServer } from "../tools/dev-server";
import {
  gotoDashboard,
  launchBrowser,
  newPage as openPage,
  PHONE,
  screenshot,
  unexpectedProblems,
} from "./support/browser";
import { axeViolations, cardOverflows, pageOverflow as overflow, serious } from "./support/page-checks";

/**
 * The demo storefront (/) and the operator dashboard (/dashboard) in a real headless Chromium
 * (Debian's `chromium` package; nothing is downloaded), against `wrangler dev` with DEV_TOOLS on.
 * Screenshots go to test-results/ and the final ones, desktop and phone, to docs/screenshots/
 * (shown in README.md). The phone is a 420 px wide screen: nothing may be wider than it.
 */

const ADMIN = { authorization: "Bearer dev-admin-token" };
const RESULTS = new URL("../test-results/", import.meta.url);
const DOCS_SCREENSHOTS = new URL("../docs/screenshots/", import.meta.url);
/**
 * The public stock display may lag the stock object by up to a second (an isolate remembers it that
 * long, src/mirror/stock-display.ts) plus the page's one-second poll: wait for it that long.
 */
const DISPLAY = { timeout: 5_000 };

let server: DevServer;
let browser: BrowserContext;

beforeAll(async () => {
  mkdirSync(RESULTS, { recursive: true });
  mkdirSync(DOCS_SCREENSHOTS, { recursive: true });
  [server, browser] = await Promise.all([startDevServer({ vars: { DEV_TOOLS: "true" } }), launchBrowser()]);
});
afterAll(async () => {
  await browser?.close();
  await server?.stop();
});

async function putSku(sku: string, settings: Record<string, unknown>) {
  const response = await fetch(`${server.url}/admin/skus/${sku}`, {
    method: "PUT",
    headers: { ...ADMIN, "content-type": "application/json" },
    body: JSON.stringify(settings),
  });
  expect(response.status).toBe(200);
}

const newPage = (width: number, height: number) => openPage(browser, { width, height });

describe("demo storefront", () => {
  it("counts down to the sale, buys a unit end to end and shows the persisted order", async () => {
    const sku = `tee-${randomUUID().slice(0, 6)}`;
    await putSku(sku, {
      name: "Limited tee",
      totalStock: 20,
      perUserLimit: 2,
      holdSeconds: 600,
      price: 2500,
      currency: "eur",
      // 8 s ahead: the page must load and sign in before the sale opens, on a loaded machine too.
      startsAt: new Date(Date.now() + 8000).toISOString(),
      endsAt: new Date(Date.now() + 3_600_000).toISOString(),
    });
    const page = await newPage(1000, 1200);
    await page.goto(`${server.url}/?sku=${sku}`);

    // Before the sale: the live view and the countdown, and no buying.
    await expect.poll(() => page.textContent("#sku-name")).toBe(`Limited tee (${sku})`);
    // Its price, in its own currency (2500 minor units of eur).
    expect(await page.textContent("#price")).toBe("€25.00 each");
    await expect.poll(() => page.textContent("#countdown")).toMatch(/^Sale starts in 0:0\d$/);
    await expect.poll(() => page.textContent("#available"), DISPLAY).toBe("20");

    // A first shopper reserves one unit and cancels it: the unit goes back on sale.
    await page.fill("#user", "carol");
    await page.click("#user-form button");
    await expect.poll(() => page.textContent("#who")).toContain("Signed in as carol");
    expect(await page.isDisabled("#buy")).toBe(true);
    await page.waitForSelector("#buy:not([disabled])", { timeout: 15_000 });
    await page.click("#buy");
    await expect.poll(() => page.textContent("#res-status"), { timeout: 10_000 }).toBe("held");
    await expect.poll(() => page.textContent("#available"), DISPLAY).toBe("19");
    await page.click("#cancel");
    await expect.poll(() => page.textContent("#res-status"), { timeout: 10_000 }).toBe("cancelled");
    await expect.poll(() => page.textContent("#available"), { timeout: 10_000 }).toBe("20");

    // A second shopper buys two and pays through the simulated provider (signed on the server).
    await page.fill("#user", "alice");
    await page.click("#user-form button");
    await expect.poll(() => page.textContent("#who")).toContain("Signed in as alice");
    await page.fill("#quantity", "2");
    await page.click("#buy");
    await expect.poll(() => page.textContent("#res-status"), { timeout: 10_000 }).toBe("held");
    await expect
      .poll(() => page.textContent("#res-order"), { timeout: 30_000, interval: 250 })
      .toBe("persisted · status held");
    await screenshot(page, "storefront-1-held");
    await page.click("#pay");
    await expect.poll(() => page.textContent("#res-status"), { timeout: 10_000 }).toBe("paid");
    await expect
      .poll(() => page.textContent("#res-order"), { timeout: 30_000, interval: 250 })
      .toBe("persisted · status paid");
    await expect.poll(() => page.textContent("#orders")).toContain(`paid 2 × ${sku}`);
    await expect.poll(() => page.textContent("#available"), DISPLAY).toBe("18");
    // A paid order reads as paid, not as a hold that is "no longer held".
    expect(await page.textContent("#res-expires-label")).toBe("Payment");
    expect(await page.textContent("#res-expires")).toBe("paid: the units are yours");
    expect(await page.isDisabled("#pay")).toBe(true);
    await expect.poll(() => page.textContent("#message")).toBe(`Paid: the 2 units of ${sku} are yours.`);
    await screenshot(page, "storefront-2-paid", "storefront.png");
    expect(unexpectedProblems(page)).toEqual([]);
    expect(serious(await axeViolations(page)), "axe-core, storefront").toEqual([]);

    // The same page on a phone.
    await page.setViewportSize(PHONE);
    await page.evaluate("window.scrollTo(0, 0)");
    expect(await overflow(page)).toBe(0);
    expect(await cardOverflows(page)).toEqual([]);
    expect(serious(await axeViolations(page)), "axe-core, storefront on a phone").toEqual([]);
    await screenshot(page, "storefront-3-phone", "storefront-phone.png", false);
    await page.close();
  });

  it("offers the waitlist when sold out and shows the hold it grants", async () => {
    const sku = `cap-${randomUUID().slice(0, 6)}`;
    await putSku(sku, { name: "Last cap", totalStock: 1, perUserLimit: 1, holdSeconds: 600 });
    // Someone else holds the only unit.
    const bob = await shopper("bob");
    const bobToken = (await (await post(`/api/skus/${sku}/tokens`, undefined, bob)).json()) as { token: string };
    const bobHold = await post(`/api/skus/${sku}/reservations`, { token: bobToken.token, quantity: 1 }, bob);
    expect(bobHold.status).toBe(202);
    const { reservationId: bobId } = (await bobHold.json()) as { reservationId: string };

    const page = await newPage(PHONE.width, PHONE.height);
    await page.goto(`${server.url}/?sku=${sku}`);
    await page.fill("#user", "erin");
    await page.click("#user-form button");
    await expect.poll(() => page.textContent("#who")).toContain("Signed in as erin");
    await expect.poll(() => page.textContent("#countdown")).toBe("Sold out.");
    await page.waitForSelector("#waitlist:not([hidden])");
    expect(await page.isDisabled("#buy")).toBe(true);
    await page.click("#join-waitlist");
    await expect.poll(() => page.textContent("#waitlist-status")).toContain("number 1 on the waitlist for 1");
    expect(await overflow(page)).toBe(0);
    await screenshot(page, "storefront-4-waitlist", "storefront-waitlist-phone.png", false);

    // Bob cancels: the released unit goes to the waitlist, and the page shows the granted hold.
    expect((await post(`/api/reservations/${bobId}/cancel`, undefined, bob)).status).toBe(200);
    // The grant shows once the queue wrote its order row: seconds, more than 20 s beside another suite
    // (storefront-line.e2e waits a minute for the same; the page looks for it that long).
    await page.waitForSelector("#res-origin:not([hidden])", { timeout: 60_000 });
    await expect.poll(() => page.textContent("#res-status")).toBe("held");
    await expect.poll(() => page.textContent("#res-expires-label")).toBe("Held until");
    await expect.poll(() => page.textContent("#res-expires")).toMatch(/left\)$/);
    expect(await page.isHidden("#waitlist")).toBe(true);
    await page.click("#pay");
    await expect.poll(() => page.textContent("#res-status"), { timeout: 10_000 }).toBe("paid");
    expect(unexpectedProblems(page)).toEqual([]);
    await page.close();
  });

  it("retries wrangler dev's '503 Your worker restarted mid-request' with the same purchase token", async () => {
    const sku = `mug-${randomUUID().slice(0, 6)}`;
    await putSku(sku, { name: "Mug", totalStock: 5, perUserLimit: 2 });
    const page = await newPage(1000, 1000);
    const sent: string[] = [];
    // The proxy's answer, as wrangler dev gives it when the Worker restarts under a request.
    await page.route("**/api/skus/*/reservations", async (route) => {
      sent.push(route.request().postData() ?? "");
      if (sent.length === 1) {
        await route.fulfill({ status: 503, contentType: "text/plain", body: "Your worker restarted mid-request." });
      } else {
        await route.continue();
      }
    });
    await page.goto(`${server.url}/?sku=${sku}`);
    await page.fill("#user", "frank");
    await page.click("#user-form button");
    await page.waitForSelector("#buy:not([disabled])");
    await page.click("#buy");
    await expect.poll(() => page.textContent("#res-status"), { timeout: 10_000 }).toBe("held");
    expect(sent).toHaveLength(2);
    expect(sent[1]).toBe(sent[0]); // the same token and quantity: one hold, never two
    // The page counts the retry (its note in #message lasts only until the order row is persisted,
    // which the queue now delivers within milliseconds).
    expect(await page.getAttribute("body", "data-retried503")).toBe("1");
    await expect.poll(() => page.textContent("#available"), DISPLAY).toBe("4");
    expect(unexpectedProblems(page).filter((p) => !/\b503\b/.test(p))).toEqual([]);
    await page.close();
  });
});

describe("operator dashboard", () => {
  it("keeps the admin token in sessionStorage, shows the stock bar move and lists a planted dead letter", async () => {
    const auth = await shopper("dave");
    // A dead letter of a real hold's event, planted in the dev server's local D1 as the DLQ consumer
    // would have stored it, before the page reads anything: `wrangler d1 execute` is a second process
    // on the same SQLite file, and a read of the dev server's that meets its write lock fails (a 500).
    const cap = `cap-${randomUUID().slice(0, 6)}`;
    await putSku(cap, { name: "Cap", totalStock: 5, perUserLimit: 1 });
    const capToken = (await (await post(`/api/skus/${cap}/tokens`, undefined, auth)).json()) as { token: string };
    const held = await post(`/api/skus/${cap}/reservations`, { token: capToken.token, quantity: 1 }, auth);
    expect(held.status).toBe(202);
    const reservation = (await held.json()) as { reservationId: string };
    const order = async () => {
      const answer = await fetch(`${server.url}/api/reservations/${reservation.reservationId}`, { headers: auth });
      return ((await answer.json()) as { order: unknown }).order;
    };
    await expect.poll(order, { timeout: 30_000 }).toEqual({ persisted: true, status: "held" });
    const letterId = `dl-${randomUUID()}`;
    const event = {
      id: randomUUID(),
      type: "reservation.held",
      reservationId: reservation.reservationId,
      sku: cap,
      userId: "dave",
      quantity: 1,
      occurredAt: new Date().toISOString(),
      seq: 1,
    };
    // And one the consumer could never apply: its replay fails, and the page says so.
    const brokenId = `dl-${randomUUID()}`;
    await plantDeadLetters([
      { id: letterId, body: JSON.stringify(event) },
      { id: brokenId, body: JSON.stringify({ type: "reservation.held" }) },
    ]);

    const sku = `hoodie-${randomUUID().slice(0, 6)}`;
    await putSku(sku, { name: "Launch hoodie", totalStock: 10, perUserLimit: 3 });
    const page = await newPage(1280, 1000);
    await gotoDashboard(page, server.url);
    await page.waitForSelector("#login:not([hidden])");
    await page.fill("#token", "dev-admin-token");
    await page.click("#login button");
    const card = `article[data-sku="${sku}"]`;
    await page.waitForSelector(card);
    const storage = await page.evaluate<{ session: string | null; local: number }>(
      '({ session: sessionStorage.getItem("flashgate.adminToken"), local: localStorage.length })',
    );
    expect(storage).toEqual({ session: "dev-admin-token", local: 0 });
    const heldWidth = async () => (await page.getAttribute(`${card} [data-bar="held"]`, "style")) ?? "";
    await expect.poll(() => page.textContent(`${card} [data-field="available"]`)).toBe("10");
    expect(await heldWidth()).toBe("width: 0%;");

    // A shopper reserves 3 units through the public API: the bar's held segment grows to 30%.
    const token = (await (await post(`/api/skus/${sku}/tokens`, undefined, auth)).json()) as { token: string };
    const reserved = await post(`/api/skus/${sku}/reservations`, { token: token.token, quantity: 3 }, auth);
    expect(reserved.status).toBe(202);
    await expect.poll(heldWidth, { timeout: 10_000 }).toBe("width: 30%;");
    await expect.poll(() => page.textContent(`${card} [data-field="held"]`)).toBe("3");
    // Units beside units and orders beside orders: one order of 3 units is 3 units held and 1 order held.
    await expect.poll(() => page.textContent(`${card} [data-field="units-held"]`)).toBe("3");
    await expect.poll(() => page.textContent(`${card} [data-field="orders-held"]`), { timeout: 30_000 }).toBe("1");
    expect(await page.textContent(`${card} [data-field="status"]`)).toBe("on sale");

    // A SKU with nothing left reads "sold out", not "on sale".
    const last = `scarf-${randomUUID().slice(0, 6)}`;
    await putSku(last, { name: "Scarf", totalStock: 2, perUserLimit: 2 });
    const scarf = (await (await post(`/api/skus/${last}/tokens`, undefined, auth)).json()) as { token: string };
    expect((await post(`/api/skus/${last}/reservations`, { token: scarf.token, quantity: 2 }, auth)).status).toBe(202);
    const lastCard = `article[data-sku="${last}"]`;
    await expect
      .poll(() => page.textContent(`${lastCard} [data-field="status"]`), { timeout: 10_000 })
      .toBe("sold out");
    expect(await page.getAttribute(`${lastCard} [data-field="status"]`, "data-status")).toBe("sold_out");

    // The dead letter planted before the page opened.
    const row = `tr[data-id="${letterId}"]`;
    await page.waitForSelector(`${row} button`, { timeout: 10_000 });
    expect(await page.textContent(row)).toContain(`reservation.held ${reservation.reservationId}`);
    // A reconciliation run: each card then says how its stock object and its D1 rows compared.
    expect((await post("/admin/reconcile", undefined, ADMIN)).status).toBe(200);
    await expect.poll(() => page.textContent("#reconcile"), { timeout: 10_000 }).toMatch(/^run /);
    await expect
      .poll(() => page.textContent(`${card} [data-field="consistency"]`))
      .toMatch(/^no difference at the last reconciliation/);
    await screenshot(page, "dashboard-1-dead-letter", "dashboard.png");

    // Replay it from the dashboard: idempotent, the order row does not change.
    await page.click(`${row} button`);
    await expect.poll(() => page.textContent(row), { timeout: 10_000 }).toContain("replayed");
    expect(await page.textContent("#board-error")).toBe("");
    // The letter that holds no order event: its replay is refused (409), and the page keeps saying so
    // past the refreshes that follow (each rewrites the board's own error line).
    await page.click(`tr[data-id="${brokenId}"] button`);
    const refused = new RegExp(`^Replay of ${brokenId} failed: INVALID_STATE: .*not a valid order event`);
    await expect.poll(() => page.textContent("#dl-error"), { timeout: 10_000 }).toMatch(refused);
    for (let i = 0; i < 2; i++) await page.waitForResponse((r) => r.url().endsWith("/admin/skus"));
    expect(await page.textContent("#dl-error")).toMatch(refused);
    await screenshot(page, "dashboard-2-replayed");
    expect(unexpectedProblems(page)).toEqual([]);
    expect(await overflow(page)).toBe(0);
    expect(await cardOverflows(page)).toEqual([]);
    expect(serious(await axeViolations(page)), "axe-core, dashboard").toEqual([]);

    // The same page on a phone: the header and the cards fit, the dead-letter table scrolls in its card.
    await page.setViewportSize(PHONE);
    await page.evaluate("window.scrollTo(0, 0)");
    expect(await overflow(page)).toBe(0);
    expect(await cardOverflows(page)).toEqual([]);
    expect(serious(await axeViolations(page)), "axe-core, dashboard on a phone").toEqual([]);
    await screenshot(page, "dashboard-3-phone", "dashboard-phone.png", false);
    await page.close();
  });

  it("pages the dead letters: Older past a full page shows the letters stored before it, Newer comes back", async () => {
    // More than a page (100), stored before any page opens: the newest 100 first, then the rest.
    const ids = Array.from({ length: 105 }, (_, i) => `dl-page-${String(i).padStart(3, "0")}`);
    await plantDeadLetters(ids.map((id) => ({ id, body: JSON.stringify({ type: "reservation.held" }) })));
    const page = await newPage(1280, 1000);
    await gotoDashboard(page, server.url);
    await page.waitForSelector("#login:not([hidden])");
    await page.fill("#token", "dev-admin-token");
    await page.click("#login button");
    const newest = 'tr[data-id="dl-page-104"]';
    const oldest = 'tr[data-id="dl-page-000"]';
    await page.waitForSelector(newest);
    expect(await page.$(oldest)).toBeNull();
    expect(await page.textContent("#dl-count")).toMatch(/, 100 shown\)$/);
    expect(await page.isHidden("#dl-newer")).toBe(true);

    await page.click("#dl-older");
    await page.waitForSelector(oldest);
    expect(await page.$(newest)).toBeNull();
    await expect.poll(() => page.textContent("#dl-count")).toMatch(/ shown, page 2\)$/);
    expect(await page.isVisible("#dl-newer")).toBe(true);
    await screenshot(page, "dashboard-dead-letters-page-2");
    // The page shown stays the one asked for across the board's refreshes.
    for (let i = 0; i < 2; i++) await page.waitForResponse((r) => r.url().includes("/admin/dead-letters?after="));
    expect(await page.$(oldest)).not.toBeNull();

    // Newer, clicked while a refresh of page 2 is still out: its late answer does not bring page 2 back.
    let release = () => {};
    const held = new Promise<void>((resolve) => {
      release = resolve;
    });
    await page.route("**/admin/dead-letters?after=*", async (route) => {
      await held;
      await route.continue();
    });
    await page.waitForRequest((r) => r.url().includes("/admin/dead-letters?after="));
    await page.click("#dl-newer");
    await page.waitForSelector(newest);
    const late = page.waitForResponse((r) => r.url().includes("/admin/dead-letters?after="));
    release();
    await late;
    // The board's next read: the late refresh has finished (each refresh sets the next one going).
    await page.waitForRequest((r) => r.url().endsWith("/admin/skus"));
    expect(await page.$(oldest)).toBeNull();
    expect(await page.$(newest)).not.toBeNull();
    expect(await page.isHidden("#dl-newer")).toBe(true);
    expect(unexpectedProblems(page)).toEqual([]);
    await page.close();
  });

  it("shows the board and keeps reading while one of its reads never answers", async () => {
    const sku = `beanie-${randomUUID().slice(0, 6)}`;
    await putSku(sku, { name: "Beanie", totalStock: 4 });
    const page = await newPage(1280, 1000);
    // The page's clock is the test's: a read given up (10 s) and the next refresh (2 s) come when it
    // moves the clock on, not on the machine's timers. The clock is the browser context's, which later
    // tests' pages share: set back to the time of day once this test ends.
    await page.clock.install();
    onTestFinished(() => browser.clock.setSystemTime(Date.now()));
    await gotoDashboard(page, server.url);
    const onClock = <T>(look: () => Promise<T>) =>
      expect.poll(
        async () => {
          await page.clock.runFor(2_000);
          return look();
        },
        { interval: 250, timeout: 20_000 },
      );
    // Every read of a sale log's checkpoint hangs: the request is held, never answered (routed once the
    // page has loaded, as openDashboard's beforeSignIn does; the board reads them once signed in).
    const held: string[] = [];
    await page.route("**/log/checkpoint", (route) => {
      held.push(route.request().url());
    });
    await page.waitForSelector("#login:not([hidden])");
    await page.fill("#token", "dev-admin-token");
    await page.click("#login button");
    await onClock(() => page.isVisible("#board")).toBe(true);
    expect(held.length).toBeGreaterThan(0);
    await expect.poll(() => page.textContent(`article[data-sku="${sku}"] [data-field="available"]`)).toBe("4");
    // The next reads still come: a SKU made now gets its card.
    const later = `mitten-${randomUUID().slice(0, 6)}`;
    await putSku(later, { name: "Mittens", totalStock: 2 });
    await onClock(async () => (await page.$(`article[data-sku="${later}"]`)) !== null).toBe(true);
    expect(await page.textContent("#board-error")).toBe("");
    await page.unrouteAll({ behavior: "ignoreErrors" });
    await page.close();
  }, 60_000);
});

describe("fair opening", () => {
  it("counts down to the opening, shows a drawn reservation's position, and the dashboard shows the draw", async () => {
    const sku = `drop-${randomUUID().slice(0, 6)}`;
    // Opening 15 s from now, for 8 s (real time, against wrangler dev): on a loaded machine the page
    // must still show the countdown when it is ready, and both buyers get into the window.
    const opensAt = Date.now() + 15_000;
    await putSku(sku, {
      name: "Sneaker drop",
      totalStock: 2,
      perUserLimit: 1,
      holdSeconds: 600,
      startsAt: new Date(opensAt).toISOString(),
      openingWindowMs: 8_000,
    });
    const before = (await (await fetch(`${server.url}/api/skus/${sku}/draw`)).json()) as { seedHash: string };
    const page = await newPage(1000, 1200);
    await page.goto(`${server.url}/?sku=${sku}`);
    await page.fill("#user", "gina");
    await page.click("#user-form button");
    await expect.poll(() => page.textContent("#who")).toContain("Signed in as gina");
    // Before the opening: a countdown to it, and the committed seed hash.
    await expect
      .poll(() => page.textContent("#opening"))
      .toMatch(/^Fair opening in 0:[01]\d: every request in the first 8 s/);
    expect(await page.textContent("#opening")).toContain(before.seedHash.slice(0, 16));
    expect(await page.isDisabled("#buy")).toBe(true);
    await screenshot(page, "storefront-5-opening");

    // Another shopper enters the same window through the API (2 units, 2 entrants: both are held).
    const hal = await shopper("hal");
    await page.waitForSelector("#buy:not([disabled])", { timeout: 30_000 });
    const theirs = (async () => {
      const token = (await (await post(`/api/skus/${sku}/tokens`, undefined, hal)).json()) as { token: string };
      return post(`/api/skus/${sku}/reservations`, { token: token.token, quantity: 1 }, hal);
    })();
    // "Entered the opening draw" shows only while the request waits for the draw (until the window
    // closes): every text of the status line is kept from before the click, so no poll gap can miss it.
    await page.evaluate(`(() => {
      const line = document.getElementById("message");
      const said = (window.said = [line.textContent]);
      new MutationObserver(() => said.push(line.textContent)).observe(line, {
        childList: true,
        characterData: true,
        subtree: true,
      });
    })()`);
    await page.click("#buy");
    await expect
      .poll(() => page.evaluate<string[]>("window.said"))
      .toContainEqual(expect.stringContaining("Entered the opening draw"));
    const halAnswer = await theirs;
    expect(halAnswer.status).toBe(202);
    const halPosition = ((await halAnswer.json()) as { draw: { position: number } }).draw.position;
    // The page's request was answered by the draw: held, with its place in it (the other one). The page
    // says "Reserved 1: …" and, once the consumer has written the order row, that it is persisted; on a
    // slow machine the first message can be gone before a poll sees it, so either one shows the hold.
    await expect
      .poll(() => page.textContent("#message"), { timeout: 20_000 })
      .toMatch(/^(Reserved 1: the stock is held for you|The order is persisted in D1)/);
    await expect
      .poll(() => page.textContent("#res-draw"))
      .toMatch(new RegExp(`^position ${3 - halPosition} of 2 \\(entry [0-9a-f]{12}…\\)$`));
    await expect
      .poll(() => page.textContent("#opening"), DISPLAY)
      .toMatch(/^Opening draw decided: 2 entrants\. Seed [0-9a-f]{16}…/);
    await screenshot(page, "storefront-6-drawn", "storefront-draw.png");
    expect(unexpectedProblems(page)).toEqual([]);
    await page.close();

    // The dashboard shows the draw: window, entrants, the seed hash and the revealed seed.
    const board = await newPage(1280, 1000);
    await gotoDashboard(board, server.url);
    await board.waitForSelector("#login:not([hidden])");
    await board.fill("#token", "dev-admin-token");
    await board.click("#login button");
    const draw = `article[data-sku="${sku}"] [data-field="draw"]`;
    await board.waitForSelector(`${draw}:not([hidden])`);
    await board.waitForSelector(`${draw} [data-hash="seed"]`);
    expect(await board.textContent(`${draw} .draw-summary`)).toMatch(/^8000 ms window · 2 entrants · decided /);
    // Each 64-hex value on a line of its own, cut to the card (whole in its text and title), with Copy.
    expect(await board.textContent(`${draw} [data-hash="seedHash"] code`)).toBe(before.seedHash);
    expect(await board.getAttribute(`${draw} [data-hash="seedHash"] code`, "title")).toBe(before.seedHash);
    expect(await board.textContent(`${draw} [data-hash="seed"] code`)).toMatch(/^[0-9a-f]{64}$/);
    expect(await board.textContent(`${draw} [data-hash="seed"] button`)).toBe("Copy");
    expect(await overflow(board)).toBe(0);
    expect(await cardOverflows(board)).toEqual([]);
    expect(unexpectedProblems(board)).toEqual([]);
    await board.close();
  });
});

/** The Authorization header of a shopper, from the dev-only JWT route. */
async function shopper(userId: string): Promise<Record<string, string>> {
  const jwt = (await (await post("/dev/jwt", { userId })).json()) as { token: string };
  return { authorization: `Bearer ${jwt.token}` };
}

function post(path: string, body?: unknown, headers: Record<string, string> = {}) {
  return fetch(`${server.url}${path}`, {
    method: "POST",
    headers: { ...headers, "content-type": "application/json" },
    body: body === undefined ? null : JSON.stringify(body),
  });
}

const run = promisify(execFile);
const WRANGLER = new URL("../node_modules/.bin/wrangler", import.meta.url).pathname;

/**
 * Inserts rows into `dead_letters` of the dev server's local D1 (its --persist-to directory), with
 * `wrangler d1 execute` beside the running server. Not spawnSync: a blocked event loop misses the
 * server closing this process's idle pooled connections, and the next fetch takes a closed one. The
 * server may hold the database's write lock at that moment (SQLITE_BUSY): tried again after a pause.
 * Planted while no page is open: the server's own reads meet this process's lock too.
 */
async function plantDeadLetters(letters: { id: string; body: string }[]) {
  const sql = (text: string) => `'${text.replaceAll("'", "''")}'`;
  const rows = letters.map(({ id, body }) => `(${sql(id)}, 'order-events', ${sql(body)}, 6, ${Date.now()})`);
  const command = `INSERT INTO dead_letters (id, queue, body, attempts, received_at) VALUES ${rows.join(", ")}`;
  const args = ["d1", "execute", "DB", "--local", "--persist-to", server.stateDir, "--command", command];
  const env = { ...process.env, CI: "true", WRANGLER_SEND_METRICS: "false" };
  for (let attempt = 1; ; attempt++) {
    try {
      await run(WRANGLER, args, { encoding: "utf8", env });
      return;
    } catch (err) {
      const { stdout = "", stderr = "" } = err as { stdout?: string; stderr?: string };
      if (attempt === 5 || !/SQLITE_BUSY/.test(stdout + stderr)) {
        throw new Error(`planting a dead letter failed:\n${stdout}\n${stderr}`);
      }
      await new Promise((resolve) => setTimeout(resolve, 500 * attempt));
    }
  }
}
