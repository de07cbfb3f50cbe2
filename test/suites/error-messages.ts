import { runDurableObjectAlarm, runInDurableObject } from "cloudflare:test";
import { env } from "cloudflare:workers";
import { describe, expect, it } from "vitest";
import { configureSku } from "../../src/catalog/configure-sku";
import { ApiError } from "../../src/http/errors";
import { CONTRACT_ROUTES } from "../../src/routes/contract";
import { ErrorBody } from "../../src/routes/contract-schemas";
import { call, createSku, reserve, stockShard, tokenFor, uniqueSku } from "../support/client";
import { pay } from "../support/payments";

/**
 * Issue #32: admin bodies are strict, shopper bodies are not; a refusal says what happened and what
 * to do next, with its figures in `error.details`; a scheduled sale shows as such before startsAt.
 */

const inSeconds = (s: number) => new Date(Date.now() + s * 1000).toISOString();

/** The error body as the contract documents it (details included), and its details. */
function refusal(answer: { status: number; json: unknown }, status: number, code: string) {
  expect(answer.status, JSON.stringify(answer.json)).toBe(status);
  const body = ErrorBody.parse(answer.json);
  expect(body.error.code).toBe(code);
  return body.error;
}

describe("which bodies are strict", () => {
  const withBody = CONTRACT_ROUTES.filter((route) => route.body !== undefined);

  it("lists every admin body as strict and every shopper or provider body as open to added fields", () => {
    const byAccess = withBody.map((route) => `${route.access} ${route.method} ${route.path} ${route.body}`);
    expect(byAccess.sort()).toEqual(
      [
        "admin post /admin/skus/:sku/access-codes AccessCodesRequest",
        "admin put /admin/skus/:sku SkuSettingsRequest",
        "admin put /admin/webhooks/:id WebhookEndpointRequest",
        "admin post /admin/payments/:eventId/refunded MarkRefundedRequest",
        "shopper post /api/reservations/:id/checkout CheckoutRequest",
        "shopper post /api/skus/:sku/reservations ReservationRequest",
        "shopper post /api/skus/:sku/waitlist WaitlistRequest",
        "paymentWebhook post /webhooks/payments PaymentEvent",
        "paymentWebhook post /webhooks/stripe StripeEvent",
      ].sort(),
    );
  });

  it("answers 400 naming a misspelled field of the SKU PUT, suggests the right one, and changes nothing", async () => {
    const sku = uniqueSku("hat");
    await createSku(sku, { totalStock: 5, perUserLimit: 3 });
    const error = refusal(
      await call("PUT", `/admin/skus/${sku}`, { admin: true, body: { totalStock: 5, perUserLimt: 1 } }),
      400,
      "INVALID_REQUEST",
    );
    expect(error.message).toContain('perUserLimt: unknown field (did you mean "perUserLimit"?)');
    expect(error.message).toContain("nothing was changed");
    expect(error.details?.unknownFields).toEqual(["perUserLimt"]);
    const view = await call("GET", `/admin/skus/${sku}`, { admin: true });
    expect(view.json.perUserLimit).toBe(3);
  });

  it("answers 400 naming an unknown field of the webhook PUT (resize and pause go through the SKU PUT)", async () => {
    const error = refusal(
      await call("PUT", "/admin/webhooks/strict-hook", {
        admin: true,
        body: { url: "http://127.0.0.1:9/", enabeld: false },
      }),
      400,
      "INVALID_REQUEST",
    );
    expect(error.details?.unknownFields).toEqual(["enabeld"]);
    expect(error.message).toContain('did you mean "enabled"');
    expect((await call("GET", "/admin/webhooks/strict-hook", { admin: true })).status).toBe(404);
    for (const body of [
      { totalStock: 5, shard: 4 },
      { totalStock: 5, stauts: "paused" },
    ]) {
      const answer = await call("PUT", `/admin/skus/${uniqueSku("resize")}`, { admin: true, body });
      expect(refusal(answer, 400, "INVALID_REQUEST").details?.unknownFields).toEqual(Object.keys(body).slice(1));
    }
  });

  it("refuses a body on an admin route that takes none (an option sent as JSON would be dropped)", async () => {
    const error = refusal(
      await call("POST", "/admin/reconcile", { admin: true, body: { full: true } }),
      400,
      "INVALID_REQUEST",
    );
    expect(error.message).toContain("takes no body");
    expect(error.message).toContain("?full=");
    expect(error.details?.unknownFields).toEqual(["full"]);
    expect((await call("POST", "/admin/reconcile", { admin: true })).status).toBe(200);
    expect((await call("POST", "/admin/reconcile", { admin: true, body: {} })).status).toBe(200);
    // `{}` however spaced (found in an audit: `{ }` was refused).
    expect((await call("POST", "/admin/reconcile", { admin: true, raw: " { \n } " })).status).toBe(200);
  });

  it("answers a body over 16 KiB on an admin route that takes none 413, and archives nothing (found in an audit)", async () => {
    const sku = uniqueSku("big-delete");
    await createSku(sku, { totalStock: 1, perUserLimit: 1 });
    const big = { note: "x".repeat(20 * 1024) };
    refusal(await call("DELETE", `/admin/skus/${sku}`, { admin: true, body: big }), 413, "PAYLOAD_TOO_LARGE");
    expect((await call("GET", `/api/skus/${sku}`)).json.status).toBe("on_sale");
  });

  it("accepts fields it does not know in shopper bodies (clients evolve)", async () => {
    const sku = uniqueSku("open");
    await createSku(sku, { totalStock: 1, perUserLimit: 1 });
    const token = await tokenFor("eve", sku);
    const held = await call("POST", `/api/skus/${sku}/reservations`, {
      user: "eve",
      body: { token, quantity: 1, clientVersion: "2.0", note: "gift" },
    });
    expect(held.status).toBe(202);
    const joined = await call("POST", `/api/skus/${sku}/waitlist`, {
      user: "fay",
      body: { quantity: 1, channel: "app" },
    });
    expect(joined.status).toBe(202);
  });
});

describe("a refusal says what to do next, with its figures", () => {
  it("LIMIT_EXCEEDED: the limit, what the shopper holds, what they may still ask for", async () => {
    const sku = uniqueSku("limit");
    await createSku(sku, { totalStock: 10, perUserLimit: 3 });
    expect((await reserve("lia", sku, 2)).status).toBe(202);
    const error = refusal(await reserve("lia", sku, 2), 409, "LIMIT_EXCEEDED");
    expect(error.message).toBe(
      "At most 3 per shopper: you already hold or bought 2, so 2 more would be over the limit. You can still buy 1: ask for 1 or fewer.",
    );
    expect(error.details).toEqual({ perUserLimit: 3, held: 2, requested: 2 });
    expect((await reserve("lia", sku, 1)).status).toBe(202);
    const full = refusal(await reserve("lia", sku, 1), 409, "LIMIT_EXCEEDED");
    expect(full.details).toEqual({ perUserLimit: 3, held: 3, requested: 1 });
    expect(full.message).toContain("cancel a hold");
  });

  it("INSUFFICIENT_STOCK: how many units are left", async () => {
    const sku = uniqueSku("few");
    await createSku(sku, { totalStock: 2, perUserLimit: 5 });
    const error = refusal(await reserve("ned", sku, 3), 409, "INSUFFICIENT_STOCK");
    expect(error.details).toEqual({ available: 2, requested: 3 });
    expect(error.message).toContain("Only 2 units are left");
  });

  it("SALE_NOT_ACTIVE before startsAt: when it opens, and the views say it is scheduled", async () => {
    const sku = uniqueSku("soon");
    const opensAt = inSeconds(30);
    await createSku(sku, { totalStock: 5, startsAt: opensAt });
    const error = refusal(await call("POST", `/api/skus/${sku}/tokens`, { user: "sam" }), 403, "SALE_NOT_ACTIVE");
    expect(error.details?.phase).toBe("scheduled");
    expect(error.details?.opensAt).toBe(new Date(opensAt).toISOString());
    expect(error.details?.opensInSeconds).toBeGreaterThanOrEqual(28);
    expect(error.details?.opensInSeconds).toBeLessThanOrEqual(30);
    expect(error.message).toContain(`opens at ${new Date(opensAt).toISOString()}, in `);

    const pub = await call("GET", `/api/skus/${sku}`);
    expect(pub.json).toMatchObject({ status: "on_sale", phase: "scheduled" });
    expect(pub.json.opensInSeconds).toBeGreaterThanOrEqual(28);
    const adm = await call("GET", `/admin/skus/${sku}`, { admin: true });
    expect(adm.json).toMatchObject({ status: "on_sale", phase: "scheduled" });
    expect(adm.json.opensInSeconds).toBeGreaterThanOrEqual(28);
  });

  it("SALE_NOT_ACTIVE after endsAt says when it closed; a paused sale says so, also at the stock object", async () => {
    const ended = uniqueSku("ended");
    await createSku(ended, { totalStock: 5, startsAt: inSeconds(-120), endsAt: inSeconds(-60) });
    const closed = refusal(await call("POST", `/api/skus/${ended}/tokens`, { user: "sam" }), 403, "SALE_NOT_ACTIVE");
    expect(closed.details?.phase).toBe("ended");
    expect(closed.message).toContain("The sale closed at");
    expect((await call("GET", `/api/skus/${ended}`)).json).toMatchObject({ phase: "ended", opensInSeconds: null });

    const paused = uniqueSku("paused");
    await createSku(paused, { totalStock: 5 });
    expect((await call("GET", `/api/skus/${paused}`)).json).toMatchObject({ phase: "open", opensInSeconds: null });
    const token = await tokenFor("pia", paused);
    await createSku(paused, { totalStock: 5, status: "paused" });
    const error = refusal(await reserve("pia", paused, 1, token), 403, "SALE_NOT_ACTIVE");
    expect(error.details).toEqual({ phase: "paused" });
    expect(error.message).toContain("paused");
    expect((await call("GET", `/admin/skus/${paused}`, { admin: true })).json.phase).toBe("paused");
  });

  it("STOCK_AVAILABLE: how many units a shopper could buy instead of waiting", async () => {
    const sku = uniqueSku("instock");
    await createSku(sku, { totalStock: 4 });
    const error = refusal(
      await call("POST", `/api/skus/${sku}/waitlist`, { user: "wes", body: { quantity: 1 } }),
      409,
      "STOCK_AVAILABLE",
    );
    expect(error.details).toEqual({ available: 4 });
    expect(error.message).toContain("4 units are available now");
  });

  it("a malformed field is named in details.fields", async () => {
    const error = refusal(
      await call("PUT", `/admin/skus/${uniqueSku("bad")}`, { admin: true, body: { totalStock: -1 } }),
      400,
      "INVALID_REQUEST",
    );
    expect(error.details?.fields?.map((f) => f.path)).toEqual(["totalStock"]);
  });
});

describe("409 INVALID_STATE says what was found and what is allowed from it", () => {
  const put = (sku: string, body: Record<string, unknown>) => call("PUT", `/admin/skus/${sku}`, { admin: true, body });

  it("cancelling a paid reservation: its status, and that only a held one can be cancelled", async () => {
    const sku = uniqueSku("paidcancel");
    await createSku(sku, { totalStock: 2 });
    const held = await reserve("cal", sku);
    const id = held.json.reservationId as string;
    expect((await pay(id)).json.reservationStatus).toBe("paid");
    const error = refusal(await call("POST", `/api/reservations/${id}/cancel`, { user: "cal" }), 409, "INVALID_STATE");
    expect(error.message).toBe(`Reservation ${id} is paid: only a held reservation can be cancelled.`);
    expect(error.details).toEqual({ state: "paid" });
  });

  it.each([1, 3])(
    "a total below held + sold (%i shard(s)): the figures and the least total allowed",
    async (shards) => {
      const sku = uniqueSku("below");
      await createSku(sku, { totalStock: 10, shards, perUserLimit: 5 });
      expect((await reserve("bea", sku, 3)).status).toBe(202);
      const sold = await reserve("ben", sku, 2);
      expect((await pay(sold.json.reservationId)).json.reservationStatus).toBe("paid");
      const error = refusal(await put(sku, { totalStock: 4, name: "Cut" }), 409, "INVALID_STATE");
      expect(error.message).toBe("totalStock 4 is below the 5 units held or sold: set at least 5.");
      expect(error.details).toEqual({ totalStock: 4, heldOrSold: 5 });
      expect((await call("GET", `/admin/skus/${sku}`, { admin: true })).json).toMatchObject({
        name: sku,
        stock: { total: 10, held: 3, sold: 2 },
      });
    },
  );

  it("a new shard count while units are held: what is held and waiting, and when shards can change", async () => {
    const sku = uniqueSku("resize-held");
    await createSku(sku, { totalStock: 1 });
    expect((await reserve("ria", sku)).status).toBe(202);
    expect((await call("POST", `/api/skus/${sku}/waitlist`, { user: "rob", body: { quantity: 1 } })).status).toBe(202);
    const error = refusal(await put(sku, { shards: 2 }), 409, "INVALID_STATE");
    expect(error.message).toBe(
      `SKU ${sku} has 1 unit held or sold and 1 buyer waiting: shards can change from 1 to 2 only while nothing is held or sold, nobody waits and no opening draw is pending (before the sale).`,
    );
    expect(error.details).toEqual({ shards: 1, heldOrSold: 1, waiting: 1 });
  });

  it("a new shard count while an opening draw is pending: that the draw is not decided yet", async () => {
    const sku = uniqueSku("resize-draw");
    const startsAt = Date.now() + 60_000;
    await createSku(sku, { totalStock: 5, openingWindowMs: 2_000, startsAt: new Date(startsAt).toISOString() });
    // The stock object's clock inside the window (the edge's is a minute before: its own check passes).
    await runInDurableObject(stockShard(env, sku, 0), (object) => {
      object.now = () => startsAt + 500;
    });
    const error = refusal(await put(sku, { shards: 2 }), 409, "INVALID_STATE");
    expect(error.message).toBe(
      `SKU ${sku}'s opening draw is not decided yet: shards can change from 1 to 2 only while nothing is held or sold, nobody waits and no opening draw is pending (before the window opens).`,
    );
    expect(error.details).toEqual({ state: "draw_pending", shards: 1, heldOrSold: 0, waiting: 0 });
    await runInDurableObject(stockShard(env, sku, 0), (object) => {
      object.now = () => Date.now();
    });
  });

  it("an opening window: one set to open in the past, one that has opened", async () => {
    const sku = uniqueSku("window-msg");
    await createSku(sku, { totalStock: 5 });
    const past = new Date(Date.now() - 1_000).toISOString();
    const late = refusal(await put(sku, { openingWindowMs: 2_000, startsAt: past }), 409, "INVALID_STATE");
    expect(late.message).toBe(
      `startsAt ${past} is not in the future: an opening window can only be set to open later (its seed hash is published first).`,
    );
    expect(late.details).toEqual({ state: "window_past" });

    const startsAt = Date.now() + 60_000;
    await createSku(sku, { openingWindowMs: 2_000, startsAt: new Date(startsAt).toISOString() });
    // The PUT as it would be decided once the window has opened (the edge's clock, moved).
    const opened = await configureSku(env, sku, { openingWindowMs: 3_000 }, startsAt + 1).catch((e: unknown) => e);
    expect(opened).toBeInstanceOf(ApiError);
    expect([(opened as ApiError).code, (opened as ApiError).message, (opened as ApiError).details]).toEqual([
      "INVALID_STATE",
      `The opening window opened at ${new Date(startsAt).toISOString()}: openingWindowMs and startsAt can no longer change (they can only be set before it opens).`,
      { state: "window_open" },
    ]);
  });

  it("replaying a dead letter that holds no valid order event: which letter, and what can be replayed", async () => {
    const id = `dl-${crypto.randomUUID()}`;
    await env.DB.prepare("INSERT INTO dead_letters (id, queue, body, attempts, received_at) VALUES (?, ?, ?, 3, ?)")
      .bind(id, "order-events", JSON.stringify({ not: "an event" }), Date.now())
      .run();
    const error = refusal(
      await call("POST", `/admin/dead-letters/${id}/replay`, { admin: true }),
      409,
      "INVALID_STATE",
    );
    expect(error.message).toBe(
      `Dead letter ${id} is not a valid order event: only a letter of valid order events can be replayed (it stays stored for inspection).`,
    );
    expect(error.details).toEqual({ state: "invalid_event" });
  });
});

describe("issue #50: a partial PUT is checked as the whole SKU it leaves", () => {
  const put = (sku: string, body: Record<string, unknown>) => call("PUT", `/admin/skus/${sku}`, { admin: true, body });
  const view = async (sku: string) => (await call("GET", `/admin/skus/${sku}`, { admin: true })).json;

  it("a window that would end before it starts (stored values for fields left out): 400 naming the field, nothing changed", async () => {
    const sku = uniqueSku("window-order");
    const startsAt = inSeconds(3_600);
    const endsAt = inSeconds(7_200);
    await createSku(sku, { totalStock: 5, startsAt, endsAt });

    const early = refusal(await put(sku, { endsAt: inSeconds(1_800) }), 400, "INVALID_REQUEST");
    expect(early.details?.fields?.map((f) => f.path)).toEqual(["endsAt"]);
    expect(early.message).toContain(`startsAt ${new Date(startsAt).toISOString()}`);
    const equal = refusal(await put(sku, { endsAt: startsAt }), 400, "INVALID_REQUEST");
    expect(equal.details?.fields?.map((f) => f.path)).toEqual(["endsAt"]);
    const late = refusal(await put(sku, { startsAt: inSeconds(9_000), name: "Late" }), 400, "INVALID_REQUEST");
    expect(late.details?.fields?.map((f) => f.path)).toEqual(["startsAt"]);
    expect(late.message).toContain(`endsAt ${new Date(endsAt).toISOString()}`);
    // Both in the body: refused as before.
    const both = refusal(await put(sku, { startsAt: endsAt, endsAt: startsAt }), 400, "INVALID_REQUEST");
    expect(both.details?.fields?.map((f) => f.path)).toEqual(["endsAt"]);
    expect(await view(sku)).toMatchObject({
      name: sku,
      startsAt: new Date(startsAt).toISOString(),
      endsAt: new Date(endsAt).toISOString(),
    });

    // Moving both at once, or clearing the end, is fine.
    const moved = await put(sku, { startsAt: inSeconds(9_000), endsAt: inSeconds(10_000) });
    expect(moved.status).toBe(200);
    expect((await put(sku, { endsAt: null })).status).toBe(200);
    expect((await put(sku, { startsAt: inSeconds(20_000) })).status).toBe(200);
  });

  it("a tier opening at or after the public start: 400 naming the field the PUT sent, nothing changed", async () => {
    const sku = uniqueSku("tier-order");
    const start = Date.now() + 3_600_000;
    const tierAt = start - 600_000;
    await createSku(sku, {
      totalStock: 5,
      startsAt: new Date(start).toISOString(),
      access: [{ name: "members", startsAt: new Date(tierAt).toISOString() }],
    });
    const before = refusal(await put(sku, { startsAt: new Date(tierAt).toISOString() }), 400, "INVALID_REQUEST");
    expect(before.details?.fields?.map((f) => f.path)).toEqual(["startsAt"]);
    expect(before.message).toContain("members");
    const cleared = refusal(await put(sku, { startsAt: null }), 400, "INVALID_REQUEST");
    expect(cleared.details?.fields?.map((f) => f.path)).toEqual(["startsAt"]);
    const tier = refusal(
      await put(sku, { access: [{ name: "members", startsAt: new Date(start).toISOString() }] }),
      400,
      "INVALID_REQUEST",
    );
    expect(tier.details?.fields?.map((f) => f.path)).toEqual(["access.0.startsAt"]);
    expect(await view(sku)).toMatchObject({
      startsAt: new Date(start).toISOString(),
      access: [{ name: "members", startsAt: new Date(tierAt).toISOString() }],
    });
  });
});

describe("issue #50: moving a tier while its opening window is open or its draw undecided names the state", () => {
  const MINUTE = 60_000;
  const iso = (ms: number) => new Date(ms).toISOString();
  const setClock = (sku: string, at: number) =>
    runInDurableObject(stockShard(env, sku, 0), (object) => {
      object.now = () => at;
    });

  it("window_open, then draw_pending, each saying what to wait for; once the draw is decided the tier moves", async () => {
    const sku = uniqueSku("tier-move");
    const now = Date.now();
    const tierAt = now + 10 * MINUTE;
    const closesAt = tierAt + 2_000;
    await createSku(sku, {
      totalStock: 5,
      startsAt: iso(now + 60 * MINUTE),
      openingWindowMs: 2_000,
      access: [{ name: "members", startsAt: iso(tierAt) }],
    });
    const moved = { access: [{ name: "members", startsAt: iso(tierAt + 5 * MINUTE) }] };

    // The stock object's clock in the tier's window, the edge's a few minutes before it: only the
    // object refuses, and the refusal is explained with what it holds.
    await setClock(sku, tierAt + 500);
    const raced = refusal(await call("PUT", `/admin/skus/${sku}`, { admin: true, body: moved }), 409, "INVALID_STATE");
    expect(raced.details?.state).toBe("window_open");
    expect(raced.message).toContain("members");
    expect(raced.message).toContain(iso(closesAt));
    expect(raced.message).not.toContain("changed while this PUT was decided");

    // Both clocks in the window: refused up front, before any shard is asked to change.
    const open = await configureSku(env, sku, moved, tierAt + 500).catch((e: unknown) => e);
    expect(open).toBeInstanceOf(ApiError);
    expect((open as ApiError).code).toBe("INVALID_STATE");
    expect((open as ApiError).details?.state).toBe("window_open");
    expect((open as ApiError).message).toContain(`wait until it closes at ${iso(closesAt)}`);

    // The window closed, its draw not decided yet.
    await setClock(sku, closesAt + 100);
    const pending = await configureSku(env, sku, moved, closesAt + 100).catch((e: unknown) => e);
    expect(pending).toBeInstanceOf(ApiError);
    expect((pending as ApiError).code).toBe("INVALID_STATE");
    expect((pending as ApiError).details?.state).toBe("draw_pending");
    expect((pending as ApiError).message).toContain("wait for its draw");

    // The draw decided: the tier moves (its decided draw stays, as history).
    expect(await runDurableObjectAlarm(stockShard(env, sku, 0))).toBe(true);
    const after = await configureSku(env, sku, moved, closesAt + 200);
    expect(after.access?.map((t) => t.startsAt)).toEqual([tierAt + 5 * MINUTE]);
    // The window itself stays as it opened.
    const wider = await configureSku(env, sku, { openingWindowMs: 3_000 }, closesAt + 300).catch((e: unknown) => e);
    expect([(wider as ApiError).code, (wider as ApiError).details?.state]).toEqual(["INVALID_STATE", "window_open"]);
    await setClock(sku, Date.now());
  });
});

describe("issue #50: errors that say what to send", () => {
  it("a missing or wrong admin token names ADMIN_TOKEN, .dev.vars and the header, and never the token", async () => {
    for (const headers of [{}, { authorization: "Bearer not-the-token" }, { authorization: "test-admin-token" }]) {
      const error = refusal(await call("GET", "/admin/skus", { headers }), 401, "UNAUTHENTICATED");
      expect(error.message).toContain("ADMIN_TOKEN");
      expect(error.message).toContain(".dev.vars");
      expect(error.message).toContain("Authorization: Bearer <token>");
      expect(error.message).not.toContain("test-admin-token");
    }
  });

  it("a price that is not an integer says prices are minor units, with the figure to send", async () => {
    const error = refusal(
      await call("PUT", `/admin/skus/${uniqueSku("cents")}`, { admin: true, body: { totalStock: 5, price: 25.5 } }),
      400,
      "INVALID_REQUEST",
    );
    expect(error.details?.fields?.map((f) => f.path)).toEqual(["price"]);
    expect(error.message).toContain("minor units");
    expect(error.message).toContain("2550 for 25.50");
    // Out of range is said as such (not as a fraction).
    const negative = refusal(
      await call("PUT", `/admin/skus/${uniqueSku("cents")}`, { admin: true, body: { totalStock: 5, price: -1 } }),
      400,
      "INVALID_REQUEST",
    );
    expect(negative.message).toContain(">=0");
    expect(negative.message).not.toContain("minor units");
  });

  it("a time that is not ISO-8601 UTC shows one that is", async () => {
    const error = refusal(
      await call("PUT", `/admin/skus/${uniqueSku("when")}`, {
        admin: true,
        body: { totalStock: 5, startsAt: "24/12/2026 18:00" },
      }),
      400,
      "INVALID_REQUEST",
    );
    expect(error.details?.fields?.map((f) => f.path)).toEqual(["startsAt"]);
    expect(error.message).toContain("2026-12-24T18:00:00Z");
  });

  it("a payment of the wrong amount answers refund_required with the amount and currency expected", async () => {
    const sku = uniqueSku("wrongpay");
    await createSku(sku, { totalStock: 5, perUserLimit: 2, price: 1500, currency: "eur" });
    const held = await reserve("wanda", sku, 2);
    const answer = await pay(held.json.reservationId, "payment.succeeded", undefined, { amount: 1500 });
    expect(answer.status).toBe(200);
    expect(answer.json).toMatchObject({ outcome: "refund_required", expected: { amount: 3000, currency: "eur" } });
    const right = await pay(held.json.reservationId, "payment.succeeded", undefined, { amount: 3000 });
    expect(right.json).toMatchObject({ outcome: "applied", reservationStatus: "paid" });
    expect(right.json.expected).toBeUndefined();
  });
});

describe("issue #50: webhook URLs on private, loopback and link-local addresses", () => {
  it("refuses them 400 naming url (decimal, hex and IPv4-mapped forms too), stores nothing, and keeps http://127.0.0.1 where allowed", async () => {
    const id = `private-${crypto.randomUUID().slice(0, 8)}`;
    for (const url of [
      "https://10.0.0.1/hook",
      "https://169.254.169.254/latest/meta-data",
      "https://167772161/hook",
      "https://0x0a.0.0.1/hook",
      "https://[::ffff:10.0.0.1]/hook",
      "https://[::ffff:a00:1]/hook",
      "https://[fd00::1]/hook",
      "https://[fe80::1]/hook",
      "https://127.0.0.1/hook",
    ]) {
      const error = refusal(
        await call("PUT", `/admin/webhooks/${id}`, { admin: true, body: { url } }),
        400,
        "INVALID_REQUEST",
      );
      expect(
        error.details?.fields?.map((f) => f.path),
        url,
      ).toEqual(["url"]);
    }
    expect((await call("GET", `/admin/webhooks/${id}`, { admin: true })).status).toBe(404);
    const local = await call("PUT", `/admin/webhooks/${id}`, { admin: true, body: { url: "http://127.0.0.1:9/hook" } });
    expect(local.status).toBe(200);
    const off = { WEBHOOK_ALLOW_HTTP_LOCALHOST: "false" } as unknown as Partial<Env>;
    const refused = refusal(
      await call("PUT", `/admin/webhooks/${id}`, { admin: true, body: { url: "http://127.0.0.1:9/hook" }, env: off }),
      400,
      "INVALID_REQUEST",
    );
    expect(refused.details?.fields?.map((f) => f.path)).toEqual(["url"]);
    expect(
      (await call("PUT", `/admin/webhooks/${id}`, { admin: true, body: { url: "https://1.1.1.1/hook" } })).status,
    ).toBe(200);
    expect((await call("DELETE", `/admin/webhooks/${id}`, { admin: true })).status).toBe(200);
  });
});
