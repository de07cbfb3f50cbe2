import { configureRedisSku, redisCounts, startClassic } from "../lib/classic";
import type { Bench } from "../lib/context";
import { summary } from "../lib/context";
import { runLoad, unexpected } from "../lib/load";
import { log } from "../lib/log";
import { mintShoppers } from "../lib/shoppers";

/**
 * 5. Classic baseline: bench/classic-server.ts (Hono on @hono/node-server, its own Node process,
 * JWT + purchase token checks, EVALSHA lua/reserve.lua through node-redis) under the hot-SKU load.
 */
export async function classic(bench: Bench, connectionsList: number[]) {
  const server = await startClassic(bench.redisUrl);
  const out: Record<number, number> = {};
  try {
    for (const connections of connectionsList) {
      const run = `cl${Date.now().toString(36)}c${connections}`;
      const sku = `classic-${run}`;
      const n = bench.sizes.classic;
      await configureRedisSku(bench.redis, sku, n * 16);
      const shoppers = await mintShoppers(run, sku, 1, n);
      log(`5. classic baseline: ${n} reservations at concurrency ${connections} (Node + Redis Lua)`);
      const r = await runLoad({
        label: `classic c${connections}`,
        url: server.url,
        path: `/api/skus/${sku}/reservations`,
        method: "POST",
        connections,
        amount: n,
        shoppers,
      });
      const bad = unexpected(r, [202]);
      if (bad) bench.problems.push(`classic c${connections}: ${bad} ${JSON.stringify(r.codes)}`);
      const counts = await redisCounts(bench.redis, sku);
      if (counts.held !== r.accepted.size || counts.held > counts.total)
        bench.problems.push(`classic c${connections}: Redis holds ${counts.held}, bench saw ${r.accepted.size}`);
      bench.rows.push({
        scenario: "5 classic baseline",
        setting: `Node+Redis Lua c${connections}`,
        figure: `${r.rps.toFixed(0)} res/s`,
        p50: r.p50Ms,
        p99: r.p99Ms,
        errors: r.responses - (r.statuses["202"] ?? 0) + r.transportErrors,
      });
      bench.figures[`classic_c${connections}`] = { sku, redis: counts, ...summary(r) };
      out[connections] = r.rps;
    }
  } finally {
    await server.stop();
  }
  return out;
}
