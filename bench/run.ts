// `npm run bench [-- --quick]`: starts everything on 127.0.0.1 (redis-server, the Upstash bridge, the
// Worker in workerd through Miniflare twice: GROUP_COMMIT on and off), runs the seven scenarios of
// issue #7 side by side, checks every reservation it made, prints one table and writes bench/results.json.
// Exits non-zero if any answer other than the expected ones (202, or 409 SOLD_OUT in the storm) was
// seen, or if a stock check failed.
import { execFileSync } from "node:child_process";
import { randomBytes } from "node:crypto";
import { readFileSync, writeFileSync } from "node:fs";
import { cpus, freemem, hostname, platform, release, totalmem } from "node:os";
import { createClient } from "redis";
import { loadScripts } from "../scripts/lib/lua";
import { type RedisServer, startRedis } from "../scripts/lib/redis-server";
import { type Bridge, startBridge } from "../scripts/upstash-bridge";
import { type Bench, FULL, QUICK } from "./lib/context";
import { log } from "./lib/log";
import { printTable, ratios } from "./lib/report";
import { verify } from "./lib/verify";
import { startWorker, type WorkerServer } from "./lib/worker";
import { ceiling } from "./scenarios/ceiling";
import { classic } from "./scenarios/classic";
import { engineCore } from "./scenarios/engine-core";
import { hotSku } from "./scenarios/hot-sku";
import { orderPipeline } from "./scenarios/order-pipeline";
import { sharding } from "./scenarios/sharding";
import { soldOut } from "./scenarios/sold-out";

const quick = process.argv.includes("--quick");
const sizes = quick ? QUICK : FULL;
const RESULTS = new URL("./results.json", import.meta.url);
const started = new Date();

function version(cmd: string, args: string[]): string {
  try {
    return execFileSync(cmd, args, { encoding: "utf8" }).trim().split("\n")[0] ?? "";
  } catch {
    return "unknown";
  }
}
function pkgVersion(name: string): string {
  const url = new URL(`../node_modules/${name}/package.json`, import.meta.url);
  return (JSON.parse(readFileSync(url, "utf8")) as { version: string }).version;
}

const stack: (() => Promise<void>)[] = [];
let redisServer: RedisServer | undefined;
let exitCode = 0;
try {
  log(`mode: ${quick ? "quick" : "full"}; starting redis-server, the Upstash bridge and the Worker twice`);
  redisServer = await startRedis();
  const redisOfServer = redisServer;
  stack.push(() => redisOfServer.stop());
  const bridgeToken = randomBytes(24).toString("hex");
  const bridge: Bridge = await startBridge({ redisUrl: redisServer.url, token: bridgeToken });
  stack.push(() => bridge.close());
  const mirror = { UPSTASH_REDIS_REST_URL: bridge.url, UPSTASH_REDIS_REST_TOKEN: bridgeToken };
  // The classic baseline and the Lua engine core get their own redis-server: the mirror's writes stay out of them.
  const luaServer = await startRedis();
  stack.push(() => luaServer.stop());
  const redis = createClient({ url: luaServer.url });
  await redis.connect();
  stack.push(async () => void (await redis.close()));
  await loadScripts(redis);

  const settled = await Promise.allSettled([
    startWorker("GROUP_COMMIT=on", { ...mirror, GROUP_COMMIT: "on" }),
    startWorker("GROUP_COMMIT=off", { ...mirror, GROUP_COMMIT: "off" }),
  ]);
  const servers: WorkerServer[] = [];
  for (const s of settled) {
    if (s.status === "rejected") continue;
    servers.push(s.value);
    stack.push(() => s.value.stop());
  }
  for (const s of settled) if (s.status === "rejected") throw s.reason;
  const [on, off] = servers;
  if (!on || !off) throw new Error("the Worker did not start");
  log(`workers ready: on ${on.url}, off ${off.url}`);

  const bench: Bench = {
    sizes,
    on,
    off,
    redis,
    redisUrl: luaServer.url,
    rows: [],
    figures: {},
    checks: [],
    problems: [],
  };
  const warm = await ceiling(bench, 10); // warm-up of the isolate and the load generator, not reported
  bench.rows.pop();
  delete bench.figures.ceiling_c10;
  log(`warm-up: ${warm.rps.toFixed(0)} req/s`);

  // First on its server: the queue must not be behind the thousands of events the other scenarios make.
  await orderPipeline(bench, quick ? 30_000 : 120_000);
  const ceil50 = await ceiling(bench, 50);
  const ceil200 = await ceiling(bench, 200);
  const hot: Record<string, number> = {};
  for (const c of [50, 200]) {
    for (const [server, gc] of [
      [on, "on"],
      [off, "off"],
    ] as const) {
      const r = await hotSku(bench, {
        server,
        key: `hot_gc_${gc}_c${c}`,
        scenario: "2 hot SKU",
        setting: `GC ${gc} c${c}`,
        connections: c,
        amount: sizes.hot,
      });
      hot[`${gc}${c}`] = r.rps;
    }
  }
  const sold50 = await soldOut(bench, 50);
  const sold200 = await soldOut(bench, 200);
  const engine = await engineCore(bench);
  const classicRps = await classic(bench, [50, 200]);
  await sharding(bench);

  log("checking every reservation the bench made (admin view)");
  await verify(bench);

  const r = ratios({
    hot,
    ceiling: { 50: ceil50.rps, 200: ceil200.rps },
    soldOut: { 50: sold50.rps, 200: sold200.rps },
    engine,
    classic: classicRps,
  });
  bench.figures.ratios = r;
  printTable(bench, r);

  const results = {
    date: started.toISOString(),
    mode: quick ? "quick" : "full",
    sizes,
    machine: {
      hostname: hostname(),
      platform: `${platform()} ${release()}`,
      cpu: cpus()[0]?.model ?? "unknown",
      cores: cpus().length,
      memoryGiB: +(totalmem() / 2 ** 30).toFixed(1),
      freeMemoryGiB: +(freemem() / 2 ** 30).toFixed(1),
    },
    versions: {
      node: process.version,
      wrangler: pkgVersion("wrangler"),
      miniflare: pkgVersion("miniflare"),
      workerd: pkgVersion("workerd"),
      hono: pkgVersion("hono"),
      "@hono/node-server": pkgVersion("@hono/node-server"),
      autocannon: pkgVersion("autocannon"),
      redis: pkgVersion("redis"),
      "redis-server": version("redis-server", ["--version"]),
      commit: version("git", ["rev-parse", "--short", "HEAD"]),
    },
    loadGenerator: "autocannon, in the harness process; every request has its own user and token",
    rateLimit: "distinct users: every shopper makes exactly one request, so the 20 req/10 s limit never applies",
    figures: bench.figures,
    problems: bench.problems,
    ok: bench.problems.length === 0,
  };
  writeFileSync(RESULTS, `${JSON.stringify(results, null, 2)}\n`);
  log(`wrote bench/results.json (${bench.problems.length} problems)`);
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
