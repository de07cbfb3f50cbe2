import { runInDurableObject } from "cloudflare:test";
import { env } from "cloudflare:workers";
import { afterEach, describe, expect, it } from "vitest";
import { call, createSku, reserve, stockShard, uniqueSku } from "../support/client";
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

/** The `test` flag of each configuration entry in the SKU's sale log, in log order (absent: false). */
async function loggedTestFlags(sku: string): Promise<boolean[]> {
  const log = env.SALE_LOG.getByName(sku);
  await log.recordHead();
  const size = (await log.head()).size;
  const flags: boolean[] = [];
  for (let n = 0; n * 256 < size; n++) {
    const bundle = await log.entryBundle(n, Math.min(256, size - n * 256));
    if (!bundle) throw new Error(`no bundle ${n} in the log of ${sku}`);
    for (let at = 0; at < bundle.length; ) {
      const length = ((bundle[at] ?? 0) << 8) | (bundle[at + 1] ?? 0);
      const entry = JSON.parse(new TextDecoder().decode(bundle.slice(at + 2, at + 2 + length)));
      if (entry.type === "config") flags.push(entry.test === true);
      at += 2 + length;
    }
  }
  return flags;
}

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

  it("two concurrent creates with different test flags: the one that created the SKU sets it, the other is checked against it", async () => {
    const cases: { first: Record<string, unknown>; second: Record<string, unknown> }[] = [
      { first: { totalStock: 5 }, second: { totalStock: 5, test: true } },
      { first: { totalStock: 5, test: true }, second: { totalStock: 5 } },
      { first: { totalStock: 5, test: false }, second: { totalStock: 5, test: true } },
      { first: { totalStock: 5, test: true }, second: { totalStock: 5, test: false } },
      { first: { totalStock: 6, shards: 2 }, second: { totalStock: 6, shards: 2, test: true } },
      { first: { totalStock: 6, shards: 2, test: true }, second: { totalStock: 6, shards: 2, test: false } },
    ];
    for (const round of [1, 2]) {
      for (const { first, second } of cases) {
        const sku = uniqueSku(`race${round}`);
        const bodies = [first, second];
        // Shard 0 takes no call for a moment (as a busy or waking object): both PUTs read the SKU
        // before either is applied, so both are checked as creates (the race, every time).
        const gate = runInDurableObject(stockShard(env, sku, 0), (_object, state) =>
          state.blockConcurrencyWhile(() => new Promise((resolve) => setTimeout(resolve, 200))),
        );
        const answers = await Promise.all(
          bodies.map((body) => call("PUT", `/admin/skus/${sku}`, { admin: true, body })),
        );
        await gate;
        const what = `${sku} ${JSON.stringify(bodies)} -> ${JSON.stringify(answers.map((a) => [a.status, a.json]))}`;
        const test = (await call("GET", `/admin/skus/${sku}`, { admin: true })).json.test as boolean;
        // One of them created the SKU: its flag (false when left out) is the SKU's.
        const created = answers.filter((a, i) => a.status === 200 && (bodies[i]?.test ?? false) === test);
        expect(created.length, what).toBeGreaterThanOrEqual(1);
        for (const [i, answer] of answers.entries()) {
          const asked = bodies[i]?.test;
          if (asked === undefined || asked === test) {
            // Its flag is the SKU's (or it named none): created it, or changed it as an update.
            expect(answer.status, what).toBe(200);
            expect(answer.json.test, what).toBe(test);
          } else {
            // Another flag than the SKU was created with: refused, naming test, whichever came first.
            expect(answer.status, what).toBe(409);
            expect(answer.json.error?.code, what).toBe("INVALID_STATE");
            expect(answer.json.error?.details?.fields, what).toEqual([{ path: "test", message: expect.any(String) }]);
          }
        }
        // The log: one configuration per PUT that answered 200, every one with the SKU's flag (never flipped).
        const oks = answers.filter((a) => a.status === 200).length;
        const flags = await eventually(async () => {
          const flags = await loggedTestFlags(sku);
          expect(flags.length, what).toBeGreaterThanOrEqual(oks);
          return flags;
        }, 20_000);
        expect(flags, what).toEqual(flags.map(() => test));
      }
    }
  });
});
