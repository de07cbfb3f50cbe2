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
