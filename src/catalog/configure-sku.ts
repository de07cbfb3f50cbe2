import { drizzle } from "drizzle-orm/d1";
import { type SkuChange, type SkuState, sumShards } from "../../durable-objects/stock-model";
import { skus } from "../db/schema";
import { rememberSku } from "../edge/sku-catalog";
import { readShardStates } from "../edge/sku-state";
import { callStock, stockShard, unwrap } from "../edge/stock-client";
import { ApiError } from "../http/errors";
import type { SkuSettingsRequest } from "../http/schemas";

/**
 * Creates or updates a SKU, then records it in the D1 catalog. Shard 0 applies the whole change,
 * all or nothing, on every shard (durable-objects/sku-change.ts): a PUT that answers an error has
 * changed nothing.
 *
 * - A new SKU's stock is split evenly over its shards, and shard 0 records the SKU's total.
 * - `shards` can change only while nothing is held or sold and nobody waits (users are routed by
 *   `hash(user) % shards`: moving them while they hold stock would split their per-user count).
 * - `totalStock` is absolute. On one shard it is that shard's total. On a sharded SKU, shard 0
 *   applies it as the difference from the total it recorded for the last PUT: a rise lands on
 *   shard 0 (transfers spread it on demand), a cut takes available units, pulling them from
 *   siblings first when shard 0 lacks them; if the SKU has not enough, `409 INVALID_STATE`. Because
 *   the base is the recorded total, not a sum read from live shards, concurrent PUTs and transfers
 *   in flight cannot skew it: the SKU's total is the `totalStock` of the last PUT that answered 200.
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
  const current = await readShardStates(env, sku, { anyId: true });
  const startsAt = time(body.startsAt);
  checkOpeningWindow(body, current?.[0] ?? null, startsAt, now);
  const shards = body.shards ?? current?.[0]?.shards ?? 1;
  const change: SkuChange = {
    sku,
    shards,
    totalStock: body.totalStock,
    // Only for a SKU whose shard 0 never recorded its total (configured before it did so).
    assumedTotal: current ? sumShards(current).stock.total : 0,
    name: body.name,
    perUserLimit: body.perUserLimit,
    holdSeconds: body.holdSeconds,
    startsAt,
    endsAt: time(body.endsAt),
    status: body.status,
    openingWindowMs: body.openingWindowMs,
    price: body.price,
    currency: body.currency,
  };
  unwrap(await callStock(() => stockShard(env, sku, 0).putSku(change, requestId)));

  const states = await readShardStates(env, sku, { anyId: true });
  if (!states) throw new Error(`SKU ${sku} vanished while being configured`);
  const state = sumShards(states);
  await drizzle(env.DB)
    .insert(skus)
    .values({ sku, name: state.name, shards, totalStock: body.totalStock, createdAt: now, updatedAt: now })
    .onConflictDoUpdate({
      target: skus.sku,
      set: { name: state.name, shards, totalStock: body.totalStock, updatedAt: now },
    });
  rememberSku(sku, shards);
  return state;
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
