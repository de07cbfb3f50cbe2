import { runInDurableObject } from "cloudflare:test";
import { env } from "cloudflare:workers";
import { describe, expect, it } from "vitest";
import { StockEngine } from "../../durable-objects/engine/stock-engine";
import type { EngineStorage } from "../../durable-objects/engine/types";
import { stockShard, uniqueSku } from "../support/client";

/** Filling the waitlist reads what it serves, not the whole line: N releases with W waiting ≠ N·W rows. */

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

describe("waitlist fill", () => {
  it("reads a bounded number of rows per release, however many wait", async () => {
    await runInDurableObject(stockShard(env, uniqueSku("wlb"), 0), async (_object, state) => {
      await state.storage.deleteAll();
      const { storage, rowsRead } = counting(state.storage);
      let ids = 0;
      const engine = new StockEngine(storage, () => `00000000-0000-4000-8000-${String(++ids).padStart(12, "0")}`);
      engine.configuration.configure(
        { sku: "wlb", shard: 0, shards: 1, totalStock: 40, perUserLimit: 2, holdSeconds: 60 },
        T0,
      );
      const holds = Array.from({ length: 40 }, (_, i) => {
        const [answer] = engine.holds.reserve([{ userId: `holder-${i}`, nonce: `n${i}`, quantity: 1 }], T0);
        if (!answer?.ok) throw new Error("expected a hold");
        return answer.value.reservation;
      });
      // 2,000 buyers wait for 2 units each; then one who wants 1.
      for (let i = 0; i < 2_000; i++) expect(engine.waitlist.join(`waiter-${i}`, 2, T0).ok).toBe(true);
      expect(engine.waitlist.join("single", 1, T0).ok).toBe(true);

      // A release of 1 unit: nobody but the last in line fits, and it is served.
      const before = rowsRead();
      expect(engine.holds.cancel(holds[0]?.id ?? "", "holder-0", T0 + 1).ok).toBe(true);
      const perRelease = rowsRead() - before;
      expect(engine.outbox.pendingEvents(10_000).some((e) => e.event.userId === "single")).toBe(true);
      // A release of 2 units serves the first in line; and so on, each release reading about as much.
      const reads: number[] = [];
      for (let i = 1; i < 21; i += 2) {
        const start = rowsRead();
        engine.holds.cancel(holds[i]?.id ?? "", `holder-${i}`, T0 + 2);
        engine.holds.cancel(holds[i + 1]?.id ?? "", `holder-${i + 1}`, T0 + 2);
        reads.push(rowsRead() - start);
      }
      expect(engine.outbox.pendingEvents(10_000).filter((e) => e.event.userId.startsWith("waiter-"))).toHaveLength(10);
      expect(engine.waitlist.length()).toBe(1_990);
      console.log(`waitlist fill: ${perRelease} rows for the first release, ${reads.join(", ")} per pair after`);
      expect(perRelease).toBeLessThan(100);
      for (const n of reads) expect(n).toBeLessThan(100);
    });
  });
});
