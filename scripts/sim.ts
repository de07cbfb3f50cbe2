/**
 * `npm run sim -- --seed S [--steps N] [--shards K] [--seeds M] [--quiet] [--states]`: the deterministic simulator
 * (docs/SIMULATOR.md). One seed prints its trace, a line per answer; `--seeds M` runs seeds S..S+M-1
 * and prints one line each; `--states` adds every shard's counts after each step. A failing seed prints its seed and step, and the command to replay it.
 */
import { register } from "node:module";
import { parseArgs } from "node:util";

register("../tools/sim/resolve-hooks.mjs", import.meta.url);
const { simulate } = await import("../tools/sim/simulate");

const { values } = parseArgs({
  options: {
    seed: { type: "string", default: "1" },
    steps: { type: "string", default: "300" },
    shards: { type: "string" },
    seeds: { type: "string", default: "1" },
    quiet: { type: "boolean", default: false },
    states: { type: "boolean", default: false },
  },
});
const first = Number(values.seed);
const steps = Number(values.steps);
const seeds = Number(values.seeds);
let failed = 0;
for (let seed = first; seed < first + seeds; seed++) {
  // Without --shards, each seed starts on 1 to 4 shards, as the unit tier runs them.
  const shards = values.shards ? Number(values.shards) : 1 + (seed % 4);
  const one = seeds === 1 && !values.quiet;
  const started = performance.now();
  const report = await simulate({
    seed,
    steps,
    shards,
    states: values.states,
    ...(one ? { onLine: (line) => process.stdout.write(`${line}\n`) } : {}),
  });
  const ms = Math.round(performance.now() - started);
  if (report.failure) {
    failed++;
    console.log(`FAIL seed ${seed} step ${report.failure.step}: ${report.failure.message}`);
    console.log(`  replay: npm run sim -- --seed ${seed} --steps ${steps} --shards ${shards}`);
  } else if (!one) {
    console.log(`ok seed ${seed} (${shards} shards, ${steps} steps, ${ms} ms)`);
  }
}
process.exitCode = failed > 0 ? 1 : 0;
