import type { Redis } from "./classic";
import type { LoadResult } from "./load";
import type { WorkerServer } from "./worker";

/** How many requests each kind of run sends: `--quick` (under two minutes) or the full default. */
export interface Sizes {
  ceiling: number;
  hot: number;
  soldOut: number;
  classic: number;
  engine: number;
  pipeline: number;
  sharded: number;
  serviceRpcs: number;
}

export const QUICK: Sizes = {
  ceiling: 400,
  hot: 300,
  soldOut: 400,
  classic: 300,
  engine: 2000,
  pipeline: 200,
  sharded: 300,
  serviceRpcs: 150,
};
export const FULL: Sizes = {
  ceiling: 4000,
  hot: 2500,
  soldOut: 4000,
  classic: 2500,
  engine: 20000,
  pipeline: 1500,
  sharded: 2000,
  serviceRpcs: 1000,
};

/** A row of the final table. */
export interface Row {
  scenario: string;
  setting: string;
  figure: string;
  p50?: number;
  p99?: number;
  errors?: number;
}

/** A stock check made after every scenario ran: what the bench expects the admin view to say. */
export interface StockCheck {
  server: WorkerServer;
  sku: string;
  total: number;
  /** Reservations the bench saw acknowledged (distinct ids), all still held. */
  held: number;
  /** D1 order rows expected (held), when the scenario waited for them. */
  ordersHeld?: number;
}

export interface Bench {
  sizes: Sizes;
  on: WorkerServer;
  off: WorkerServer;
  redis: Redis;
  redisUrl: string;
  rows: Row[];
  /** Every figure, by scenario, for bench/results.json. */
  figures: Record<string, unknown>;
  checks: StockCheck[];
  /** Unexpected answers or failed checks; any of them makes the bench exit non-zero. */
  problems: string[];
}

/** A load result without its per-request map, for the JSON. */
export function summary(r: LoadResult) {
  const { accepted: _accepted, ...rest } = r;
  return { ...rest, acceptedIds: r.accepted.size };
}
