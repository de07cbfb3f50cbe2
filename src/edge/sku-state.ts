import type { SkuState } from "../../durable-objects/stock-engine";
import { callStock, stockShard } from "./stock-client";

/** A SKU's configuration and stock, or null when the SKU does not exist. */
export async function readSkuState(env: Env, sku: string): Promise<SkuState | null> {
  // One shard per SKU for now: shard 0 holds all of it.
  return callStock(() => stockShard(env, sku, 0).state());
}
