import { MIRROR_READ_TIMEOUT_MS, mirrorFromEnv } from "../../durable-objects/mirror/redis-mirror";
import { log } from "../../durable-objects/shared/log";

export interface MirrorCounts {
  available: number;
  held: number;
  sold: number;
  /** The snapshot's seq (summed over shards); `version` is the contract's name for it (API.md). */
  version: number;
}

/**
 * The `mirror` field of the admin SKU view: the counts the Redis mirror holds, read directly (no edge
 * cache), or null when the mirror is off, has no snapshot of the SKU, or does not answer in time.
 */
export async function mirrorCounts(env: Env, sku: string): Promise<MirrorCounts | null> {
  const mirror = mirrorFromEnv(env, MIRROR_READ_TIMEOUT_MS);
  if (!mirror) return null;
  try {
    const state = await mirror.read(sku);
    if (!state) return null;
    const { available, held, sold } = state.stock;
    return { available, held, sold, version: state.seq };
  } catch (err) {
    log("warn", "mirror read failed", { sku, error: String(err) });
    return null;
  }
}
