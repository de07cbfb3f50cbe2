import type { StockStats } from "../../src/harness/harness-stock";
import { cpuMeter } from "../../tools/proc";
import { createSku, type WorkerServer } from "../../tools/worker";
import type { Bench } from "../lib/context";
import { engineRun, stockStats } from "../lib/engine-route";
import { log } from "../lib/log";

const BATCH = 64; // the group commit's MAX_BATCH
/** Batches of 1 cost a call each: an eighth as many reservations keeps the point as long. */
const ONE_BY_ONE_SHARE = 8;

/**
 * The engine core, no HTTP on the measured path: the stock object's `reserve(requests[])` RPC driven
 * from inside workerd (the bench route), batches of 64 (or `batch`), one in flight (the object is serial anyway),
 * every reservation a fresh user, after a warm-up of a quarter as many on the same object (its JIT and
 * SQLite page cache warm, as in a sale under way). Beside its rate: workerd's CPU µs per reservation, and the SQL
 * statements the engine ran per reservation (the harness storage counts them), outbox flushes included:
 * the count is read once the outbox is empty.
 */
export async function engineCore(
  bench: Bench,
  server: WorkerServer,
  key = "engine_core",
  batch = BATCH,
  via: "stock" | "gatherer" = "stock",
) {
  const n = batch === 1 ? bench.mode.engineReservations / ONE_BY_ONE_SHARE : bench.mode.engineReservations;
  const run = `e${Date.now().toString(36)}`;
  const sku = `eng-${run}`;
  await createSku(server, sku, n * 2);
  const warm = Math.ceil(n / 4);
  const warmed = await engineRun(server, { sku, count: warm, batch, concurrency: 1, run: `${run}w`, via });
  const before = await stockStats(server, sku);
  log(
    `engine core: ${n} reservations through reserve RPC batches of ${batch}${via === "gatherer" ? ", each through the gatherer" : ""} (in workerd, no HTTP), after ${warm}`,
  );
  const meter = cpuMeter([server.pid]);
  const r = await engineRun(server, { sku, count: n, batch, concurrency: 1, run, via });
  const cpu = meter.stop();
  if (r.ok !== n || Object.keys(r.rejected).length > 0)
    bench.problems.push(`engine core: ${r.ok}/${n} ok, rejected ${JSON.stringify(r.rejected)}`);
  bench.checks.push({ server, sku, total: n * 2, held: warmed.ok + r.ok });
  let after = await stockStats(server, sku);
  // (`outbox_batch`: a baseline from before the outbox kept message text.)
  const unsent = (stats: StockStats) => stats.rows.outbox_events ?? stats.rows.outbox_batch ?? 0;
  for (let i = 0; i < 100 && unsent(after) > 0; i++) {
    await new Promise((resolve) => setTimeout(resolve, 100)); // the last batches' outbox flush, in the background
    after = await stockStats(server, sku);
  }
  // Every event must have left through the queue's send (the outbox drained): else the flush failed.
  if (unsent(after) > 0) bench.problems.push(`${key}: ${unsent(after)} outbox rows still unsent 10 s after the run`);
  const fig = {
    reservations: n,
    batch,
    elapsedMs: r.elapsedMs,
    perSec: (n * 1000) / r.elapsedMs,
    cpuUsPerReservation: cpu / n,
    sqlStatementsPerReservation: (after.statements - before.statements) / n,
    databaseBytesPerReservation: (after.databaseSize - before.databaseSize) / n,
  };
  log(
    `  ${fig.perSec.toFixed(0)} reservations/s, ${fig.cpuUsPerReservation.toFixed(0)} µs workerd CPU and ${fig.sqlStatementsPerReservation.toFixed(2)} SQL statements each`,
  );
  bench.figures[key] = fig;
  return fig;
}
