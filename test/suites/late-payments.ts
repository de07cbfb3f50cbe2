import { abortAllDurableObjects, runDurableObjectAlarm, runInDurableObject } from "cloudflare:test";
import { env } from "cloudflare:workers";
import { describe, expect, it } from "vitest";
import { homeShard } from "../../durable-objects/shared/shard-name";
import { type Answer, call, createSku, reserve, stockOf, stockShard, uniqueSku } from "../support/client";
import { eventually } from "../support/eventually";
import { pay } from "../support/payments";
import { differencesOf, ordersOf, reconcileNow } from "../support/reconcile";
import { checkoutSession, sendStripe, stripeEvent } from "../support/stripe";

/**
 * A late payment (its hold expired or was cancelled) is decided as a new reservation of the buyer
 * would be at that moment (API.md "Payments owed back"): on the buyer's home shard under the SKU's
 * current shard count, with units from any shard, the limit counted over everything the buyer holds
 * or bought. Issue 41, cases 1 and 2, by each way a payment arrives.
 */

/** A user whose home shard is `shard` under each count of `homes` (`[count, shard]` pairs). */
function userWithHomes(prefix: string, ...homes: [count: number, shard: number][]): string {
  for (let i = 0; ; i++) {
    const user = `${prefix}-${i}`;
    if (homes.every(([count, shard]) => homeShard(user, count) === shard)) return user;
  }
}

type LatePay = (reservationId: string, amount: number) => Promise<Answer>;

/** The three ways a late payment arrives: the provider-neutral webhook and Stripe's two. */
const arrivals: [string, LatePay][] = [
  ["/webhooks/payments", (id, amount) => pay(id, "payment.succeeded", undefined, { amount })],
  [
    "Stripe checkout.session.completed",
    (id, amount) => sendStripe(stripeEvent("checkout.session.completed", checkoutSession(id, amount))),
  ],
  [
    "Stripe checkout.session.async_payment_succeeded",
    async (id, amount) => {
      const intent = `pi_test_${crypto.randomUUID().replaceAll("-", "")}`;
      // A delayed payment method: the session completes unpaid, the money arrives later.
      const unpaid = checkoutSession(id, amount, { paymentStatus: "unpaid", paymentIntent: intent });
      expect((await sendStripe(stripeEvent("checkout.session.completed", unpaid))).json).toEqual({
        received: true,
        ignored: true,
      });
      const paid = checkoutSession(id, amount, { paymentIntent: intent });
      return sendStripe(stripeEvent("checkout.session.async_payment_succeeded", paid));
    },
  ],
];

const cancel = (id: string, user: string) => call("POST", `/api/reservations/${id}/cancel`, { user });

describe.each(arrivals)("a late payment by %s", (_name, latePay) => {
  it("after a resize counts the buyer's limit over the SKU: a second unit past the limit is refund_required", async () => {
    const sku = uniqueSku("late-resize");
    await createSku(sku, { totalStock: 6, perUserLimit: 1, shards: 2, price: 500 });
    const u = userWithHomes("late-u", [2, 1], [3, 0]);
    const first = await reserve(u, sku);
    expect(first.json.reservationId).toMatch(new RegExp(`^${sku}\\.1\\.`));
    expect((await cancel(first.json.reservationId, u)).json.status).toBe("cancelled");
    const resized = await call("PUT", `/admin/skus/${sku}`, { admin: true, body: { totalStock: 6, shards: 3 } });
    expect([resized.status, resized.json.shards]).toEqual([200, 3]);

    const second = await reserve(u, sku);
    expect([second.status, second.json.reservationId]).toEqual([202, expect.stringMatching(`^${sku}\\.0\\.`)]);
    expect((await pay(second.json.reservationId, "payment.succeeded", undefined, { amount: 500 })).json).toEqual({
      received: true,
      reservationStatus: "paid",
      outcome: "applied",
    });
    const late = await latePay(first.json.reservationId, 500);
    expect([late.status, late.json]).toEqual([
      200,
      { received: true, reservationStatus: "refund_required", outcome: "refund_required" },
    ]);
    expect(await stockOf(sku)).toEqual({ total: 6, available: 5, held: 0, sold: 1 });
    const mine = await call("GET", `/api/reservations/${first.json.reservationId}`, { user: u });
    expect(mine.json.status).toBe("refund_required");
    // Owed back for the limit, as GET /admin/payments lists it.
    const owed = await call("GET", "/admin/payments?outcome=refund_required&limit=1000", { admin: true });
    const listed = (owed.json.payments as { reservationId: string; reason: string }[]).filter(
      (p) => p.reservationId === first.json.reservationId,
    );
    expect(listed.map((p) => p.reason)).toEqual(["limit_exceeded"]);
  });

  it("on a sharded SKU takes a unit from another shard, as a reservation would", async () => {
    const sku = uniqueSku("late-pull");
    await createSku(sku, { totalStock: 2, perUserLimit: 1, shards: 2, price: 500 });
    const a = userWithHomes("late-a", [2, 1]);
    const b = userWithHomes(`late-b-${a}`, [2, 1]);
    const held = await reserve(a, sku);
    await cancel(held.json.reservationId, a);
    expect((await reserve(b, sku)).status).toBe(202); // the last unit of shard 1
    expect(await stockOf(sku)).toEqual({ total: 2, available: 1, held: 1, sold: 0 });

    const late = await latePay(held.json.reservationId, 500);
    expect([late.status, late.json]).toEqual([200, { received: true, reservationStatus: "paid", outcome: "applied" }]);
    expect(await stockOf(sku)).toEqual({ total: 2, available: 0, held: 1, sold: 1 });
    await eventually(async () =>
      expect((await ordersOf(sku)).find((o) => o.reservation_id === held.json.reservationId)?.status).toBe("paid"),
    );
  });
});

describe("a late payment on one shard", () => {
  it("is decided as before: applied while the SKU has a unit (the same sequence as on two shards)", async () => {
    const sku = uniqueSku("late-one");
    await createSku(sku, { totalStock: 2, perUserLimit: 1, price: 500 });
    const held = await reserve("one-a", sku);
    await cancel(held.json.reservationId, "one-a");
    expect((await reserve("one-b", sku)).status).toBe(202);
    const late = await pay(held.json.reservationId, "payment.succeeded", undefined, { amount: 500 });
    expect(late.json).toEqual({ received: true, reservationStatus: "paid", outcome: "applied" });
    expect(await stockOf(sku)).toEqual({ total: 2, available: 0, held: 1, sold: 1 });
  });
});

describe("a late payment whose buyer's home is another shard", () => {
  /**
   * A SKU resized from `from` to `to` shards after its buyer cancelled a reservation on the last
   * shard of `from`; the buyer's home under `to` is shard 0.
   */
  async function resizedAfterCancel(prefix: string, from: number, to: number) {
    const sku = uniqueSku(prefix);
    await createSku(sku, { totalStock: 4, perUserLimit: 2, shards: from, price: 500 });
    const user = userWithHomes(`${prefix}-u`, [from, from - 1], [to, 0]);
    const held = await reserve(user, sku);
    await cancel(held.json.reservationId, user);
    const resized = await call("PUT", `/admin/skus/${sku}`, { admin: true, body: { totalStock: 4, shards: to } });
    expect(resized.status).toBe(200);
    return { sku, user, id: held.json.reservationId as string, shard: stockShard(env, sku, from - 1) };
  }

  it("sells the unit on the home shard, counted in the buyer's limit there, once per event, and reconciles clean", async () => {
    const { sku, user, id } = await resizedAfterCancel("late-home", 2, 3);
    const late = await pay(id, "payment.succeeded", "evt_late_home", { amount: 500 });
    expect(late.json).toEqual({ received: true, reservationStatus: "paid", outcome: "applied" });
    expect(await stockOf(sku)).toEqual({ total: 4, available: 3, held: 0, sold: 1 });
    const quota = await runInDurableObject(stockShard(env, sku, 0), (object) => object.quotaOf(user));
    expect(quota).toBe(1);
    // One more unit is within the limit of 2; a third is not.
    expect((await reserve(user, sku)).status).toBe(202);
    expect((await reserve(user, sku)).json.error?.code).toBe("LIMIT_EXCEEDED");
    // The same event again: its first answer, nothing more sold.
    expect((await pay(id, "payment.succeeded", "evt_late_home", { amount: 500 })).json).toEqual(late.json);
    expect(await stockOf(sku)).toEqual({ total: 4, available: 2, held: 1, sold: 1 });
    await eventually(async () =>
      expect((await ordersOf(sku)).find((o) => o.reservation_id === id)?.status).toBe("paid"),
    );
    expect(differencesOf(await reconcileNow({ sku }), sku)).toEqual([]);
  });

  it("after the SKU shrank below the reservation's shard: the unit is sold where the SKU's stock is counted", async () => {
    const { sku, id } = await resizedAfterCancel("late-shrunk", 3, 2);
    const late = await pay(id, "payment.succeeded", undefined, { amount: 500 });
    expect(late.json).toEqual({ received: true, reservationStatus: "paid", outcome: "applied" });
    expect(await stockOf(sku)).toEqual({ total: 4, available: 3, held: 0, sold: 1 });
    const beyond = await runInDurableObject(
      stockShard(env, sku, 2),
      (object) => object.engine.configuration.state()?.stock,
    );
    expect(beyond).toEqual({ total: 0, available: 0, held: 0, sold: 0 });
  });

  it("two payments of one reservation at once: one applied, the other refund_required, one unit sold", async () => {
    const { sku, id } = await resizedAfterCancel("late-twice", 2, 3);
    const answers = await Promise.all([
      pay(id, "payment.succeeded", undefined, { amount: 500 }),
      pay(id, "payment.succeeded", undefined, { amount: 500 }),
    ]);
    expect(answers.map((a) => [a.status, a.json.reservationStatus, a.json.outcome]).sort()).toEqual([
      [200, "paid", "applied"],
      [200, "paid", "refund_required"],
    ]);
    expect(await stockOf(sku)).toEqual({ total: 4, available: 3, held: 0, sold: 1 });
  });

  it("a crash after the home shard granted the unit: the alarm finishes the payment once, and a retry gets its answer", async () => {
    const { sku, id, user, shard } = await resizedAfterCancel("late-crash", 2, 3);
    const command = {
      eventId: `evt_${crypto.randomUUID()}`,
      type: "payment.succeeded" as const,
      reservationId: id,
      money: { amount: 500 },
    };
    // The reservation's shard records the claim, the home shard grants, and the first dies before it
    // records the answer (what PaymentClaims.apply does, stopped between two steps).
    const step = await runInDurableObject(shard, (object) =>
      object.engine.payments.step(command, Date.now(), undefined, false),
    );
    expect(step).toMatchObject({ ok: true, value: { kind: "claim", began: true } });
    const claim = step.ok && step.value.kind === "claim" ? step.value.claim : undefined;
    if (!claim) throw new Error("no claim");
    expect(await stockShard(env, sku, 0).grantUnit(claim)).toEqual({ kind: "granted" });
    await abortAllDurableObjects();
    const restarted = stockShard(env, sku, 1);
    expect(await stockOf(sku)).toEqual({ total: 4, available: 3, held: 0, sold: 1 });
    // Sold once, on the home shard. The object arms its alarm when it starts again (the stock view
    // above started it); the alarm asks the home shard again and finishes the claim.
    await eventually(async () => {
      await runDurableObjectAlarm(restarted);
      expect(await restarted.reservation(id)).toMatchObject({ status: "paid" });
    });
    // Asked again, the home shard answers the same grant and sells nothing more.
    expect(await stockShard(env, sku, 0).grantUnit(claim)).toEqual({ kind: "granted" });
    const retry = await pay(id, "payment.succeeded", command.eventId, { amount: 500 });
    expect(retry.json).toEqual({ received: true, reservationStatus: "paid", outcome: "applied" });
    expect((await call("GET", `/api/reservations/${id}`, { user })).json.status).toBe("paid");
    expect(await stockOf(sku)).toEqual({ total: 4, available: 3, held: 0, sold: 1 });
    expect(await runInDurableObject(restarted, (object) => object.engine.payments.pendingClaims())).toEqual([]);
  });

  it("two asks of one claim at once, a unit freed between them: the claim's one answer, no unit sold for a refund", async () => {
    const sku = uniqueSku("late-asks");
    await createSku(sku, { totalStock: 1, perUserLimit: 1, shards: 2, price: 500 });
    const user = userWithHomes("late-asks-u", [2, 1], [3, 0]);
    const held = await reserve(user, sku);
    const id = held.json.reservationId as string;
    expect(id).toMatch(new RegExp(`^${sku}\\.1\\.`));
    await cancel(id, user);
    expect((await call("PUT", `/admin/skus/${sku}`, { admin: true, body: { shards: 3 } })).status).toBe(200);
    const other = await reserve("late-asks-v", sku); // the SKU's last unit
    expect(other.status).toBe(202);
    const shard = stockShard(env, sku, 1);
    const command = { eventId: `evt_${crypto.randomUUID()}`, type: "payment.succeeded" as const, reservationId: id };
    const step = await runInDurableObject(shard, (object) =>
      object.engine.payments.step({ ...command, money: { amount: 500 } }, Date.now(), undefined, false),
    );
    const claim = step.ok && step.value.kind === "claim" ? step.value.claim : undefined;
    if (!claim) throw new Error("no claim");
    // Two deliveries (or a delivery and the alarm) ask the home shard for the claim's unit: the first
    // finds none; the other buyer's hold is let go; the second asks. The refusal comes back first.
    const first = await stockShard(env, sku, 0).grantUnit(claim);
    expect(first).toEqual({ kind: "refused", code: "SOLD_OUT" });
    expect((await cancel(other.json.reservationId, "late-asks-v")).status).toBe(200);
    const second = await stockShard(env, sku, 0).grantUnit(claim);
    if (first.kind !== "refused") throw new Error("not refused");
    await runInDurableObject(shard, (object) => object.engine.payments.finishClaim(id, first, Date.now()));
    if (second.kind === "granted" || second.kind === "refused") {
      await runInDurableObject(shard, (object) => object.engine.payments.finishClaim(id, second, Date.now()));
    }
    // The payment is refunded, so the unit freed is not sold: it is there for the next buyer.
    expect((await call("GET", `/api/reservations/${id}`, { user })).json.status).toBe("refund_required");
    expect(await stockOf(sku)).toEqual({ total: 1, available: 1, held: 0, sold: 0 });
  });

  it("a resize waits while a claim is in flight (503 BUSY), and is refused once the unit is sold", async () => {
    const { sku, id, shard } = await resizedAfterCancel("late-fence", 2, 3);
    const command = {
      eventId: "evt_fence",
      type: "payment.succeeded" as const,
      reservationId: id,
      money: { amount: 500 },
    };
    await runInDurableObject(shard, (object) => object.engine.payments.step(command, Date.now(), undefined, false));
    const refused = await call("PUT", `/admin/skus/${sku}`, { admin: true, body: { totalStock: 4, shards: 4 } });
    expect([refused.status, refused.json.error?.code]).toEqual([503, "BUSY"]);
    const paid = await pay(id, "payment.succeeded", "evt_fence", { amount: 500 });
    expect(paid.json).toEqual({ received: true, reservationStatus: "paid", outcome: "applied" });
    const after = await call("PUT", `/admin/skus/${sku}`, { admin: true, body: { totalStock: 4, shards: 4 } });
    expect([after.status, after.json.error?.code]).toEqual([409, "INVALID_STATE"]);
  });
});
