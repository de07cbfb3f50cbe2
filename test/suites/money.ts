import { runInDurableObject } from "cloudflare:test";
import { env } from "cloudflare:workers";
import { describe, expect, it } from "vitest";
import { StockEngine } from "../../durable-objects/engine/stock-engine";
import { homeShard } from "../../durable-objects/shared/shard-name";
import { forgetSoldOut } from "../../src/edge/sold-out-cache";
import { Scrape } from "../../tools/prometheus";
import { call, createSku, reserve, stockOf, stockShard, uniqueSku } from "../support/client";
import { eventually } from "../support/eventually";
import { pay } from "../support/payments";

/** API.md "Money is checked": prices on SKUs, payments checked against them, refunds counted. */

async function scrape(): Promise<Scrape> {
  const answer = await call("GET", "/metrics", { admin: true });
  return new Scrape((answer.json as { text: string }).text);
}
const paymentsCounted = async (outcome: string) => (await scrape()).value("flashgate_payments_total", { outcome }) ?? 0;

describe("prices and checked payments", () => {
  it("SKUs carry a price and a currency in the admin and public views; left out, they keep their value", async () => {
    const sku = uniqueSku("price");
    const created = await createSku(sku, { totalStock: 3, price: 1500, currency: "eur" });
    expect([created.json.price, created.json.currency, created.json.payments]).toEqual([
      1500,
      "eur",
      { refund_required: 0 },
    ]);
    const shown = await call("GET", `/api/skus/${sku}`);
    expect([shown.json.price, shown.json.currency]).toEqual([1500, "eur"]);
    const kept = await createSku(sku, { totalStock: 4 });
    expect([kept.json.price, kept.json.currency]).toEqual([1500, "eur"]);
    const cleared = await createSku(sku, { totalStock: 4, price: null });
    expect([cleared.json.price, cleared.json.currency]).toEqual([null, "eur"]);

    const plain = uniqueSku("noprice");
    const fresh = await createSku(plain, { totalStock: 1 });
    expect([fresh.json.price, fresh.json.currency]).toEqual([null, "usd"]);
    for (const bad of [{ price: -1 }, { price: 1.5 }, { currency: "USD" }, { currency: "dollars" }]) {
      const answer = await call("PUT", `/admin/skus/${sku}`, { admin: true, body: { totalStock: 4, ...bad } });
      expect([answer.status, answer.json.error?.code], JSON.stringify(bad)).toEqual([400, "INVALID_REQUEST"]);
    }
    expect((await call("GET", `/admin/skus/${sku}`, { admin: true })).json.price).toBeNull();
  });

  it("a wrong amount or currency changes no stock and answers refund_required; the right one pays once", async () => {
    const sku = uniqueSku("money");
    await createSku(sku, { totalStock: 5, perUserLimit: 2, price: 1500 });
    const held = await reserve("amy", sku, 2);
    const id = held.json.reservationId as string;
    const refundsBefore = await paymentsCounted("refund_required");
    const appliedBefore = await paymentsCounted("applied");

    const refused = [
      await pay(id, "payment.succeeded", "evt_zero", { amount: 0 }),
      await pay(id, "payment.succeeded", "evt_one_unit", { amount: 1500 }),
      await pay(id, "payment.succeeded", "evt_eur", { amount: 3000, currency: "eur" }),
    ];
    for (const answer of refused) {
      // What was due is said beside (issue #50): 2 units at 1500 usd.
      expect([answer.status, answer.json]).toEqual([
        200,
        {
          received: true,
          reservationStatus: "held",
          outcome: "refund_required",
          expected: { amount: 3000, currency: "usd" },
        },
      ]);
    }
    expect(await stockOf(sku)).toEqual({ total: 5, available: 3, held: 2, sold: 0 });

    const paid = await pay(id, "payment.succeeded", "evt_right", { amount: 3000, currency: "USD" });
    expect(paid.json).toEqual({ received: true, reservationStatus: "paid", outcome: "applied" });
    // A second, distinct payment for the paid reservation buys nothing.
    const twice = await pay(id, "payment.succeeded", "evt_again", { amount: 3000 });
    expect(twice.json).toEqual({ received: true, reservationStatus: "paid", outcome: "refund_required" });
    expect(await stockOf(sku)).toEqual({ total: 5, available: 3, held: 0, sold: 2 });
    // A replay gets its first answer again and is not counted again.
    expect((await pay(id, "payment.succeeded", "evt_zero", { amount: 0 })).json.outcome).toBe("refund_required");

    const view = await call("GET", `/admin/skus/${sku}`, { admin: true });
    expect(view.json.payments).toEqual({ refund_required: 4 });
    expect((await paymentsCounted("refund_required")) - refundsBefore).toBe(4);
    expect((await paymentsCounted("applied")) - appliedBefore).toBe(1);
  });

  it("a payment too late to take the stock again answers refund_required and is counted", async () => {
    const sku = uniqueSku("toolate");
    await createSku(sku, { totalStock: 1, price: 700, holdSeconds: 60 });
    const first = await reserve("bea", sku, 1);
    const expiresAt = Date.parse(first.json.expiresAt);
    await runInDurableObject(stockShard(env, sku, 0), (object) => {
      object.now = () => expiresAt + 1;
      object.engine.holds.expireDue(expiresAt + 1);
    });
    forgetSoldOut(sku); // this isolate learnt "sold out" from the first hold
    await reserve("cal", sku, 1); // takes the unit the expired hold gave back
    const late = await pay(first.json.reservationId, "payment.succeeded", "evt_late", { amount: 700 });
    expect(late.json).toEqual({ received: true, reservationStatus: "refund_required", outcome: "refund_required" });
    expect(await stockOf(sku)).toEqual({ total: 1, available: 0, held: 1, sold: 0 });
    expect((await call("GET", `/admin/skus/${sku}`, { admin: true })).json.payments).toEqual({ refund_required: 1 });
  });

  it("a SKU without a price takes any amount, as before prices existed", async () => {
    const sku = uniqueSku("free");
    await createSku(sku, { totalStock: 2 });
    const held = await reserve("dee", sku, 1);
    const paid = await pay(held.json.reservationId, "payment.succeeded", "evt_any", { amount: 0, currency: "jpy" });
    expect(paid.json).toEqual({ received: true, reservationStatus: "paid", outcome: "applied" });
  });
});

describe("payments counted once, whichever delivery finished them", () => {
  it("a late payment whose first delivery stopped short (503 BUSY) is counted when the provider's retry finishes it", async () => {
    const sku = uniqueSku("countretry");
    await createSku(sku, { totalStock: 4, perUserLimit: 2, shards: 2, price: 500 });
    // A buyer on shard 1 at 2 shards and on shard 0 at 3: after the resize, the late payment asks shard 0.
    let user = "";
    for (let i = 0; !user; i++) {
      const u = `cr-${i}`;
      if (homeShard(u, 2) === 1 && homeShard(u, 3) === 0) user = u;
    }
    const id = (await reserve(user, sku)).json.reservationId as string;
    expect((await call("POST", `/api/reservations/${id}/cancel`, { user })).status).toBe(200);
    expect((await call("PUT", `/admin/skus/${sku}`, { admin: true, body: { totalStock: 4, shards: 3 } })).status).toBe(
      200,
    );
    const before = await paymentsCounted("applied");
    // The first delivery: the reservation's shard records its claim, and the webhook would answer 503
    // BUSY before the home shard answered (what the route does when that shard cannot answer).
    const eventId = `evt_${crypto.randomUUID()}`;
    const command = { eventId, type: "payment.succeeded" as const, reservationId: id, money: { amount: 500 } };
    const first = await runInDurableObject(stockShard(env, sku, 1), (o) =>
      o.engine.payments.step(command, Date.now(), undefined, false),
    );
    expect(first).toMatchObject({ ok: true, value: { kind: "claim", began: true } });
    const retry = await pay(id, "payment.succeeded", eventId, { amount: 500 });
    expect(retry.json).toEqual({ received: true, reservationStatus: "paid", outcome: "applied" });
    expect(await pay(id, "payment.succeeded", eventId, { amount: 500 })).toMatchObject({ status: 200 }); // a replay
    expect((await paymentsCounted("applied")) - before).toBe(1);
  });
});

describe("payment ids recorded before prices existed", () => {
  it("are carried over, so a replay of an old event still gets its answer and changes nothing", async () => {
    const sku = uniqueSku("legacy");
    await createSku(sku, { totalStock: 3 });
    const held = await reserve("old", sku, 1);
    const id = held.json.reservationId as string;
    expect((await pay(id, "payment.succeeded", "evt_legacy")).json.outcome).toBe("applied");
    // As an object written by the previous version would hold it: the id in `payments` only.
    await runInDurableObject(stockShard(env, sku, 0), (_object, state) => {
      state.storage.sql.exec("DELETE FROM payment_events");
      state.storage.sql.exec("DROP TABLE schema_version"); // objects from before numbered steps have none
      state.storage.sql.exec(
        "INSERT INTO payments (event_id, reservation_id, outcome) VALUES ('evt_legacy', ?, 'paid')",
        id,
      );
      const restarted = new StockEngine(state.storage, () => crypto.randomUUID());
      const replay = restarted.payments.apply(
        { eventId: "evt_legacy", type: "payment.succeeded", reservationId: id },
        Date.now(),
      );
      expect(replay).toMatchObject({ ok: true, value: { status: "paid", outcome: "applied", replayed: true } });
      expect(state.storage.sql.exec("SELECT COUNT(*) AS n FROM payments").one().n).toBe(0);
    });
    expect((await call("GET", `/admin/skus/${sku}`, { admin: true })).json.payments).toEqual({ refund_required: 0 });
  });
});

describe("revenue in the admin SKU view", () => {
  const revenueOf = async (sku: string) => (await call("GET", `/admin/skus/${sku}`, { admin: true })).json.revenue;

  it("sums D1's paid orders: units, and amounts in the SKU's currency (an earlier currency apart)", async () => {
    const sku = uniqueSku("revenue");
    await createSku(sku, { totalStock: 10, perUserLimit: 2, price: 1500 });
    expect(await revenueOf(sku)).toEqual({ paidUnits: 0, amount: null, currency: "usd", otherCurrencies: [] });
    const two = (await reserve("rev1", sku, 2)).json.reservationId;
    const one = (await reserve("rev2", sku, 1)).json.reservationId;
    const cancelled = (await reserve("rev3", sku, 1)).json.reservationId;
    expect((await pay(two, "payment.succeeded", undefined, { amount: 3000 })).json.outcome).toBe("applied");
    expect((await pay(one, "payment.succeeded", undefined, { amount: 1500 })).json.outcome).toBe("applied");
    expect((await call("POST", `/api/reservations/${cancelled}/cancel`, { user: "rev3" })).status).toBe(200);
    await eventually(async () =>
      expect(await revenueOf(sku)).toEqual({ paidUnits: 3, amount: 4500, currency: "usd", otherCurrencies: [] }),
    );

    // The shop switches to euros mid-sale: what was paid in dollars stays apart.
    await createSku(sku, { totalStock: 10, perUserLimit: 2, price: 1000, currency: "eur" });
    const euro = (await reserve("rev4", sku, 1)).json.reservationId;
    expect((await pay(euro, "payment.succeeded", undefined, { amount: 1000, currency: "eur" })).json.outcome).toBe(
      "applied",
    );
    const expected = {
      paidUnits: 4,
      amount: 1000,
      currency: "eur",
      otherCurrencies: [{ currency: "usd", paidUnits: 3, amount: 4500 }],
    };
    await eventually(async () => expect(await revenueOf(sku)).toEqual(expected));
    const listed = (await call("GET", "/admin/skus", { admin: true })).json.skus.find(
      (s: { sku: string }) => s.sku === sku,
    );
    expect(listed.revenue).toEqual(expected);

    // One read of the covering index, whatever the number of orders.
    const plan = await env.DB.prepare(
      "EXPLAIN QUERY PLAN SELECT currency, SUM(quantity), SUM(amount) FROM orders WHERE sku = ?1 AND status = 'paid' GROUP BY currency",
    )
      .bind(sku)
      .all<{ detail: string }>();
    expect(plan.results.map((r) => r.detail).join("; ")).toMatch(/USING COVERING INDEX orders_paid_by_sku/);
  });

  it("a SKU without a price counts paid units and no amount", async () => {
    const sku = uniqueSku("revfree");
    await createSku(sku, { totalStock: 3 });
    const held = (await reserve("rev5", sku, 1)).json.reservationId;
    expect((await pay(held, "payment.succeeded", undefined, { amount: 0 })).status).toBe(200);
    await eventually(async () =>
      expect(await revenueOf(sku)).toEqual({ paidUnits: 1, amount: null, currency: "usd", otherCurrencies: [] }),
    );
  });
});
