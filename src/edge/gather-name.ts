import { fnv1a } from "../../durable-objects/shared/fnv1a";

/**
 * Gatherers per stock shard (issue 44): a colo's isolates send a shard's reservations to one of
 * these, picked by the colo's name, so a stock object has at most this many batches coming at once
 * however many isolates a spike lands on. The capacity model (bench/lib/capacity-sim.ts) sizes it.
 */
export const GATHER_GROUPS = 32;

/** The gatherer a colo's reservations for a shard go through: `<sku>#<shard>@<group>`. */
export function gathererName(stockName: string, colo: string | undefined, groups = GATHER_GROUPS): string {
  return `${stockName}@${fnv1a(colo ?? "local") % groups}`;
}

/**
 * Whether a reservation on a SKU of `shards` shards goes through the gatherers (docs/CONFIGURATION.md):
 * `GATHER = "on"` for every SKU, `"sharded"` for SKUs of more than one shard (the ones sized for a
 * spike; a one-shard SKU keeps its direct call and no extra hop), anything else for none.
 */
export function gatherOn(env: { GATHER?: string }, shards: number): boolean {
  return env.GATHER === "on" || (env.GATHER === "sharded" && shards > 1);
}
