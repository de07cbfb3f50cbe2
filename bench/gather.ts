// `npm run bench:gather`: the gatherer's cost per call alone (bench/scenarios/gather-core.ts), without
// a whole bench run: one Worker with the stock object alone, as the engine core runs. `-- --write`
// stores the figures in bench/results.json (`figures.gather_core*`), where `npm run capacity` and
// the full bench's report read them.
import { existsSync, readFileSync, writeFileSync } from "node:fs";
import { fileURLToPath } from "node:url";
import { startWorker } from "../tools/worker";
import { FULL, newBench, QUICK } from "./lib/context";
import { log } from "./lib/log";
import { gatherCore } from "./scenarios/gather-core";

const file = fileURLToPath(new URL("results.json", import.meta.url));
const quick = process.argv.includes("--quick");
const bench = newBench(quick ? QUICK : FULL);
const server = await startWorker(
  "object alone, commit without fsync",
  { GROUP_COMMIT: "on" },
  existsSync("/dev/shm") ? { objectAlone: true, stateRoot: "/dev/shm" } : { objectAlone: true },
);
try {
  await gatherCore(bench, server, quick ? 1 : 2);
} finally {
  await server.stop();
}
for (const p of bench.problems) console.error(`PROBLEM: ${p}`);
if (process.argv.includes("--write") && bench.problems.length === 0) {
  const results = JSON.parse(readFileSync(file, "utf8")) as { figures: Record<string, unknown> };
  results.figures.gather_core = bench.figures.gather_core;
  results.figures.gather_core_batch1 = bench.figures.gather_core_batch1;
  writeFileSync(file, `${JSON.stringify(results, null, 2)}\n`);
  log("stored gather_core and gather_core_batch1 in bench/results.json");
}
process.exitCode = bench.problems.length > 0 ? 1 : 0;
