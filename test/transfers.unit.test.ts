import { expect, it } from "vitest";
import { StockEngine } from "../durable-objects/engine/stock-engine";
import { homeShard } from "../durable-objects/shared/shard-name";
import { sqliteStorage } from "../tools/sqlite-storage";

// A transfer between shards happens once per transfer id, whatever its asks: found by the simulator
// (npm run sim -- --seed 415 --shards 4, docs/SIMULATOR.md). The giver answered 0 without
// recording it; the receiver recorded that 0 and closed the transfer; a second ask of the same id
// (the alarm's retry, or a delayed copy) reached the giver after a unit was freed there, which it gave:
// the giver's total went down, the receiver's never up, and the SKU lost the unit for good.

const T0 = 1_900_000_000_000;

it("a giver answers every ask of one transfer id as it answered the first, a zero included", () => {
  let ids = 0;
  const newId = () => `00000000-0000-4000-8000-${String(++ids).padStart(12, "0")}`;
  const [receiver, giver] = [0, 1].map((shard) => {
    const engine = new StockEngine(sqliteStorage(), newId);
    const total = shard === 1 ? 1 : 0;
    expect(engine.configuration.configure({ sku: "t", shard, shards: 2, totalStock: total, perUserLimit: 1 }).ok).toBe(
      true,
    );
    return engine;
  }) as [StockEngine, StockEngine];
  // The giver's only unit is held, so the first ask of transfer x finds nothing to give.
  const user = ["a", "b", "c", "d", "e"].find((u) => homeShard(u, 2) === 1) as string;
  const [held] = giver.holds.reserve([{ userId: user, nonce: "n1", quantity: 1, shards: 2 }], T0);
  if (!held?.ok) throw new Error(`the giver did not hold: ${JSON.stringify(held)}`);
  receiver.transfers.begin("x", 1, 1, T0);
  const first = giver.transfers.give("x", 0, 1, T0);
  expect(first).toBe(0);
  receiver.transfers.complete("x", first, T0);
  // The hold is cancelled: the giver has a unit now. The same transfer asked again answers the same.
  expect(giver.holds.cancel(held.value.reservation.id, user, T0 + 1).ok).toBe(true);
  expect(giver.transfers.give("x", 0, 1, T0 + 2)).toBe(0);
  const totals = [receiver, giver].map((e) => e.configuration.state()?.stock.total);
  expect(totals).toEqual([0, 1]); // the SKU keeps its unit, on the giver
});
