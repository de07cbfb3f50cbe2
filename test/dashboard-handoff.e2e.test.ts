import { randomUUID } from "node:crypto";
import type { Page } from "playwright-core";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { Received } from "../tools/webhook-receiver";
import {
  call as callGateway,
  gotoDashboard,
  newPage as openPage,
  type SaleDay,
  screenshot,
  startSaleDay,
  unexpectedProblems,
} from "./support/browser";
import { axeViolations, cardOverflows, serious } from "./support/page-checks";

/**
 * The operator dashboard's shop hand-off panel (API.md "Order hand-off") in a real headless
 * Chromium against `wrangler dev`: a webhook endpoint whose receiver (tools/webhook-receiver.ts, in
 * this process) refuses everything, an order whose delivery fails after its retries, and the
 * dashboard's Retry once the receiver is healthy again. Its own Worker (test/support/browser.ts:
 * http://127.0.0.1 receivers allowed, one retry after 1 s), so a delivery fails within seconds, and
 * no other test's orders are owed to its endpoints. Screenshots: test-results/, and the final
 * desktop and phone ones in docs/screenshots/.
 */

const PHONE = { width: 420, height: 900 };
/** The panel asks every 10 s; a delivery fails after two attempts a second or two apart. */
const PANEL = { timeout: 30_000, interval: 250 };

let day: SaleDay;

beforeAll(async () => {
  day = await startSaleDay();
});
afterAll(async () => {
  await day?.stop();
});

const call = (method: string, path: string, body?: unknown, headers?: Record<string, string>) =>
  callGateway(day.server, method, path, body, headers);

/** Sets how the receiver's endpoint `name` answers (and forgets what it received). */
async function receiverBehaves(name: string, behaviour: { secret: string; fail?: number; delayMs?: number }) {
  const response = await fetch(`${day.receiver.url}/control/${name}`, {
    method: "PUT",
    body: JSON.stringify(behaviour),
  });
  expect(response.status).toBe(200);
}

async function receivedBy(name: string): Promise<Received[]> {
  const answer = (await (await fetch(`${day.receiver.url}/control/${name}`)).json()) as { received: Received[] };
  return answer.received;
}

const newPage = (width: number, height: number) => openPage(day.browser, { width, height });

/** A promise the test settles when it chooses (Node 20 has no Promise.withResolvers). */
function gate(): { promise: Promise<void>; open: () => void } {
  let open = () => {};
  const promise = new Promise<void>((resolve) => {
    open = resolve;
  });
  return { promise, open };
}

/** How far the page is wider than its viewport (0 when it lays out within it). */
function overflow(page: Page): Promise<number> {
  return page.evaluate(
    "document.documentElement.scrollWidth - document.documentElement.clientWidth",
  ) as Promise<number>;
}

/** Whether the element is on screen: within the viewport, not only in the page. */
async function inView(page: Page, selector: string): Promise<boolean> {
  const box = await page.locator(selector).boundingBox();
  const viewport = page.viewportSize();
  if (!box || !viewport) return false;
  return box.y >= 0 && box.x >= 0 && box.y + box.height <= viewport.height && box.x + box.width <= viewport.width;
}

/**
 * The visible text under `selector` whose contrast with its background is below 4.5:1 (WCAG AA), as
 * the browser computes both (the background is the nearest one that is not transparent).
 */
function lowContrast(page: Page, selector: string) {
  return page.evaluate(`(() => {
    const rgb = (text) => text.match(/[\\d.]+/g).map(Number);
    const channel = (v) => { v /= 255; return v <= 0.03928 ? v / 12.92 : ((v + 0.055) / 1.055) ** 2.4; };
    const luminance = ([r, g, b]) => 0.2126 * channel(r) + 0.7152 * channel(g) + 0.0722 * channel(b);
    const background = (el) => {
      for (let e = el; e; e = e.parentElement) {
        const c = rgb(getComputedStyle(e).backgroundColor);
        if (c.length < 4 || c[3] > 0) return c;
      }
      return [255, 255, 255];
    };
    const low = [];
    for (const el of document.querySelectorAll(${JSON.stringify(selector)} + " *")) {
      const text = [...el.childNodes].filter((n) => n.nodeType === 3).map((n) => n.textContent.trim()).join("");
      if (!text || el.getClientRects().length === 0 || el.closest("[hidden]")) continue;
      const fg = luminance(rgb(getComputedStyle(el).color));
      const bg = luminance(background(el));
      const ratio = (Math.max(fg, bg) + 0.05) / (Math.min(fg, bg) + 0.05);
      if (ratio < 4.5) low.push({ text: text.slice(0, 40), ratio: Math.round(ratio * 100) / 100 });
    }
    return low;
  })()`) as Promise<{ text: string; ratio: number }[]>;
}

describe("operator dashboard: shop hand-off", () => {
  it("shows an endpoint's failing delivery and retries it from the dashboard", async () => {
    const page = await newPage(1280, 1000);
    await gotoDashboard(page, day.server.url);
    await page.waitForSelector("#login:not([hidden])");
    await page.fill("#token", "dev-admin-token");
    await page.click("#login button");

    // No endpoint yet: the panel says how to add one, with this gateway's own URL.
    await page.waitForSelector("#wh-empty:not([hidden])");
    const empty = (await page.textContent("#wh-empty")) ?? "";
    expect(empty).toContain(`curl -X PUT ${day.server.url}/admin/webhooks/shop`);
    expect(empty).toContain("docs/CONNECTING.md");
    expect(await overflow(page)).toBe(0);
    await screenshot(page, "dashboard-handoff-1-empty");
    await page.setViewportSize(PHONE);
    expect(await overflow(page)).toBe(0);
    await page.evaluate(`document.querySelector("#handoff").scrollIntoView({ block: "start" })`);
    await screenshot(page, "dashboard-handoff-1-empty-phone", undefined, false);
    await page.setViewportSize({ width: 1280, height: 1000 });

    // The shop's endpoint, at a receiver that refuses everything, with a long URL (it must wrap); and
    // a disabled one for paid orders only, in batches (API.md v1.4 "Webhook batches").
    const path = `/hooks/shop/${"flashgate-order-hand-off".repeat(4)}?tenant=launch-week&region=eu-west`;
    const created = await call("PUT", "/admin/webhooks/shop", { url: `${day.receiver.url}${path}` });
    expect(created.status).toBe(200);
    const secret = String(created.json.secret);
    await receiverBehaves("shop", { secret, fail: 1000 });
    const erp = {
      url: "https://erp.example.com/flashgate/orders",
      events: ["order.paid"],
      enabled: false,
      batch: { maxEvents: 100, maxWaitMs: 1000 },
    };
    expect((await call("PUT", "/admin/webhooks/erp", erp)).status).toBe(200);

    const shop = 'article[data-endpoint="shop"]';
    await page.waitForSelector(shop, PANEL);
    await page.waitForSelector('article[data-endpoint="erp"]');
    expect(await page.isHidden("#wh-empty")).toBe(true);
    expect(await page.textContent(`${shop} [data-field="url"]`)).toBe(`${day.receiver.url}${path}`);
    expect(await page.textContent(`${shop} [data-field="events"]`)).toBe(
      "order.held, order.paid, order.expired, order.cancelled, order.refund_required, payment.refund_required",
    );
    expect(await page.textContent(`${shop} [data-field="enabled"]`)).toBe("enabled");
    expect(await page.textContent('article[data-endpoint="erp"] [data-field="enabled"]')).toBe("disabled");
    // Each endpoint's batch setting: one event a message, or batches.
    expect(await page.textContent(`${shop} [data-field="batch"]`)).toBe("one event each");
    expect(await page.textContent('article[data-endpoint="erp"] [data-field="batch"]')).toBe(
      "batches of up to 100 events, sent when full or after 1 s",
    );
    // Nothing is owed yet: no lag (the API's lagSeconds is 0).
    expect((await call("GET", "/admin/webhooks/shop")).json.lagSeconds).toBe(0);
    expect(await page.textContent(`${shop} [data-field="lag"]`)).toBe("none: nothing is pending");

    // The secret is not on screen, nor anywhere in the page, until the operator asks for it.
    expect(await page.content()).not.toContain(secret);
    expect(await page.textContent(`${shop} [data-field="secret"]`)).toBe("hidden");

    // An order: its order.held delivery is refused twice (the schedule's one retry), then failed.
    const sku = `hook-${randomUUID().slice(0, 6)}`;
    expect((await call("PUT", `/admin/skus/${sku}`, { name: "Hand-off tee", totalStock: 5 })).status).toBe(200);
    const jwt = (await call("POST", "/dev/jwt", { userId: "ivy" }, { "content-type": "application/json" })).json;
    const shopper = { authorization: `Bearer ${jwt.token}`, "content-type": "application/json" };
    const token = (await call("POST", `/api/skus/${sku}/tokens`, undefined, shopper)).json;
    const reserved = await call("POST", `/api/skus/${sku}/reservations`, { token: token.token, quantity: 1 }, shopper);
    expect(reserved.status).toBe(202);
    const reservationId = String(reserved.json.reservationId);

    const item = `${shop} li.delivery`;
    await expect.poll(() => page.textContent(`${item} .badge`), PANEL).toBe("failed");
    expect(await page.locator(item).count()).toBe(1);
    const deliveryId = (await page.getAttribute(item, "data-id")) ?? "";
    expect(deliveryId).not.toBe("");
    const text = (await page.textContent(item)) ?? "";
    expect(text).toContain(`order.held${reservationId}`);
    // Why, in the server's words (lastError), then the start of what the receiver answered.
    expect(text).toContain("2 attempts · answered 500: receiver failing on purpose");
    expect(text).toContain("no attempt left: retry it by hand");
    expect(await page.textContent(`${shop} [data-field="counts"]`)).toBe("0 pending (0 being retried) · 1 failed");
    expect(await page.textContent("#wh-count")).toBe("(2 endpoints, 1 failing)");
    expect(await page.getAttribute(`${item} button`, "aria-label")).toBe(`Retry order.held of ${reservationId} now`);
    expect(await lowContrast(page, "#handoff")).toEqual([]);
    expect(await overflow(page)).toBe(0);
    expect(await cardOverflows(page)).toEqual([]);
    expect(serious(await axeViolations(page)), "axe-core, the hand-off with a failed delivery").toEqual([]);
    await screenshot(page, "dashboard-handoff-2-failed", "dashboard-handoff.png");

    // The same on a phone: nothing wider than the screen, the long URL wrapped.
    await page.setViewportSize(PHONE);
    expect(await overflow(page)).toBe(0);
    expect(await cardOverflows(page)).toEqual([]);
    expect(serious(await axeViolations(page)), "axe-core, the hand-off on a phone").toEqual([]);
    await page.evaluate(`document.querySelector("#handoff").scrollIntoView({ block: "start" })`);
    await screenshot(page, "dashboard-handoff-3-phone", "dashboard-handoff-phone.png", false);

    // Show puts the secret on screen and Hide takes it off; Copy puts it on the clipboard without showing it.
    const reveal = `${shop} [data-action="reveal"]`;
    expect(await page.getAttribute(reveal, "aria-label")).toBe("Show the signing secret of shop");
    await page.click(reveal);
    expect(await page.textContent(`${shop} [data-field="secret"]`)).toBe(secret);
    expect(await page.getAttribute(reveal, "aria-label")).toBe("Hide the signing secret of shop");
    await page.click(reveal);
    expect(await page.content()).not.toContain(secret);
    await page.click(`${shop} [data-action="copy"]`);
    await expect.poll(() => page.textContent(`${shop} [data-field="message"]`)).toContain("is on the clipboard");
    expect(await page.evaluate("navigator.clipboard.readText()")).toBe(secret);
    expect(await page.content()).not.toContain(secret);

    // A refused retry says why, where the button is.
    const retryRoute = `**/admin/webhooks/shop/deliveries/${deliveryId}/retry`;
    await page.route(retryRoute, (route) =>
      route.fulfill({
        status: 404,
        contentType: "application/json",
        body: JSON.stringify({ error: { code: "NOT_FOUND", message: "No such delivery of this webhook endpoint." } }),
      }),
    );
    await page.click(`${item} button`);
    const message = `${shop} [data-field="message"]`;
    await expect
      .poll(() => page.textContent(message))
      .toBe(`Retry of order.held of ${reservationId} refused: NOT_FOUND: No such delivery of this webhook endpoint.`);
    expect(await page.getAttribute(message, "data-kind")).toBe("error");
    expect(await inView(page, message)).toBe(true);
    expect(await lowContrast(page, "#handoff")).toEqual([]);
    await page.unroute(retryRoute);

    // The receiver is healthy again (and answers after 2 s, so the retry is seen queued first): Retry
    // delivers it, with the same webhook-id, and nothing fails any more. A poll reading while the retry
    // is queued must not judge it: held here, its pending list is read before the retry (the row is
    // failed then) and its failed list after it (pending again), so the row is in neither. Read side by
    // side and judged, that poll said "accepted on retry" 2 s before the receiver answered.
    await receiverBehaves("shop", { secret, delayMs: 2_000 });
    const retried = gate();
    const stalePending = gate();
    let held = false;
    const logRoute = "**/admin/webhooks/shop/deliveries?*";
    await page.route(logRoute, async (route) => {
      const url = route.request().url();
      if (!held && url.includes("status=pending")) {
        held = true;
        const before = await route.fetch();
        stalePending.open();
        await retried.promise;
        await route.fulfill({ response: before });
      } else {
        if (url.includes("status=failed")) await retried.promise;
        await route.continue();
      }
    });
    await stalePending.promise;
    await page.click(`${item} button`);
    await expect
      .poll(() => page.textContent(message))
      .toBe(`Retry queued: order.held of ${reservationId}, it is tried now.`);
    retried.open();
    expect(await page.getAttribute(message, "data-kind")).toBe("ok");
    expect(await inView(page, message)).toBe(true);
    await expect.poll(() => page.locator(item).count(), PANEL).toBe(0);
    await expect.poll(() => page.textContent(message)).toBe(`order.held of ${reservationId} was accepted on retry.`);
    expect(await page.isVisible(`${shop} [data-field="no-failing"]`)).toBe(true);
    expect(await lowContrast(page, "#handoff")).toEqual([]);
    await expect
      .poll(() => page.textContent(`${shop} [data-field="counts"]`))
      .toBe("0 pending (0 being retried) · 0 failed");
    expect(await page.textContent("#wh-count")).toBe("(2 endpoints, 0 failing)");
    const received = await receivedBy("shop");
    expect(received.map((r) => [r.webhookId, r.verified, r.answered])).toEqual([[deliveryId, true, 204]]);
    expect(received[0]?.body?.data.reservationId).toBe(reservationId);
    const delivered = await call("GET", "/admin/webhooks/shop/deliveries?status=delivered");
    expect((delivered.json.deliveries as { id: string }[]).map((d) => d.id)).toEqual([deliveryId]);
    await page.unroute(logRoute);

    // Two more orders refused to the end, then "Retry all" (POST /admin/webhooks/shop/retry) sends
    // both at once to the healed receiver, and says how many it retried.
    await receiverBehaves("shop", { secret, fail: 1000 });
    for (const userId of ["jon", "kai"]) {
      const auth = (await call("POST", "/dev/jwt", { userId }, { "content-type": "application/json" })).json;
      const headers = { authorization: `Bearer ${auth.token}`, "content-type": "application/json" };
      const minted = (await call("POST", `/api/skus/${sku}/tokens`, undefined, headers)).json;
      expect(
        (await call("POST", `/api/skus/${sku}/reservations`, { token: minted.token, quantity: 1 }, headers)).status,
      ).toBe(202);
    }
    await expect.poll(() => page.locator(`${item} .badge[data-status="failed"]`).count(), PANEL).toBe(2);
    const retryAll = `${shop} [data-action="retry-all"]`;
    expect(await page.getAttribute(retryAll, "aria-label")).toBe("Retry all failing deliveries of shop now");
    await receiverBehaves("shop", { secret });
    await page.click(retryAll);
    await expect.poll(() => page.textContent(message)).toBe("Retry of all queued: 2 deliveries of shop tried now.");
    await expect.poll(() => page.locator(item).count(), PANEL).toBe(0);
    expect(await page.isHidden(retryAll)).toBe(true);
    await expect.poll(async () => (await receivedBy("shop")).length, PANEL).toBe(2);
    expect(await overflow(page)).toBe(0);
    await screenshot(page, "dashboard-handoff-4-retried-phone", undefined, false);
    await page.setViewportSize({ width: 1280, height: 1000 });
    expect(await overflow(page)).toBe(0);
    await screenshot(page, "dashboard-handoff-5-retried");

    // A receiver that takes 25 s to answer: the next order's delivery stays pending, and the endpoint's
    // lag (its oldest pending delivery's age, lagSeconds in the API) shows and grows on the dashboard.
    await receiverBehaves("shop", { secret, delayMs: 25_000 });
    const lea = (await call("POST", "/dev/jwt", { userId: "lea" }, { "content-type": "application/json" })).json;
    const leaAuth = { authorization: `Bearer ${lea.token}`, "content-type": "application/json" };
    const leaToken = (await call("POST", `/api/skus/${sku}/tokens`, undefined, leaAuth)).json;
    expect(
      (await call("POST", `/api/skus/${sku}/reservations`, { token: leaToken.token, quantity: 1 }, leaAuth)).status,
    ).toBe(202);
    // The delivery stays pending about 21 s (two attempts cut at the sender's 10 s timeout): the API shows
    // its lag first, then the dashboard within its 10 s poll, both inside that span.
    const apiLag = async () => Number((await call("GET", "/admin/webhooks/shop")).json.lagSeconds);
    await expect.poll(apiLag, PANEL).toBeGreaterThanOrEqual(2);
    const lagField = `${shop} [data-field="lag"]`;
    const shownLag = async () => Number(/^(\d+) s behind/.exec((await page.textContent(lagField)) ?? "")?.[1] ?? 0);
    await expect.poll(shownLag, PANEL).toBeGreaterThanOrEqual(2);
    const shown = await shownLag();
    const api = await apiLag();
    // What the page shows is what the API said at its last poll (at most 10 s ago), never more.
    expect(api).toBeGreaterThanOrEqual(shown);
    expect(api - shown).toBeLessThanOrEqual(11);
    expect(await page.textContent(lagField)).toMatch(/^\d+ s behind \(the oldest pending delivery\)$/);
    expect(await page.getAttribute(lagField, "data-kind")).toBe("late");
    expect(await lowContrast(page, "#handoff")).toEqual([]);
    expect(serious(await axeViolations(page)), "axe-core, an endpoint with lag").toEqual([]);
    await page.evaluate(`document.querySelector('${shop}').scrollIntoView({ block: "start" })`);
    await screenshot(page, "dashboard-handoff-6-lag", "dashboard-handoff-lag.png", false);
    expect(unexpectedProblems(page)).toEqual([]);
    await page.close();
  });
});
