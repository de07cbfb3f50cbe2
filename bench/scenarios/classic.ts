import { configureRedisSku, type Redis, redisCounts, startClassic } from "../lib/classic";
import { answered, type Bench, measured } from "../lib/context";
import type { Point } from "../lib/measure";
import { reservationRequests } from "../lib/shoppers";

/**
 * The classic design under the same wrk load as the hot SKU: bench/classic-server.ts (Hono on
 * @hono/node-server in its own Node process, JWT + purchase token checks, EVALSHA lua/reserve.lua
 * through node-redis). Its CPU per request is the Node process's plus redis-server's.
 */
export async function classic(bench: Bench, redis: Redis, redisUrl: string, redisPid: number): Promise<Point> {
  const server = await startClassic(redisUrl);
  try {
    const run = `cl${Date.now().toString(36)}`;
    const sku = `classic-${run}`;
    const total = 5_000_000;
    await configureRedisSku(redis, sku, total);
    const point = await measured(bench, {
      key: "classic",
      label: "classic design (Node + Redis Lua)",
      url: server.url,
      pids: [server.pid, redisPid],
      requests: (n, phase) => reservationRequests(`${run}${phase}`, sku, 1, n),
      fresh: true,
      expected: [202],
    });
    const counts = await redisCounts(redis, sku);
    const seen = answered(point, 202);
    if (counts.held < seen || counts.held > seen + 2 * point.connections || counts.held > counts.total)
      bench.problems.push(`classic: Redis holds ${counts.held}, the bench saw ${seen} acknowledged`);
    return point;
  } finally {
    await server.stop();
  }
}
