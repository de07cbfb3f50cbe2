import { expect, test } from "vitest";
import { simulate } from "../../tools/sim/simulate";

/** Steps per seed in the unit tier. */
export const SIM_STEPS = 300;

/**
 * The deterministic simulator (docs/SIMULATOR.md) over seeds `first` to `last`, each on 1 + seed % 4
 * shards: a SKU's real stock objects over SQLite in a seeded world of delays, lost calls and answers,
 * resets and a virtual clock, every invariant checked after each step. A failing seed is named with
 * its step and the command that replays it. Two files run halves of the range, one per core.
 */
export function simSeeds(first: number, last: number): void {
  test(`seeds ${first}-${last} x ${SIM_STEPS} steps on 1 to 4 shards keep every invariant`, {
    timeout: 600_000,
  }, async () => {
    const failures: string[] = [];
    for (let seed = first; seed <= last; seed++) {
      const shards = 1 + (seed % 4);
      const { failure } = await simulate({ seed, steps: SIM_STEPS, shards });
      if (failure)
        failures.push(
          `seed ${seed} step ${failure.step}: ${failure.message} (replay: npm run sim -- --seed ${seed} --steps ${SIM_STEPS} --shards ${shards})`,
        );
    }
    expect(failures).toEqual([]);
  });
}
