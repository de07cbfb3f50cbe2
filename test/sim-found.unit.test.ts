import { expect, it } from "vitest";
import type { Outcome, ReserveOutcome, SkuState } from "../durable-objects/engine/types";
import type { WaitlistEntry } from "../durable-objects/engine/waitlist";
import { homeShard, shardName } from "../durable-objects/shared/shard-name";
import type { SkuChange } from "../durable-objects/stock/sku-change";
import { seededRandom } from "../src/harness/seeded-random";
import { enterWorld } from "../tools/sim/simulate";
import { NO_FAULTS, World } from "../tools/sim/world";

// Defects the simulator found (docs/SIMULATOR.md), each replayed as a script over the same world.

// npm run sim -- --seed 809 --shards 2: a shard pulled
// units from its sibling, the sibling's answer was lost after it gave them, and the shard restarted
// before its alarm finished the transfer. Its retry was booked in memory only, so the new instance's
// first alarm update moved the alarm to what it knew of (no hold: deleted), and the units stayed
// given by one shard and never added by the other: the SKU's total fell below what the operator set.

it("a transfer whose answer was lost is finished after its shard restarts", async () => {
  const random = seededRandom(1);
  const world = new World(Date.UTC(2026, 0, 1), random);
  const restore = enterWorld(world, random);
  try {
    const call = async <T>(shard: number, method: string, ...args: unknown[]): Promise<T> => {
      const answer = world.call<T>(shardName("pull", shard), method, args);
      await world.runUntil(world.now + 1_000);
      return answer;
    };
    const totals = () =>
      [0, 1].map((shard) => world.shard(shardName("pull", shard))?.instance.engine.configuration.state()?.stock.total);
    const change: SkuChange = { sku: "pull", shards: 2, assumedTotal: 0, totalStock: 4, perUserLimit: 4 };
    expect((await call<Outcome<SkuState>>(0, "putSku", change)).ok).toBe(true);
    expect(totals()).toEqual([2, 2]);

    // A buyer of shard 1 asks for 3: shard 1 pulls from shard 0, which gives its 2, but every answer is lost.
    const buyer = ["a", "b", "c", "d", "e", "f"].find((u) => homeShard(u, 2) === 1) as string;
    world.faults = { ...NO_FAULTS, dropAnswer: 1 };
    const reserving = world
      .call<ReserveOutcome[]>(shardName("pull", 1), "reserve", [
        [{ userId: buyer, nonce: "n1", quantity: 3, shards: 2 }],
      ])
      .then(
        () => "answered",
        (error: Error) => error.message,
      );
    await world.runUntil(world.now + 1_000);
    expect(await reserving).toBe("sim: answer of reserve from pull#1 lost");
    world.faults = NO_FAULTS;
    expect(totals()).toEqual([0, 2]); // given by shard 0, not yet added by shard 1

    // Shard 1 restarts (storage kept), and its first request updates its alarm.
    world.object(shardName("pull", 1)).build();
    await call(1, "cancel", "no-such-reservation", buyer);
    await world.runUntil(world.now + 60_000);
    expect(totals()).toEqual([0, 4]);
  } finally {
    restore();
  }
});

// npm run sim -- --seed 897 --shards 2: a sharded SKU's line is served by holds whose nonce is the
// entry's id; a pass during an opening's window entered the entry in the draw, which refused it (its
// size had no unit). That refusal was then replayed to every later pass as a token's answer would be,
// so the buyer waited on while units of their size were available (invariant 9).

it("a line's entry that an opening draw refused is served once its size has units", async () => {
  const random = seededRandom(1);
  const start = Date.UTC(2026, 0, 1);
  const world = new World(start, random);
  const restore = enterWorld(world, random);
  try {
    const call = async <T>(shard: number, method: string, ...args: unknown[]): Promise<T> => {
      const answer = world.call<T>(shardName("line", shard), method, args);
      await world.runUntil(world.now + 1_000);
      return answer;
    };
    const put = (change: Partial<SkuChange>) =>
      call<Outcome<SkuState>>(0, "putSku", { sku: "line", shards: 2, assumedTotal: 0, ...change });
    const opensAt = start + 60_000;
    const created = await put({
      totalStock: 2,
      perUserLimit: 1,
      startsAt: opensAt,
      openingWindowMs: 2_000,
      variants: [
        { id: "x", name: "x", totalStock: 2 },
        { id: "y", name: "y", totalStock: 0 },
      ],
    });
    expect(created.ok).toBe(true);
    await world.runUntil(opensAt + 500); // the opening's window is open
    const waiter = "bob";
    const joined = await call<Outcome<WaitlistEntry>>(0, "joinWaitlist", waiter, 1, undefined, 0, ["y"]);
    expect(joined.ok).toBe(true);
    await world.runUntil(opensAt + 60_000); // the window closes and the draw is decided
    expect(await call<number>(0, "waitlistLength")).toBe(1);

    expect((await put({ variants: [{ id: "y", name: "y", totalStock: 1 }] })).ok).toBe(true);
    await world.runUntil(world.now + 5_000);
    expect(await call<number>(0, "waitlistLength")).toBe(0);
    expect(await call<number>(homeShard(waiter, 2), "heldBy", waiter)).toBe(1);
  } finally {
    restore();
  }
});
