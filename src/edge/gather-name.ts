import { fnv1a } from "../../durable-objects/support";

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

/** `GATHER = "on"` in wrangler.toml: reservations go through the gatherers (docs/CONFIGURATION.md). */
export function gatherOn(env: { GATHER?: string }): boolean {
  return env.GATHER === "on";
}
