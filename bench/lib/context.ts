import type { WorkerServer } from "../../tools/worker";
import { measure, type Point, type PointSpec, type Timing } from "./measure";
import type { RedisBenchResult } from "./redis-benchmark";

/** `--quick` (about two minutes) or the full default run. */
export interface Mode {
  quick: boolean;
  timing: Timing;
  /** Reservations the engine-core scenario drives through the stock object's RPC. */
  engineReservations: number;
  /** EVALSHA calls per redis-benchmark run. */
  redisCalls: number;
  /** Reservations in the order-pipeline scenario's sale (issue 15 asks for at least 20,000). */
  orderReservations: number;
}

export const QUICK: Mode = {
  quick: true,
  timing: { warmSeconds: 1, seconds: 4, connections: 50 },
  engineReservations: 10_000,
  redisCalls: 100_000,
  orderReservations: 20_000,
};

export const FULL: Mode = {
  quick: false,
  timing: { warmSeconds: 3, seconds: 8, connections: 50 },
  engineReservations: 40_000,
  redisCalls: 400_000,
  orderReservations: 40_000,
};

/** A stock check made after every scenario ran: what the admin view must say. */
export interface StockCheck {
  server: WorkerServer;
  sku: string;
  total: number;
  /** Reservations the bench saw acknowledged (202), all still held. */
  held: number;
  /**
   * Requests that may have been served without the bench seeing the answer: wrk stops with a request
   * in flight on each connection, at the end of the warm-up and of the run. The stock object must
   * hold between `held` and `held + unseen`.
   */
  unseen?: number;
  /** Whether the scenario waited for the queue: then D1 must have one `held` row per hold. */
  orders?: boolean;
}

export interface Bench {
  mode: Mode;
  /** Scratch directory (request files for wrk). */
  dir: string;
  points: Record<string, Point>;
  redis: Record<string, RedisBenchResult>;
  /** Figures of the scenarios that are not load points (engine core, order pipeline, …). */
  figures: Record<string, unknown>;
  checks: StockCheck[];
  /** Unexpected answers or failed checks; any of them makes the bench exit non-zero. */
  problems: string[];
}

/** A bench with nothing measured yet. */
export const newBench = (mode: Mode, dir = ""): Bench => ({
  mode,
  dir,
  points: {},
  redis: {},
  figures: {},
  checks: [],
  problems: [],
});

/** Records a point, and as a problem any answer the point did not expect or any replayed token. */
export function record(bench: Bench, point: Point): Point {
  bench.points[point.key] = point;
  if (point.unexpected > 0)
    bench.problems.push(
      `${point.label}: ${point.unexpected} unexpected answers or socket errors ${JSON.stringify(point.statuses)} ${JSON.stringify(point.errors)}`,
    );
  if (point.wraps > 0) bench.problems.push(`${point.label}: ran out of fresh requests ${point.wraps} times`);
  return point;
}

/** Measures a point with the bench's timing (unless the spec has its own) and scratch directory, and records it. */
export async function measured(
  bench: Bench,
  spec: Omit<PointSpec, "timing" | "dir"> & { timing?: Timing },
): Promise<Point> {
  return record(bench, await measure({ timing: bench.mode.timing, ...spec, dir: bench.dir }));
}

/** Requests a point answered with `status`, warm-up included. */
export function answered(point: Point, status: number): number {
  return (point.statuses[status] ?? 0) + (point.warmStatuses[status] ?? 0);
}
