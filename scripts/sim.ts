/**
 * `npm run sim -- --seed S [--steps N] [--shards K] [--seeds M] [--quiet] [--states]`: the deterministic simulator
 * (docs/SIMULATOR.md). One seed prints its trace, a line per answer; `--seeds M` runs seeds S..S+M-1
 * and prints one line each, then how many failed; `--states` adds every shard's counts after each
 * step. A failing seed prints its seed and step, and the command to replay it. Bad options: the
 * reason and the usage, exit 2.
 */
import { register } from "node:module";
import { parseArgs } from "node:util";

const USAGE = "usage: npm run sim -- [--seed S] [--seeds M] [--steps N] [--shards 1-4] [--quiet] [--states]";

/** Bad input: the reason and the usage on stderr, exit 2 (as npm run jwt and verify-sale do). */
function refuse(reason: string): never {
  console.error(`${reason}\n${USAGE}`);
  process.exit(2);
}

const { values } = (() => {
  try {
    return parseArgs({
      options: {
        seed: { type: "string", default: "1" },
        steps: { type: "string", default: "300" },
        shards: { type: "string" },
        seeds: { type: "string", default: "1" },
        quiet: { type: "boolean", default: false },
        states: { type: "boolean", default: false },
        help: { type: "boolean", short: "h", default: false },
      },
    });
  } catch (err) {
    return refuse((err as Error).message);
  }
})();
if (values.help) {
  console.log(USAGE);
  process.exit(0);
}

/** An option's whole number within [min, max], or a refusal naming it. */
function whole(name: string, text: string, min: number, max: number): number {
  const n = Number(text);
  if (!/^\d+$/.test(text) || n < min || n > max)
    refuse(`--${name} must be a whole number from ${min} to ${max}, got "${text}"`);
  return n;
}
const first = whole("seed", values.seed, 0, Number.MAX_SAFE_INTEGER);
const steps = whole("steps", values.steps, 1, 100_000);
const seeds = whole("seeds", values.seeds, 1, 1_000_000);
const fixedShards = values.shards === undefined ? undefined : whole("shards", values.shards, 1, 4);
register("../tools/sim/resolve-hooks.mjs", import.meta.url);
const { simulate } = await import("../tools/sim/simulate");
let failed = 0;
for (let seed = first; seed < first + seeds; seed++) {
  // Without --shards, each seed starts on 1 to 4 shards, as the unit tier runs them.
  const shards = fixedShards ?? 1 + (seed % 4);
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
if (seeds > 1) console.log(`${seeds} seeds, ${failed} failed`);
process.exitCode = failed > 0 ? 1 : 0;
