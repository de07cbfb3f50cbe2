// `npm run bench:perf -- <point> [--seconds N] [--js]`: where one edge point's CPU goes, in workerd
// as a whole (C++ and JIT code alike), while wrk loads it directly: `perf record` (software clock, the
// kernel's sampling; no hardware counters needed) on the Worker's workerd, then the top symbols by
// self time. `--js` adds the inspector's CPU profile of the isolate (the JavaScript side by function,
// and its samples by part of a request: bench/lib/parts.ts); `hot_sku --js --save` records the parts
// in bench/results.json (figures.hot_sku_parts), which docs/PERFORMANCE.md shows.
// Points: healthz, sku_view, sold_out, hot_sku, bare, body_floor, floor; engine1 and engine64 (the
// engine core's reserve RPC in batches of 1 or 64, the object alone on tmpfs, as the bench runs it)
// and row (the floor object committing one row per call, tmpfs).
// `--callgrind` (engine1, statements, row, noop; and bare, framework, healthz: GETs from Node, ten in flight):
// instructions instead of samples, workerd under valgrind's callgrind, counted over `--calls N`
// (default 400, 2,000 for a GET) after 2,000 warm-up calls, grouped as above; `--save` records them
// in bench/results.json (figures.callgrind), which docs/PERFORMANCE.md shows.
import { execFileSync } from "node:child_process";
import { randomBytes } from "node:crypto";
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { startRedis } from "../tools/redis-server";
import { startBridge } from "../tools/upstash-bridge";
import { createSku, startWorker } from "../tools/worker";
import { startBareWorker } from "./lib/bare-worker";
import { countInstructions, useCallgrind } from "./lib/callgrind";
import { FULL, newBench } from "./lib/context";
import { engineRun } from "./lib/engine-route";
import { startFloorWorker } from "./lib/floor-worker";
import { objectFloor, startBodyWorker, startFloorObjects, startFrameworkWorker } from "./lib/floors";
import { log } from "./lib/log";
import { type Parts, partsFigure, partsOf } from "./lib/parts";
import { perfProfile, printPerf } from "./lib/perf-record";
import { startProfile, topFunctions } from "./lib/profile";
import { through } from "./lib/via";
import { bodyFloor, ceiling, healthz, hotSku, skuView, soldOut, soldOutFloor } from "./scenarios/edge";
import { engineCore } from "./scenarios/engine-core";

const argv = process.argv.slice(2);
const point = argv[0] ?? "";
const seconds = Number(argv.includes("--seconds") ? argv[argv.indexOf("--seconds") + 1] : 8);
const js = argv.includes("--js");
const callgrind = argv.includes("--callgrind");
const COUNTED = ["engine1", "statements", "row", "noop", "bare", "framework", "healthz"];
const GETS = ["bare", "framework", "healthz"];
const calls = Number(argv.includes("--calls") ? argv[argv.indexOf("--calls") + 1] : GETS.includes(point) ? 2_000 : 400);
const POINTS = [
  "healthz",
  "sku_view",
  "sold_out",
  "hot_sku",
  "bare",
  "body_floor",
  "floor",
  "engine1",
  "engine64",
  "row",
];
if (callgrind && !COUNTED.includes(point)) {
  console.error(`--callgrind counts ${COUNTED.join(", ")} (the other edge points under valgrind would take hours)`);
  process.exit(2);
}
if (!POINTS.includes(point) && !(callgrind && COUNTED.includes(point))) {
  console.error(`usage: npm run bench:perf -- <${POINTS.join("|")}> [--seconds N] [--js]`);
  process.exit(2);
}

const dir = mkdtempSync(join(tmpdir(), "flashgate-perf-"));
const bench = newBench({ ...FULL, timing: { warmSeconds: 2, seconds, connections: 50 } }, dir);

let exitCode = 0;
const stops: (() => Promise<void>)[] = [];
try {
  if (callgrind) {
    await countPoint();
  } else await samplePoint();
} catch (err) {
  console.error(err);
  exitCode = 1;
} finally {
  for (const stop of stops.reverse()) await stop().catch(() => undefined);
  rmSync(dir, { recursive: true, force: true });
}
process.exit(exitCode);

/** `--callgrind`: the point's instructions per call, printed, and recorded with `--save`. */
async function countPoint(): Promise<void> {
  useCallgrind(dir);
  log(`${point}: starting workerd under callgrind (a minute or two)`);
  let pid: number;
  let drive: (n: number) => Promise<number>;
  if (point === "engine1") {
    const worker = await startWorker("callgrind", { GROUP_COMMIT: "on" }, { objectAlone: true, stateRoot: "/dev/shm" });
    stops.push(() => worker.stop());
    pid = worker.pid;
    await createSku(worker, "cg", 1_000_000);
    let round = 0;
    drive = async (n) => {
      const r = await engineRun(worker, { sku: "cg", count: n, batch: 1, concurrency: 1, run: `cg${round++}` });
      return r.rpcs;
    };
  } else if (GETS.includes(point)) {
    const server =
      point === "bare"
        ? await startBareWorker()
        : point === "framework"
          ? await startFrameworkWorker()
          : // The metrics flush is paced by the wall clock: under valgrind's slowdown once a second
            // would be charged to a fiftieth as many requests as at full speed.
            await startWorker("callgrind", { METRICS_FLUSH_INTERVAL_MS: "60000" });
    stops.push(() => server.stop());
    pid = server.pid;
    const get = () => fetch(`${server.directUrl}/healthz`).then((res) => res.arrayBuffer());
    drive = async (n) => {
      for (let sent = 0; sent < n; sent += 10) await Promise.all(Array.from({ length: Math.min(10, n - sent) }, get));
      return n;
    };
  } else {
    const objects = await startFloorObjects("/dev/shm");
    stops.push(() => objects.stop());
    pid = objects.pid;
    drive = async (n) => {
      const body = JSON.stringify({ method: point, count: n, name: point });
      const res = await fetch(objects.url, { method: "POST", body });
      return ((await res.json()) as { calls: number }).calls;
    };
  }
  await drive(2_000);
  const counted = await countInstructions(point, pid, dir, () => drive(calls));
  console.log(
    `${point}: ${counted.kInstructions.toFixed(0)} K instructions of workerd per call (${counted.calls} calls)`,
  );
  for (const [group, k] of counted.groups) console.log(`${k.toFixed(1).padStart(8)} K  ${group}`);
  if (argv.includes("--save")) {
    saveFigure(`callgrind.${point}`, (figures, commit) => {
      const saved = (figures.callgrind ?? {}) as Record<string, unknown>;
      saved[point] = { ...counted, commit, date: new Date().toISOString() };
      figures.callgrind = saved;
    });
  }
}

/** `--save`: `put` writes this run's figure into bench/results.json's figures (HEAD's commit given). */
function saveFigure(name: string, put: (figures: Record<string, unknown>, commit: string) => void): void {
  const path = join(import.meta.dirname, "results.json");
  const results = JSON.parse(readFileSync(path, "utf8")) as { figures: Record<string, unknown> };
  put(results.figures, execFileSync("git", ["rev-parse", "--short", "HEAD"], { encoding: "utf8" }).trim());
  writeFileSync(path, `${JSON.stringify(results, null, 2)}\n`);
  log(`saved in bench/results.json (figures.${name})`);
}

async function samplePoint(): Promise<void> {
  let server: { url: string; directUrl: string; pid: number; inspectorPort?: number };
  let load: (s: typeof server) => Promise<unknown>;
  /** The Worker's bundle, whose modules name the parts of a profile (bench/lib/parts.ts). */
  let bundle: string | undefined;
  if (point === "row") {
    const objects = await startFloorObjects("/dev/shm");
    stops.push(() => objects.stop());
    server = { url: objects.url, directUrl: objects.url, pid: objects.pid };
    load = () => objectFloor(objects, "row", 40_000, "RPC committing one row (tmpfs)");
  } else if (point === "bare" || point === "body_floor" || point === "floor") {
    const worker =
      point === "bare"
        ? await startBareWorker()
        : point === "floor"
          ? await startFloorWorker()
          : await startBodyWorker();
    stops.push(() => worker.stop());
    server = worker;
    load = async () =>
      point === "bare"
        ? ceiling(bench, worker, "bare", "direct")
        : point === "floor"
          ? soldOutFloor(bench, worker, "direct")
          : bodyFloor(bench, worker, "direct");
  } else {
    // As the bench runs Flashgate: its Redis mirror on, through the Upstash bridge.
    const redis = await startRedis();
    stops.push(() => redis.stop());
    const token = randomBytes(24).toString("hex");
    const bridge = await startBridge({ redisUrl: redis.url, token });
    stops.push(() => bridge.close());
    const engine = point.startsWith("engine");
    const worker = await startWorker(
      "perf",
      { GROUP_COMMIT: "on", UPSTASH_REDIS_REST_URL: bridge.url, UPSTASH_REDIS_REST_TOKEN: token },
      { inspect: js, ...(engine ? { objectAlone: true, stateRoot: "/dev/shm" } : {}) },
    );
    stops.push(() => worker.stop());
    server = worker;
    bundle = join(worker.stateDir, "bundle", "index.js");
    const direct = through(worker, "direct");
    load = async () => {
      if (point === "healthz") return healthz(bench, direct, point);
      if (point === "sku_view") return skuView(bench, direct, point);
      if (point === "sold_out") return soldOut(bench, direct, point);
      if (point === "engine1") return engineCore(bench, worker, point, 1);
      if (point === "engine64") return engineCore(bench, worker, point);
      return hotSku(bench, direct, { key: point });
    };
  }
  const profile = js && server.inspectorPort ? await startProfile(server.inspectorPort) : undefined;
  // The warm-up runs first (2 s), then perf samples the measured run.
  const loaded = load(server);
  // The profile is taken as the load ends, not after perf's report, while the queue drains.
  const taken = profile && loaded.then(() => profile.take());
  taken?.catch(() => undefined); // a failed load is reported by `await loaded` below
  await new Promise((resolve) => setTimeout(resolve, 2_500));
  const perf = await perfProfile(server.pid, seconds - 1, dir);
  log(`${point}: perf report of workerd (pid ${server.pid}), self time, direct`);
  // An engine point's figure is per reservation (per call in batches of 1); the floor object's per call.
  const fig = (await loaded) as { cpuUsPerCall?: number; cpuUsPerReservation?: number } | undefined;
  // Read once the load is done: the point is in bench.points only then.
  const measured = Object.values(bench.points as Record<string, { cpuUsPerRequest: number }>)[0]?.cpuUsPerRequest;
  console.log(printPerf(perf, measured ?? fig?.cpuUsPerReservation ?? fig?.cpuUsPerCall ?? 0));
  if (taken) {
    const cpuProfile = await taken;
    console.log("\nJavaScript, by self time (inspector):");
    for (const line of topFunctions(cpuProfile, 30))
      console.log(`${line.selfPct.toFixed(1).padStart(5)}%  ${line.fn}  ${line.where}`);
    if (bundle) printParts(partsOf(cpuProfile, readFileSync(bundle, "utf8")), measured ?? 0);
  } else if (argv.includes("--save")) log("--save keeps a profile's parts: add --js");
}

/**
 * The isolate's samples by part (bench/lib/parts.ts); `--save` on the hot SKU records them in
 * bench/results.json (figures.hot_sku_parts), which docs/PERFORMANCE.md shows.
 */
function printParts(parts: Parts, cpuUsPerRequest: number): void {
  const busy = Math.max(1, parts.samples - parts.idleSamples);
  console.log(`\nThe isolate's busy samples by part (${busy} of ${parts.samples}; the rest idle):`);
  for (const { part, samples } of parts.parts)
    console.log(`${((samples * 100) / busy).toFixed(1).padStart(5)}%  ${part}`);
  if (point !== "hot_sku" || !argv.includes("--save")) return;
  const loadSeconds = bench.mode.timing.warmSeconds + seconds;
  saveFigure("hot_sku_parts", (figures, commit) => {
    figures.hot_sku_parts = partsFigure(parts, { cpuUsPerRequest, perf: true, loadSeconds, commit });
  });
}
