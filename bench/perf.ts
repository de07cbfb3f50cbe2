// `npm run bench:perf -- <point> [--seconds N] [--js]`: where one edge point's CPU goes, in workerd
// as a whole (C++ and JIT code alike), while wrk loads it directly: `perf record` (software clock, the
// kernel's sampling; no hardware counters needed) on the Worker's workerd, then the top symbols by
// self time. `--js` adds the inspector's CPU profile of the isolate (the JavaScript side by function).
// Points: healthz, sku_view, sold_out, hot_sku, bare, body_floor, floor; engine1 and engine64 (the
// engine core's reserve RPC in batches of 1 or 64, the object alone on tmpfs, as the bench runs it)
// and row (the floor object committing one row per call, tmpfs).
import { spawn } from "node:child_process";
import { randomBytes } from "node:crypto";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { startRedis } from "../tools/redis-server";
import { startBridge } from "../tools/upstash-bridge";
import { startWorker } from "../tools/worker";
import { startBareWorker } from "./lib/bare-worker";
import { FULL } from "./lib/context";
import { startFloorWorker } from "./lib/floor-worker";
import { objectFloor, startBodyWorker, startFloorObjects } from "./lib/floors";
import { log } from "./lib/log";
import { startProfile } from "./lib/profile";
import { through } from "./lib/via";
import { bodyFloor, ceiling, healthz, hotSku, skuView, soldOut, soldOutFloor } from "./scenarios/edge";
import { engineCore } from "./scenarios/engine-core";

const argv = process.argv.slice(2);
const point = argv[0] ?? "";
const seconds = Number(argv.includes("--seconds") ? argv[argv.indexOf("--seconds") + 1] : 8);
const js = argv.includes("--js");
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
if (!POINTS.includes(point)) {
  console.error(`usage: npm run bench:perf -- <${POINTS.join("|")}> [--seconds N] [--js]`);
  process.exit(2);
}

const dir = mkdtempSync(join(tmpdir(), "flashgate-perf-"));
const bench = {
  mode: { ...FULL, timing: { warmSeconds: 2, seconds, connections: 50 } },
  dir,
  points: {},
  redis: {},
  figures: {},
  checks: [],
  problems: [],
};

/** `perf record` of `pid` for `s` seconds, then its report's top lines by self time. */
function perfRecord(pid: number, s: number): Promise<string> {
  const data = join(dir, "perf.data");
  return new Promise((resolve, reject) => {
    const rec = spawn(
      "perf",
      ["record", "-q", "-e", "cpu-clock", "-F", "4000", "-p", String(pid), "-o", data, "--", "sleep", String(s)],
      {
        stdio: "ignore",
      },
    );
    rec.on("error", reject);
    rec.on("exit", () => {
      const report = spawn(
        "perf",
        ["report", "-i", data, "--no-children", "--percent-limit", "0.01", "--stdio", "--sort", "dso,symbol"],
        {
          stdio: ["ignore", "pipe", "ignore"],
        },
      );
      let out = "";
      report.stdout.on("data", (d: Buffer) => {
        out += d.toString();
      });
      report.on("exit", () => resolve(out));
    });
  });
}

/** Where a symbol's time belongs, first match wins. */
const GROUPS: [string, RegExp][] = [
  ["kernel (syscalls, network, scheduling)", /^\[kernel/],
  ["tcmalloc (C++ allocation)", /tcmalloc|TCMalloc/],
  [
    "V8 garbage collection",
    /v8::internal::(Heap|Scaveng|MarkCompact|Sweeper|Marking|MinorMS|ConcurrentMarking|.*GC)|cppgc/,
  ],
  [
    "V8 handles and API (bindings' glue)",
    /v8::internal::GlobalHandles|v8::(Object|Function|Value|String|Isolate|Local|HandleScope|Context)|v8::internal::(HandleScope|Builtins|Runtime_|Factory|LookupIterator|JSObject|Object::)/,
  ],
  ["V8 other", /v8::|Builtins_|^v8/],
  ["JavaScript (JIT code)", /^\[(unknown|JIT)|perf-\d+\.map/],
  ["workerd jsg (JS ⇄ C++ bindings)", /workerd::jsg/],
  ["workerd api (Request, Response, headers, streams)", /workerd::api/],
  ["workerd io and server (HTTP, isolate entry)", /workerd::/],
  ["kj (event loop, async, HTTP parser)", /kj::/],
  ["capnp (RPC between isolates)", /capnp::/],
  ["SQLite", /sqlite/i],
  ["libc", /libc|memcpy|memmove|memset|__/],
];

/** The report's lines as "pct  dso  symbol" (symbols cut to a line), and the share per group. */
function summarize(report: string, cpuUsPerRequest: number): string {
  const rows = report
    .split("\n")
    .map((line) => /^\s*([\d.]+)%\s+(\S+)\s+\[.\]\s+(.*?)\s*(?:-\s+-\s*)?$/.exec(line))
    .filter((m): m is RegExpExecArray => m !== null)
    .map((m) => ({ pct: Number(m[1]), dso: m[2] ?? "", symbol: (m[3] ?? "").replace(/<.*>/g, "<…>").slice(0, 110) }));
  const byGroup = new Map<string, number>();
  for (const r of rows) {
    const where = `${r.dso} ${r.symbol}`;
    const group =
      GROUPS.find(([, re]) => re.test(r.dso.startsWith("[kernel") ? r.dso : r.symbol) || re.test(where))?.[0] ??
      "other";
    byGroup.set(group, (byGroup.get(group) ?? 0) + r.pct);
  }
  const lines = rows.slice(0, 30).map((r) => `${r.pct.toFixed(2).padStart(6)}%  ${r.dso.padEnd(18)} ${r.symbol}`);
  const groups = [...byGroup]
    .sort((a, b) => b[1] - a[1])
    .map(([g, p]) => `${p.toFixed(1).padStart(6)}%  ${((p * cpuUsPerRequest) / 100).toFixed(1).padStart(6)} µs  ${g}`);
  return `${lines.join("\n")}\n\nBy group (share of workerd's samples, and of the point's CPU µs per request):\n${groups.join("\n")}`;
}

let exitCode = 0;
const stops: (() => Promise<void>)[] = [];
try {
  let server: { url: string; directUrl: string; pid: number; inspectorPort?: number };
  let load: (s: typeof server) => Promise<unknown>;
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
  await new Promise((resolve) => setTimeout(resolve, 2_500));
  const report = await perfRecord(server.pid, seconds - 1);
  log(`${point}: perf report of workerd (pid ${server.pid}), self time, direct`);
  const measured = Object.values(bench.points as Record<string, { cpuUsPerRequest: number }>)[0]?.cpuUsPerRequest;
  const figure = Object.values(
    bench.figures as Record<string, { cpuUsPerReservation?: number; cpuUsPerCall?: number }>,
  )[0];
  const row = (await loaded) as { cpuUsPerCall?: number } | undefined;
  console.log(summarize(report, measured ?? figure?.cpuUsPerReservation ?? row?.cpuUsPerCall ?? 0));
  if (profile) {
    console.log("\nJavaScript, by self time (inspector):");
    for (const line of await profile.stop(30))
      console.log(`${line.selfPct.toFixed(1).padStart(5)}%  ${line.fn}  ${line.where}`);
  }
} catch (err) {
  console.error(err);
  exitCode = 1;
} finally {
  for (const stop of stops.reverse()) await stop().catch(() => undefined);
  rmSync(dir, { recursive: true, force: true });
}
process.exit(exitCode);
