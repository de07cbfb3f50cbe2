import { runInDurableObject } from "cloudflare:test";
import { env } from "cloudflare:workers";
import { afterEach, describe, expect, it } from "vitest";
import { forgetSoldOut } from "../../src/edge/sold-out-cache";
import { cursorOf } from "../../src/handoff/change-feed";
import { ADMIN_TOKEN, call, createSku, reserve, stockShard, uniqueSku } from "../support/client";
import { eventually } from "../support/eventually";
import { conforms, deliveries, endpoint, forgetEndpoints, logOf } from "../support/handoff";
import { pay } from "../support/payments";
import { checkoutSession, sendStripe, stripeEvent } from "../support/stripe";

/**
 * API.md v1.3 "Payments owed back": `GET /admin/payments` lists every payment that took effect or was
 * flagged, with why; a flagged one is pushed as `payment.refund_required`, signed (the test receiver
 * verifies it with `standardwebhooks`), once per event.
 */

afterEach(forgetEndpoints);

interface Listed {
  eventId: string;
  source: string;
  reservationId: string;
  sku: string;
  userId: string;
  amount: number | null;
  currency: string | null;
  outcome: string;
  reason: string | null;
  receivedAt: string;
}

/** Every page of the list (with `query`), following `next` until a page comes back short. */
async function everyPayment(query = "", limit = 3): Promise<Listed[]> {
  const all: Listed[] = [];
  let after = "";
  for (;;) {
    const answer = await call("GET", `/admin/payments?limit=${limit}${query}${after}`, { admin: true });
    expect(answer.status, JSON.stringify(answer.json)).toBe(200);
    conforms("PaymentList", answer.json);
    all.push(...answer.json.payments);
    if (answer.json.payments.length < limit) return all;
    after = `&after=${encodeURIComponent(answer.json.next)}`;
  }
}

const ofSku = (list: Listed[], sku: string) => list.filter((p) => p.sku === sku);

/** Lets the stock object's clock run past a hold's expiry and releases it there. */
async function expire(sku: string, expiresAt: string) {
  const at = Date.parse(expiresAt) + 1;
  await runInDurableObject(stockShard(env, sku, 0), (object) => {
    object.now = () => at;
    object.engine.holds.expireDue(at);
  });
}

describe("GET /admin/payments", () => {
  it("lists each payment once, in the order received, with its source, money, outcome and reason", async () => {
    const sku = uniqueSku("owed");
    await createSku(sku, { totalStock: 4, perUserLimit: 1, price: 1500, holdSeconds: 60 });
    const amy = (await reserve("amy", sku)).json;
    const ben = (await reserve("ben", sku)).json;
    const cat = (await reserve("cat", sku)).json;

    const answers = [
      await pay(amy.reservationId, "payment.succeeded", "evt_list_amount", { amount: 1499 }),
      await pay(amy.reservationId, "payment.succeeded", "evt_list_currency", { amount: 1500, currency: "eur" }),
      await pay(amy.reservationId, "payment.succeeded", "evt_list_paid", { amount: 1500 }),
      await pay(amy.reservationId, "payment.succeeded", "evt_list_twice", { amount: 1500, currency: "usd" }),
      // A replay: the same answer, not listed again.
      await pay(amy.reservationId, "payment.succeeded", "evt_list_amount", { amount: 1499 }),
      // A failure moves no money: not listed.
      await pay(cat.reservationId, "payment.failed", "evt_list_failed", { amount: 1500 }),
    ];
    expect(answers.map((a) => a.status)).toEqual(Array(6).fill(200));

    // Ben's hold expires; he holds again (his limit is 1) and then the first hold's payment comes.
    await expire(sku, ben.expiresAt);
    expect((await reserve("ben", sku)).status).toBe(202);
    const overLimit = await pay(ben.reservationId, "payment.succeeded", "evt_list_limit", { amount: 1500 });
    expect(overLimit.json).toMatchObject({ outcome: "refund_required", reservationStatus: "refund_required" });

    // Paid by Stripe, through Checkout.
    const dee = (await reserve("dee", sku)).json;
    const stripe = await sendStripe(
      stripeEvent(
        "checkout.session.completed",
        checkoutSession(dee.reservationId, 1500, { paymentIntent: "pi_list1" }),
      ),
    );
    expect(stripe.json).toMatchObject({ outcome: "applied" });

    const listed = ofSku(await everyPayment(), sku);
    expect(listed.map((p) => [p.eventId, p.source, p.userId, p.amount, p.currency, p.outcome, p.reason])).toEqual([
      ["evt_list_amount", "payments", "amy", 1499, "usd", "refund_required", "amount_mismatch"],
      ["evt_list_currency", "payments", "amy", 1500, "eur", "refund_required", "currency_mismatch"],
      ["evt_list_paid", "payments", "amy", 1500, "usd", "applied", null],
      ["evt_list_twice", "payments", "amy", 1500, "usd", "refund_required", "already_paid"],
      ["evt_list_limit", "payments", "ben", 1500, "usd", "refund_required", "limit_exceeded"],
      ["stripe:paid:pi_list1", "stripe", "dee", 1500, "usd", "applied", null],
    ]);
    expect(listed[0]).toMatchObject({ reservationId: amy.reservationId, sku });
    expect(Date.parse(listed[0]?.receivedAt ?? "")).toBeGreaterThan(Date.now() - 60_000);

    // `outcome` narrows the list, paged the same way.
    const owed = ofSku(await everyPayment("&outcome=refund_required", 2), sku);
    expect(owed.map((p) => p.eventId)).toEqual([
      "evt_list_amount",
      "evt_list_currency",
      "evt_list_twice",
      "evt_list_limit",
    ]);
    const applied = ofSku(await everyPayment("&outcome=applied", 1), sku);
    expect(applied.map((p) => p.reason)).toEqual([null, null]);
  });

  it("a payment too late for the stock is too_late", async () => {
    const sku = uniqueSku("late");
    await createSku(sku, { totalStock: 1, price: 700, holdSeconds: 60 });
    const first = (await reserve("eve", sku)).json;
    await expire(sku, first.expiresAt);
    forgetSoldOut(sku);
    expect((await reserve("fay", sku)).status).toBe(202);
    const late = await pay(first.reservationId, "payment.succeeded", "evt_too_late", { amount: 700 });
    expect(late.json.outcome).toBe("refund_required");
    const [listed] = ofSku(await everyPayment("&outcome=refund_required", 1000), sku);
    expect(listed).toMatchObject({ eventId: "evt_too_late", reason: "too_late", amount: 700 });
  });

  it("next is always given; a cursor it did not make, the order feed's included, is 400; limit and outcome are checked", async () => {
    const end = await call("GET", "/admin/payments?limit=1000", { admin: true });
    expect(end.status).toBe(200);
    const empty = await call("GET", `/admin/payments?after=${encodeURIComponent(end.json.next)}`, { admin: true });
    expect([empty.status, empty.json.payments, empty.json.next]).toEqual([200, [], end.json.next]);
    const feedCursor = await cursorOf(ADMIN_TOKEN, 1);
    for (const after of ["nonsense", feedCursor, `${end.json.next}x`]) {
      const answer = await call("GET", `/admin/payments?after=${encodeURIComponent(after)}`, { admin: true });
      expect([answer.status, answer.json.error?.code], after).toEqual([400, "INVALID_REQUEST"]);
    }
    for (const query of ["limit=0", "limit=1001", "limit=1e2", "limit=+5", "outcome=refunded", "outcome="]) {
      const answer = await call("GET", `/admin/payments?${query}`, { admin: true });
      expect([answer.status, answer.json.error?.code], query).toEqual([400, "INVALID_REQUEST"]);
    }
    expect((await call("GET", "/admin/payments")).status).toBe(401);
  });

  it("a payment applied while D1 could not record it is recorded when the provider sends it again", async () => {
    const sku = uniqueSku("lost");
    await createSku(sku, { totalStock: 2, price: 900 });
    const held = (await reserve("gus", sku)).json;
    // D1 refuses the record (a real failed write, in D1 itself); the stock object has applied it by then.
    await env.DB.prepare(
      "CREATE TRIGGER test_payments_down BEFORE INSERT ON payments BEGIN SELECT RAISE(ABORT, 'D1 is down'); END",
    ).run();
    let failed: Awaited<ReturnType<typeof pay>>;
    try {
      failed = await pay(held.reservationId, "payment.succeeded", "evt_lost_record", { amount: 901 });
    } finally {
      await env.DB.prepare("DROP TRIGGER test_payments_down").run();
    }
    expect(failed.status).toBe(500);
    expect(ofSku(await everyPayment("", 1000), sku)).toEqual([]);
    // The provider retries: the object replays its first answer, and the record is written now.
    const retried = await pay(held.reservationId, "payment.succeeded", "evt_lost_record", { amount: 901 });
    expect(retried.json).toEqual({
      received: true,
      reservationStatus: "held",
      outcome: "refund_required",
      expected: { amount: 900, currency: "usd" },
    });
    const again = await pay(held.reservationId, "payment.succeeded", "evt_lost_record", { amount: 901 });
    expect(again.status).toBe(200);
    expect(ofSku(await everyPayment("", 1000), sku).map((p) => [p.eventId, p.reason])).toEqual([
      ["evt_lost_record", "amount_mismatch"],
    ]);
  });
});

describe("a payment event sent again after its stock object forgot it", () => {
  it("is answered as it first was, from its record: applied stays applied, a refusal keeps what was due", async () => {
    const sku = uniqueSku("resent");
    await createSku(sku, { totalStock: 2, perUserLimit: 1, price: 1200 });
    const ivy = (await reserve("ivy", sku)).json;
    const jon = (await reserve("jon", sku)).json;
    const paid = await pay(ivy.reservationId, "payment.succeeded", `evt_resent_paid_${sku}`, { amount: 1200 });
    const short = await pay(jon.reservationId, "payment.succeeded", `evt_resent_short_${sku}`, { amount: 1100 });
    const first = [paid.json, short.json];
    expect(first).toEqual([
      { received: true, reservationStatus: "paid", outcome: "applied" },
      {
        received: true,
        reservationStatus: "held",
        outcome: "refund_required",
        expected: { amount: 1200, currency: "usd" },
      },
    ]);
    // 7 days on, the stock object and D1's claims have let the events go (engine/retention.ts,
    // src/db/retention.ts); a provider (Stripe's dashboard, say) sends them again.
    await runInDurableObject(stockShard(env, sku, 0), (_object, state) => {
      state.storage.sql.exec("DELETE FROM payment_events");
    });
    await env.DB.prepare("DELETE FROM payment_event_ids WHERE event_id LIKE ?1").bind(`evt_resent_%_${sku}`).run();
    const again = [
      (await pay(ivy.reservationId, "payment.succeeded", `evt_resent_paid_${sku}`, { amount: 1200 })).json,
      (await pay(jon.reservationId, "payment.succeeded", `evt_resent_short_${sku}`, { amount: 1100 })).json,
    ];
    expect(again).toEqual(first);
    // The same id saying something else is still one event saying two things.
    const other = await pay(ivy.reservationId, "payment.succeeded", `evt_resent_paid_${sku}`, { amount: 1300 });
    expect([other.status, other.json.error?.code]).toEqual([422, "IDEMPOTENCY_MISMATCH"]);
    expect(ofSku(await everyPayment("", 1000), sku).map((p) => [p.outcome, p.reason])).toEqual([
      ["applied", null],
      ["refund_required", "amount_mismatch"],
    ]);
  });
});

describe("a payment event sent again twice after its stock object forgot it", () => {
  it("is answered from its record both times, a row without its status (the release before 0017's) included", async () => {
    const sku = uniqueSku("resent-twice");
    await createSku(sku, { totalStock: 2, perUserLimit: 1, price: 1200 });
    const ned = (await reserve("ned", sku)).json;
    const eventId = `evt_resent_twice_${sku}`;
    const first = await pay(ned.reservationId, "payment.succeeded", eventId, { amount: 1200 });
    expect(first.json).toEqual({ received: true, reservationStatus: "paid", outcome: "applied" });
    await env.DB.prepare("UPDATE payments SET reservation_status = NULL WHERE event_id = ?1").bind(eventId).run();
    // 7 days on: the object and D1's claim forgot it; the first resend claims the id again.
    await runInDurableObject(stockShard(env, sku, 0), (_object, state) => {
      state.storage.sql.exec("DELETE FROM payment_events");
    });
    await env.DB.prepare("DELETE FROM payment_event_ids WHERE event_id = ?1").bind(eventId).run();
    const again = await pay(ned.reservationId, "payment.succeeded", eventId, { amount: 1200 });
    const thrice = await pay(ned.reservationId, "payment.succeeded", eventId, { amount: 1200 });
    expect([again.json, thrice.json]).toEqual([first.json, first.json]);
  });
});

describe("a payment event sent again while its claim is kept (second reading of 3fe1ff1)", () => {
  it("a row from before reservation_status (or from the release before, during a deploy) is answered by the object, not by the reservation's status now", async () => {
    const sku = uniqueSku("resent-old");
    await createSku(sku, { totalStock: 2, perUserLimit: 1, price: 1200 });
    const kai = (await reserve("kai", sku)).json;
    const eventId = `evt_resent_old_${sku}`;
    const first = await pay(kai.reservationId, "payment.succeeded", eventId, { amount: 1100 });
    expect(first.json).toEqual({
      received: true,
      reservationStatus: "held",
      outcome: "refund_required",
      expected: { amount: 1200, currency: "usd" },
    });
    // Written by the release before 0017 (it does not know the column), then the hold is let go.
    await env.DB.prepare("UPDATE payments SET reservation_status = NULL WHERE event_id = ?1").bind(eventId).run();
    const cancel = await call("POST", `/api/reservations/${kai.reservationId}/cancel`, { user: "kai" });
    expect(cancel.status, JSON.stringify(cancel.json)).toBe(200);
    // Within the 7 days: the same answer as the first (API.md), which the stock object still keeps.
    const again = await pay(kai.reservationId, "payment.succeeded", eventId, { amount: 1100 });
    expect([again.status, again.json]).toEqual([200, first.json]);
  });

  it("after the 7 days, the id sent with another amount is refused and leaves no claim: its own resend still gets its first answer", async () => {
    const sku = uniqueSku("resent-poison");
    await createSku(sku, { totalStock: 2, perUserLimit: 1, price: 1200 });
    const mia = (await reserve("mia", sku)).json;
    const eventId = `evt_resent_poison_${sku}`;
    const first = await pay(mia.reservationId, "payment.succeeded", eventId, { amount: 1200 });
    expect(first.json).toEqual({ received: true, reservationStatus: "paid", outcome: "applied" });
    await runInDurableObject(stockShard(env, sku, 0), (_object, state) => {
      state.storage.sql.exec("DELETE FROM payment_events");
    });
    await env.DB.prepare("DELETE FROM payment_event_ids WHERE event_id = ?1").bind(eventId).run();
    const other = await pay(mia.reservationId, "payment.succeeded", eventId, { amount: 1300 });
    expect([other.status, other.json.error?.code]).toEqual([422, "IDEMPOTENCY_MISMATCH"]);
    const again = await pay(mia.reservationId, "payment.succeeded", eventId, { amount: 1200 });
    expect([again.status, again.json]).toEqual([200, first.json]);
  });

  it("the same id with another currency is still refused while its claim is kept, recorded or not", async () => {
    const sku = uniqueSku("resent-cur");
    await createSku(sku, { totalStock: 2, perUserLimit: 1, price: 1200 });
    const lou = (await reserve("lou", sku)).json;
    const eventId = `evt_resent_cur_${sku}`;
    const first = await pay(lou.reservationId, "payment.succeeded", eventId, { amount: 1200, currency: "usd" });
    expect(first.json).toEqual({ received: true, reservationStatus: "paid", outcome: "applied" });
    // The event said "usd": the same id saying nothing of its currency is another event (as the object says).
    const other = await pay(lou.reservationId, "payment.succeeded", eventId, { amount: 1200 });
    expect([other.status, other.json.error?.code]).toEqual([422, "IDEMPOTENCY_MISMATCH"]);
  });
});

describe("webhook payment.refund_required", () => {
  it("is pushed, signed, once per flagged payment, to the endpoints that take it", async () => {
    const refunds = await endpoint({}, { events: ["payment.refund_required"] });
    const everything = await endpoint();
    const ordersOnly = await endpoint({}, { events: ["order.paid"] });
    const sku = uniqueSku("pushed");
    await createSku(sku, { totalStock: 3, price: 2500, currency: "eur" });
    const held = (await reserve("hal", sku)).json;
    const wrong = await pay(held.reservationId, "payment.succeeded", "evt_push_wrong", { amount: 100 });
    expect(wrong.json.outcome).toBe("refund_required");
    expect((await pay(held.reservationId, "payment.succeeded", "evt_push_wrong", { amount: 100 })).status).toBe(200);
    expect((await pay(held.reservationId, "payment.succeeded", "evt_push_right", { amount: 2500 })).status).toBe(200);

    const log = await eventually(async () => {
      const log = await logOf(refunds.id);
      expect(log.count).toBe(1);
      return log;
    });
    expect(log.unverified).toBe(0);
    const [received] = log.received;
    conforms("WebhookEvent", received?.body);
    const [listed] = ofSku(await everyPayment("&outcome=refund_required", 1000), sku);
    expect(received?.body).toEqual({ type: "payment.refund_required", timestamp: listed?.receivedAt, data: listed });
    expect(listed).toMatchObject({
      eventId: "evt_push_wrong",
      reservationId: held.reservationId,
      amount: 100,
      currency: "eur",
      reason: "amount_mismatch",
    });
    expect(received?.webhookId).toMatch(new RegExp(`^msg_pay_\\d+_${refunds.id}$`));
    const rows = await deliveries(refunds.id);
    expect(rows).toHaveLength(1);
    expect(rows[0]).toMatchObject({ id: received?.webhookId, type: "payment.refund_required", status: "delivered" });

    // The endpoint of every type gets it too, beside the order's changes; the orders-only one never does.
    await eventually(async () => {
      const types = (await logOf(everything.id)).received.map((r) => r.body?.type);
      expect(types.filter((t) => t === "payment.refund_required")).toHaveLength(1);
      expect(types).toContain("order.paid");
    });
    // (This SKU's: an earlier test's order changes may reach the queue's consumer after these endpoints are made.)
    const ours = async (id: string) =>
      (await logOf(id)).received.filter((r) => r.body?.data?.reservationId?.startsWith(`${sku}.`));
    await eventually(async () => expect(await ours(ordersOnly.id)).toHaveLength(1));
    expect((await ours(ordersOnly.id)).map((r) => r.body?.type)).toEqual(["order.paid"]);
    expect((await logOf(refunds.id)).count).toBe(1);

    // Retried by hand, it is sent again with the same webhook-id.
    const retry = await call("POST", `/admin/webhooks/${refunds.id}/deliveries/${received?.webhookId}/retry`, {
      admin: true,
    });
    expect(retry.status).toBe(202);
    const again = await eventually(async () => {
      const log = await logOf(refunds.id);
      expect(log.count).toBe(2);
      return log;
    });
    expect(again.received.map((r) => [r.webhookId, r.verified])).toEqual([
      [received?.webhookId, true],
      [received?.webhookId, true],
    ]);
  });
});
