import { expect, it } from "vitest";
import type { Outcome, Reservation, ReserveOutcome, SkuState } from "../durable-objects/engine/types";
import type { WaitlistEntry } from "../durable-objects/engine/waitlist";
import { homeShard, shardName } from "../durable-objects/shared/shard-name";
import type { SkuChange } from "../durable-objects/stock/sku-change";
import { seededRandom } from "../src/harness/seeded-random";
import { enterWorld } from "../tools/sim/simulate";
import { World } from "../tools/sim/world";

// Found by the simulator (npm run sim -- --seed 165 --shards 2, and --seed 150 --shards 3 in sizes;
// docs/SIMULATOR.md): a sharded SKU whose unit was freed while the sale was paused kept it from the
// buyer waiting in its line once the sale resumed. The pass the freed unit started stopped at the pause,
// and nothing started one at the resume, so the unit stayed available while the buyer waited (invariant 9).

it("a sharded sale resumed while buyers wait serves its line", async () => {
  const random = seededRandom(1);
  const world = new World(Date.UTC(2026, 0, 1), random);
  const restore = enterWorld(world, random);
  try {
    const call = async <T>(shard: number, method: string, ...args: unknown[]): Promise<T> => {
      const answer = world.call<T>(shardName("line", shard), method, args);
      await world.runUntil(world.now + 1_000);
      return answer;
    };
    const put = (change: Partial<SkuChange>) =>
      call<Outcome<SkuState>>(0, "putSku", { sku: "line", shards: 2, assumedTotal: 0, ...change });
    expect((await put({ totalStock: 1, perUserLimit: 1, holdSeconds: 60, name: "Line", status: "on_sale" })).ok).toBe(
      true,
    );
    const [holder, waiter] = ["ann", "bob"];
    const [held] = await call<ReserveOutcome[]>(homeShard(holder, 2), "reserve", [
      { userId: holder, nonce: "n1", quantity: 1, shards: 2 },
    ]);
    if (!held?.ok) throw new Error(`no hold: ${JSON.stringify(held)}`);
    const joined = await call<Outcome<WaitlistEntry>>(0, "joinWaitlist", waiter, 1, undefined, 0);
    expect(joined.ok).toBe(true);
    expect((await put({ status: "paused" })).ok).toBe(true);
    const reservation = held.value.reservation;
    const cancelled = await call<Outcome<Reservation>>(
      Number(reservation.id.split(".")[1]),
      "cancel",
      reservation.id,
      holder,
    );
    expect(cancelled.ok).toBe(true);
    expect((await put({ status: "on_sale" })).ok).toBe(true);
    await world.runUntil(world.now + 5_000);
    // The waiting buyer holds the unit now (within its 60 s), on their home shard; nobody waits.
    expect(await call<number>(0, "waitlistLength")).toBe(0);
    expect(await call<number>(homeShard(waiter, 2), "heldBy", waiter)).toBe(1);
  } finally {
    restore();
  }
});
