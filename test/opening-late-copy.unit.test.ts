import { expect, it } from "vitest";
import { StockEngine } from "../durable-objects/engine/stock-engine";
import { homeShard } from "../durable-objects/shared/shard-name";
import { followerSettings } from "../durable-objects/stock/sku-change";
import { sqliteStorage } from "../tools/sqlite-storage";

// A sibling of a sharded SKU told of an opening's window late (docs/FAIR-OPENING.md "Sharded SKUs"):
// shard 0's copy of the settings names the openings it still draws, so a sibling adds a draw for one
// that already opened. A copy that comes after shard 0 closed the sibling's entries (or told it the
// draw is over) must not open that draw again: an entry then would never be decided, and a draw
// shard 0 already told over would keep the sibling's buyers waiting for good.
// The whole path through the objects: test/sim-found.unit.test.ts ("told of an opening's window").

const T0 = 1_900_000_000_000;
const opensAt = T0 + 10_000;
const windowMs = 2_000;
const buyer = ["a", "b", "c", "d", "e", "f"].find((u) => homeShard(u, 2) === 1) as string;
const token = { userId: buyer, nonce: "n1", quantity: 1, shards: 2 };

function engine(): StockEngine {
  let ids = 0;
  return new StockEngine(sqliteStorage(), () => `00000000-0000-4000-8000-${String(++ids).padStart(12, "0")}`);
}

/** Shard 0 and shard 1 of a SKU opening at `opensAt`, and shard 0's copy of the window it set just before. */
function lateWindow() {
  const lead = engine();
  const sibling = engine();
  const settings = { sku: "late", shards: 2, totalStock: 2, perUserLimit: 1, startsAt: opensAt };
  expect(lead.configuration.configure({ ...settings, shard: 0 }, T0).ok).toBe(true);
  expect(sibling.configuration.configure({ ...settings, shard: 1 }, T0).ok).toBe(true);
  expect(
    lead.configuration.configure({ sku: "late", shard: 0, shards: 2, openingWindowMs: windowMs }, opensAt - 50).ok,
  ).toBe(true);
  const state = lead.configuration.state();
  if (!state) throw new Error("shard 0 has no state");
  return { sibling, copy: followerSettings(state, 1, lead.draw.undecidedOpenings()) };
}

it("a copy that comes inside the window adds its draw: the sibling's buyer enters it", () => {
  const { sibling, copy } = lateWindow();
  expect(sibling.configuration.configure(copy, opensAt + 500).ok).toBe(true);
  const [answer] = sibling.holds.reserve([token], opensAt + 600);
  expect(answer).toMatchObject({ ok: false, code: "DRAW_PENDING" });
  expect(sibling.draw.entriesHere(opensAt)).toBe(1);
  // Shard 0's close takes the entry.
  expect(sibling.drawDecision.close(opensAt, opensAt + windowMs, windowMs).map((e) => e.userId)).toEqual([buyer]);
});

it("a copy that comes after shard 0 closed the sibling's entries takes no entry, and waits for the draw's end", () => {
  const { sibling, copy } = lateWindow();
  // Shard 0 closes at its clock's close; the sibling's clock is a little behind.
  expect(sibling.drawDecision.close(opensAt, opensAt + windowMs - 300, windowMs)).toEqual([]);
  expect(sibling.configuration.configure(copy, opensAt + windowMs - 200).ok).toBe(true);
  const [waiting] = sibling.holds.reserve([token], opensAt + windowMs - 100);
  expect(waiting).toMatchObject({ ok: false, code: "DRAW_PENDING" });
  expect(sibling.draw.entriesHere(opensAt)).toBe(0);
  sibling.drawDecision.finish(opensAt, opensAt + windowMs + 500); // drawOver
  const [held] = sibling.holds.reserve([token], opensAt + windowMs + 600);
  expect(held).toMatchObject({ ok: true, value: { reservation: { status: "held" } } });
});

it("a copy that comes after the draw is over opens no draw again", () => {
  const { sibling, copy } = lateWindow();
  expect(sibling.drawDecision.close(opensAt, opensAt + windowMs, windowMs)).toEqual([]);
  sibling.drawDecision.finish(opensAt, opensAt + windowMs + 500); // drawOver
  expect(sibling.configuration.configure(copy, opensAt + windowMs + 600).ok).toBe(true);
  const [held] = sibling.holds.reserve([token], opensAt + windowMs + 700);
  expect(held).toMatchObject({ ok: true, value: { reservation: { status: "held" } } });
});
