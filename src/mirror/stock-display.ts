import type { SkuState } from "../../durable-objects/stock-engine";
import { log } from "../observability/log";
import { MIRROR_READ_TIMEOUT_MS, mirrorFromEnv } from "./redis-mirror";

/**
 * The read path of stock displays (`GET /api/skus/:sku`): the SKU as the Redis mirror sees it, kept a
 * moment in the location's edge cache so a hot SKU costs Redis one read per second per location.
 * Null when the mirror is off, has no snapshot of the SKU yet, or does not answer in time: the
 * caller then asks the stock object.
 */

/** How long a location serves a mirror read without asking Redis again. */
export const DISPLAY_CACHE_SECONDS = 1;

const CACHE_ORIGIN = "https://flashgate-edge-cache.internal";

/** The location's cache, or undefined where there is none. */
function edgeCache(): Cache | undefined {
  return typeof caches === "undefined" ? undefined : (caches as CacheStorage & { default?: Cache }).default;
}

export async function mirroredSkuState(
  env: Env,
  sku: string,
  waitUntil: (promise: Promise<unknown>) => void,
): Promise<SkuState | null> {
  const mirror = mirrorFromEnv(env, MIRROR_READ_TIMEOUT_MS);
  if (!mirror) return null;
  const cache = edgeCache();
  const key = new Request(`${CACHE_ORIGIN}/mirror/skus/${encodeURIComponent(sku)}`);
  const hit = await cache?.match(key);
  if (hit) return (await hit.json()) as SkuState;

  let state: SkuState | null;
  try {
    state = await mirror.read(sku);
  } catch (err) {
    log("warn", "mirror read failed", { sku, error: String(err) });
    return null;
  }
  if (state && cache) {
    const entry = Response.json(state, { headers: { "Cache-Control": `public, max-age=${DISPLAY_CACHE_SECONDS}` } });
    waitUntil(cache.put(key, entry).catch(() => undefined));
  }
  return state;
}
