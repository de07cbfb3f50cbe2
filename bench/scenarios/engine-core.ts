import { cpuMeter } from "../../tools/proc";
import { createSku, type WorkerServer } from "../../tools/worker";
import type { Bench } from "../lib/context";
import { engineRun } from "../lib/engine-route";
import { log } from "../lib/log";

const BATCH = 64; // the group commit's MAX_BATCH

/**
 * The engine core, no HTTP on the measured path: the stock object's `reserve(requests[])` RPC driven
 * from inside workerd (the bench route), batches of 64, one in flight (the object is serial anyway),
 * every reservation a fresh user. Beside its rate: workerd's CPU µs per reservation.
 */
export async function engineCore(bench: Bench, server: WorkerServer) {
  const n = bench.mode.engineReservations;
  const run = `e${Date.now().toString(36)}`;
  const sku = `eng-${run}`;
  await createSku(server, sku, n * 2);
  log(`engine core: ${n} reservations through reserve RPC batches of ${BATCH} (in workerd, no HTTP)`);
  const meter = cpuMeter([server.pid]);
  const r = await engineRun(server, { sku, count: n, batch: BATCH, concurrency: 1, run });
  const cpu = meter.stop();
  if (r.ok !== n || Object.keys(r.rejected).length > 0)
    bench.problems.push(`engine core: ${r.ok}/${n} ok, rejected ${JSON.stringify(r.rejected)}`);
  bench.checks.push({ server, sku, total: n * 2, held: r.ok });
  const fig = {
    reservations: n,
    batch: BATCH,
    elapsedMs: r.elapsedMs,
    perSec: (n * 1000) / r.elapsedMs,
    cpuUsPerReservation: cpu / n,
  };
  log(`  ${fig.perSec.toFixed(0)} reservations/s, ${fig.cpuUsPerReservation.toFixed(0)} µs workerd CPU each`);
  bench.figures.engine_core = fig;
  return fig;
}
