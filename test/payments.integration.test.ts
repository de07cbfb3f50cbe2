import { runDurableObjectAlarm, runInDurableObject } from "cloudflare:test";
import { env } from "cloudflare:workers";
import { describe, expect, it } from "vitest";
import { forgetSoldOut } from "../src/edge/sold-out-cache";
import { MAX_V1_SIGNATURES, signPayment } from "../src/payments/webhook-signature";
import { call, createSku, reserve, stockOf, stockShard, uniqueSku } from "./support/client";
import { pay, WEBHOOK_SECRET } from "./support/payments";
// The other payment suites share this file's workerd (one start-up, issue #56): prices and checked
// payments, the payments list, Stripe's webhook and Checkout. Their event ids and SKUs are their own.
import "./suites/money";
import "./suites/payments-list";
import "./suites/stripe-webhook";
import "./suites/stripe-pay";
// Last of the suites: its crash test aborts every object of the runtime.
import "./suites/late-payments";

const seqOf = (sku: string) =>
  runInDurableObject(stockShard(env, sku, 0), (object) => object.engine.configuration.state()?.seq ?? 0);

describe("payment webhook", () => {
  it("turns a hold into sold on a valid signature; payment.failed releases a hold", async () => {
    const sku = uniqueSku("pay");
    await createSku(sku, { totalStock: 5, perUserLimit: 2 });
    const a = await reserve("pat", sku, 2);
    const paid = await pay(a.json.reservationId);
    expect([paid.status, paid.json]).toEqual([200, { received: true, reservationStatus: "paid", outcome: "applied" }]);
    const b = await reserve("quin", sku, 1);
    const failed = await pay(b.json.reservationId, "payment.failed");
    expect(failed.json.reservationStatus).toBe("cancelled");
    expect(await stockOf(sku)).toEqual({ total: 5, available: 3, held: 0, sold: 2 });
    const view = await call("GET", `/api/reservations/${a.json.reservationId}`, { user: "pat" });
    expect(view.json.status).toBe("paid");
  });

  it("refuses wrong secret, tampered body, stale and future timestamps with 401 and no change", async () => {
    const sku = uniqueSku("forge");
    await createSku(sku, { totalStock: 5 });
    const held = await reserve("rex", sku, 1);
    const id = held.json.reservationId as string;
    // Timestamps are read at each call: under load the calls take seconds, and a time read once
    // would drift into the 300 s tolerance (now + 301 read early is accepted a few seconds later).
    const now = () => Math.floor(Date.now() / 1000);
    const before = await seqOf(sku);
    const tampered = JSON.stringify({ id: "evt_t", type: "payment.succeeded", reservationId: id, amount: 1 });
    const attempts = [
      await pay(id, "payment.succeeded", "evt_1", { secret: "wrong-secret" }),
      await pay(id, "payment.succeeded", "evt_2", { sendInstead: tampered }),
      await pay(id, "payment.succeeded", "evt_3", { at: now() - 330 }),
      await pay(id, "payment.succeeded", "evt_4", { at: now() + 330 }),
      await call("POST", "/webhooks/payments", { raw: tampered }),
      await call("POST", "/webhooks/payments", { raw: tampered, headers: { "payment-signature": "t=abc,v1=zz" } }),
      await call("POST", "/webhooks/payments", { raw: tampered, headers: { "payment-signature": `t=${now()}` } }),
    ];
    for (const answer of attempts) expect([answer.status, answer.json.error?.code]).toEqual([401, "SIGNATURE_INVALID"]);
    expect(await seqOf(sku)).toBe(before);
    expect(await stockOf(sku)).toEqual({ total: 5, available: 4, held: 1, sold: 0 });
    // Inside the tolerance both ways is accepted: 290 s old pays this hold, 290 s ahead another.
    const early = await pay(id, "payment.succeeded", "evt_5", { at: now() - 290 });
    expect([early.status, early.json.outcome]).toEqual([200, "applied"]);
    const other = (await reserve("rex-2", sku, 1)).json.reservationId as string;
    const ahead = await pay(other, "payment.succeeded", "evt_6", { at: now() + 290 });
    expect([ahead.status, ahead.json.outcome]).toEqual([200, "applied"]);
    expect(await stockOf(sku)).toEqual({ total: 5, available: 3, held: 0, sold: 2 });
  });

  it("applies the same event sent 5 times concurrently once", async () => {
    const sku = uniqueSku("dupe");
    await createSku(sku, { totalStock: 5, perUserLimit: 3 });
    const held = await reserve("sam", sku, 3);
    const before = await seqOf(sku);
    const answers = await Promise.all(
      Array.from({ length: 5 }, () => pay(held.json.reservationId, "payment.succeeded", "evt_same")),
    );
    expect(answers.map((a) => [a.status, a.json.reservationStatus])).toEqual(Array(5).fill([200, "paid"]));
    expect(await seqOf(sku)).toBe(before + 1); // one state change, one outbox event
    expect(await stockOf(sku)).toEqual({ total: 5, available: 2, held: 0, sold: 3 });
    // A different event id for the same reservation changes nothing more either: it is a refund.
    const other = await pay(held.json.reservationId, "payment.succeeded", "evt_other");
    expect([other.json.reservationStatus, other.json.outcome]).toEqual(["paid", "refund_required"]);
    expect(await stockOf(sku)).toEqual({ total: 5, available: 2, held: 0, sold: 3 });
  });

  it("one event id is one event: the same id naming another reservation, type or amount is 422 and changes nothing", async () => {
    // Two SKUs: the reservations live in different stock objects, as they do for any two SKUs or shards.
    const skuA = uniqueSku("evt-one-a");
    const skuB = uniqueSku("evt-one-b");
    await createSku(skuA, { totalStock: 3, perUserLimit: 2 });
    await createSku(skuB, { totalStock: 3, perUserLimit: 2 });
    const a = (await reserve("ona", skuA, 1)).json.reservationId as string;
    const b = (await reserve("onb", skuB, 1)).json.reservationId as string;
    const a2 = (await reserve("ona2", skuA, 1)).json.reservationId as string;
    const eventId = `evt_${crypto.randomUUID()}`;
    const paid = await pay(a, "payment.succeeded", eventId);
    expect([paid.status, paid.json]).toEqual([200, { received: true, reservationStatus: "paid", outcome: "applied" }]);

    const others = [
      await pay(b, "payment.succeeded", eventId), // another reservation, another stock object
      await pay(a2, "payment.succeeded", eventId), // another reservation, the same stock object
      await pay(a, "payment.failed", eventId), // another type
      await pay(a, "payment.succeeded", eventId, { amount: 1 }), // another amount
      await pay(a, "payment.succeeded", eventId, { currency: "eur" }), // another currency
    ];
    for (const answer of others)
      expect([answer.status, answer.json.error?.code]).toEqual([422, "IDEMPOTENCY_MISMATCH"]);
    // The stock object that saw the id refuses it on its own too (what it recorded is what the event said).
    const direct = await stockShard(env, skuA, 0).applyPayment({
      eventId,
      type: "payment.succeeded",
      reservationId: a2,
      money: { amount: 1999 },
    });
    expect(direct).toEqual({ ok: false, code: "IDEMPOTENCY_MISMATCH" });
    expect(await stockOf(skuA)).toEqual({ total: 3, available: 1, held: 1, sold: 1 });
    expect(await stockOf(skuB)).toEqual({ total: 3, available: 2, held: 1, sold: 0 });
    expect((await call("GET", `/api/reservations/${b}`, { user: "onb" })).json.status).toBe("held");
    // The same content again is the first answer again.
    const again = await pay(a, "payment.succeeded", eventId);
    expect([again.status, again.json]).toEqual([200, paid.json]);
    // B is paid by its own event, as if the mismatch had never been sent.
    expect((await pay(b, "payment.succeeded")).json.reservationStatus).toBe("paid");
  });

  it("two deliveries of one event id naming different reservations at once: one applies, the other is 422", async () => {
    const skuA = uniqueSku("evt-race-a");
    const skuB = uniqueSku("evt-race-b");
    await createSku(skuA, { totalStock: 2 });
    await createSku(skuB, { totalStock: 2 });
    const a = (await reserve("rca", skuA, 1)).json.reservationId as string;
    const b = (await reserve("rcb", skuB, 1)).json.reservationId as string;
    const eventId = `evt_${crypto.randomUUID()}`;
    const answers = await Promise.all([pay(a, "payment.succeeded", eventId), pay(b, "payment.succeeded", eventId)]);
    expect(answers.map((x) => x.status).sort()).toEqual([200, 422]);
    const sold = [(await stockOf(skuA)).sold, (await stockOf(skuB)).sold];
    expect(sold.sort()).toEqual([0, 1]);
  });

  it("two deliveries of one event id at once, one naming no reservation: the other applies (found in an audit)", async () => {
    for (let i = 0; i < 3; i++) {
      const sku = uniqueSku("evt-ghost");
      await createSku(sku, { totalStock: 2 });
      const real = (await reserve("rcg", sku, 1)).json.reservationId as string;
      const ghost = `${sku}.0.${"0".repeat(32)}`;
      const eventId = `evt_${crypto.randomUUID()}`;
      const [unknown, known] = await Promise.all([
        pay(ghost, "payment.succeeded", eventId),
        pay(real, "payment.succeeded", eventId),
      ]);
      // The unknown one is 404, or 422 if the known one had the id first: refused either way.
      expect([known.status, known.json.outcome]).toEqual([200, "applied"]);
      expect([404, 422]).toContain(unknown.status);
      expect((await stockOf(sku)).sold).toBe(1);
    }
  });

  it("late payment re-takes stock when it can, else the order becomes refund_required", async () => {
    const sku = uniqueSku("late");
    await createSku(sku, { totalStock: 2, perUserLimit: 2, holdSeconds: 60 });
    const early = await reserve("tia", sku, 1);
    const stub = stockShard(env, sku, 0);
    const expiresAt = Date.parse(early.json.expiresAt);
    await runInDurableObject(stub, (object) => {
      object.now = () => expiresAt + 1;
    });
    // Expired, but stock is left: the payment takes it again.
    const late = await pay(early.json.reservationId);
    expect(late.json.reservationStatus).toBe("paid");
    expect(await stockOf(sku)).toEqual({ total: 2, available: 1, held: 0, sold: 1 });

    // Now one unit left: a second user's hold expires and someone else buys the last unit first.
    await runInDurableObject(stub, (object) => {
      object.now = () => Date.now();
    });
    const second = await reserve("uma", sku, 1);
    const secondExpiry = Date.parse(second.json.expiresAt);
    await runInDurableObject(stub, (object) => {
      object.now = () => secondExpiry + 1;
    });
    expect(await runDurableObjectAlarm(stub)).toBe(true); // the hold expires: the unit is back
    forgetSoldOut(sku); // this isolate saw "available 0" a moment ago; let it ask again
    const taker = await reserve("vic", sku, 1);
    expect(taker.status).toBe(202);
    const refused = await pay(second.json.reservationId);
    expect(refused.json.reservationStatus).toBe("refund_required");
    expect(await stockOf(sku)).toEqual({ total: 2, available: 0, held: 1, sold: 1 });
  });

  it("answers 404 for an unknown reservation and 400 for a bad event body", async () => {
    const unknown = await pay(`nosuch.0.${"a".repeat(32)}`);
    expect([unknown.status, unknown.json.error.code]).toEqual([404, "RESERVATION_NOT_FOUND"]);
    const garbage = await pay("not-an-id");
    expect([garbage.status, garbage.json.error.code]).toEqual([404, "RESERVATION_NOT_FOUND"]);
    // Well signed, but not an event: malformed JSON, a body without the fields, a wrong type or amount.
    const sku = uniqueSku("badbody");
    await createSku(sku, { totalStock: 2 });
    const id = (await reserve("bea", sku, 1)).json.reservationId as string;
    const event = { id: "evt_bad", type: "payment.succeeded", reservationId: id, amount: 1999 };
    const bodies = [
      "{not json",
      JSON.stringify({ id: "evt_bad" }),
      JSON.stringify({ ...event, type: "payment.refunded" }),
      JSON.stringify({ ...event, amount: "1999" }),
      JSON.stringify({ ...event, reservationId: 7 }),
      JSON.stringify([event]),
    ];
    const at = Math.floor(Date.now() / 1000);
    for (const raw of bodies) {
      const headers = { "payment-signature": await signPayment(raw, WEBHOOK_SECRET, at) };
      const answer = await call("POST", "/webhooks/payments", { raw, headers });
      expect([answer.status, answer.json.error?.code], raw).toEqual([400, "INVALID_REQUEST"]);
    }
    expect(await stockOf(sku)).toEqual({ total: 2, available: 1, held: 1, sold: 0 });
  });

  it(`verifies at most ${MAX_V1_SIGNATURES} v1 signatures: a header with more is refused before any is checked`, async () => {
    const sku = uniqueSku("manysig");
    await createSku(sku, { totalStock: 2 });
    const held = await reserve("yul", sku, 1);
    const now = Math.floor(Date.now() / 1000);
    const raw = JSON.stringify({
      id: "evt_many",
      type: "payment.succeeded",
      reservationId: held.json.reservationId,
      amount: 1,
    });
    const valid = (await signPayment(raw, WEBHOOK_SECRET, now)).split(",")[1] as string; // "v1=<hex>"
    const decoy = `v1=${"ab".repeat(32)}`;
    const header = (decoys: number) => [`t=${now}`, ...Array(decoys).fill(decoy), valid].join(",");
    const send = (decoys: number) =>
      call("POST", "/webhooks/payments", { raw, headers: { "payment-signature": header(decoys) } });

    const flood = await send(500);
    expect([flood.status, flood.json.error?.code]).toEqual([401, "SIGNATURE_INVALID"]);
    const oneTooMany = await send(MAX_V1_SIGNATURES);
    expect([oneTooMany.status, oneTooMany.json.error?.code]).toEqual([401, "SIGNATURE_INVALID"]);
    expect(await stockOf(sku)).toEqual({ total: 2, available: 1, held: 1, sold: 0 });
    // A rotation's few signatures, the valid one last, are fine.
    expect((await send(MAX_V1_SIGNATURES - 1)).json.reservationStatus).toBe("paid");
  });
});
