import { createSku, type WorkerServer } from "../../tools/worker";
import { answered, type Bench, measured } from "../lib/context";
import { stockStats } from "../lib/engine-route";
import type { Point } from "../lib/measure";
import { reservationRequests } from "../lib/shoppers";

let runs = 0;

export interface CopiesFigure {
  copies: number;
  gather: boolean;
  reserveCalls: number;
  reservations: number;
  meanBatch: number;
  /** The stock object's reserve calls per second at the point's rate of holds. */
  callsPerSec: number;
}

/**
 * A hot SKU (one shard) behind several copies of the Worker (issue 44): wrk's requests go to a front
 * that hands each to the next copy in turn, each copy its own isolate with its own group commit, all
 * reaching the one stock object, as a spike lands on many isolates on Cloudflare. With GATHER on they
 * reach it through its gatherer. Besides the point's holds/s, time-to-hold and CPU per request (the
 * whole workerd: front, copies, gatherer, object), the stock object's calls and mean batch.
 */
export async function hotSkuCopies(
  bench: Bench,
  server: WorkerServer,
  opts: { key: string; copies: number; gather: boolean; connections?: number | undefined },
): Promise<Point & { figure: CopiesFigure }> {
  if (!server.copiesUrl) throw new Error(`${server.label}: started without copies`);
  const run = `c${Date.now().toString(36)}${runs++}`;
  const sku = `hot-${run}`;
  const total = 5_000_000;
  await createSku(server, sku, total, 1);
  const point = await measured(bench, {
    key: opts.key,
    label: `hot SKU behind ${opts.copies} copies of the Worker, GATHER ${opts.gather ? "on" : "off"} (${server.label})`,
    url: server.copiesUrl,
    pids: [server.pid],
    requests: (n, phase) => reservationRequests(`${run}${phase}`, sku, 1, n),
    fresh: true,
    expected: [202],
    timing: opts.connections ? { ...bench.mode.timing, connections: opts.connections } : bench.mode.timing,
  });
  bench.checks.push({ server, sku, total, held: answered(point, 202), unseen: 2 * point.connections });
  const stats = await stockStats(server, sku, 0);
  const meanBatch = stats.reserveRequests / Math.max(1, stats.reserveCalls);
  const figure: CopiesFigure = {
    copies: opts.copies,
    gather: opts.gather,
    reserveCalls: stats.reserveCalls,
    reservations: stats.reserveRequests,
    meanBatch,
    callsPerSec: point.rps / meanBatch,
  };
  bench.figures[`${opts.key}_batch`] = figure;
  return { ...point, figure };
}
