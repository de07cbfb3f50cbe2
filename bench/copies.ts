// `npm run bench:copies`: the hot SKU behind 16 copies of the Worker, GATHER off and on (issue 44,
// bench/scenarios/copies.ts), without a whole bench run: short points (the quick timing), the stock
// object alone (its queue a sink, as bench/run.ts runs the engine core). Rounds (3 by default,
// `-- --rounds N`) on the same two workerds, off first in odd rounds and on first in even ones, so
// the goal (object calls per hold) is judged on medians; then one copy, off and on, unloaded (one connection) and loaded: the latency the tier adds
// on one isolate. `-- --copies N` for another count; `-- --write` stores the figures in bench/results.json.
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { loadavg, tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { startWorker, type WorkerServer } from "../tools/worker";
import { newBench, QUICK } from "./lib/context";
import { log, median } from "./lib/log";
import type { Point } from "./lib/measure";
import { verify } from "./lib/verify";
import { type CopiesFigure, hotSkuCopies } from "./scenarios/copies";

const file = fileURLToPath(new URL("results.json", import.meta.url));
const arg = (name: string, fallback: number) => {
  const at = process.argv.indexOf(name);
  return at > 0 ? Number(process.argv[at + 1]) : fallback;
};
const copies = arg("--copies", 16);
const rounds = arg("--rounds", 3);
const dir = mkdtempSync(join(tmpdir(), "flashgate-copies-"));
const bench = newBench(QUICK, dir);
const alone = existsSync("/dev/shm") ? { objectAlone: true, stateRoot: "/dev/shm" } : { objectAlone: true };

type Run = Point & { figure: CopiesFigure };

/** A workerd with `n` copies of the Worker, GATHER off or on. */
function serve(n: number, gather: boolean): Promise<WorkerServer> {
  return startWorker(
    `${n} ${n === 1 ? "copy" : "copies"}, GATHER=${gather ? "on" : "off"}`,
    { GROUP_COMMIT: "on", GATHER: gather ? "on" : "off" },
    { ...alone, copies: n },
  );
}

/** One point (a fresh SKU) on `server`, then the check that every hold acknowledged is held once. */
async function point(server: WorkerServer, n: number, gather: boolean, key: string, connections?: number) {
  const p = await hotSkuCopies(bench, server, { key, copies: n, gather, connections });
  await verify(bench);
  bench.checks = [];
  return p;
}

/** Both configurations' workerds, started once (startup dominates a short point), stopped after `work`. */
async function withBoth<T>(n: number, work: (servers: { off: WorkerServer; on: WorkerServer }) => Promise<T>) {
  const servers: WorkerServer[] = [];
  try {
    const off = await serve(n, false);
    servers.push(off);
    const on = await serve(n, true);
    servers.push(on);
    return await work({ off, on });
  } finally {
    for (const server of servers) await server.stop();
  }
}

const summary = (p: Run) => ({
  holdsPerSec: p.rps,
  p50Ms: p.p50Ms,
  p99Ms: p.p99Ms,
  cpuUsPerReservation: p.cpuUsPerRequest,
  callsPerSec: p.figure.callsPerSec,
  meanBatch: p.figure.meanBatch,
});
type Summary = ReturnType<typeof summary>;
const describe = (s: Summary) =>
  `${s.holdsPerSec.toFixed(0)} holds/s, p50 ${s.p50Ms.toFixed(1)} ms, p99 ${s.p99Ms.toFixed(1)} ms, ${s.cpuUsPerReservation.toFixed(0)} µs CPU per reservation; stock object ${s.callsPerSec.toFixed(0)} calls/s, mean batch ${s.meanBatch.toFixed(2)}`;

const byRound: {
  first: "off" | "on";
  off: Summary;
  on: Summary;
  fewerCalls: number;
  holdsRatio: number;
  /** The machine's 1-minute load average after the round (2 cores, shared): what the points competed with. */
  load: number;
}[] = [];
const key = `hot_sku_copies${copies}`;
await withBoth(copies, async (servers) => {
  for (let round = 1; round <= rounds; round++) {
    const order = round % 2 === 1 ? [false, true] : [true, false];
    const got: Partial<Record<"off" | "on", Summary>> = {};
    for (const gather of order) {
      const server = gather ? servers.on : servers.off;
      const p = await point(server, copies, gather, `${key}${gather ? "_gather" : ""}_r${round}`);
      got[gather ? "on" : "off"] = summary(p);
    }
    const off = got.off as Summary;
    const on = got.on as Summary;
    // Calls for the same holds: the object's calls per hold are 1 / its mean batch, so the ratio of
    // the batches, whatever share of this shared machine each point got.
    const fewerCalls = on.meanBatch / off.meanBatch;
    const holdsRatio = on.holdsPerSec / off.holdsPerSec;
    byRound.push({ first: order[0] ? "on" : "off", off, on, fewerCalls, holdsRatio, load: loadavg()[0] ?? 0 });
    log(`round ${round} (${order[0] ? "on" : "off"} first): ${fewerCalls.toFixed(2)}x fewer object calls per hold`);
  }
});
const medianOf = (side: "off" | "on"): Summary => {
  const pick = (f: (s: Summary) => number) => median(byRound.map((r) => f(r[side])));
  return {
    holdsPerSec: pick((s) => s.holdsPerSec),
    p50Ms: pick((s) => s.p50Ms),
    p99Ms: pick((s) => s.p99Ms),
    cpuUsPerReservation: pick((s) => s.cpuUsPerReservation),
    callsPerSec: pick((s) => s.callsPerSec),
    meanBatch: pick((s) => s.meanBatch),
  };
};

// One isolate: what the extra hop costs a hold when no other isolate shares the gatherer.
const single: Record<string, { off: Summary; on: Summary }> = {};
await withBoth(1, async (servers) => {
  for (const connections of [1, QUICK.timing.connections]) {
    const off = summary(await point(servers.off, 1, false, `hot_sku_copies1_c${connections}`, connections));
    const on = summary(await point(servers.on, 1, true, `hot_sku_copies1_c${connections}_gather`, connections));
    single[`c${connections}`] = { off, on };
  }
});
rmSync(dir, { recursive: true, force: true });

const figure = {
  copies,
  rounds: byRound,
  median: {
    off: medianOf("off"),
    on: medianOf("on"),
    fewerCalls: median(byRound.map((r) => r.fewerCalls)),
    holdsRatio: median(byRound.map((r) => r.holdsRatio)),
  },
  single,
  connections: QUICK.timing.connections,
};
/** `figures.copies_rounds` of bench/results.json (docs/PERFORMANCE.md's rounds, bench/report.ts). */
export type CopiesRounds = typeof figure;
log(`hot SKU behind ${copies} copies of the Worker, ${rounds} rounds:`);
byRound.forEach((r, i) => {
  log(`  round ${i + 1} (${r.first} first): GATHER off: ${describe(r.off)}`);
  log(`  round ${i + 1} (${r.first} first): GATHER on:  ${describe(r.on)} (load average ${r.load.toFixed(1)})`);
});
log(`  median GATHER off: ${describe(figure.median.off)}`);
log(`  median GATHER on:  ${describe(figure.median.on)}`);
log(
  `  median of the rounds: ${figure.median.fewerCalls.toFixed(2)}x fewer object calls per hold, holds/s ${figure.median.holdsRatio.toFixed(2)}x`,
);
for (const [c, s] of Object.entries(single)) {
  log(`one copy, ${c}: GATHER off: ${describe(s.off)}`);
  log(`one copy, ${c}: GATHER on:  ${describe(s.on)}`);
}
for (const p of bench.problems) console.error(`PROBLEM: ${p}`);
if (process.argv.includes("--write") && bench.problems.length === 0) {
  const results = JSON.parse(readFileSync(file, "utf8")) as {
    points: Record<string, unknown>;
    figures: Record<string, unknown>;
  };
  // The figures of the rounds and the single copy; the points of the round with the median ratio
  // stand for the configuration in the points table, as a whole bench run's would.
  const medianRound = byRound
    .map((r, i) => ({ i: i + 1, d: Math.abs(r.fewerCalls - figure.median.fewerCalls) }))
    .sort((a, b) => a.d - b.d)[0]?.i;
  for (const gather of ["", "_gather"]) {
    const from = `${key}${gather}_r${medianRound}`;
    results.points[`${key}${gather}`] = { ...(bench.points[from] as object), key: `${key}${gather}` };
    results.figures[`${key}${gather}_batch`] = bench.figures[`${from}_batch`];
  }
  results.figures.copies_rounds = figure;
  writeFileSync(file, `${JSON.stringify(results, null, 2)}\n`);
  log("stored in bench/results.json");
}
process.exitCode = bench.problems.length > 0 ? 1 : 0;
