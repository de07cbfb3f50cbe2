import { runDurableObjectAlarm, runInDurableObject } from "cloudflare:test";
import { env } from "cloudflare:workers";
import { afterEach, describe, expect, it, vi } from "vitest";
import { homeShard } from "../../durable-objects/shared/shard-name";
import { mintPurchaseToken, newNonce } from "../../src/edge/purchase-token";
import { call, createSku, stockCallsTo, stockShard, uniqueSku } from "../support/client";
import { countStorage, storageCount } from "../support/counting-storage";
import { eventually } from "../support/eventually";
import { ordersOf } from "../support/reconcile";

/**
 * What a fair opening costs the stock objects, whatever its size: reading a draw and its entries
 * (bounded per request, shard 0 spared by the edge's memory of the draw), and deciding a sharded
 * draw with a request waiting per entrant (transactions in proportion to the entrants).
 */

const TOKEN_SECRET = "test-token-secret";

/** A SKU whose window opens a minute from now (clocks are moved with the objects' `now` seam). */
async function saleWithWindow(sku: string, opts: { total: number; shards?: number; windowMs?: number }) {
  const startsAt = Date.now() + 60_000;
  await createSku(sku, {
    totalStock: opts.total,
    perUserLimit: 1,
    holdSeconds: 600,
    shards: opts.shards ?? 1,
    startsAt: new Date(startsAt).toISOString(),
    openingWindowMs: opts.windowMs ?? 1_000,
  });
  return { opensAt: startsAt, closesAt: startsAt + (opts.windowMs ?? 1_000) };
}

const setClock = (sku: string, shard: number, at: number) =>
  runInDurableObject(stockShard(env, sku, shard), (object) => {
    object.now = () => at;
  });

describe("fair opening: reading a draw", () => {
  afterEach(() => vi.useRealTimers()); // a failure while the clock stands still must not stop it for the next test
  it("pages entries by position (a page deep in 20,000 reads what the first does); GET /draw is remembered", async () => {
    const sku = uniqueSku("drawpage");
    const units = 10;
    const entrants = 20_000;
    const { opensAt, closesAt } = await saleWithWindow(sku, { total: units });
    const stub = stockShard(env, sku, 0);

    // Undecided: a second read within about a second is answered by this isolate. The clock stands
    // still meanwhile: the memory's second (DRAW_TTL_MS) is not configurable, and a loaded machine can
    // take longer than that between two requests.
    vi.useFakeTimers({ toFake: ["Date"], now: Date.now() });
    expect((await call("GET", `/api/skus/${sku}/draw`)).json.decidedAt).toBeNull();
    const undecided = stockCallsTo(sku, 0);
    expect((await call("GET", `/api/skus/${sku}/draw`)).status).toBe(200);
    expect((await call("GET", `/api/skus/${sku}/draw/entries`)).json.entries).toEqual([]);
    expect(stockCallsTo(sku, 0)).toBe(undecided);
    vi.useRealTimers();

    // 20,000 entrants straight into the window's tables (as 20,000 reservations would leave them).
    await runInDurableObject(stub, (_object, state) => {
      state.storage.sql.exec(
        `WITH RECURSIVE n(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM n WHERE i + 1 < ?)
         INSERT INTO draw_entrants (opening, user_id, nonce, quantity, home, entered_at)
         SELECT ?, 'page-' || i, 'page-n-' || i, 1, 0, ? FROM n`,
        entrants,
        opensAt,
        closesAt - 1,
      );
      state.storage.sql.exec(
        "INSERT INTO draw_tokens (nonce, opening, user_id) SELECT nonce, opening, user_id FROM draw_entrants",
      );
    });
    await setClock(sku, 0, closesAt);
    expect(await runDurableObjectAlarm(stub)).toBe(true); // the alarm at the close decides
    const draw = await eventually(async () => {
      const read = await call("GET", `/api/skus/${sku}/draw`);
      expect(read.json.decidedAt).not.toBeNull();
      return read.json;
    });
    expect(draw.entrants).toBe(entrants);

    await eventually(async () => expect(await ordersOf(sku)).toHaveLength(units)); // the outbox is flushed
    await countStorage(stub);
    // Decided: remembered, shard 0 is not asked again, for a read or for any page of entries. The clock
    // stands still from the read that fills the memory to the last page (its second is not configurable,
    // and a loaded machine can take longer than that between two requests).
    vi.useFakeTimers({ toFake: ["Date"], now: Date.now() });
    expect((await call("GET", `/api/skus/${sku}/draw`)).json).toEqual(draw);
    const decided = stockCallsTo(sku, 0);
    expect((await call("GET", `/api/skus/${sku}/draw`)).json).toEqual(draw);
    expect(stockCallsTo(sku, 0)).toBe(decided);
    const page = async (offset: number, limit: number) => {
      const before = (await storageCount(stub)).rowsRead;
      const answer = await call("GET", `/api/skus/${sku}/draw/entries?offset=${offset}&limit=${limit}`);
      expect(answer.status).toBe(200);
      return {
        entries: answer.json.entries as { position: number }[],
        rows: (await storageCount(stub)).rowsRead - before,
      };
    };
    const first = await page(0, 1_000);
    const deep = await page(19_000, 1_000);
    const tail = await page(19_500, 1_000);
    const past = await page(entrants, 1_000);
    console.log(`draw entries, rows read per page of 1,000: ${first.rows} at offset 0, ${deep.rows} at 19,000`);
    expect(first.entries.map((e) => e.position)).toEqual(Array.from({ length: 1_000 }, (_, i) => i + 1));
    expect(deep.entries.map((e) => e.position)).toEqual(Array.from({ length: 1_000 }, (_, i) => 19_001 + i));
    expect(tail.entries).toHaveLength(500);
    expect(past.entries).toEqual([]);
    expect(first.rows).toBeLessThan(1_000 + 20);
    expect(Math.abs(deep.rows - first.rows)).toBeLessThanOrEqual(5);
    expect(stockCallsTo(sku, 0)).toBe(decided + 4); // one call a page, the draw itself from memory
    vi.useRealTimers();
  }, 60_000);
});

describe("fair opening: deciding a sharded draw", () => {
  it("decides 200 entrants on 4 shards, each with a request waiting, in fewer than 6 transactions per entrant", async () => {
    const sku = uniqueSku("drawtx");
    const units = 120;
    const shards = 4;
    const { opensAt, closesAt } = await saleWithWindow(sku, { total: units, shards, windowMs: 2_000 });
    const all = Array.from({ length: shards }, (_, shard) => shard);
    for (const shard of all) await setClock(sku, shard, opensAt + 1);

    // 200 shoppers enter through the Worker; each request then waits on its home shard.
    const users = Array.from({ length: 200 }, (_, i) => `tx-${sku}-${i}`);
    const answers = Promise.all(
      users.map(async (user) => {
        const claims = {
          sku,
          userId: user,
          shard: homeShard(user, shards),
          shards,
          nonce: newNonce(),
          expiresAt: Date.now() + 300_000,
        };
        const token = await mintPurchaseToken(claims, TOKEN_SECRET);
        return call("POST", `/api/skus/${sku}/reservations`, { user, body: { token, quantity: 1 } });
      }),
    );
    const entered = () =>
      Promise.all(
        all.map((shard) =>
          runInDurableObject(stockShard(env, sku, shard), (_object, state) => {
            const row = state.storage.sql.exec<{ n: number }>("SELECT COUNT(*) AS n FROM draw_entrants").one();
            return row.n;
          }),
        ),
      );
    await eventually(async () => expect((await entered()).reduce((a, b) => a + b, 0)).toBe(users.length), 30_000);

    for (const shard of all) await countStorage(stockShard(env, sku, shard));
    const spent = async () =>
      (await Promise.all(all.map((shard) => storageCount(stockShard(env, sku, shard))))).reduce(
        (n, c) => n + c.transactions,
        0,
      );
    const before = await spent();
    for (const shard of all) await setClock(sku, shard, closesAt);
    expect(await runDurableObjectAlarm(stockShard(env, sku, 0))).toBe(true);
    const answered = await answers;
    const transactions = (await spent()) - before;
    console.log(`sharded draw: ${transactions} transactions for ${users.length} entrants`);

    expect(answered.filter((a) => a.status === 202)).toHaveLength(units);
    expect(answered.filter((a) => a.status !== 202).map((a) => a.json.error?.code)).toEqual(
      Array.from({ length: users.length - units }, () => "SOLD_OUT"),
    );
    expect(transactions).toBeLessThan(6 * users.length);
  }, 60_000);
});
