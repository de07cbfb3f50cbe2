// `npm run bench:copies`: the hot SKU behind 16 copies of the Worker, GATHER off and on (issue 44,
// bench/scenarios/copies.ts), without a whole bench run: short points (the quick timing), the stock
// object alone (its queue a sink, as bench/run.ts runs the engine core). `-- --copies N` for another
// count; `-- --write` stores the points and figures in bench/results.json.
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { startWorker, type WorkerServer } from "../tools/worker";
import { type Bench, QUICK } from "./lib/context";
import { log } from "./lib/log";
import { verify } from "./lib/verify";
import { hotSkuCopies } from "./scenarios/copies";

const file = fileURLToPath(new URL("results.json", import.meta.url));
const at = process.argv.indexOf("--copies");
const copies = at > 0 ? Number(process.argv[at + 1]) : 16;
const dir = mkdtempSync(join(tmpdir(), "flashgate-copies-"));
const bench: Bench = { mode: QUICK, dir, points: {}, redis: {}, figures: {}, checks: [], problems: [] };
const alone = existsSync("/dev/shm") ? { objectAlone: true, stateRoot: "/dev/shm" } : { objectAlone: true };
const lines: string[] = [];
for (const gather of [false, true]) {
  let server: WorkerServer | undefined;
  try {
    server = await startWorker(
      `${copies} copies, GATHER=${gather ? "on" : "off"}`,
      { GROUP_COMMIT: "on", GATHER: gather ? "on" : "off" },
      { ...alone, copies },
    );
    const key = `hot_sku_copies${copies}${gather ? "_gather" : ""}`;
    const p = await hotSkuCopies(bench, server, { key, copies, gather });
    await verify(bench); // every hold acknowledged is held once, none more (while the Worker runs)
    bench.checks = [];
    lines.push(
      `GATHER ${gather ? "on " : "off"}: ${p.rps.toFixed(0)} holds/s, p50 ${p.p50Ms.toFixed(1)} ms, p99 ${p.p99Ms.toFixed(1)} ms, ${p.cpuUsPerRequest.toFixed(0)} µs CPU per reservation; stock object ${p.figure.callsPerSec.toFixed(0)} calls/s, mean batch ${p.figure.meanBatch.toFixed(1)} (${p.figure.reserveCalls} calls for ${p.figure.reservations})`,
    );
  } finally {
    await server?.stop();
  }
}
rmSync(dir, { recursive: true, force: true });
log(`hot SKU behind ${copies} copies of the Worker:`);
for (const line of lines) log(`  ${line}`);
for (const p of bench.problems) console.error(`PROBLEM: ${p}`);
if (process.argv.includes("--write") && bench.problems.length === 0) {
  const results = JSON.parse(readFileSync(file, "utf8")) as {
    points: Record<string, unknown>;
    figures: Record<string, unknown>;
  };
  Object.assign(results.points, bench.points);
  Object.assign(results.figures, bench.figures);
  writeFileSync(file, `${JSON.stringify(results, null, 2)}\n`);
  log("stored in bench/results.json");
}
process.exitCode = bench.problems.length > 0 ? 1 : 0;
