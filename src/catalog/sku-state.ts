import { type SkuState, sumShards } from "../../durable-objects/stock/stock-model";
import { callStock, stockShard } from "../stock/stock-client";
import { skuExists } from "./sku-catalog";

/**
 * The states of every shard of a SKU (shard 0 first), or null when the SKU does not exist. A SKU the
 * catalog does not know reaches no stock object (`anyId`: the PUT that is creating it does).
 */
export async function readShardStates(
  env: Env,
  sku: string,
  opts: { anyId?: boolean } = {},
): Promise<SkuState[] | null> {
  if (!opts.anyId && !(await skuExists(env, sku))) return null;
  const first: SkuState | null = await callStock(() => stockShard(env, sku, 0).state());
  if (!first) return null;
  const rest: (SkuState | null)[] = await Promise.all(
    Array.from({ length: first.shards - 1 }, (_, i) => callStock(() => stockShard(env, sku, i + 1).state())),
  );
  return [first, ...rest.filter((s) => s !== null)];
}

/** A SKU's configuration and stock summed over its shards, or null when it does not exist. */
export async function readSkuState(env: Env, sku: string): Promise<SkuState | null> {
  const states = await readShardStates(env, sku);
  return states ? sumShards(states) : null;
}

/** How many buyers wait, over all shards. */
export async function readWaitlist(env: Env, sku: string, shards: number): Promise<number> {
  const lengths = await Promise.all(
    Array.from({ length: shards }, (_, i) => callStock(() => stockShard(env, sku, i).waitlistLength())),
  );
  return lengths.reduce((a, b) => a + b, 0);
}
