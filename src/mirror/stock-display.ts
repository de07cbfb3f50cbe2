import { MIRROR_READ_TIMEOUT_MS, mirrorFromEnv } from "../../durable-objects/mirror/redis-mirror";
import { log } from "../../durable-objects/shared/log";
import type { SkuState } from "../../durable-objects/stock/stock-model";
import { skuExists } from "../catalog/sku-catalog";
import { readSkuState } from "../catalog/sku-state";
import { sharedRead } from "../http/shared-read";

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

async function mirroredSkuState(
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

/** A display and where it came from (the `X-Stock-Source` header). */
interface SkuDisplay {
  state: SkuState;
  source: "mirror" | "stock-object";
}

/** How long an isolate answers displays of a SKU from memory. */
const DISPLAY_MEMO_MS = 1_000;
/** SKU ids remembered per isolate; the oldest is forgotten first (unknown ids are not kept). */
const DISPLAY_MEMO_MAX = 1_024;
const memo = new Map<string, { at: number; display: Promise<SkuDisplay | null>; settled: boolean }>();

/**
 * The public display of a SKU, or null when the catalog has no such SKU. Within
 * {@link DISPLAY_MEMO_MS} an isolate answers a SKU from memory, and concurrent misses share one
 * read, so a GET storm reaches Redis or the stock objects about once a second per isolate and never
 * competes with reservations. An id the isolate's catalog does not know (src/catalog/sku-catalog.ts)
 * is answered "not found" before Redis or a stock object is asked.
 */
export function skuDisplay(
  env: Env,
  sku: string,
  now: number,
  waitUntil: (promise: Promise<unknown>) => void,
): Promise<SkuDisplay | null> {
  const hit = memo.get(sku);
  if (hit && now - hit.at < DISPLAY_MEMO_MS) {
    // A read still in flight is another request's: shared for a bounded time (src/http/shared-read.ts).
    if (hit.settled) return hit.display;
    return sharedRead(hit.display, hit.at, () => readNow(env, sku, Date.now(), waitUntil));
  }
  return readNow(env, sku, now, waitUntil);
}

/** Reads the display now, in this request, and keeps the read for the requests after it. */
function readNow(
  env: Env,
  sku: string,
  now: number,
  waitUntil: (promise: Promise<unknown>) => void,
): Promise<SkuDisplay | null> {
  const display = readDisplay(env, sku, waitUntil);
  const entry = { at: now, display, settled: false };
  memo.delete(sku);
  memo.set(sku, entry);
  if (memo.size > DISPLAY_MEMO_MAX) memo.delete(memo.keys().next().value as string);
  display.then(
    (found) => {
      entry.settled = true;
      // Not found is not remembered: the catalog already reads D1 at most once a second per isolate,
      // and a SKU created elsewhere shows here as soon as the catalog knows it (API.md: a second).
      if (found === null && memo.get(sku) === entry) memo.delete(sku);
    },
    () => {
      // A failed read is not remembered: the next request tries again.
      if (memo.get(sku) === entry) memo.delete(sku);
    },
  );
  return display;
}

/** Forgets this isolate's display of a SKU (after an admin change, so its author sees it at once). */
export function forgetDisplay(sku: string): void {
  memo.delete(sku);
}

async function readDisplay(
  env: Env,
  sku: string,
  waitUntil: (promise: Promise<unknown>) => void,
): Promise<SkuDisplay | null> {
  // An id the catalog does not know costs neither Redis nor a stock object (nor a D1 query of its own).
  if (!(await skuExists(env, sku))) return null;
  const mirrored = await mirroredSkuState(env, sku, waitUntil);
  if (mirrored) return { state: mirrored, source: "mirror" };
  const state = await readSkuState(env, sku);
  return state ? { state, source: "stock-object" } : null;
}
