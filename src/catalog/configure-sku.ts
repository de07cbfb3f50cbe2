import { drizzle } from "drizzle-orm/d1";
import { type SkuSettings, type SkuState, sumShards } from "../../durable-objects/stock-model";
import { skus } from "../db/schema";
import { readShardStates } from "../edge/sku-state";
import { callStock, stockShard, unwrap } from "../edge/stock-client";
import { ApiError } from "../http/errors";
import type { SkuSettingsRequest } from "../http/schemas";

/**
 * Creates or updates a SKU over its shards, then records it in the D1 catalog.
 *
 * - A new SKU's stock is split evenly over its shards, and shard 0 records the SKU's total.
 * - `shards` can change only while nothing is held or sold and nobody waits (users are routed by
 *   `hash(user) % shards`: moving them while they hold stock would split their per-user count).
 * - `totalStock` is absolute. On one shard it is that shard's total. On a sharded SKU, shard 0
 *   applies it in one transaction as the difference from the total it recorded for the last PUT
 *   (`setSkuTotal`): a rise lands on shard 0 (transfers spread it on demand), a cut takes available
 *   units, pulling them from siblings first when shard 0 lacks them; if the SKU has not enough,
 *   `409 INVALID_STATE` and the total stays as it was. Because the base is the recorded total, not a
 *   sum read from live shards, concurrent PUTs and transfers in flight cannot skew it: the SKU's
 *   total is the `totalStock` of the last PUT shard 0 applied. Stock is never created or lost.
 * Fields left out keep their value.
 */
export async function configureSku(
  env: Env,
  sku: string,
  body: SkuSettingsRequest,
  now: number,
  requestId?: string,
): Promise<SkuState> {
  const time = (value: string | null | undefined) => (value == null ? value : Date.parse(value));
  const common = {
    sku,
    name: body.name,
    perUserLimit: body.perUserLimit,
    holdSeconds: body.holdSeconds,
    startsAt: time(body.startsAt),
    endsAt: time(body.endsAt),
    status: body.status,
    openingWindowMs: body.openingWindowMs,
  };
  const configure = (shard: number, shards: number, totalStock: number | undefined) => {
    const settings: SkuSettings = { ...common, shard, shards, totalStock };
    if (shard === 0 && totalStock !== undefined) settings.skuTotal = body.totalStock;
    return callStock(() => stockShard(env, sku, shard).configure(settings, requestId)).then(unwrap);
  };

  const current = await readShardStates(env, sku);
  checkOpeningWindow(body, current?.[0] ?? null, common.startsAt, now);
  const shards = body.shards ?? current?.[0]?.shards ?? 1;
  if (!current || shards !== current[0]?.shards) {
    if (current) await assertIdle(env, sku, current);
    const reach = Math.max(shards, current?.length ?? 0);
    // Shards beyond the new count keep nothing (no user is routed there any more). Each shard
    // refuses a new count once it holds or sells anything (a hold taken since `assertIdle` read it);
    // shard 0, whose count tokens are minted with, changes last, so a refused resize is retried whole.
    await Promise.all(
      Array.from({ length: reach - 1 }, (_, k) => k + 1).map((i) =>
        configure(i, shards, i < shards ? share(body.totalStock, shards, i) : 0),
      ),
    );
    await configure(0, shards, share(body.totalStock, shards, 0));
  } else if (shards === 1) {
    await configure(0, 1, body.totalStock); // the object refuses a total below held + sold
  } else {
    await Promise.all(current.map((s) => configure(s.shard, shards, undefined)));
    // Only for a SKU whose shard 0 never recorded its total (configured before it did so).
    const assumed = sumShards(current).stock.total;
    await callStock(() => stockShard(env, sku, 0).setSkuTotal(body.totalStock, assumed, requestId)).then(unwrap);
  }

  const states = await readShardStates(env, sku);
  if (!states) throw new Error(`SKU ${sku} vanished while being configured`);
  const state = sumShards(states);
  await drizzle(env.DB)
    .insert(skus)
    .values({ sku, name: state.name, shards, totalStock: body.totalStock, createdAt: now, updatedAt: now })
    .onConflictDoUpdate({
      target: skus.sku,
      set: { name: state.name, shards, totalStock: body.totalStock, updatedAt: now },
    });
  return state;
}

/** Shard i's part of `total` over `shards` shards (the first ones take the remainder). */
export function share(total: number, shards: number, i: number): number {
  return Math.floor(total / shards) + (i < total % shards ? 1 : 0);
}

/**
 * Fair opening: a window opens at `startsAt`, in the future (its seed hash is published before it
 * opens), and does not move once open. The stock objects check the same in their transaction (two
 * PUTs racing); this gives the clear error first, before any shard changes.
 */
function checkOpeningWindow(
  body: SkuSettingsRequest,
  current: SkuState | null,
  startsAt: number | null | undefined,
  now: number,
): void {
  const windowBefore = current?.openingWindowMs ?? 0;
  const startsBefore = current?.startsAt ?? null;
  const windowMs = body.openingWindowMs ?? windowBefore;
  const starts = startsAt === undefined ? startsBefore : startsAt;
  const changed = windowMs !== windowBefore || starts !== startsBefore;
  if (windowBefore > 0 && startsBefore !== null && now >= startsBefore) {
    if (changed)
      throw new ApiError("INVALID_STATE", "The opening window has opened: openingWindowMs and startsAt stay.");
    return;
  }
  if (windowMs === 0 || !changed) return;
  if (starts === null) throw new ApiError("INVALID_REQUEST", "openingWindowMs > 0 needs a startsAt.");
  if (now >= starts) {
    throw new ApiError(
      "INVALID_STATE",
      "An opening window must open in the future (its seed hash is published first).",
    );
  }
}

async function assertIdle(env: Env, sku: string, states: SkuState[]): Promise<void> {
  const busy = states.some((s) => s.stock.held + s.stock.sold > 0);
  const waiting = await Promise.all(states.map((s) => callStock(() => stockShard(env, sku, s.shard).waitlistLength())));
  if (busy || waiting.some((n) => n > 0)) {
    throw new ApiError("INVALID_STATE", "shards can change only while nothing is held or sold and nobody waits.");
  }
}
