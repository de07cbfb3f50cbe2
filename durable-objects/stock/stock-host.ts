import type { StockEngine } from "../engine/stock-engine";
import type { SkuState } from "../engine/types";
import type { DueWork } from "./due-work";
import type { ShardFace, StockStub } from "./stock-faces";

/**
 * A stock object as its parts see it (shard-pulls.ts, code-asks.ts, waitlist-server.ts, draw-runner.ts,
 * sku-change-runner.ts): the engine, the alarm's due work, the clock, its siblings, and the follow-up
 * every RPC runs after its transaction. `SkuStock` makes one, private to it, and hands it to its
 * runners: none of this is reachable over RPC.
 */
export interface StockHost {
  readonly engine: StockEngine;
  readonly due: DueWork;
  now(): number;
  /** Shard `shard` of `sku`'s stock object. */
  shardOf(sku: string, shard: number): StockStub<ShardFace>;
  /** Keeps the object alive until `work` is done, without making the caller wait. */
  background(work: Promise<void>): void;
  /** The outbox flush, the mirror publish, the alarm, and a notice to the waitlist of freed units. */
  afterCommit(): Promise<void>;
  /** Throws when this object can no longer commit (aborted or reset while its code runs on). */
  assertAlive(): void;
  /** This object's name, for log lines. */
  where(): { object: string | undefined };
}

/** How soon the alarm retries work that failed (a transfer, a waitlist notice, a draw, a change). */
export const RETRY_MS = 5_000;

/** The shards of a SKU other than 0, in order. */
export function siblingsOf(shards: number): number[] {
  return Array.from({ length: shards - 1 }, (_, i) => i + 1);
}

/** Shard 0: the units available on its sibling shards (one state read each, side by side). */
export async function siblingsAvailable(host: StockHost, state: SkuState): Promise<number> {
  const states = await Promise.all(siblingsOf(state.shards).map((shard) => host.shardOf(state.sku, shard).state()));
  return states.reduce((sum, s) => sum + (s?.stock.available ?? 0), 0);
}
