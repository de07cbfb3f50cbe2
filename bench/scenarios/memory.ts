import { rssBytes } from "../../tools/proc";
import { createSku, type WorkerServer } from "../../tools/worker";
import type { Bench } from "../lib/context";
import { benchRoute, engineRun, stockStats } from "../lib/engine-route";
import { log } from "../lib/log";
import { heapUsage } from "../lib/profile";

const MiB = 1024 * 1024;

const fill = (
  server: WorkerServer,
  sku: string,
  body: { run: string; holds?: number; paidUsers?: number; from?: number },
) => benchRoute<{ holds: number; paidUsers: number }>(server, `/bench/stock/${sku}/0/fill`, body);

/**
 * The stock object's memory with many live holds and many users' quotas: the isolate's JS heap after
 * a full GC (the inspector's Runtime.getHeapUsage; Workers' 128 MB limit is on it) and workerd's RSS
 * (which counts SQLite's page cache too), before and after filling an object, then after the object
 * decided batches over that data (reserve RPCs of 64: new users, and users who already bought).
 * On a Worker of its own started with the inspector.
 */
export async function memory(bench: Bench, server: WorkerServer, opts: { holds: number; paidUsers: number }) {
  const port = server.inspectorPort;
  if (port === undefined) throw new Error("the memory scenario needs a Worker started with the inspector");
  const run = `m${Date.now().toString(36)}`;
  const measure = async () => ({ heap: await heapUsage(port), rss: rssBytes(server.pid) });
  const out: Record<string, unknown> = {};

  const holdsSku = `memh-${run}`;
  await createSku(server, holdsSku, opts.holds * 2);
  await engineRun(server, { sku: holdsSku, count: 64, batch: 64, concurrency: 1, run: `${run}w` }); // object started
  const h0 = await measure();
  log(`memory: ${opts.holds} live holds made by the engine in one object`);
  // In RPCs of 6,400 holds / 100,000 quota rows: one RPC of all of them made workerd drop the connection.
  let made = 0;
  for (let i = 0; i < opts.holds; i += 6_400) {
    made += (await fill(server, holdsSku, { run: `${run}-${i}`, holds: Math.min(6_400, opts.holds - i) })).holds;
  }
  await engineRun(server, { sku: holdsSku, count: 6_400, batch: 64, concurrency: 1, run: `${run}n` });
  const h1 = await measure();
  const holdsStats = await stockStats(server, holdsSku);
  out.liveHolds = {
    holds: made + 64 + 6_400,
    heapUsedMiB: h1.heap.usedBytes / MiB,
    heapDeltaMiB: (h1.heap.usedBytes - h0.heap.usedBytes) / MiB,
    rssDeltaMiB: (h1.rss - h0.rss) / MiB,
    databaseMiB: holdsStats.databaseSize / MiB,
  };

  const usersSku = `memu-${run}`;
  await createSku(server, usersSku, 100_000);
  await engineRun(server, { sku: usersSku, count: 64, batch: 64, concurrency: 1, run: `${run}w` });
  const u0 = await measure();
  log(`memory: ${opts.paidUsers} users' quotas in one object`);
  for (let i = 0; i < opts.paidUsers; i += 100_000) {
    await fill(server, usersSku, { run, paidUsers: Math.min(100_000, opts.paidUsers - i), from: i });
  }
  // Users who bought already (each refused: over the limit of 1, read from their quota row) and new ones.
  const repeat = await engineRun(server, { sku: usersSku, count: 6_400, batch: 64, concurrency: 1, run });
  await engineRun(server, { sku: usersSku, count: 6_400, batch: 64, concurrency: 1, run: `${run}n` });
  const u1 = await measure();
  const usersStats = await stockStats(server, usersSku);
  if ((repeat.rejected.LIMIT_EXCEEDED ?? 0) !== 6_400)
    bench.problems.push(`memory: users with a quota were not refused: ${JSON.stringify(repeat.rejected)}`);
  out.userQuotas = {
    users: opts.paidUsers,
    quotaRows: usersStats.rows.user_quota,
    heapUsedMiB: u1.heap.usedBytes / MiB,
    heapDeltaMiB: (u1.heap.usedBytes - u0.heap.usedBytes) / MiB,
    rssDeltaMiB: (u1.rss - u0.rss) / MiB,
    databaseMiB: usersStats.databaseSize / MiB,
  };
  log(`  ${JSON.stringify(out)}`);
  bench.figures.memory = out;
  return out;
}
