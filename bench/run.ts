// `npm run bench [-- --quick] [-- --baseline <ref>[,<ref>…] [--rounds N]]`: every part of the system on 127.0.0.1,
// load from other processes (wrk, redis-benchmark), figures side by side in one run:
//   the ceiling (a bare Worker in its own workerd), GET /healthz, the sold-out storm and its floor,
//   the hot SKU, each through Miniflare's entry worker and directly (bench/lib/via.ts); the hot SKU with
//   group commit off and with 4 shards, the classic design (Node + Redis Lua) under the same
//   wrk, Redis's own EVALSHA of lua/reserve.lua, the stock object's engine core, the order pipeline
//   (and beside it, the same with one webhook endpoint subscribed to every order change);
//   with --baseline, the same edge points on earlier commits' Workers (before → after in one run).
// Beside each throughput: the CPU µs per request of the processes under test, from /proc.
// Checks every reservation it made; writes bench/results.json, then docs/PERFORMANCE.md from it
// (bench/report.ts). Exits non-zero on any unexpected answer or
// failed check.
import { execFileSync } from "node:child_process";
import { randomBytes } from "node:crypto";
import { existsSync, mkdtempSync, readFileSync, rmSync, symlinkSync, writeFileSync } from "node:fs";
import { cpus, hostname, platform, release, tmpdir, totalmem } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { createClient } from "redis";
import { loadScripts } from "../tools/lua";
import { startRedis } from "../tools/redis-server";
import { startBridge } from "../tools/upstash-bridge";
import { startWorker, type WorkerServer } from "../tools/worker";
import { startBareWorker } from "./lib/bare-worker";
import { capacityModel, printCapacity } from "./lib/capacity";
import { FULL, newBench, QUICK } from "./lib/context";
import { startFloorWorker } from "./lib/floor-worker";
import { FLOOR_STATE, objectFloor, startBodyWorker, startFloorObjects } from "./lib/floors";
import { log } from "./lib/log";
import type { Point } from "./lib/measure";
import { partsFigure, partsOf } from "./lib/parts";
import { type PerfPoint, profiled } from "./lib/perf-record";
import { startPostFloor } from "./lib/post-floor";
import { startProfile } from "./lib/profile";
import { startReceiverProcess } from "./lib/receiver";
import { verify } from "./lib/verify";
import { through, VIAS, viaKey } from "./lib/via";
import { type Results, writeReport } from "./report";
import { classic } from "./scenarios/classic";
import { classicPipeline } from "./scenarios/classic-pipeline";
import { hotSkuCopies } from "./scenarios/copies";
import { drawDecide, drawDecideSharded, SHARDED_ENTRANTS } from "./scenarios/draw";
import {
  bodyFloor,
  type Ceiling,
  ceiling,
  ceilingOf,
  healthz,
  hotSku,
  skuView,
  soldOut,
  soldOutFloor,
  tokens,
} from "./scenarios/edge";
import { engineCore } from "./scenarios/engine-core";
import { gatherCore } from "./scenarios/gather-core";
import { memory } from "./scenarios/memory";
import { orderPipelineWebhooks, profiledHandOff } from "./scenarios/order-hand-off";
import { hotSkuOrders, orderPipeline } from "./scenarios/order-pipeline";
import { powBrowser } from "./scenarios/pow-browser";
import { powCheck } from "./scenarios/pow-check";
import { redisReserve } from "./scenarios/redis";

const argv = process.argv.slice(2);
const quick = argv.includes("--quick");
const option = (name: string) =>
  argv.includes(name) ? (argv[argv.indexOf(name) + 1] ?? "").split(",").filter(Boolean) : [];
/** How the headline engine core runs: no queue consumer in the workerd, state on a tmpfs (no fsync). */
const ENGINE_ALONE: { objectAlone: boolean; stateRoot?: string } = existsSync("/dev/shm")
  ? { objectAlone: true, stateRoot: "/dev/shm" }
  : { objectAlone: true };
const baselineRefs = option("--baseline");
/**
 * `--rounds N`: pairs per baseline point, which Worker goes first alternating, and pairs of the order
 * hand-off point (endpoint off / on), which goes first alternating (default 3; 1 with --quick).
 */
const rounds = Number(option("--rounds")[0] ?? (quick ? 1 : 3));
if (!Number.isInteger(rounds) || rounds < 1) {
  console.error("--rounds takes a whole number of rounds, 1 or more (for example --rounds 3)");
  process.exit(2);
}
/** `--draw-entrants N`: entrants of the sharded draw point `draw_decide_sharded` (default 10,000). */
const drawEntrants = Number(option("--draw-entrants")[0] ?? SHARDED_ENTRANTS);
if (!Number.isInteger(drawEntrants) || drawEntrants < 8) {
  console.error("--draw-entrants takes a whole number of entrants, 8 or more (for example --draw-entrants 10000)");
  process.exit(2);
}
/** `--only sold_out,hot_sku`: just these points (and the ceiling), for measuring one change quickly. */
/** The difficulty the token point's Worker checks: its cost does not depend on it, so an easy one. */
const POW_BENCH_BITS = 4;
const only = option("--only");
const wanted = (key: string) => only.length === 0 || only.includes(key);
const ROOT = fileURLToPath(new URL("..", import.meta.url));
const RESULTS = join(ROOT, "bench/results.json");

function sh(cmd: string, args: string[], cwd = ROOT): string {
  try {
    return execFileSync(cmd, args, { encoding: "utf8", cwd, stdio: ["ignore", "pipe", "ignore"] }).trim();
  } catch {
    return "unknown";
  }
}
function pkgVersion(name: string): string {
  return (JSON.parse(readFileSync(join(ROOT, "node_modules", name, "package.json"), "utf8")) as { version: string })
    .version;
}
for (const tool of ["wrk", "redis-server", "redis-benchmark"]) {
  if (sh("sh", ["-c", `command -v ${tool}`]) === "unknown") {
    console.error(`${tool} is not installed: apt-get install -y ${tool === "wrk" ? "wrk" : "redis-server"}`);
    process.exit(2);
  }
}

const stack: (() => Promise<void>)[] = [];
const bench = newBench(quick ? QUICK : FULL, mkdtempSync(join(tmpdir(), "flashgate-bench-load-")));
stack.push(async () => rmSync(bench.dir, { recursive: true, force: true }));
const started = new Date();
const baselines: Results["baselines"] = [];
let exitCode = 0;
try {
  log(`mode: ${quick ? "quick" : "full"}; starting redis-server ×2, the Upstash bridge, the bare Worker and Flashgate`);
  const mirrorRedis = await startRedis();
  stack.push(() => mirrorRedis.stop());
  const bridgeToken = randomBytes(24).toString("hex");
  const bridge = await startBridge({ redisUrl: mirrorRedis.url, token: bridgeToken });
  stack.push(() => bridge.close());
  const mirror = { UPSTASH_REDIS_REST_URL: bridge.url, UPSTASH_REDIS_REST_TOKEN: bridgeToken };
  // The classic design and redis-benchmark get their own redis-server: the mirror's writes stay out of it.
  const luaServer = await startRedis();
  stack.push(() => luaServer.stop());
  const redis = createClient({ url: luaServer.url });
  await redis.connect();
  stack.push(async () => void (await redis.close()));
  await loadScripts(redis);

  // One at a time: each workerd is found as the new child process (its CPU is read from /proc).
  const bare = await startBareWorker();
  stack.push(() => bare.stop());
  const start = async (
    label: string,
    vars: Record<string, string>,
    opts: Parameters<typeof startWorker>[2] = {},
  ): Promise<WorkerServer> => {
    // No inspector on a measured Worker (`inspect` only for profiles and heaps): with the inspector
    // on, workerd serves the same requests with 20-25% more CPU per sold-out answer here, which once
    // made this run's own Worker look worse than identical code started as a baseline.
    const server = await startWorker(label, { ...mirror, ...vars }, opts);
    stack.push(() => server.stop());
    return server;
  };
  const on = await start("GROUP_COMMIT=on", { GROUP_COMMIT: "on" });
  const off = wanted("hot_sku_gc_off") ? await start("GROUP_COMMIT=off", { GROUP_COMMIT: "off" }) : on;
  const pow = wanted("tokens_pow")
    ? await start(`POW_BITS=${POW_BENCH_BITS}`, { GROUP_COMMIT: "on", POW_BITS: String(POW_BENCH_BITS) })
    : undefined;

  // The ceiling beside each edge point: the bare Worker runs before and after it, and the point is
  // divided by the mean of those two runs. A ratio of two runs minutes apart on a shared machine
  // measures the machine's drift as much as the gateway: the five bare runs of one full bench here
  // ranged from 1,511 to 2,025 req/s, and the same Worker code did /healthz at 1,454 and 1,888.
  // Every edge point runs twice: through Miniflare's entry worker, then directly (bench/lib/via.ts).
  const ceilings: Record<string, Ceiling> = {};
  const floor = wanted("sold_out_floor") ? await startFloorWorker() : undefined;
  if (floor) stack.push(() => floor.stop());
  const bodyReader = wanted("body_floor") ? await startBodyWorker() : undefined;
  if (bodyReader) stack.push(() => bodyReader.stop());
  for (const via of VIAS) {
    let lastBare = await ceiling(bench, bare, "bare_worker", via);
    const besideCeiling = async (key: string, point: () => Promise<unknown>) => {
      const before = lastBare;
      await point();
      lastBare = await ceiling(bench, bare, `bare_worker_after_${key}`, via);
      ceilings[viaKey(key, via)] = ceilingOf([before, lastBare]);
    };
    const gateway = through(on, via);
    if (bodyReader) await besideCeiling("body_floor", () => bodyFloor(bench, bodyReader, via));
    if (wanted("healthz")) await besideCeiling("healthz", () => healthz(bench, gateway, viaKey("healthz", via)));
    if (wanted("sku_view")) await besideCeiling("sku_view", () => skuView(bench, gateway, viaKey("sku_view", via)));
    if (wanted("sold_out")) await besideCeiling("sold_out", () => soldOut(bench, gateway, viaKey("sold_out", via)));
    if (floor) await besideCeiling("sold_out_floor", () => soldOutFloor(bench, floor, via));
    if (wanted("tokens")) await besideCeiling("tokens", () => tokens(bench, gateway, { key: viaKey("tokens", via) }));
    if (wanted("tokens_code")) {
      const key = viaKey("tokens_code", via);
      await besideCeiling("tokens_code", () => tokens(bench, gateway, { key, accessCodes: true }));
    }
    if (pow) {
      const key = viaKey("tokens_pow", via);
      await besideCeiling("tokens_pow", () => tokens(bench, through(pow, via), { key, powBits: POW_BENCH_BITS }));
    }
    if (wanted("hot_sku")) {
      await besideCeiling("hot_sku", async () => {
        const hot = await hotSku(bench, gateway, { key: viaKey("hot_sku", via) });
        // The pipeline catches up before the next bare run, so that run has the machine to itself.
        await hotSkuOrders(bench, on, hot.sku, viaKey("hot_sku_orders", via));
      });
    }
  }
  bench.figures.ceilings = ceilings;
  // Issue #51: a hot product in 12 sizes beside the plain hot SKU, directly, in pairs of rounds
  // (which goes first alternating); the figure is the ratio of their median CPU per reservation.
  if (wanted("hot_sizes")) {
    const HOT_SIZES = 12;
    const direct = through(on, "direct");
    const cpu: Record<"plain" | "sizes", number[]> = { plain: [], sizes: [] };
    for (let round = 0; round < rounds; round++) {
      for (const who of round % 2 === 0 ? (["plain", "sizes"] as const) : (["sizes", "plain"] as const)) {
        const key = `${who === "plain" ? "hot_sku_pair" : "hot_sizes"}_r${round}_direct`;
        const point = await hotSku(bench, direct, { key, ...(who === "sizes" ? { sizes: HOT_SIZES } : {}) });
        cpu[who].push(point.cpuUsPerRequest);
      }
    }
    const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)] ?? Number.NaN;
    bench.figures.hot_sizes = {
      rounds,
      sizes: HOT_SIZES,
      plainCpuUs: cpu.plain,
      sizesCpuUs: cpu.sizes,
      ratio: median(cpu.sizes) / median(cpu.plain),
    };
  }
  if (wanted("hot_sku_gc_off")) await hotSku(bench, off, { key: "hot_sku_gc_off" });
  if (wanted("hot_sku_4_shards")) await hotSku(bench, on, { key: "hot_sku_4_shards", shards: 4 });
  if (wanted("hot_sku_copies")) {
    // Issue 44: one stock object behind 16 copies of the Worker (16 isolates), GATHER off and on;
    // each stopped before the next starts (17 isolates apiece).
    for (const gather of [false, true]) {
      const copies = await startWorker(
        `16 copies, GATHER=${gather ? "on" : "off"}`,
        { GROUP_COMMIT: "on", GATHER: gather ? "on" : "off" },
        { ...ENGINE_ALONE, copies: 16 },
      );
      try {
        await hotSkuCopies(bench, copies, { key: `hot_sku_copies16${gather ? "_gather" : ""}`, copies: 16, gather });
        // Its holds are checked while it runs: the run's last check comes after it stopped.
        await verify({ ...bench, checks: bench.checks.filter((c) => c.server === copies) });
      } finally {
        bench.checks = bench.checks.filter((c) => c.server !== copies);
        await copies.stop();
      }
    }
  }

  if (wanted("classic")) await classic(bench, redis, luaServer.url, luaServer.process.pid ?? 0);
  if (wanted("redis")) {
    await redisReserve(bench, redis, luaServer.port, luaServer.process.pid ?? 0);
    // The classic design made as durable as a committed SQLite transaction: the append-only file
    // fsynced before every answer (its directory on disk, like the Worker's state).
    const durable = await startRedis({ appendfsync: "always" });
    const client = createClient({ url: durable.url });
    try {
      await client.connect();
      await loadScripts(client);
      await redisReserve(bench, client, durable.port, durable.process.pid ?? 0, { suffix: "_fsync_always" });
    } finally {
      await client.close();
      await durable.stop();
    }
  }
  /** This run's engine core server (object alone, tmpfs): the baselines' engine core runs beside it. */
  let engineAlone: WorkerServer | undefined;
  if (wanted("engine_core")) {
    // The engine core as the object runs on Cloudflare (the headline): alone in its workerd (no
    // queue consumer: the consumer and D1 are another Worker invocation and another database there;
    // the object still writes and flushes its outbox, the queue drops what it gets), and its commit
    // not waiting for a local fsync (state on a tmpfs): on Cloudflare a commit is made durable by
    // replication to followers while the object goes on behind its output gate.
    const cloudflare = await start(
      "GROUP_COMMIT=on, object alone, commit without fsync",
      { GROUP_COMMIT: "on" },
      ENGINE_ALONE,
    );
    engineAlone = cloudflare;
    await engineCore(bench, cloudflare);
    // Its fixed cost per call: the same object called with one reservation per call.
    await engineCore(bench, cloudflare, "engine_core_batch1", 1);
    // The gatherer's cost per call (issue 44): the same object, batches straight and through it.
    await gatherCore(bench, cloudflare);
    // The same object with an fsync per commit (state on disk): beside Redis with appendfsync always.
    const fsync = await start(
      "GROUP_COMMIT=on, object alone, fsync per commit",
      { GROUP_COMMIT: "on" },
      { objectAlone: true },
    );
    await engineCore(bench, fsync, "engine_core_fsync");
    // And as `npm run dev` runs it: the whole order pipeline in the same workerd, state on disk.
    await engineCore(bench, on, "engine_core_shared");
  }
  if (wanted("floor_objects")) {
    // The floors of a stock object's call, called as the engine core is (one in flight, from the
    // Worker in the same workerd): an RPC that does nothing, and one that commits one row.
    const calls = bench.mode.engineReservations / 8;
    log(`floor objects: ${calls} calls each, one in flight`);
    for (const [where, root] of Object.entries(FLOOR_STATE)) {
      const objects = await startFloorObjects(root);
      try {
        if (where === "tmpfs")
          bench.figures.floor_rpc_noop = await objectFloor(objects, "noop", calls, "RPC doing nothing");
        bench.figures[`floor_rpc_row_${where}`] = await objectFloor(
          objects,
          "row",
          calls,
          `RPC committing one row (${where})`,
        );
      } finally {
        await objects.stop();
      }
    }
  }
  if (wanted("engine_core") && argv.includes("--profile")) {
    // `--profile`: where the engine core's time goes, on a Worker of its own started with the inspector.
    log("profiling the engine core (CPU profile of the Worker's isolate)");
    const inspected = await start("profiled engine", { GROUP_COMMIT: "on" }, { inspect: true });
    const profile = await startProfile(inspected.inspectorPort ?? 0);
    await engineCore(bench, inspected, "profiled_engine_core");
    bench.figures.engine_core_profile = await profile.stop(30);
    delete bench.figures.profiled_engine_core;
  }

  if (wanted("memory")) {
    // The object's heap with many holds and many users (a Worker of its own, with the inspector).
    const inspected = await start("memory", { GROUP_COMMIT: "on" }, { inspect: true });
    await memory(bench, inspected, { holds: 100_000, paidUsers: 1_000_000 });
  }
  if (wanted("order_pipeline"))
    await orderPipeline(
      bench,
      on,
      (bench.figures.engine_core_fsync as { cpuUsPerReservation?: number } | undefined)?.cpuUsPerReservation,
    );
  // The classic design's whole pipeline beside it (Redis Lua + outbox → RabbitMQ with confirms → MariaDB),
  // the producer and consumer in processes of their own; skipped, with the reason, if a service is missing.
  if (wanted("classic_pipeline")) await classicPipeline(bench, redis, luaServer.url, luaServer.process.pid ?? 0);
  /**
   * One endpoint subscribed to every type, at a receiver in a process of its own, on a Worker of its
   * own; with `--profile`, then one sale more on a Worker started with the inspector.
   */
  const handOff = async (label: string, batch?: { maxEvents: number; maxWaitMs: number }) => {
    const receiver = await startReceiverProcess();
    stack.push(() => receiver.stop());
    const vars = { GROUP_COMMIT: "on", WEBHOOK_ALLOW_HTTP_LOCALHOST: "true" };
    const hooks = await start(label, vars);
    const floor = await startPostFloor();
    stack.push(() => floor.stop());
    const kept = await startPostFloor(true);
    stack.push(() => kept.stop());
    await orderPipelineWebhooks(bench, hooks, receiver, floor, kept, rounds, batch);
    if (argv.includes("--profile")) {
      const inspected = await start(`profiled ${label}`, vars, { inspect: true });
      await profiledHandOff(bench, inspected, receiver, batch);
    }
  };
  // The order hand-off at work: the receiver's CPU stays off this process's event loop, which hosts
  // Miniflare; its Worker may deliver to http://127.0.0.1; the plain pipeline beside it on that Worker.
  if (wanted("order_pipeline_webhooks")) await handOff("GROUP_COMMIT=on, webhooks to 127.0.0.1");
  // The same with the endpoint batched (issue #53, API.md v1.4 "Webhook batches"): up to 100 events a
  // message, the oldest waiting at most 1 s.
  if (wanted("order_pipeline_webhook_batches"))
    await handOff("GROUP_COMMIT=on, batched webhooks to 127.0.0.1", { maxEvents: 100, maxWaitMs: 1000 });
  if (wanted("draw_decide")) await drawDecide(bench, on);
  if (wanted("draw_decide_sharded")) await drawDecideSharded(bench, on, drawEntrants);
  if (wanted("pow_check")) await powCheck(bench, on);
  if (wanted("pow_browser")) await powBrowser(bench, on);

  for (const ref of baselineRefs) {
    const commit = sh("git", ["rev-parse", "--short", ref]);
    const subject = sh("git", ["log", "-1", "--format=%s", ref]);
    const tree = mkdtempSync(join(tmpdir(), `flashgate-baseline-${commit}-`));
    execFileSync("git", ["worktree", "add", "--detach", tree, ref], { cwd: ROOT, stdio: "ignore" });
    stack.push(async () => {
      execFileSync("git", ["worktree", "remove", "--force", tree], { cwd: ROOT, stdio: "ignore" });
    });
    if (!existsSync(join(tree, "node_modules"))) symlinkSync(join(ROOT, "node_modules"), join(tree, "node_modules"));
    log(`baseline ${commit} (${subject})`);
    const server = await start(`baseline ${commit}`, { GROUP_COMMIT: "on" }, { root: tree });
    const keys: Record<string, string> = { engine_core: `base_${commit}_engine_core` };
    // An earlier commit may fail where today's does not (one earlier engine core overran Miniflare's
    // queue broker, 10,000 timers, and took its workerd down): that is recorded as a problem of the
    // run, its reservations are not checked, and the bench goes on.
    const attempt = async (what: string, point: () => Promise<unknown>) => {
      try {
        await point();
      } catch (err) {
        bench.problems.push(`baseline ${commit} ${what} failed: ${String(err).slice(0, 300)}`);
        bench.checks = bench.checks.filter((check) => check.server !== server);
      }
    };
    // Each edge point both ways in: the earlier Worker and this run's back to back, so each pair shares
    // the machine's state of that minute (the main points ran minutes earlier), `rounds` times, which
    // one goes first alternating; the report takes the median of each side's rounds.
    const points = {
      healthz: (gateway: WorkerServer, key: string) => healthz(bench, gateway, key),
      sold_out: (gateway: WorkerServer, key: string) => soldOut(bench, gateway, key),
      hot_sku: (gateway: WorkerServer, key: string) => hotSku(bench, gateway, { key }),
    };
    const roundKeys: Record<string, string[]> = {};
    for (const via of VIAS) {
      for (const [point, measurePoint] of Object.entries(points)) {
        if (!wanted(point)) continue;
        for (let round = 0; round < rounds; round++) {
          for (const who of round % 2 === 0 ? (["base", "now"] as const) : (["now", "base"] as const)) {
            const name = viaKey(who === "base" ? point : `now_${point}`, via);
            const key = viaKey(`${who}_${commit}_${point}${round > 0 ? `_r${round}` : ""}`, via);
            keys[name] ??= key;
            roundKeys[name] = [...(roundKeys[name] ?? []), key];
            await attempt(point, () => measurePoint(through(who === "base" ? server : on, via), key));
          }
        }
      }
    }
    // The engine core before → after; its figure is under `figures` (a baseline from before the
    // harness counted SQL statements reports them as NaN).
    if (wanted("engine_core")) {
      const alone = await start(
        `baseline ${commit}, object alone`,
        { GROUP_COMMIT: "on" },
        { root: tree, ...ENGINE_ALONE },
      );
      await attempt("engine_core", () => engineCore(bench, alone, keys.engine_core));
      // Its fixed cost per call (batches of 1), the earlier object and this run's back to back, which
      // one goes first alternating, as the edge points are.
      const now = engineAlone;
      for (let round = 0; now && round < rounds; round++) {
        for (const who of round % 2 === 0 ? (["base", "now"] as const) : (["now", "base"] as const)) {
          const name = `${who === "base" ? "" : "now_"}engine_core_batch1`;
          const key = `${who}_${commit}_engine_core_batch1_r${round}`;
          roundKeys[name] = [...(roundKeys[name] ?? []), key];
          await attempt("engine_core_batch1", () => engineCore(bench, who === "base" ? alone : now, key, 1));
        }
      }
    }
    baselines.push({ ref, commit, subject, keys, rounds: roundKeys });
  }

  if (!quick && only.length === 0) {
    // Where the time goes, by part of a reservation (bench/lib/parts.ts): a CPU profile of the
    // hot-SKU path, direct, on a Worker of its own started with the inspector (not a measured run).
    log("profiling the hot-SKU path (CPU profile of the Worker's isolate)");
    const inspected = await start("profiled", { GROUP_COMMIT: "on" }, { inspect: true });
    const profile = await startProfile(inspected.inspectorPort ?? 0);
    const point = await hotSku(bench, through(inspected, "direct"), {
      key: "profiled_hot_sku",
      label: "hot SKU under the profiler",
    });
    const parts = partsOf(await profile.take(), readFileSync(join(inspected.stateDir, "bundle", "index.js"), "utf8"));
    const { warmSeconds, seconds } = bench.mode.timing;
    const head = sh("git", ["rev-parse", "--short", "HEAD"]);
    const run = {
      cpuUsPerRequest: point.cpuUsPerRequest,
      perf: false,
      loadSeconds: warmSeconds + seconds,
      commit: head,
    };
    bench.figures.hot_sku_parts = partsFigure(parts, run);
    delete bench.points.profiled_hot_sku;
  }

  if ((!quick && only.length === 0) || argv.includes("--perf")) {
    // Where workerd's CPU goes, C++ and JavaScript alike (`perf record`, bench/lib/perf-record.ts):
    // the bare Worker, three edge points direct, the engine core one reservation per call and the
    // one-row floor object, each measured again while perf samples it.
    if (sh("sh", ["-c", "command -v perf"]) === "unknown") {
      bench.problems.push("perf is not installed (apt-get install -y linux-perf): no profile of workerd");
    } else {
      log("perf profiles of workerd (bare, /healthz, sold-out, hot SKU, engine core ×1, one-row floor)");
      /** A load point measured again under perf, its figure the CPU per request. */
      const edge = (label: string, pid: number, point: () => Promise<Point>) =>
        profiled(label, pid, bench.dir, point, (p) => p.cpuUsPerRequest);
      const profiles: Record<string, PerfPoint> = {};
      const direct = through(on, "direct");
      profiles.bare = await edge("bare Worker", bare.pid, () => ceiling(bench, bare, "perf_bare", "direct"));
      profiles.healthz = await edge("GET /healthz", on.pid, () => healthz(bench, direct, "perf_healthz"));
      profiles.sold_out = await edge("sold-out storm", on.pid, () => soldOut(bench, direct, "perf_sold_out"));
      profiles.hot_sku = await edge("hot SKU", on.pid, () => hotSku(bench, direct, { key: "perf_hot_sku" }));
      const alone = await start("perf: object alone, tmpfs", { GROUP_COMMIT: "on" }, ENGINE_ALONE);
      profiles.engine_batch1 = await profiled(
        "engine core, batches of 1",
        alone.pid,
        bench.dir,
        () => engineCore(bench, alone, "perf_engine_batch1", 1),
        (f) => f.cpuUsPerReservation,
      );
      const objects = await startFloorObjects(FLOOR_STATE.tmpfs);
      try {
        profiles.row_floor = await profiled(
          "one-row floor object",
          objects.pid,
          bench.dir,
          () =>
            objectFloor(objects, "row", bench.mode.engineReservations / 4, "RPC committing one row (tmpfs, profiled)"),
          (f) => f.cpuUsPerCall,
        );
      } finally {
        await objects.stop();
      }
      for (const key of Object.keys(bench.points))
        if (key.startsWith("perf_") || key.endsWith("perf_bare_direct")) delete bench.points[key];
      delete bench.figures.perf_engine_batch1;
      delete bench.figures.perf_hot_sku_direct_batch;
      delete bench.figures.perf_hot_sku_batch;
      bench.figures.perf = profiles;
    }
  }

  log("checking every reservation the bench made (admin views, D1 rows)");
  await verify(bench);
  const capacity = capacityModel(bench.figures, bench.points);
  printCapacity(capacity);

  const results = {
    date: started.toISOString(),
    mode: quick ? "quick" : "full",
    timing: bench.mode.timing,
    commit: sh("git", ["rev-parse", "--short", "HEAD"]),
    dirty: sh("git", ["status", "--porcelain"]) !== "",
    machine: {
      hostname: hostname(),
      platform: `${platform()} ${release()}`,
      cpu: cpus()[0]?.model ?? "unknown",
      cores: cpus().length,
      memoryGiB: +(totalmem() / 2 ** 30).toFixed(1),
    },
    versions: {
      node: process.version,
      wrangler: pkgVersion("wrangler"),
      miniflare: pkgVersion("miniflare"),
      workerd: pkgVersion("workerd"),
      hono: pkgVersion("hono"),
      wrk: sh("sh", ["-c", "wrk -v 2>&1 | head -1"]),
      "redis-server": sh("redis-server", ["--version"]),
    },
    load: "wrk (its own process, 1 thread) with bench/lib/wrk.lua: every reservation a distinct user with a fresh JWT and purchase token; redis-benchmark for Redis",
    cpu: "utime + stime from /proc/<pid>/stat of the processes under test across the measured run, ÷ requests",
    points: bench.points,
    redis: bench.redis,
    figures: bench.figures,
    capacity,
    baselines,
    problems: bench.problems,
    ok: bench.problems.length === 0,
  };
  if (only.length > 0) {
    // A partial run is for measuring one change: it prints its figures and keeps the full report as it is.
    console.log(
      JSON.stringify(
        { points: bench.points, redis: bench.redis, figures: bench.figures, capacity, baselines },
        null,
        2,
      ),
    );
  } else {
    // Recorded apart, kept from run to run unless this run made them: instruction counts
    // (`bench:perf -- <point> --callgrind --save`), the hot SKU's parts (`bench:perf -- hot_sku --js
    // --save`, or a full run), the copies' rounds (`bench:copies -- --write`), the hand-off's figures
    // before its rework (the "before" of its before → after), issue #53's cut of a delivery
    // (bench/delivery-floor.ts), and the sale log's (`bench/sale-log.ts --write`).
    const kept = existsSync(RESULTS)
      ? (JSON.parse(readFileSync(RESULTS, "utf8")) as { figures?: Record<string, unknown> }).figures
      : undefined;
    for (const key of [
      "callgrind",
      "hot_sku_parts",
      "copies_rounds",
      "order_pipeline_webhooks_before",
      "order_pipeline_webhooks_cut",
      "sale_log",
      "sale_log_before",
    ])
      if (bench.figures[key] === undefined && kept?.[key] !== undefined) bench.figures[key] = kept[key];
    writeFileSync(RESULTS, `${JSON.stringify(results, null, 2)}\n`);
    writeReport(results);
    log(`wrote bench/results.json and docs/PERFORMANCE.md (${bench.problems.length} problems)`);
  }
  if (bench.problems.length > 0) {
    for (const p of bench.problems) console.error(`PROBLEM: ${p}`);
    exitCode = 1;
  }
} catch (err) {
  console.error(err);
  exitCode = 1;
} finally {
  for (const stop of stack.reverse()) await stop().catch((e: unknown) => console.error(e));
}
process.exit(exitCode);
