import { env } from "cloudflare:workers";
import { afterEach, describe, expect, it } from "vitest";
import { call, createSku, reserve, uniqueSku } from "../support/client";
import { eventually } from "../support/eventually";
import { conforms, endpoint, forgetEndpoints, logOf } from "../support/handoff";
import { pay } from "../support/payments";

/**
 * API.md v1.4 "Test sales": a SKU created with `"test": true` marks everything it sells, so the shop's
 * systems can skip it: the order events (the queue consumer's D1 row says what its events said), the
 * order objects of the change feed and the webhooks, and the payments list. A real sale's say
 * `test: false` (order and payment objects) or nothing (queue events). The flag is set when the SKU is
 * created and never changes.
 */

afterEach(forgetEndpoints);

interface FeedOrder {
  reservationId: string;
  sku: string;
  status: string;
  test: boolean;
}

/** The feed's end now: a cursor after every change so far. */
async function feedEnd(): Promise<string> {
  let next: string | undefined;
  for (;;) {
    const answer = await call("GET", `/admin/orders?limit=1000${next ? `&after=${next}` : ""}`, { admin: true });
    expect(answer.status).toBe(200);
    next = answer.json.next as string;
    if (answer.json.orders.length === 0) return next;
  }
}

/** The feed's entries of `sku` after `cursor`. */
async function feedOf(sku: string, cursor: string): Promise<FeedOrder[]> {
  const entries: FeedOrder[] = [];
  let next = cursor;
  for (;;) {
    const answer = await call("GET", `/admin/orders?limit=1000&after=${next}`, { admin: true });
    expect(answer.status).toBe(200);
    conforms("OrderFeed", answer.json);
    entries.push(...(answer.json.orders as FeedOrder[]).filter((o) => o.sku === sku));
    next = answer.json.next as string;
    if (answer.json.orders.length === 0) return entries;
  }
}

/** Sells one unit of `sku` to `user` and pays for it; the reservation id. */
async function holdAndPay(user: string, sku: string): Promise<string> {
  const held = await reserve(user, sku, 1);
  expect(held.status, JSON.stringify(held.json)).toBe(202);
  const id = held.json.reservationId as string;
  const paid = await pay(id, "payment.succeeded", undefined, { amount: 500 });
  expect(paid.status, JSON.stringify(paid.json)).toBe(200);
  return id;
}

async function paymentsOf(sku: string): Promise<{ reservationId: string; test: boolean }[]> {
  const answer = await call("GET", "/admin/payments?limit=1000", { admin: true });
  expect(answer.status).toBe(200);
  conforms("PaymentList", answer.json);
  return (answer.json.payments as { sku: string; reservationId: string; test: boolean }[]).filter((p) => p.sku === sku);
}

describe("test sales", () => {
  it("a test SKU's held and paid order says test: true in the feed, the webhooks, D1 and the payments list", async () => {
    const hook = await endpoint();
    const cursor = await feedEnd();
    const sku = uniqueSku("trial");
    const created = await createSku(sku, { totalStock: 10, price: 500, test: true });
    expect(created.json).toMatchObject({ sku, test: true, status: "on_sale" });
    conforms("AdminSku", created.json);
    const shown = await call("GET", `/api/skus/${sku}`);
    expect(shown.json).toMatchObject({ sku, test: true });
    conforms("PublicSku", shown.json);

    const id = await holdAndPay("tess", sku);

    const feed = await eventually(async () => {
      const feed = await feedOf(sku, cursor);
      expect(feed.map((o) => o.status)).toEqual(["held", "paid"]);
      return feed;
    });
    expect(feed.map((o) => [o.reservationId, o.test])).toEqual([
      [id, true],
      [id, true],
    ]);
    const log = await eventually(async () => {
      const log = await logOf(hook.id);
      expect(log.received.filter((r) => r.body?.data.reservationId === id)).toHaveLength(2);
      return log;
    });
    expect(log.unverified).toBe(0);
    for (const request of log.received.filter((r) => r.body?.data.reservationId === id)) {
      conforms("WebhookEvent", request.body);
      expect(request.body?.data).toMatchObject({ reservationId: id, sku, test: true });
    }
    expect(await env.DB.prepare("SELECT test FROM orders WHERE reservation_id = ?").bind(id).first("test")).toBe(1);
    expect(await paymentsOf(sku)).toEqual([expect.objectContaining({ reservationId: id, test: true })]);
    const lookup = await call("GET", `/admin/orders/${id}`, { admin: true });
    expect(lookup.json).toMatchObject({ reservationId: id, status: "paid", test: true });
    conforms("OrderObject", lookup.json);
  });

  it("a real SKU's orders and payments say test: false", async () => {
    const hook = await endpoint();
    const cursor = await feedEnd();
    const sku = uniqueSku("real");
    const created = await createSku(sku, { totalStock: 10, price: 500 });
    expect(created.json.test).toBe(false);
    const id = await holdAndPay("rita", sku);
    const feed = await eventually(async () => {
      const feed = await feedOf(sku, cursor);
      expect(feed).toHaveLength(2);
      return feed;
    });
    expect(feed.map((o) => o.test)).toEqual([false, false]);
    const log = await eventually(async () => {
      const log = await logOf(hook.id);
      expect(log.received.filter((r) => r.body?.data.reservationId === id)).toHaveLength(2);
      return log;
    });
    for (const request of log.received.filter((r) => r.body?.data.reservationId === id)) {
      expect(request.body?.data).toMatchObject({ reservationId: id, test: false });
    }
    expect(await paymentsOf(sku)).toEqual([expect.objectContaining({ reservationId: id, test: false })]);
  });

  it("the flag is set when the SKU is created: the same value again is 200, another is 409 naming test, unchanged", async () => {
    const sku = uniqueSku("fixed");
    await createSku(sku, { totalStock: 5, test: true });
    const again = await call("PUT", `/admin/skus/${sku}`, { admin: true, body: { totalStock: 6, test: true } });
    expect(again.status).toBe(200);
    expect(again.json).toMatchObject({ test: true, stock: { total: 6 } });
    const flip = await call("PUT", `/admin/skus/${sku}`, { admin: true, body: { totalStock: 7, test: false } });
    expect(flip.status).toBe(409);
    expect(flip.json.error.code).toBe("INVALID_STATE");
    expect(flip.json.error.message).toContain("test");
    expect(flip.json.error.details.fields).toEqual([{ path: "test", message: expect.any(String) }]);
    conforms("ErrorBody", flip.json);
    const after = await call("GET", `/admin/skus/${sku}`, { admin: true });
    expect(after.json).toMatchObject({ test: true, stock: { total: 6 } });

    const real = uniqueSku("fixed");
    await createSku(real, { totalStock: 5 });
    const toTest = await call("PUT", `/admin/skus/${real}`, { admin: true, body: { test: true } });
    expect(toTest.status).toBe(409);
    expect((await call("GET", `/admin/skus/${real}`, { admin: true })).json.test).toBe(false);
  });

  it("a sharded test SKU marks every shard, also those a later resize adds; created paused, it stays paused", async () => {
    const sku = uniqueSku("trials");
    const created = await createSku(sku, { totalStock: 40, price: 500, shards: 2, test: true, status: "paused" });
    expect(created.json).toMatchObject({ test: true, status: "paused", shards: 2 });
    const resized = await call("PUT", `/admin/skus/${sku}`, { admin: true, body: { shards: 4, status: "on_sale" } });
    expect(resized.status, JSON.stringify(resized.json)).toBe(200);
    expect(resized.json).toMatchObject({ test: true, shards: 4 });
    const ids: string[] = [];
    for (let i = 0; i < 12; i++) {
      const held = await reserve(`shard-user-${i}`, sku, 1);
      expect(held.status).toBe(202);
      ids.push(held.json.reservationId as string);
    }
    const rows = await eventually(async () => {
      const { results } = await env.DB.prepare("SELECT reservation_id, test FROM orders WHERE sku = ?")
        .bind(sku)
        .all<{ reservation_id: string; test: number }>();
      expect(results).toHaveLength(ids.length);
      return results;
    });
    expect(rows.every((r) => r.test === 1)).toBe(true);
  });
});
