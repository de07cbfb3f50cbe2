/**
 * What this isolate knows of the D1 catalog (`skus`): which SKUs exist, and their shard count.
 *
 * Routes ask it before they reach a stock object, so a request about a SKU nobody configured reaches
 * no object and creates none (API.md: such requests store nothing, whoever sends them). A SKU once
 * known stays known (there is no delete); an id the isolate does not know reads the whole catalog
 * again, at most once a second and shared by concurrent requests, so a flood of random ids costs one
 * D1 query a second per isolate, not one per id. A SKU created by another isolate is therefore known
 * here within about a second; this isolate's own PUT tells it at once ({@link rememberSku}).
 */

const REFRESH_MS = 1_000;

const known = new Map<string, number>();
let loadedAt = Number.NEGATIVE_INFINITY;
let loading: Promise<void> | null = null;

/**
 * The most shards the SKU has had as far as this isolate knows (every one of them is a configured
 * stock object), or null when no such SKU was ever configured.
 */
export async function catalogShards(env: Env, sku: string): Promise<number | null> {
  const hit = known.get(sku);
  if (hit !== undefined) return hit;
  await refresh(env);
  return known.get(sku) ?? null;
}

/**
 * Whether `shard` is a stock object of a configured SKU: below its shard count (read again, at most
 * once a second, when the count this isolate has is smaller: a resize elsewhere).
 */
export async function catalogHasShard(env: Env, sku: string, shard: number): Promise<boolean> {
  const shards = await catalogShards(env, sku);
  if (shards === null) return false;
  if (shard < shards) return true;
  await refresh(env);
  return shard < (known.get(sku) ?? 0);
}

/** This isolate configured a SKU: it exists now, with this many shards. */
export function rememberSku(sku: string, shards: number): void {
  known.set(sku, Math.max(shards, known.get(sku) ?? 0));
}

async function refresh(env: Env): Promise<void> {
  if (Date.now() - loadedAt < REFRESH_MS) return;
  loading ??= (async () => {
    const { results } = await env.DB.prepare("SELECT sku, shards FROM skus").all<{ sku: string; shards: number }>();
    // Merged, not replaced: a SKU this isolate just configured may be newer than the rows read.
    for (const row of results) known.set(row.sku, Math.max(row.shards, known.get(row.sku) ?? 0));
    loadedAt = Date.now();
  })().finally(() => {
    loading = null;
  });
  await loading;
}
