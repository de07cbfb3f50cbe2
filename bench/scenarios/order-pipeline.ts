import type { Bench } from "../lib/context";
import { runLoad, unexpected } from "../lib/load";
import { log, percentile, sleep } from "../lib/log";
import { mintShoppers, SECRETS } from "../lib/shoppers";
import { createSku } from "../lib/worker";

/**
 * 6. Order pipeline: N reservations at concurrency 50, then the time until all N order rows are in D1.
 * Each row's time is when the queue consumer first wrote it (`processed_events.processed_at`, read by
 * the bench route); its lag is that minus the time its 202 reached the harness (same machine clock).
 */
export async function orderPipeline(bench: Bench, timeoutMs: number) {
  const n = bench.sizes.pipeline;
  const run = `op${Date.now().toString(36)}`;
  const sku = `pipe-${run}`;
  await createSku(bench.on, sku, n * 16);
  const shoppers = await mintShoppers(run, sku, 1, n);
  log(`6. order pipeline: ${n} reservations at concurrency 50, then wait for ${n} D1 rows`);
  const started = Date.now();
  const r = await runLoad({
    label: "pipeline",
    url: bench.on.url,
    path: `/api/skus/${sku}/reservations`,
    method: "POST",
    connections: 50,
    amount: n,
    shoppers,
  });
  const bad = unexpected(r, [202]);
  if (bad) bench.problems.push(`order pipeline: ${bad}`);
  let rows: { id: string; at: number }[] = [];
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const res = await fetch(`${bench.on.url}/bench/orders/${sku}`, {
      headers: { authorization: `Bearer ${SECRETS.ADMIN_TOKEN}` },
    });
    rows = ((await res.json()) as { rows: { id: string; at: number }[] }).rows;
    if (rows.length >= r.accepted.size || Date.now() > deadline) break;
    log(`  pipeline: ${rows.length}/${r.accepted.size} order rows in D1`);
    await sleep(500);
  }
  const lags: number[] = [];
  let last = started;
  for (const row of rows) {
    const at202 = r.accepted.get(row.id);
    if (at202 !== undefined) lags.push(Math.max(0, row.at - at202));
    last = Math.max(last, row.at);
  }
  if (rows.length !== r.accepted.size)
    bench.problems.push(`order pipeline: ${rows.length}/${r.accepted.size} rows in D1 after ${timeoutMs} ms`);
  bench.checks.push({ server: bench.on, sku, total: n * 16, held: r.accepted.size, ordersHeld: r.accepted.size });
  const fig = {
    sku,
    reservations: r.accepted.size,
    rows: rows.length,
    reserveMs: r.elapsedMs,
    allPersistedMs: last - started,
    ordersPerSec: (rows.length * 1000) / Math.max(1, last - started),
    lagP50Ms: percentile(lags, 50),
    lagP99Ms: percentile(lags, 99),
    lagMaxMs: percentile(lags, 100),
  };
  bench.figures.order_pipeline = fig;
  bench.rows.push({
    scenario: "6 order pipeline",
    setting: `${n} res → D1 rows (lag 202→row)`,
    figure: `${fig.ordersPerSec.toFixed(0)} orders/s`,
    p50: fig.lagP50Ms,
    p99: fig.lagP99Ms,
    errors: r.accepted.size - rows.length + (r.responses - r.accepted.size),
  });
  return fig;
}
