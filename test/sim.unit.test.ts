import { expect, test } from "vitest";
import { simulate } from "../tools/sim/simulate";
import { simSeeds } from "./suites/sim-seeds";

// The simulator in the unit tier (docs/SIMULATOR.md): seeds 1 to 100 here, 101 to 200 in
// sim-101-200.unit.test.ts, which runs beside this file.
simSeeds(1, 100);

test("a seed replays byte for byte", async () => {
  const first = await simulate({ seed: 7, steps: 120, shards: 4 });
  const again = await simulate({ seed: 7, steps: 120, shards: 4 });
  expect(again.trace.join("\n")).toBe(first.trace.join("\n"));
  expect(first.trace.length).toBeGreaterThan(120);
});
