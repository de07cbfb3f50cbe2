import { createClient } from "redis";
import { LUA_SHA1, shardKeys } from "../../scripts/lib/lua";
import { configureRedisSku, redisCounts } from "../lib/classic";
import type { Bench } from "../lib/context";
import { engineRun } from "../lib/engine-route";
import { log } from "../lib/log";
import { createSku } from "../lib/worker";

const BATCH = 64; // the group commit's MAX_BATCH

/**
 * 4. Engine core, no HTTP on the measured path:
 * - the stock object's `reserve(requests[])` RPC driven from inside workerd (bench route): batches of
 *   64, one in flight (the object is serial anyway); and single-request RPCs, 50 in flight;
 * - lua/reserve.lua by EVALSHA on the real redis-server from Node: 50 connections with one call in
 *   flight each; and one connection pipelining batches of 64.
 * Same semantics (reserve.lua is the engine's twin), same machine, same run. Every call is a fresh user.
 */
export async function engineCore(bench: Bench) {
  const n = bench.sizes.engine;
  const run = `e${Date.now().toString(36)}`;
  const sku = `eng-${run}`;
  await createSku(bench.on, sku, n * 4);

  log(`4. engine core: ${n} reservations through reserve RPC batches of ${BATCH} (in workerd, no HTTP)`);
  const batched = await engineRun(bench.on, { sku, count: n, batch: BATCH, concurrency: 1, run: `${run}b` });
  const ns = Math.ceil(n / 4); // one RPC per reservation is slow: a quarter as many keeps the run short
  log(`4. engine core: ${ns} reservations through single-request RPCs, 50 in flight`);
  const single = await engineRun(bench.on, { sku, count: ns, batch: 1, concurrency: 50, run: `${run}s` });
  for (const [name, r] of [
    ["batched", batched],
    ["single", single],
  ] as const) {
    const want = name === "batched" ? n : ns;
    if (r.ok !== want || Object.keys(r.rejected).length > 0)
      bench.problems.push(`engine ${name}: ${r.ok}/${want} ok, rejected ${JSON.stringify(r.rejected)}`);
  }
  bench.checks.push({ server: bench.on, sku, total: n * 4, held: batched.ok + single.ok });

  const luaSku = `lua-${run}`;
  await configureRedisSku(bench.redis, luaSku, n * 4);
  const keys = shardKeys(luaSku, 0);
  const args = (user: string) => [String(Date.now()), `${luaSku}.0.${user}`, user, `nonce-${user}`, "1"];
  const isOk = (raw: unknown) => (JSON.parse(String(raw)) as { ok?: unknown }).ok === true;

  log(`4. engine core: ${n} EVALSHA reserve.lua, 50 connections`);
  const clients = await Promise.all(Array.from({ length: 50 }, () => createClient({ url: bench.redisUrl }).connect()));
  let next = 0;
  let luaOk = 0;
  const t50 = performance.now();
  await Promise.all(
    clients.map(async (client) => {
      for (let i = next++; i < n; i = next++) {
        if (isOk(await client.evalSha(LUA_SHA1.reserve, { keys, arguments: args(`${run}c${i}`) }))) luaOk++;
      }
    }),
  );
  const c50Ms = performance.now() - t50;
  await Promise.all(clients.map((c) => c.close()));

  log(`4. engine core: ${n} EVALSHA reserve.lua, one connection, pipelines of ${BATCH}`);
  const piped = await createClient({ url: bench.redisUrl }).connect();
  let pipedOk = 0;
  const tp = performance.now();
  for (let i = 0; i < n; i += BATCH) {
    const multi = piped.multi();
    for (let k = i; k < Math.min(n, i + BATCH); k++)
      multi.evalSha(LUA_SHA1.reserve, { keys, arguments: args(`${run}p${k}`) });
    for (const raw of await multi.execAsPipeline()) if (isOk(raw)) pipedOk++;
  }
  const pipedMs = performance.now() - tp;
  await piped.close();
  if (luaOk !== n || pipedOk !== n) bench.problems.push(`reserve.lua: ${luaOk}/${n} and ${pipedOk}/${n} ok`);
  const counts = await redisCounts(bench.redis, luaSku);
  if (counts.held !== luaOk + pipedOk || counts.sold !== 0 || counts.held > counts.total)
    bench.problems.push(`reserve.lua counters wrong: ${JSON.stringify(counts)} for ${luaOk + pipedOk} ok`);

  const rate = (count: number, ms: number) => (count * 1000) / ms;
  const fig = {
    rpcBatched: { count: n, batch: BATCH, elapsedMs: batched.elapsedMs, perSec: rate(n, batched.elapsedMs) },
    rpcSingleC50: { count: ns, elapsedMs: single.elapsedMs, perSec: rate(ns, single.elapsedMs) },
    luaC50: { count: n, elapsedMs: c50Ms, perSec: rate(n, c50Ms) },
    luaPipelined: { count: n, batch: BATCH, elapsedMs: pipedMs, perSec: rate(n, pipedMs) },
  };
  bench.figures.engine_core = fig;
  bench.rows.push(
    {
      scenario: "4 engine core",
      setting: `DO reserve RPC, batches of ${BATCH}`,
      figure: `${fig.rpcBatched.perSec.toFixed(0)} res/s`,
      errors: n - batched.ok,
    },
    {
      scenario: "4 engine core",
      setting: "DO reserve RPC, 1/RPC, c50",
      figure: `${fig.rpcSingleC50.perSec.toFixed(0)} res/s`,
      errors: ns - single.ok,
    },
    {
      scenario: "4 engine core",
      setting: "EVALSHA reserve.lua c50",
      figure: `${fig.luaC50.perSec.toFixed(0)} res/s`,
      errors: n - luaOk,
    },
    {
      scenario: "4 engine core",
      setting: `EVALSHA reserve.lua, pipelines of ${BATCH}`,
      figure: `${fig.luaPipelined.perSec.toFixed(0)} res/s`,
      errors: n - pipedOk,
    },
  );
  return fig;
}
