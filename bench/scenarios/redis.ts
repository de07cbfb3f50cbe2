import { LUA_SHA1, shardKeys } from "../../tools/lua";
import { configureRedisSku, type Redis } from "../lib/classic";
import type { Bench } from "../lib/context";
import { log } from "../lib/log";
import { type RedisBenchResult, redisBenchmark } from "../lib/redis-benchmark";

/**
 * Redis's own figures for the script the stock object twins: `redis-benchmark` sends EVALSHA of
 * lua/reserve.lua, 50 connections, unpipelined and with `-P 16`, every call a fresh user, id and nonce.
 */
export async function redisReserve(
  bench: Bench,
  redis: Redis,
  port: number,
  pid: number,
  opts: { suffix?: string; pipelines?: number[] } = {},
) {
  const out: Record<string, RedisBenchResult> = {};
  const suffix = opts.suffix ?? "";
  for (const pipeline of opts.pipelines ?? [1, 16]) {
    // A SKU per run: ids, users and nonces are random numbers, and a second run on the same SKU
    // met ids of the first (reserve.lua refuses a reservation id that exists).
    const sku = `rb-${Date.now().toString(36)}-p${pipeline}`;
    await configureRedisSku(redis, sku, 100_000_000);
    const keys = shardKeys(sku, 0);
    const command = [
      "EVALSHA",
      LUA_SHA1.reserve,
      String(keys.length),
      ...keys,
      String(Date.now()),
      // Two placeholders each: one is a random number below 2^31, and 100,000 of those already collide.
      `${sku}.0.r__rand_int____rand_int__`,
      "u__rand_int____rand_int__",
      "n__rand_int____rand_int__",
      "1",
    ];
    const calls = bench.mode.redisCalls;
    log(`redis-benchmark: EVALSHA reserve.lua, ${calls} calls, c50, pipeline ${pipeline}`);
    try {
      const r = await redisBenchmark({
        label: `EVALSHA reserve.lua -P ${pipeline}${suffix ? ` (${suffix.replaceAll("_", " ").trim()})` : ""}`,
        port,
        pid,
        command,
        calls,
        clients: 50,
        pipeline,
      });
      log(`  ${r.perSec.toFixed(0)} calls/s, ${r.cpuUsPerCall.toFixed(1)} µs redis-server CPU per call`);
      out[`reserve_lua_p${pipeline}${suffix}`] = r;
      bench.redis[`reserve_lua_p${pipeline}${suffix}`] = r;
    } catch (err) {
      bench.problems.push(`redis-benchmark -P ${pipeline}: ${String(err).split("\n")[0]}`);
    }
  }
  return out;
}
