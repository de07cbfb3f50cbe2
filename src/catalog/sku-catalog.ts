import { sharedRead } from "../http/shared-read";
import { callStock, stockShard } from "../stock/stock-client";

/**
 * The SKU catalog as the edge asks it: whether a SKU exists, and whether a shard is one of its stock
 * objects. Everything kept here is a cache of a durable source, so a fresh isolate answers as a warm
 * one (API.md v1.4):
 *
 * - Existence is D1's `skus`. Routes ask before they reach a stock object, so a request about a SKU
 *   nobody configured reaches no object and creates none. A SKU is never deleted, so a known id stays
 *   known; an unknown id reads the whole table again, at most once a second and shared by concurrent
 *   requests (a flood of random ids costs one D1 query a second per isolate, not one per id), so a SKU
 *   created elsewhere is known here within about a second, as in a fresh isolate.
 * - The shards a SKU has ever had: a cut leaves shards out that still keep reservations (finished,
 *   or owed a late payment). Shard 0 records the most it ever had (`shardsEver`, its own SQLite): that
 *   is the truth. Every count kept here (D1's current `shards`, shard 0's answer) is at most that
 *   number, which never shrinks, so a shard below it is one; a shard at or above it asks shard 0.
 */

const REFRESH_MS = 1_000;
/** `PUT /admin/skus/:sku` takes 1 to 64 shards: a higher shard is nobody's, and asks no object. */
const MAX_SHARDS = 64;

/** Per SKU id: a number of shards the SKU has had (at most the most it ever had). */
const known = new Map<string, number>();
let loadedAt = Number.NEGATIVE_INFINITY;
/** The table's read in flight, shared by concurrent requests for a bounded time (src/http/shared-read.ts). */
let loading: { read: Promise<void>; startedAt: number } | null = null;
/** Shard 0's answers in flight, per SKU (concurrent requests share one, for a bounded time). */
const asking = new Map<string, { read: Promise<number>; startedAt: number }>();

/** Whether the SKU was ever configured (an archived one included). */
export async function skuExists(env: Env, sku: string): Promise<boolean> {
  if (known.has(sku)) return true;
  await refresh(env);
  return known.has(sku);
}

/** Whether `shard` is a stock object the SKU has, or had before a cut: one that may hold its reservations. */
export async function catalogHasShard(env: Env, sku: string, shard: number): Promise<boolean> {
  if (!(await skuExists(env, sku))) return false;
  if (shard < (known.get(sku) ?? 0)) return true;
  if (!Number.isInteger(shard) || shard < 0 || shard >= MAX_SHARDS) return false;
  return shard < (await askShardZero(env, sku));
}

/** A SKU exists with at least this many shards: this isolate configured it, or read so. */
export function rememberSku(sku: string, shards: number): void {
  known.set(sku, Math.max(shards, known.get(sku) ?? 0));
}

/** The most shards the SKU ever had, as shard 0 records it. */
function askShardZero(env: Env, sku: string): Promise<number> {
  const shared = asking.get(sku);
  if (shared) return sharedRead(shared.read, shared.startedAt, () => askNow(env, sku));
  return askNow(env, sku);
}

function askNow(env: Env, sku: string): Promise<number> {
  const read = (async () => {
    const state = await callStock(() => stockShard(env, sku, 0).state());
    const ever = state ? Math.max(state.shards, state.shardsEver ?? 0) : 0;
    rememberSku(sku, ever);
    return ever;
  })().finally(() => {
    if (asking.get(sku)?.read === read) asking.delete(sku);
  });
  asking.set(sku, { read, startedAt: Date.now() });
  return read;
}

async function refresh(env: Env): Promise<void> {
  if (Date.now() - loadedAt < REFRESH_MS) return;
  if (loading) return sharedRead(loading.read, loading.startedAt, () => load(env));
  return load(env);
}

function load(env: Env): Promise<void> {
  const read = (async () => {
    // Shards a cut left out have a reconciliation watermark (configure-sku.ts): a lower bound that
    // also covers objects whose record of the most shards began after their cut.
    const { results } = await env.DB.prepare(
      `SELECT sku, shards FROM skus
       UNION ALL SELECT w.sku, MAX(w.shard) + 1 FROM reconcile_watermarks w JOIN skus s ON s.sku = w.sku GROUP BY w.sku`,
    ).all<{ sku: string; shards: number }>();
    for (const row of results) rememberSku(row.sku, row.shards);
    loadedAt = Date.now();
  })().finally(() => {
    if (loading?.read === read) loading = null;
  });
  loading = { read, startedAt: Date.now() };
  return read;
}
