import { runInDurableObject } from "cloudflare:test";
import { env } from "cloudflare:workers";
import { describe, expect, it } from "vitest";
import { StockEngine } from "../../durable-objects/engine/stock-engine";
import type { EngineStorage } from "../../durable-objects/engine/types";
import { stockShard, uniqueSku } from "../support/client";

/**
 * What a place in the line costs (API.md v1.3 "The line, visible", as built): a read grows with the
 * entries ahead of the buyer, never with those behind, and the SKU's `waiting` costs no COUNT.
 */

const T0 = 1_900_000_000_000;

/** The object's storage, counting the rows every statement read. */
function counting(storage: DurableObjectStorage): { storage: EngineStorage; rowsRead: () => number } {
  const cursors: SqlStorageCursor<Record<string, SqlStorageValue>>[] = [];
  const sql = new Proxy(storage.sql, {
    get(target, prop) {
      if (prop !== "exec") return Reflect.get(target, prop);
      return (query: string, ...bindings: unknown[]) => {
        const cursor = target.exec(query, ...bindings);
        cursors.push(cursor);
        return cursor;
      };
    },
  });
  return {
    storage: { sql, transactionSync: (fn) => storage.transactionSync(fn) },
    rowsRead: () => cursors.reduce((sum, cursor) => sum + cursor.rowsRead, 0),
  };
}

describe("a place in a long line", () => {
  it("reads the entries ahead once, and the SKU's waiting count reads nothing", async () => {
    await runInDurableObject(stockShard(env, uniqueSku("wlcost"), 0), async (_object, state) => {
      await state.storage.deleteAll();
      const { storage, rowsRead } = counting(state.storage);
      let ids = 0;
      const engine = new StockEngine(storage, () => `00000000-0000-4000-8000-${String(++ids).padStart(12, "0")}`);
      engine.configuration.configure(
        { sku: "wlcost", shard: 0, shards: 1, totalStock: 0, perUserLimit: 3, holdSeconds: 60 },
        T0,
      );
      const n = 3_000;
      for (let i = 0; i < n; i++) expect(engine.waitlist.join(`w-${i}`, 1 + (i % 3), T0).ok).toBe(true);

      const ahead = Array.from({ length: n - 1 }, (_, i) => 1 + (i % 3)).reduce((a, b) => a + b, 0);
      const cost = (read: () => unknown) => {
        const before = rowsRead();
        read();
        return rowsRead() - before;
      };
      expect(engine.waitlist.place("w-0", T0)).toMatchObject({ position: 1, unitsAhead: 0 });
      expect(engine.waitlist.place(`w-${n - 1}`, T0)).toMatchObject({ position: n, unitsAhead: ahead });
      const first = cost(() => engine.waitlist.place("w-0", T0));
      const middle = cost(() => engine.waitlist.place(`w-${n / 2}`, T0));
      const last = cost(() => engine.waitlist.place(`w-${n - 1}`, T0));
      console.log(`place in a line of ${n}: ${first} rows read first, ${middle} in the middle, ${last} last`);
      expect(first).toBeLessThanOrEqual(5);
      expect(middle).toBeLessThanOrEqual(n / 2 + 5);
      expect(last).toBeLessThanOrEqual(n + 5);

      // The count is kept in step: the state (every display, every mirror publish) reads no waitlist row.
      expect(engine.configuration.state()?.waiting).toBe(n);
      expect(cost(() => engine.configuration.state())).toBe(0);
      expect(engine.waitlist.leaveLine("w-7", T0)).toMatchObject({ position: 8 });
      expect(cost(() => expect(engine.configuration.state()?.waiting).toBe(n - 1))).toBe(0);
      // Memory is read again whenever the ledger's is (after a rollback, or a change behind the engine).
      storage.sql.exec("DELETE FROM waitlist WHERE user_id = 'w-8'");
      engine.forget();
      expect(engine.configuration.state()?.waiting).toBe(n - 2);
      expect(engine.waitlist.place("w-9", T0)).toMatchObject({ position: 8 });
    });
  });

  it("the caller's own holds (left out of the line's held): one row for a buyer who holds nothing, at most the shard's live holds otherwise", async () => {
    await runInDurableObject(stockShard(env, uniqueSku("heldby"), 0), async (_object, state) => {
      await state.storage.deleteAll();
      const { storage, rowsRead } = counting(state.storage);
      let ids = 0;
      const engine = new StockEngine(storage, () => `00000000-0000-4000-8000-${String(++ids).padStart(12, "0")}`);
      engine.configuration.configure(
        { sku: "heldby", shard: 0, shards: 1, totalStock: 2_000, perUserLimit: 3, holdSeconds: 60 },
        T0,
      );
      const n = 1_000;
      for (let i = 0; i < n; i++) {
        expect(engine.holds.reserve([{ userId: `h-${i}`, nonce: `n-${i}`, quantity: 1 }], T0)[0]?.ok).toBe(true);
      }
      expect(engine.holds.reserve([{ userId: "me", nonce: "me-1", quantity: 2 }], T0)[0]?.ok).toBe(true);
      const cost = (read: () => number) => {
        const before = rowsRead();
        const value = read();
        return { value, rows: rowsRead() - before };
      };
      expect(cost(() => engine.holds.heldBy("nobody", T0 + 1))).toEqual({ value: 0, rows: 0 });
      const mine = cost(() => engine.holds.heldBy("me", T0 + 1));
      console.log(`own holds among ${n} live holds: ${mine.rows} rows read`);
      expect(mine.value).toBe(2);
      expect(mine.rows).toBeLessThanOrEqual(n + 5);
      // Expired (by the clock, before the alarm releases them), they are no longer held.
      expect(engine.holds.heldBy("me", T0 + 61_000)).toBe(0);
    });
  });
});
