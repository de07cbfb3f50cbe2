import { SECRETS } from "../../tools/dev-vars";
import { type AdminSku, admin, type WorkerServer } from "../../tools/worker";
import type { Bench } from "../lib/context";
import { log, percentile, sleep } from "../lib/log";

/**
 * The order pipeline behind a hot-SKU run: how fast the holds it acknowledged reach D1 as order rows
 * (outbox → queue → consumer), and each row's lag from the hold's creation in the stock object to its
 * first write by the consumer (both the Worker's clock; `GET /bench/orders/:sku`).
 */
export async function orderPipeline(bench: Bench, server: WorkerServer, sku: string) {
  // Every hold the stock object made, the ones whose answer wrk did not wait for included.
  const held = (await admin<AdminSku>(server, "GET", `/admin/skus/${sku}`)).stock.held;
  const deadline = Date.now() + (bench.mode.quick ? 60_000 : 180_000);
  let rows: { id: string; at: number; created: number }[] = [];
  for (;;) {
    const res = await fetch(`${server.url}/bench/orders/${sku}`, {
      headers: { authorization: `Bearer ${SECRETS.ADMIN_TOKEN}` },
    });
    rows = ((await res.json()) as { rows: typeof rows }).rows;
    if (rows.length >= held || Date.now() > deadline) break;
    log(`order pipeline: ${rows.length}/${held} order rows in D1`);
    await sleep(1000);
  }
  for (const check of bench.checks) if (check.sku === sku) check.orders = true;
  if (rows.length !== held) bench.problems.push(`order pipeline: ${rows.length}/${held} rows in D1 in time`);
  const lags = rows.map((r) => Math.max(0, r.at - r.created));
  const first = Math.min(...rows.map((r) => r.created));
  const last = Math.max(...rows.map((r) => r.at));
  const fig = {
    sku,
    reservations: held,
    rows: rows.length,
    ordersPerSec: (rows.length * 1000) / Math.max(1, last - first),
    lagP50Ms: percentile(lags, 50),
    lagP99Ms: percentile(lags, 99),
    lagMaxMs: percentile(lags, 100),
  };
  log(`order pipeline: ${fig.rows} rows, ${fig.ordersPerSec.toFixed(0)} orders/s, lag p99 ${fig.lagP99Ms} ms`);
  bench.figures.order_pipeline = fig;
  return fig;
}
