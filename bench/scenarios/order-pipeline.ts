import { cpuMeter } from "../../tools/proc";
import { type AdminSku, admin, createSku, type WorkerServer } from "../../tools/worker";
import type { Bench } from "../lib/context";
import { benchRoute, engineRun } from "../lib/engine-route";
import { log, percentile, sleep } from "../lib/log";

/** Figures of one wait for a SKU's holds to reach D1 as order rows. */
export interface PipelineFigures {
  sku: string;
  reservations: number;
  rows: number;
  /** Rows ÷ (last row's first write − first hold's creation): the sale's end-to-end persisting rate. */
  ordersPerSec: number;
  /** Rows ÷ (last row's first write − first row's first write): the consumer's rate once it started. */
  persistPerSec: number;
  lagP50Ms: number;
  lagP99Ms: number;
  lagMaxMs: number;
  /** The first hold's creation and the last row's first write (the Worker's clock, ms since the epoch). */
  firstHoldAt: number;
  lastRowAt: number;
}

/**
 * A GET that may meet a keep-alive connection workerd closed while the sale ran (kj closes idle
 * connections after about 5 s, and undici reuses the pooled one): tried once more on a socket error.
 */
export async function get<T>(read: () => Promise<T>): Promise<T> {
  try {
    return await read();
  } catch (err) {
    if (!(err instanceof TypeError)) throw err; // fetch's network errors; HTTP errors are Error
    return read();
  }
}

/**
 * Waits until every hold the stock object(s) made for `sku` is an order row in D1 (outbox → queue →
 * consumer), then reads each row's lag: from the hold's creation in the stock object to the row's
 * first write by the consumer (both the Worker's clock; `GET /bench/orders/:sku`).
 * Polls the admin view's order counts (kept by triggers, no scan) while it waits; the rows once.
 */
export async function awaitOrders(bench: Bench, server: WorkerServer, sku: string): Promise<PipelineFigures> {
  // Every hold the stock object made, the ones whose answer wrk did not wait for included.
  const view = () => get(() => admin<AdminSku>(server, "GET", `/admin/skus/${sku}`));
  const held = (await view()).stock.held;
  const deadline = Date.now() + (bench.mode.quick ? 60_000 : 180_000);
  let lastLog = 0;
  for (;;) {
    const persisted = (await view()).orders.held ?? 0;
    if (persisted >= held || Date.now() > deadline) break;
    if (Date.now() - lastLog >= 1000) {
      log(`order pipeline: ${persisted}/${held} order rows in D1`);
      lastLog = Date.now();
    }
    await sleep(100);
  }
  type Row = { id: string; at: number; created: number };
  const { rows } = await get(() => benchRoute<{ rows: Row[] }>(server, `/bench/orders/${sku}`));
  for (const check of bench.checks) if (check.sku === sku) check.orders = true;
  if (rows.length !== held) bench.problems.push(`order pipeline: ${rows.length}/${held} rows in D1 in time`);
  const lags = rows.map((r) => Math.max(0, r.at - r.created));
  const firstHold = Math.min(...rows.map((r) => r.created));
  const firstRow = Math.min(...rows.map((r) => r.at));
  const lastRow = Math.max(...rows.map((r) => r.at));
  return {
    sku,
    reservations: held,
    rows: rows.length,
    ordersPerSec: (rows.length * 1000) / Math.max(1, lastRow - firstHold),
    persistPerSec: (rows.length * 1000) / Math.max(1, lastRow - firstRow),
    lagP50Ms: percentile(lags, 50),
    lagP99Ms: percentile(lags, 99),
    lagMaxMs: percentile(lags, 100),
    firstHoldAt: firstHold,
    lastRowAt: lastRow,
  };
}

/** The order pipeline behind the hot-SKU run (HTTP load, wrk): its holds reach D1, and how late. */
export async function hotSkuOrders(bench: Bench, server: WorkerServer, sku: string, key = "hot_sku_orders") {
  const fig = await awaitOrders(bench, server, sku);
  log(`hot-SKU orders: ${fig.rows} rows, ${fig.ordersPerSec.toFixed(0)} orders/s, lag p99 ${fig.lagP99Ms} ms`);
  bench.figures[key] = fig;
  return fig;
}

const BATCH = 64; // the group commit's MAX_BATCH, as in the engine core
/** The sale's pace: twice the 5,000 orders/s the pipeline must keep up with (issue 15). */
const SALE_RATE = 10_000;
/** Reservations per `/bench/engine` call: 10 batches of 64, about a tenth of a second at the pace. */
const SALE_CHUNK = 640;

/**
 * The sale at {@link SALE_RATE} reservations/s at most, in calls of {@link SALE_CHUNK}: a sale arrives
 * at a rate, not as one call that holds workerd's one isolate (the stock object, the Worker and the
 * queue consumer share it locally; one back-to-back call of 20,000 kept Miniflare from delivering a
 * single batch until it ended). When the machine cannot keep the pace, the calls run back to back.
 */
async function pacedSale(server: WorkerServer, sku: string, n: number, run: string) {
  const sale = { ok: 0, rejected: {} as Record<string, number>, elapsedMs: 0 };
  const t0 = Date.now();
  for (let i = 0; i < n; i += SALE_CHUNK) {
    const due = t0 + (i * 1000) / SALE_RATE;
    if (Date.now() < due) await sleep(due - Date.now());
    const count = Math.min(SALE_CHUNK, n - i);
    const r = await engineRun(server, { sku, count, batch: BATCH, concurrency: 1, run: `${run}-${i}` });
    sale.ok += r.ok;
    for (const [code, k] of Object.entries(r.rejected)) sale.rejected[code] = (sale.rejected[code] ?? 0) + k;
  }
  sale.elapsedMs = Date.now() - t0;
  return sale;
}

/**
 * One sale through the order pipeline ({@link orderPipeline}): its figures, workerd's CPU until the
 * last row, and the meter still running (a caller may read it again later).
 */
export async function pipelineRun(bench: Bench, server: WorkerServer, objectCpuUsPerReservation?: number) {
  const n = bench.mode.orderReservations;
  const run = `o${Date.now().toString(36)}`;
  const sku = `orders-${run}`;
  await createSku(server, sku, n * 2);
  log(
    `order pipeline: a sale of ${n} reservations through reserve RPC batches of ${BATCH}, paced at ≤ ${SALE_RATE}/s, then D1`,
  );
  const meter = cpuMeter([server.pid]);
  const started = Date.now();
  const sale = await pacedSale(server, sku, n, run);
  if (sale.ok !== n || Object.keys(sale.rejected).length > 0)
    bench.problems.push(`order pipeline sale: ${sale.ok}/${n} ok, rejected ${JSON.stringify(sale.rejected)}`);
  bench.checks.push({ server, sku, total: n * 2, held: sale.ok });
  // Rows already in D1 when the sale ended: the pipeline keeps up while the sale runs.
  const rowsAtSaleEnd = (await get(() => admin<AdminSku>(server, "GET", `/admin/skus/${sku}`))).orders.held ?? 0;
  const fig = await awaitOrders(bench, server, sku);
  const cpu = meter.stop();
  const result = {
    ...fig,
    saleMs: sale.elapsedMs,
    salePerSec: (n * 1000) / sale.elapsedMs,
    drainMs: Date.now() - started,
    /** workerd CPU per order, the sale included. */
    cpuUsPerOrder: cpu / Math.max(1, fig.rows),
    /** The same less the stock object's share (queue broker, consumer, D1); NaN without the engine core. */
    pipelineCpuUsPerOrder:
      objectCpuUsPerReservation === undefined
        ? Number.NaN
        : (cpu - n * objectCpuUsPerReservation) / Math.max(1, fig.rows),
    rowsAtSaleEnd,
  };
  const pipelineShare = Number.isNaN(result.pipelineCpuUsPerOrder)
    ? ""
    : `, ${result.pipelineCpuUsPerOrder.toFixed(0)} µs of it the pipeline's`;
  log(
    `order pipeline: ${fig.rows} rows, ${fig.ordersPerSec.toFixed(0)} orders/s (consumer ${fig.persistPerSec.toFixed(0)}/s), lag p50 ${fig.lagP50Ms} ms p99 ${fig.lagP99Ms} ms, ${result.cpuUsPerOrder.toFixed(0)} µs workerd CPU per order (sale included)${pipelineShare} (${rowsAtSaleEnd} rows written during the sale)`,
  );
  return { result, meter };
}

/**
 * The order pipeline at full tilt: a sale of `bench.mode.orderReservations` holds (≥ 20,000) made
 * through the stock object's reserve RPC inside workerd (batches of 64, as the engine core), so the
 * sale outpaces the pipeline and what is measured is the outbox → queue → consumer → D1 path, not the
 * HTTP edge. Figures: orders persisted per second (first hold → last row), the lag of each row
 * (hold → first write), and workerd's CPU µs per order over the whole sale and drain; less the stock
 * object's own share (`objectCpuUsPerReservation`: the engine core on disk, measured in the same run),
 * what the pipeline itself costs per order (queue broker, consumer, D1), which the capacity model uses.
 */
export async function orderPipeline(bench: Bench, server: WorkerServer, objectCpuUsPerReservation?: number) {
  const { result } = await pipelineRun(bench, server, objectCpuUsPerReservation);
  bench.figures.order_pipeline = result;
  return result;
}
