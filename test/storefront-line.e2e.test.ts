import { randomUUID } from "node:crypto";
import type { Page } from "playwright-core";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { consoleAccess } from "./suites/console-access";
import {
  call as callGateway,
  DESKTOP,
  expectSound,
  newPage,
  PHONE,
  reserveByApi,
  type SaleDay,
  screenshot,
  shopper,
  startSaleDay,
  unexpectedProblems,
} from "./support/browser";

/**
 * The storefront's side of issue #43 (API.md v1.3 "Early access" and "The line, visible") in a real
 * headless Chromium against `wrangler dev`: the tiers and their countdowns, an access code refused
 * then taken, a waiting shopper's place with what is ahead of it (refreshed as others leave), Leave,
 * and an opening draw's result for its winner and its loser. Each screen is checked with axe-core at
 * 1280 and 420 px; the screenshots go to docs/screenshots/. Early access from the console
 * (test/suites/console-access.ts) runs first on the same sale day: one `wrangler dev` and one
 * Chromium fewer (issue #56); its SKUs, codes and shoppers are its own.
 */

let day: SaleDay;

beforeAll(async () => {
  day = await startSaleDay();
});
afterAll(async () => {
  await day?.stop();
});

const call = (method: string, path: string, body?: unknown, headers?: Record<string, string>) =>
  callGateway(day.server, method, path, body, headers);
const iso = (ms: number) => new Date(ms).toISOString();
/** The page reads the SKU every second and the line every 2 s: a change shows within this. */
const SHOWS = { timeout: 10_000 };

async function putSku(settings: Record<string, unknown>): Promise<string> {
  const sku = `ea-${randomUUID().slice(0, 6)}`;
  const answer = await call("PUT", `/admin/skus/${sku}`, settings);
  expect(answer.status, JSON.stringify(answer.json)).toBe(200);
  return sku;
}

async function codesOf(sku: string, tier: string, count: number): Promise<string[]> {
  const made = await call("POST", `/admin/skus/${sku}/access-codes`, { tier, count });
  expect(made.status).toBe(201);
  return made.json.codes as string[];
}

async function signedIn(sku: string, user: string, viewport = DESKTOP): Promise<Page> {
  const page = await newPage(day.browser, viewport);
  await page.goto(`${day.server.url}/?sku=${sku}`);
  await signIn(page, user);
  return page;
}

async function signIn(page: Page, user: string) {
  await page.fill("#user", user);
  await page.click("#user-form button");
  await expect.poll(() => page.textContent("#who")).toContain(`Signed in as ${user}`);
}

/** The page checked at 1280 px and at 420 px, each screenshot saved as `name` (and its -phone). */
async function soundAtBothSizes(page: Page, what: string, name: string, focus: string) {
  await page.setViewportSize(DESKTOP);
  await expectSound(page, `${what} at 1280 px`);
  // As tall as the page: the status line (sticky at the bottom) then covers none of it.
  await page.setViewportSize({ width: DESKTOP.width, height: 1100 });
  await screenshot(page, `storefront-${name}`, `storefront-${name}.png`);
  await page.setViewportSize(PHONE);
  await expectSound(page, `${what} at 420 px`);
  await page.evaluate(`document.querySelector("${focus}").scrollIntoView({ block: "start" })`);
  await screenshot(page, `storefront-${name}-phone`, `storefront-${name}-phone.png`, false);
  await page.setViewportSize(DESKTOP);
}

consoleAccess(() => day);

describe("storefront: early access", () => {
  it("counts down to each tier, refuses a bad access code clearly and buys with a good one", async () => {
    const now = Date.now();
    const sku = await putSku({
      name: "Members' drop",
      totalStock: 5,
      perUserLimit: 1,
      holdSeconds: 600,
      startsAt: iso(now + 3_600_000),
      // `early` opens in 8 s: the page must load and sign in before, on a loaded machine too.
      access: [
        { name: "early", startsAt: iso(now + 8_000) },
        { name: "friends", startsAt: iso(now + 1_800_000) },
      ],
    });
    const [code, spare] = await codesOf(sku, "early", 2);
    const [friendsCode] = await codesOf(sku, "friends", 1);
    const page = await signedIn(sku, "mia");

    // Before any tier: the next one's countdown, every tier listed, and no buying.
    await expect
      .poll(() => page.textContent("#countdown"))
      .toMatch(/^Early access \(early\) opens in 0:0\d · everyone in (59:\d\d|1:00:00)$/);
    expect(await page.isDisabled("#buy")).toBe(true);
    expect(await page.textContent("#tiers-now")).toBe("· none open yet");
    const tier = (name: string) => `#tier-list li[data-tier="${name}"]`;
    expect(await page.getAttribute(tier("early"), "data-state")).toBe("next");
    expect(await page.textContent(tier("early"))).toMatch(/^early opens in 0:0\d \(at /);
    expect(await page.textContent(tier("friends"))).toMatch(/^friends opens in (29:\d\d|30:00) \(at /);
    expect(await page.textContent(tier("everyone"))).toMatch(/^Everyone opens in (59:\d\d|1:00:00) \(at /);
    expect(await page.isVisible("#access-code")).toBe(true);

    // `early` opens: Buy turns on, for code holders (and members) only.
    await page.waitForSelector("#buy:not([disabled])", { timeout: 20_000 });
    await expect.poll(() => page.textContent("#tiers-now")).toBe("· open now: early");
    expect(await page.getAttribute(tier("early"), "data-state")).toBe("open");
    expect(await page.textContent(tier("early"))).toMatch(/^early open since /);
    expect(await page.getAttribute(tier("friends"), "data-state")).toBe("next");
    expect(await page.textContent("#countdown")).toMatch(/^Early access open \(early\) · everyone in /);

    // Without a code: the sale is not open to this shopper yet, and the page says who can buy.
    await page.click("#buy");
    await expect
      .poll(() => page.textContent("#message"))
      .toContain("Early access is open only to members and access-code holders");
    expect(await page.isHidden("#access-error")).toBe(true);

    // A code that does not exist, then one of a tier not open yet: each refused beside the field.
    for (const wrong of ["NOT-A-REAL-CODE", friendsCode ?? ""]) {
      await page.fill("#access-code", wrong);
      expect(await page.isHidden("#access-error")).toBe(true); // typing clears the last refusal
      await page.click("#buy");
      await page.waitForSelector("#access-error:not([hidden])");
      expect(await page.textContent("#access-error")).toBe(
        "This access code admits nobody now: it is unknown, its tier has not opened yet, or another shopper has already used it. Check the code and try again.",
      );
      expect(await page.getAttribute("#access-code", "aria-invalid")).toBe("true");
      expect(await page.getAttribute("#access-error", "role")).toBe("alert");
    }
    expect((await call("GET", `/admin/skus/${sku}`)).json.stock).toMatchObject({ available: 5, held: 0 });
    await soundAtBothSizes(page, "a refused access code", "early-access", "#sku-view");

    // The right code: held, before the public start.
    await page.fill("#access-code", code ?? "");
    await page.click("#buy");
    await expect.poll(() => page.textContent("#res-status"), SHOWS).toBe("held");
    expect(await page.isHidden("#access-error")).toBe(true);
    expect((await call("GET", `/admin/skus/${sku}`)).json.stock).toMatchObject({ available: 4, held: 1 });

    // Another shopper with the same code: taken, refused; with the spare code: held.
    await signIn(page, "noah");
    await page.fill("#access-code", code ?? "");
    await page.click("#buy");
    await page.waitForSelector("#access-error:not([hidden])");
    expect(await page.textContent("#message")).toBe("Not reserved: the access code was refused (see under the field).");
    await page.fill("#access-code", spare ?? "");
    await page.click("#buy");
    // Noah's own list, once his hold is answered (the card, hidden at his sign-in, shows again): until the
    // page has read his list, #orders can still be Mia's, whose "held 1 × sku" reads the same.
    await page.waitForSelector("#reservation:not([hidden])", SHOWS);
    await expect.poll(() => page.textContent("#orders"), SHOWS).toContain(`held 1 × ${sku}`);
    expect(await page.isHidden("#access-error")).toBe(true);
    expect((await call("GET", `/admin/skus/${sku}`)).json.stock).toMatchObject({ available: 3, held: 2 });
    expect(unexpectedProblems(page)).toEqual([]);
    await page.close();
  });
});

describe("storefront: the line, visible", () => {
  it("shows the place and what is ahead, refreshes it as others leave, and leaves the line", async () => {
    const sku = await putSku({ name: "Last caps", totalStock: 3, perUserLimit: 3, holdSeconds: 600 });
    // Bob holds all 3; Cleo waits for 2 before anyone on the page.
    const bob = await shopper(day.server, "bob");
    const bobHold = await reserveByApi(day.server, bob, sku, 3);
    expect(bobHold.status).toBe(202);
    const cleo = await shopper(day.server, "cleo");
    expect((await call("POST", `/api/skus/${sku}/waitlist`, { quantity: 2 }, cleo)).status).toBe(202);

    const page = await signedIn(sku, "erin");
    await expect.poll(() => page.textContent("#countdown"), SHOWS).toBe("Sold out.");
    await expect.poll(() => page.textContent("#waiting-count"), SHOWS).toBe("1 shopper is in line now.");
    expect(await page.textContent("#held-note")).toBe("· 3 held by shoppers (unpaid, may come back)");
    await page.click("#join-waitlist");
    await expect.poll(() => page.textContent("#waitlist-status")).toBe("You are number 2 on the waitlist for 1.");
    await page.waitForSelector("#line:not([hidden])");
    expect(await page.textContent("#line-position")).toBe("2 of those waiting");
    expect(await page.textContent("#line-ahead")).toBe("2 units wanted by the 1 shopper before you");
    expect(await page.textContent("#line-held")).toBe(
      "3 units, unpaid: they come back to the line if they lapse or are cancelled",
    );
    expect(await page.textContent("#line-updated")).toMatch(/^Updated .+; refreshed every 2 s\.$/);
    expect(await page.isHidden("#access")).toBe(true); // no tiers: no access code field
    expect(await page.isVisible("#leave-waitlist")).toBe(true);
    await soundAtBothSizes(page, "a place in the line", "line", "#waitlist");

    // Cleo leaves: the page moves Erin up by itself.
    expect((await call("DELETE", `/api/skus/${sku}/waitlist`, undefined, cleo)).status).toBe(200);
    await expect.poll(() => page.textContent("#line-position"), SHOWS).toBe("1 of those waiting: you are next");
    expect(await page.textContent("#line-ahead")).toBe("nobody: the next units that come back are yours");

    // A reload keeps the place on screen.
    await page.reload();
    await page.waitForSelector("#line:not([hidden])", SHOWS);
    expect(await page.textContent("#line-position")).toBe("1 of those waiting: you are next");

    // Leave: out of the line (the API agrees), and Join is offered again.
    await page.click("#leave-waitlist");
    await expect
      .poll(() => page.textContent("#message"))
      .toBe(`You left the line for ${sku}: nothing will be held for you, and those behind you moved up.`);
    const erin = await shopper(day.server, "erin");
    expect((await call("GET", `/api/skus/${sku}/waitlist`, undefined, erin)).status).toBe(404);
    expect(await page.isHidden("#line")).toBe(true);
    expect(await page.isVisible("#join-waitlist")).toBe(true);
    await expect.poll(() => page.textContent("#waiting-count"), SHOWS).toBe("");

    // Back in line, then Bob cancels: the line grants Erin a hold, and the page shows it.
    await page.click("#join-waitlist");
    // The line's server, not the panel, says Erin waits: the panel kept its text while hidden, so a
    // cancel sent on that text alone could reach the SKU before the join (then 409 STOCK_AVAILABLE).
    await expect
      .poll(async () => (await call("GET", `/api/skus/${sku}/waitlist`, undefined, erin)).status, SHOWS)
      .toBe(200);
    await page.waitForSelector("#line:not([hidden])", SHOWS);
    expect(await page.textContent("#line-position")).toBe("1 of those waiting: you are next");
    const bobId = String(bobHold.json.reservationId);
    expect((await call("POST", `/api/reservations/${bobId}/cancel`, undefined, bob)).status).toBe(200);
    // The grant shows once the queue wrote its order row: seconds, more on a loaded machine.
    await page.waitForSelector("#res-origin:not([hidden])", { timeout: 60_000 });
    await expect.poll(() => page.textContent("#res-status")).toBe("held");
    expect(await page.isHidden("#waitlist")).toBe(true);
    expect(unexpectedProblems(page)).toEqual([]);
    await page.close();
  });
});

describe("storefront: the opening draw's result", () => {
  it("tells the winner and the loser each their place", async () => {
    const sku = await putSku({
      name: "One pair",
      totalStock: 1,
      perUserLimit: 1,
      holdSeconds: 600,
      startsAt: iso(Date.now() + 8_000),
      openingWindowMs: 4_000,
    });
    const pages = await Promise.all(["wyn", "lou"].map((user) => signedIn(sku, user)));
    await Promise.all(pages.map((page) => page.waitForSelector("#buy:not([disabled])", { timeout: 20_000 })));
    await Promise.all(pages.map((page) => page.click("#buy")));
    for (const page of pages) await page.waitForSelector("#draw-result:not([hidden])", { timeout: 20_000 });
    const outcomes = await Promise.all(pages.map((page) => page.getAttribute("#draw-result", "data-outcome")));
    expect([...outcomes].sort()).toEqual(["lost", "won"]);
    const winner = pages[outcomes.indexOf("won")] as Page;
    const loser = pages[outcomes.indexOf("lost")] as Page;

    expect(await winner.textContent("#draw-result")).toBe("The opening draw placed you 1 of 2: you won a hold on 1.");
    expect(await winner.textContent("#res-draw")).toMatch(/^position 1 of 2 \(entry [0-9a-f]{12}…\)$/);
    expect(await winner.textContent("#res-status")).toBe("held");
    expect(await loser.textContent("#draw-result")).toBe(
      "The opening draw placed you 2 of 2: the units ran out before your place. Join the waitlist below for one that comes back.",
    );
    expect(await loser.textContent("#message")).toContain("Not reserved. Sold out");
    await loser.waitForSelector("#waitlist:not([hidden])", SHOWS);
    await soundAtBothSizes(loser, "a lost draw", "draw-lost", "#sku-view");
    for (const page of pages) {
      expect(unexpectedProblems(page)).toEqual([]);
      await page.close();
    }
  });
});

/** Every console error and uncaught error of the page, 4xx answers included (unexpectedProblems leaves those out). */
function consoleErrors(page: Page): string[] {
  const seen: string[] = [];
  page.on("console", (message) => {
    if (message.type() === "error") seen.push(`${message.text()} (${message.location().url})`);
  });
  page.on("pageerror", (error) => seen.push(String(error)));
  return seen;
}

/** Where an element and the sticky status line (#message) are on the screen now. */
async function boxes(page: Page, selector: string) {
  return (await page.evaluate(`(() => {
    const box = (s) => { const r = document.querySelector(s).getBoundingClientRect(); return { top: r.top, bottom: r.bottom }; };
    return { it: box(${JSON.stringify(selector)}), bar: box("#message"), height: window.innerHeight };
  })()`)) as Boxes;
}

type Boxes = { it: { top: number; bottom: number }; bar: { top: number; bottom: number }; height: number };

/**
 * Where `selector` and the status line are at the very moment `watched` first shows `text` (a
 * MutationObserver's callback, before anything else runs): what a screenshot taken then would show.
 */
function boxesWhenShown(page: Page, watched: string, text: string, selector: string): Promise<Boxes> {
  return page.evaluate(`new Promise((resolve) => {
    const watched = document.querySelector(${JSON.stringify(watched)});
    const box = (s) => { const r = document.querySelector(s).getBoundingClientRect(); return { top: r.top, bottom: r.bottom }; };
    new MutationObserver((_, observer) => {
      if (!watched.textContent.includes(${JSON.stringify(text)})) return;
      observer.disconnect();
      resolve({ it: box(${JSON.stringify(selector)}), bar: box("#message"), height: window.innerHeight });
    }).observe(watched, { childList: true, characterData: true, subtree: true });
  })`) as Promise<Boxes>;
}

/** The element is on the screen and wholly above the status line: nothing of it is behind the bar. */
async function expectClearOfBar(page: Page, selector: string, what: string) {
  expectClear(await boxes(page, selector), what);
}

function expectClear({ it, bar, height }: Boxes, what: string) {
  expect(it.top, `${what}: on the screen`).toBeGreaterThanOrEqual(0);
  expect(it.bottom, `${what}: not behind the status line (${JSON.stringify({ it, bar })})`).toBeLessThanOrEqual(
    bar.top,
  );
  expect(bar.bottom, `${what}: the status line at the screen's bottom edge`).toBeLessThanOrEqual(height);
}

const holdIds = (page: Page) =>
  page.$$eval("#orders li.hold", (items) => items.map((li) => li.getAttribute("data-id")));

describe("storefront: the line and the holds, as a newcomer finds them (issue #50)", () => {
  it("signs in without a console error, keeps Leave clear of the status line, one place in both", async () => {
    const sku = await putSku({ name: "Last scarves", totalStock: 2, perUserLimit: 2, holdSeconds: 600 });
    expect((await reserveByApi(day.server, await shopper(day.server, "bo"), sku, 2)).status).toBe(202);
    const cy = await shopper(day.server, "cy");
    expect((await call("POST", `/api/skus/${sku}/waitlist`, { quantity: 1 }, cy)).status).toBe(202);

    // Signing in asks nothing the browser logs as failed (a GET of the line for a shopper not in it did).
    const page = await newPage(day.browser, DESKTOP);
    const errors = consoleErrors(page);
    await page.goto(`${day.server.url}/?sku=${sku}`);
    await signIn(page, "ren");
    await expect.poll(() => page.textContent("#orders"), SHOWS).toBe("No holds or orders yet.");
    await expect.poll(() => page.textContent("#waiting-count"), SHOWS).toBe("1 shopper is in line now.");
    await page.waitForTimeout(1500); // the page's reads after a sign-in are done
    expect(errors, "console errors on sign-in").toEqual([]);

    // Join: the status line says the place the panel says, and Leave is in view above the line, from
    // the first moment the place shows (a screenshot then caught the page mid-way, Leave off screen).
    const first = boxesWhenShown(page, "#waitlist-status", "number", "#leave-waitlist");
    await page.click("#join-waitlist");
    expectClear(await first, "Leave as the place first shows, 1280 px");
    await page.waitForSelector("#line:not([hidden])");
    expect(await page.textContent("#line-position")).toBe("2 of those waiting");
    await expect.poll(() => page.textContent("#message")).toMatch(/\b2\b/);
    await expectClearOfBar(page, "#leave-waitlist", "Leave after Join, 1280 px");
    await page.evaluate("window.scrollTo(0, 0)");
    await page.evaluate(`document.querySelector("#leave-waitlist").scrollIntoView({ block: "nearest" })`);
    await expectClearOfBar(page, "#leave-waitlist", "Leave scrolled into view, 1280 px");
    await screenshot(page, "storefront-line-bar", undefined, false);
    await page.setViewportSize(PHONE);
    await page.evaluate(`document.querySelector("#waitlist").scrollIntoView({ block: "nearest" })`);
    await expectClearOfBar(page, "#line", "the place in line, 420 px");
    await expectClearOfBar(page, "#leave-waitlist", "Leave, 420 px");
    await expectSound(page, "the line above the status line, 420 px");
    await screenshot(page, "storefront-line-bar-phone", "storefront-line-bar-phone.png", false);
    await page.setViewportSize(DESKTOP);

    // Cy leaves: the panel and the status line both say place 1 (the line kept "position 2").
    expect((await call("DELETE", `/api/skus/${sku}/waitlist`, undefined, cy)).status).toBe(200);
    await expect.poll(() => page.textContent("#line-position"), SHOWS).toBe("1 of those waiting: you are next");
    const said = await page.textContent("#message");
    expect(said, "the status line, once the panel says place 1").not.toMatch(/\b2\b/);
    expect(said).toBe("On the waitlist for 1 unit: place 1 of those waiting: you are next.");

    // A reload keeps the place (the page asks, it knows Ren joined here); another shopper is not asked about.
    await page.reload();
    await page.waitForSelector("#line:not([hidden])", SHOWS);
    expect(await page.textContent("#line-position")).toBe("1 of those waiting: you are next");
    await signIn(page, "cy");
    await page.waitForTimeout(1500);
    expect(await page.isVisible("#join-waitlist")).toBe(true);
    expect(errors, "console errors after a reload and a second sign-in").toEqual([]);
    expect(unexpectedProblems(page)).toEqual([]);
    await page.close();
  });

  it("says a cancelled unit went to the line when someone waits, and not on sale", async () => {
    const sku = await putSku({ name: "Only hat", totalStock: 1, perUserLimit: 1, holdSeconds: 600 });
    const page = await signedIn(sku, "sol");
    await page.waitForSelector("#buy:not([disabled])", SHOWS);
    await page.click("#buy");
    await expect.poll(() => page.textContent("#res-status"), SHOWS).toBe("held");
    const tia = await shopper(day.server, "tia");
    expect((await call("POST", `/api/skus/${sku}/waitlist`, { quantity: 1 }, tia)).status).toBe(202);
    await expect.poll(() => page.evaluate("state.view && state.view.waiting"), SHOWS).toBe(1);

    await page.click("#cancel");
    await expect.poll(() => page.textContent("#res-status"), SHOWS).toBe("cancelled");
    const said = (await page.textContent("#message")) ?? "";
    expect(said).toBe(
      `Cancelled: the 1 of ${sku} went to the line: the next shopper waiting who can take it gets a hold (back on sale if none can).`,
    );
    expect(said).not.toContain("went back on sale");
    expect(await page.textContent("#res-expires")).toBe("cancelled: the units were released");
    // The line was served: Tia holds it, nothing is on sale.
    await expect
      .poll(async () => (await call("GET", "/api/me/reservations", undefined, tia)).json.reservations, SHOWS)
      .toMatchObject([{ sku, status: "held" }]);
    expect((await call("GET", `/admin/skus/${sku}`)).json.stock).toMatchObject({ available: 0, held: 1 });
    await expectSound(page, "a cancel that served the line, 1280 px");
    expect(unexpectedProblems(page)).toEqual([]);
    await page.close();
  });

  it("does not offer the line to a shopper the per-user limit refuses", async () => {
    const sku = await putSku({ name: "Pair of gloves", totalStock: 2, perUserLimit: 1, holdSeconds: 600 });
    const uma = await shopper(day.server, "uma");
    const bought = await reserveByApi(day.server, uma, sku);
    expect(bought.status).toBe(202);
    expect((await call("POST", "/dev/pay", { reservationId: bought.json.reservationId }, {})).json).toMatchObject({
      reservationStatus: "paid",
    });
    expect((await reserveByApi(day.server, await shopper(day.server, "vic"), sku)).status).toBe(202);
    // The line refuses her (she has her 1): the page must not offer it.
    const refused = await call("POST", `/api/skus/${sku}/waitlist`, { quantity: 1 }, uma);
    expect(refused.status).toBe(409);
    expect(refused.json).toMatchObject({ error: { code: "LIMIT_EXCEEDED" } });

    const page = await signedIn(sku, "uma");
    await expect.poll(() => page.textContent("#countdown"), SHOWS).toBe("Sold out.");
    // (Her holds are read: the note names the limit.)
    await expect.poll(() => page.textContent("#buy-note"), SHOWS).toMatch(/^You have bought the 1 allowed per shopper/);
    expect(await page.isVisible("#join-waitlist"), "Join the waitlist offered").toBe(false);
    expect(await page.isHidden("#waitlist")).toBe(true);
    expect(await page.textContent("#buy-note")).toBe(
      "You have bought the 1 allowed per shopper, so the waitlist cannot take you either.",
    );
    await soundAtBothSizes(page, "sold out at the limit", "limit", "#sku-view");
    expect(unexpectedProblems(page)).toEqual([]);
    await page.close();
  });

  it("keeps the holds in one order, newest first, across refreshes and a reload", async () => {
    const sku = await putSku({ name: "Socks", totalStock: 10, perUserLimit: 3, holdSeconds: 600 });
    const page = await signedIn(sku, "wyatt");
    await page.waitForSelector("#buy:not([disabled])", SHOWS);
    const made: string[] = [];
    for (let i = 1; i <= 3; i++) {
      await page.click("#buy");
      await expect.poll(async () => (await holdIds(page)).length, SHOWS).toBe(i);
      made.push(String(await page.textContent("#res-id")));
      await page.waitForTimeout(50); // holds made at distinct times
    }
    const newestFirst = [...made].reverse();
    expect(await holdIds(page)).toEqual(newestFirst);
    // The list is read again every 10 s: the same order after it.
    await page.waitForResponse((r) => r.url().endsWith("/api/me/reservations"), { timeout: 15_000 });
    await page.waitForTimeout(300);
    expect(await holdIds(page)).toEqual(newestFirst);
    await page.reload();
    await expect.poll(async () => (await holdIds(page)).length, SHOWS).toBe(3);
    expect(await holdIds(page)).toEqual(newestFirst);
    expect(unexpectedProblems(page)).toEqual([]);
    await page.close();
  });
});
