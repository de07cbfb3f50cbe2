import { expect, test } from "vitest";
import { simulate } from "../tools/sim/simulate";

/**
 * The deterministic simulator (docs/SIMULATOR.md) in the unit tier: a SKU's real stock objects over
 * SQLite, a seeded world of delays, lost calls and answers, resets and a virtual clock, with every
 * invariant checked after each step. A failing seed is named with its step and the command that replays it.
 */
const SEEDS = Number(process.env.SIM_SEEDS ?? 200);
const STEPS = Number(process.env.SIM_STEPS ?? 300);
const FIRST = Number(process.env.SIM_FIRST_SEED ?? 1);

test(`${SEEDS} seeds x ${STEPS} steps on 1 to 4 shards keep every invariant`, { timeout: 600_000 }, async () => {
  const failures: string[] = [];
  for (let seed = FIRST; seed < FIRST + SEEDS; seed++) {
    const shards = 1 + (seed % 4);
    const { failure } = await simulate({ seed, steps: STEPS, shards });
    if (failure)
      failures.push(
        `seed ${seed} step ${failure.step}: ${failure.message} (replay: npm run sim -- --seed ${seed} --steps ${STEPS} --shards ${shards})`,
      );
  }
  expect(failures).toEqual([]);
});

test("a seed replays byte for byte", async () => {
  const first = await simulate({ seed: 7, steps: 120, shards: 4 });
  const again = await simulate({ seed: 7, steps: 120, shards: 4 });
  expect(again.trace.join("\n")).toBe(first.trace.join("\n"));
  expect(first.trace.length).toBeGreaterThan(120);
});
