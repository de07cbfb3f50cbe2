import { expect, it } from "vitest";
import type { Outcome, Reservation, ReserveOutcome, SkuState } from "../durable-objects/engine/types";
import type { WaitlistEntry } from "../durable-objects/engine/waitlist";
import { homeShard, shardName } from "../durable-objects/shared/shard-name";
import type { SkuChange } from "../durable-objects/stock/sku-change";
import { seededRandom } from "../src/harness/seeded-random";
import { enterWorld } from "../tools/sim/simulate";
import { NO_FAULTS, World } from "../tools/sim/world";

// Defects the simulator found (docs/SIMULATOR.md), each replayed as a script over the same world: one
// SKU of two shards, every shard a real SkuStock over SQLite, driven through the objects' faces.

const START = Date.UTC(2026, 0, 1);

interface Script {
  world: World;
  /** A call to one of the SKU's shards over the world's network, then a virtual second. */
  call<T>(shard: number, method: string, ...args: unknown[]): Promise<T>;
  /** `PUT /admin/skus/:sku` as the edge hands it to shard 0 (2 shards). */
  put(change: Partial<SkuChange>): Promise<Outcome<SkuState>>;
}

async function inWorld(sku: string, script: (s: Script) => Promise<void>): Promise<void> {
  const random = seededRandom(1);
  const world = new World(START, random);
  const restore = enterWorld(world, random);
  const call = async <T>(shard: number, method: string, ...args: unknown[]): Promise<T> => {
    const answer = world.call<T>(shardName(sku, shard), method, args);
    await world.runUntil(world.now + 1_000);
    return answer;
  };
  const put = (change: Partial<SkuChange>) =>
    call<Outcome<SkuState>>(0, "putSku", { sku, shards: 2, assumedTotal: 0, ...change });
  try {
    await script({ world, call, put });
  } finally {
    world.close();
    restore();
  }
}

/** A user whose home shard of the SKU's two is `shard`. */
const homedOn = (shard: number) => ["a", "b", "c", "d", "e", "f"].find((u) => homeShard(u, 2) === shard) as string;

// npm run sim -- --seed 165 --shards 2, and --seed 150 --shards 3 in sizes: a unit freed while the sale
// was paused started a pass over the line that stopped at the pause, and nothing started one at the
// resume, so the unit stayed available while the buyer waited in the line (invariant 9).

it("a sharded sale resumed while buyers wait serves its line", async () => {
  await inWorld("line", async ({ world, call, put }) => {
    expect((await put({ totalStock: 1, perUserLimit: 1, holdSeconds: 60, name: "Line", status: "on_sale" })).ok).toBe(
      true,
    );
    const [holder, waiter] = ["ann", "bob"];
    const [held] = await call<ReserveOutcome[]>(homeShard(holder, 2), "reserve", [
      { userId: holder, nonce: "n1", quantity: 1, shards: 2 },
    ]);
    if (!held?.ok) throw new Error(`no hold: ${JSON.stringify(held)}`);
    expect((await call<Outcome<WaitlistEntry>>(0, "joinWaitlist", waiter, 1, undefined, 0)).ok).toBe(true);
    expect((await put({ status: "paused" })).ok).toBe(true);
    const reservation = held.value.reservation;
    const shard = Number(reservation.id.split(".")[1]);
    expect((await call<Outcome<Reservation>>(shard, "cancel", reservation.id, holder)).ok).toBe(true);
    expect((await put({ status: "on_sale" })).ok).toBe(true);
    await world.runUntil(world.now + 5_000);
    // The waiting buyer holds the unit now (within its 60 s), on their home shard; nobody waits.
    expect(await call<number>(0, "waitlistLength")).toBe(0);
    expect(await call<number>(homeShard(waiter, 2), "heldBy", waiter)).toBe(1);
  });
});

// npm run sim -- --seed 809 --shards 2 (the simulator of ad8498c): a shard pulled units from its
// sibling, the sibling's answer was lost after it gave them, and the shard restarted before its alarm
// finished the transfer. Its retry was booked in memory only, so the new instance's first alarm update
// moved the alarm to what it knew of (no hold: deleted), and the units stayed given by one shard and
// never added by the other: the SKU's total fell below what the operator set (invariant 8).

it("a transfer whose answer was lost is finished after its shard restarts", async () => {
  await inWorld("pull", async ({ world, call, put }) => {
    const totals = () =>
      [0, 1].map((shard) => world.shard(shardName("pull", shard))?.instance.engine.configuration.state()?.stock.total);
    expect((await put({ totalStock: 4, perUserLimit: 4 })).ok).toBe(true);
    expect(totals()).toEqual([2, 2]);

    // A buyer of shard 1 asks for 3: shard 1 pulls from shard 0, which gives its 2, but every answer is lost.
    const buyer = homedOn(1);
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
  });
});

// npm run sim -- --seed 897 --shards 2 (the simulator of ad8498c): a sharded SKU's line is served by
// holds whose nonce is the entry's id; a pass during an opening's window entered the entry in the draw,
// which refused it (its size had no unit). That refusal was then replayed to every later pass as a
// token's answer would be, so the buyer waited on while units of their size were available (invariant 9).

it("a line's entry that an opening draw refused is served once its size has units", async () => {
  await inWorld("drawn", async ({ world, call, put }) => {
    const opensAt = START + 60_000;
    const sizes = [
      { id: "x", name: "x", totalStock: 2 },
      { id: "y", name: "y", totalStock: 0 },
    ];
    const created = await put({
      totalStock: 2,
      perUserLimit: 1,
      startsAt: opensAt,
      openingWindowMs: 2_000,
      variants: sizes,
    });
    expect(created.ok).toBe(true);
    await world.runUntil(opensAt + 500); // the opening's window is open
    const waiter = "bob";
    expect((await call<Outcome<WaitlistEntry>>(0, "joinWaitlist", waiter, 1, undefined, 0, ["y"])).ok).toBe(true);
    await world.runUntil(opensAt + 60_000); // the window closes and the draw is decided
    expect(await call<number>(0, "waitlistLength")).toBe(1);

    expect((await put({ variants: [{ id: "y", name: "y", totalStock: 1 }] })).ok).toBe(true);
    await world.runUntil(world.now + 5_000);
    expect(await call<number>(0, "waitlistLength")).toBe(0);
    expect(await call<number>(homeShard(waiter, 2), "heldBy", waiter)).toBe(1);
  });
});
