// `npm run capacity`: the capacity model (bench/lib/capacity.ts, its simulation in
// bench/lib/capacity-sim.ts) from the figures in bench/results.json, printed. `-- --write` stores
// it back as the file's `capacity`, so `npm run bench:report` renders it without a new bench run.
import { readFileSync, writeFileSync } from "node:fs";
import { fileURLToPath } from "node:url";
import { capacityModel, printCapacity } from "./lib/capacity";

const file = fileURLToPath(new URL("results.json", import.meta.url));
const results = JSON.parse(readFileSync(file, "utf8")) as {
  figures: Record<string, unknown>;
  points: Record<string, unknown>;
  capacity?: unknown;
};
const started = performance.now();
const capacity = capacityModel(results.figures, results.points);
printCapacity(capacity);
console.log(`(simulated in ${((performance.now() - started) / 1000).toFixed(1)} s)`);
if (process.argv.includes("--write")) {
  results.capacity = capacity;
  writeFileSync(file, `${JSON.stringify(results, null, 2)}\n`);
  console.log("stored as `capacity` in bench/results.json");
}
