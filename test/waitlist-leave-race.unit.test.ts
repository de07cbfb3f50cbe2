import { describe, expect, it } from "vitest";
import { StockEngine } from "../durable-objects/engine/stock-engine";
import type { ReserveOutcome } from "../durable-objects/engine/types";
import { homeShard } from "../durable-objects/shared/shard-name";
import type { DueWork } from "../durable-objects/stock/due-work";
import type { ShardPulls } from "../durable-objects/stock/shard-pulls";
import type { SkuStock } from "../durable-objects/stock/sku-stock";
import type { StockHost } from "../durable-objects/stock/stock-host";
import { WaitlistServer } from "../durable-objects/stock/waitlist-server";
import { inMemory } from "./support/node-place";

/**
 * Leaving a sharded SKU's line while shard 0 holds for that very buyer on their home shard (API.md
 * v1.3 "The line, visible"): shard 0's pass awaits the home shard, and a leave arrives meanwhile.
 * The home shard is a stand-in whose answer the test gives, so each interleaving is played exactly.
 */

const T0 = 1_900_000_000_000;

function userOnShard1(prefix: string): string {
  for (let i = 0; ; i++) if (homeShard(`${prefix}-${i}`, 2) === 1) return `${prefix}-${i}`;
}

interface Asked {
  entryId: string;
  userId: string;
  answer: (outcome: ReserveOutcome) => void;
}

/** Shard 0 of a 2-shard SKU with nothing available, its server, and the holds it asks shard 1 for. */
function withShardZero(run: (t: { engine: StockEngine; server: WaitlistServer; asked: Asked[] }) => Promise<void>) {
  return inMemory("wlrace", async (storage) => {
    let ids = 0;
    const engine = new StockEngine(storage, () => `00000000-0000-4000-8000-${String(++ids).padStart(12, "0")}`);
    engine.configuration.configure(
      { sku: "wlrace", shard: 0, shards: 2, totalStock: 0, perUserLimit: 5, holdSeconds: 60 },
      T0,
    );
    const asked: Asked[] = [];
    const shard1 = {
      holdForWaitlist: (entryId: string, userId: string) =>
        new Promise<ReserveOutcome>((answer) => asked.push({ entryId, userId, answer })),
      setWaitlistMode: async () => undefined,
      state: async () => ({ stock: { available: 0 } }),
    };
    const host: StockHost = {
      engine,
      due: { retry: async () => undefined } as unknown as DueWork,
      now: () => T0,
      shardOf: () => shard1 as unknown as DurableObjectStub<SkuStock>,
      background: () => undefined,
      afterCommit: async () => undefined,
      assertAlive: () => undefined,
      where: () => ({ object: "wlrace#0" }),
    };
    await run({ engine, server: new WaitlistServer(host, {} as ShardPulls), asked });
  });
}

/** Resolves once the pass has asked shard 1 for `n` holds. */
async function untilAsked(asked: Asked[], n: number): Promise<void> {
  for (let turns = 0; asked.length < n; turns++) {
    if (turns > 1_000) throw new Error(`the pass asked for ${asked.length} holds, not ${n}`);
    await Promise.resolve();
  }
}

const granted = (entryId: string): ReserveOutcome => ({
  ok: true,
  value: {
    reservation: {
      id: `r-${entryId}`,
      sku: "wlrace",
      userId: "x",
      quantity: 1,
      status: "held",
      createdAt: T0,
      expiresAt: T0 + 60_000,
      updatedAt: T0,
    },
    replayed: false,
    available: 0,
  },
});

describe("leaving the line while it serves you", () => {
  it("a leave during the grant of that buyer waits for it: served, the leave finds nothing and the hold stands", async () => {
    await withShardZero(async ({ engine, server, asked }) => {
      const ann = userOnShard1("ann");
      expect(engine.waitlist.join(ann, 1, T0, 0, 0).ok).toBe(true);
      const pass = server.serve();
      await untilAsked(asked, 1);
      const leaving = server.leave(ann); // arrives while shard 1 is holding for Ann
      asked[0]?.answer(granted(asked[0].entryId));
      await pass;
      expect(await leaving).toBeNull();
      expect(engine.waitlist.place(ann, T0)).toBeNull();
      expect(asked.map((a) => a.userId)).toEqual([ann]);
    });
  });

  it("a leave during a grant that fails takes the entry off the line", async () => {
    await withShardZero(async ({ engine, server, asked }) => {
      const ann = userOnShard1("ann");
      expect(engine.waitlist.join(ann, 1, T0, 0, 0).ok).toBe(true);
      const pass = server.serve();
      await untilAsked(asked, 1);
      const leaving = server.leave(ann);
      asked[0]?.answer({ ok: false, code: "INSUFFICIENT_STOCK", available: 0 });
      await pass;
      expect(await leaving).toMatchObject({ position: 1, quantity: 1, unitsAhead: 0 });
      expect(engine.waitlist.length()).toBe(0);
    });
  });

  it("a buyer who leaves after a pass read the line is skipped by it, and nothing is held for them", async () => {
    await withShardZero(async ({ engine, server, asked }) => {
      const ann = userOnShard1("ann");
      const ben = userOnShard1("ben");
      expect(engine.waitlist.join(ann, 1, T0, 0, 0).ok).toBe(true);
      expect(engine.waitlist.join(ben, 2, T0, 0, 0).ok).toBe(true);
      const pass = server.serve(); // reads Ann and Ben, then holds for Ann
      await untilAsked(asked, 1);
      // Ben is not being held for: he leaves at once, from second place.
      expect(await server.leave(ben)).toMatchObject({ position: 2, quantity: 2, unitsAhead: 1 });
      asked[0]?.answer(granted(asked[0].entryId));
      await pass;
      expect(asked.map((a) => a.userId)).toEqual([ann]);
      expect(engine.waitlist.length()).toBe(0);
      expect(engine.configuration.state()?.waiting).toBeUndefined();
    });
  });
});
