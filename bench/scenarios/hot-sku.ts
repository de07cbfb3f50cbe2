import type { Bench } from "../lib/context";
import { summary } from "../lib/context";
import { type LoadResult, runLoad, unexpected } from "../lib/load";
import { log } from "../lib/log";
import { mintShoppers } from "../lib/shoppers";
import { createSku, type WorkerServer } from "../lib/worker";

let runs = 0;

/**
 * 2 (and 7). Hot SKU: one SKU with far more stock than the run can take, `amount` distinct users
 * each with their own JWT and purchase token, `connections` in flight. Only 202 is expected.
 */
export async function hotSku(
  bench: Bench,
  opts: {
    server: WorkerServer;
    key: string;
    scenario: string;
    setting: string;
    connections: number;
    amount: number;
    shards?: number;
  },
): Promise<LoadResult> {
  const shards = opts.shards ?? 1;
  const run = `b${Date.now().toString(36)}${runs++}`;
  const sku = `hot-${run}`;
  const total = opts.amount * 16;
  await createSku(opts.server, sku, total, shards);
  const shoppers = await mintShoppers(run, sku, shards, opts.amount);
  log(`${opts.scenario}: ${opts.setting}, ${opts.amount} reservations (distinct users) on ${sku}`);
  const r = await runLoad({
    label: `${opts.key}`,
    url: opts.server.url,
    path: `/api/skus/${sku}/reservations`,
    method: "POST",
    connections: opts.connections,
    amount: opts.amount,
    shoppers,
  });
  const bad = unexpected(r, [202]);
  if (bad) bench.problems.push(`${opts.key}: ${bad} ${JSON.stringify(r.codes)} ${r.samples.join(" | ")}`);
  if (r.replayed > 0) bench.problems.push(`${opts.key}: ${r.replayed} answers replayed a fresh token`);
  bench.checks.push({ server: opts.server, sku, total, held: r.accepted.size });
  bench.rows.push({
    scenario: opts.scenario,
    setting: opts.setting,
    figure: `${r.rps.toFixed(0)} res/s`,
    p50: r.p50Ms,
    p99: r.p99Ms,
    errors: r.responses - (r.statuses["202"] ?? 0) + r.transportErrors,
  });
  bench.figures[opts.key] = { sku, shards, ...summary(r) };
  return r;
}
