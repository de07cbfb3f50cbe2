import { expect, it } from "vitest";
import { StockEngine } from "../durable-objects/engine/stock-engine";
import { homeShard } from "../durable-objects/shared/shard-name";
import { type ResizePlan, resizeSettings } from "../durable-objects/stock/sku-change";
import { sqliteStorage } from "../tools/sqlite-storage";

// A resize of a fair-opening SKU after its opening (found by the simulator: npm run sim -- --seed 73,
// docs/SIMULATOR.md). Shard 0 committed the new shard count; a shard new to the SKU refused the
// commit, judging the opening's window by itself (a window set after it opened), so the plan stayed
// `committing` for good and every later PUT answered BUSY. Shard 0 judges; a sibling takes its change.

const T0 = 1_900_000_000_000;

function engine(): StockEngine {
  let ids = 0;
  return new StockEngine(sqliteStorage(), () => `00000000-0000-4000-8000-${String(++ids).padStart(12, "0")}`);
}

it("a shard new to the SKU takes a resize committed after the opening, and sells on arrival", () => {
  const lead = engine();
  const settings = { sku: "o", shard: 0, shards: 1, totalStock: 4, openingWindowMs: 1_000, startsAt: T0 + 10_000 };
  expect(lead.configuration.configure(settings, T0).ok).toBe(true);
  const plan: ResizePlan = {
    changeId: "c1",
    from: 1,
    to: 2,
    change: { sku: "o", shards: 2, totalStock: 4, assumedTotal: 4 },
  };
  const later = T0 + 60_000;
  expect(lead.configuration.configure(resizeSettings(plan, 0), later).ok).toBe(true);
  const state = lead.configuration.state();
  if (!state) throw new Error("shard 0 has no state");

  const sibling = engine();
  const committed = sibling.configuration.configure(resizeSettings(plan, 1, state), later);
  expect(committed).toMatchObject({ ok: true, value: { shards: 2, stock: { total: 2 } } });
  // The opening is history here: a buyer whose home is this shard is decided on arrival.
  const buyer = ["a", "b", "c", "d", "e", "f"].find((u) => homeShard(u, 2) === 1) as string;
  const [held] = sibling.holds.reserve([{ userId: buyer, nonce: "n1", quantity: 1, shards: 2 }], later + 1);
  expect(held).toMatchObject({ ok: true, value: { reservation: { status: "held" } } });
});

it("shard 0 still refuses a public opening set in the past", () => {
  const lead = engine();
  const past = { sku: "p", shard: 0, shards: 1, totalStock: 4, openingWindowMs: 1_000, startsAt: T0 - 1 };
  expect(lead.configuration.configure(past, T0)).toMatchObject({ ok: false, code: "INVALID_STATE" });
});

// npm run sim -- --seed 60022 --shards 3: a cut from 3 shards to 1 fenced every shard before an early
// access tier's window, and shard 2's commit came once that window had opened by its clock. Shard 2
// refused it as a new shard count while a draw is pending, so the plan stayed `committing`: every later
// PUT answered BUSY, and shard 2 kept its 3 units beside shard 0's 11 (invariant 8). Fenced, the shard
// took no hold or entry since the fence judged it: its commit is taken.

it("a shard fenced for a resize takes its commit after a window opened since the fence", () => {
  const opensAt = T0 + 10_000;
  const settings = { sku: "f", shards: 3, totalStock: 11, openingWindowMs: 2_000, startsAt: opensAt };
  const lead = engine();
  expect(lead.configuration.configure({ ...settings, shard: 0 }, T0).ok).toBe(true);
  const sibling = engine();
  expect(sibling.configuration.configure({ ...settings, shard: 2, totalStock: 3 }, T0).ok).toBe(true);
  const plan: ResizePlan = {
    changeId: "c3",
    from: 3,
    to: 1,
    change: { sku: "f", shards: 1, totalStock: 11, assumedTotal: 11 },
  };
  expect(lead.configuration.fence(plan.changeId, T0 + 1_000, JSON.stringify(plan)).ok).toBe(true);
  expect(sibling.configuration.fence(plan.changeId, T0 + 1_000).ok).toBe(true);
  expect(lead.configuration.configure(resizeSettings(plan, 0), T0 + 2_000).ok).toBe(true);
  const state = lead.configuration.state();
  if (!state) throw new Error("shard 0 has no state");
  // The window opened at 10 s; the commit reaches shard 2 at 10.5 s.
  const committed = sibling.configuration.configure(resizeSettings(plan, 2, state), opensAt + 500);
  expect(committed).toMatchObject({ ok: true, value: { shards: 1, stock: { total: 0 } } });
});
