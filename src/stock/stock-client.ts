import { log } from "../../durable-objects/shared/log";
import type { AdminFace, EdgeFace, Outcome, StockStub } from "../../durable-objects/stock/stock-model";
import { shardName } from "../../durable-objects/stock/stock-model";
import { ApiError, busy } from "../http/errors";

/** SKU ids: short, URL-safe, no dots (a dot separates the parts of a reservation id). */
export const SKU_ID = /^[A-Za-z0-9_-]{1,64}$/;

/** Reservation ids name their stock object: `<sku>.<shard>.<32 hex>`. */
const RESERVATION_ID = /^([A-Za-z0-9_-]{1,64})\.(\d{1,2})\.[0-9a-f]{32}$/;

/** The stock object of one SKU shard as the edge reaches it: by typed RPC, through its edge face. */
export function stockShard(env: Env, sku: string, shard: number): StockStub<EdgeFace> {
  return stockShardByName(env, shardName(sku, shard));
}

/** The stock object named `<sku>#<shard>` (shard-name.ts), through its edge face. */
export function stockShardByName(env: Env, name: string): StockStub<EdgeFace> {
  return env.SKU_STOCK.getByName(name);
}

/** The stock object of one SKU shard as the operator's side reaches it: admin, catalog, payments, reconciliation. */
export function adminShard(env: Env, sku: string, shard: number): StockStub<AdminFace> {
  return env.SKU_STOCK.getByName(shardName(sku, shard));
}

/** Where a reservation lives, or null for an id that cannot be one of ours. */
export function locateReservation(id: string): { sku: string; shard: number } | null {
  const match = RESERVATION_ID.exec(id);
  if (!match?.[1] || !match[2]) return null;
  return { sku: match[1], shard: Number(match[2]) };
}

const STALE_TOKEN = "The purchase token was minted before the SKU's shards changed; ask for a new one.";

/** The value of a stock outcome, or the contract error it stands for. */
export function unwrap<T>(outcome: Outcome<T>): T {
  if (!outcome.ok) {
    if (outcome.code === "BUSY") throw busy();
    if (outcome.code === "TOKEN_INVALID") throw new ApiError("TOKEN_INVALID", STALE_TOKEN);
    // An undecided draw's answer is waited for by the edge (src/edge/draw-client.ts), never sent.
    if (outcome.code === "DRAW_PENDING") throw busy("The opening draw is not decided yet (your token keeps its place)");
    if (outcome.code === "VARIANT_INVALID") throw variantInvalid();
    throw new ApiError(outcome.code);
  }
  return outcome.value;
}

/**
 * Calls a stock object. An overloaded object (its queue of waiting requests is full), one the
 * runtime is restarting, or one reset while it answered becomes `503 BUSY` with `Retry-After`, as the
 * contract says; anything else is a real failure.
 */
export async function callStock<P>(call: () => P): Promise<Awaited<P>> {
  try {
    return await call();
  } catch (err) {
    if (!(err instanceof Error)) throw err;
    if (isReset(err)) {
      // Kept visible: a reset the object's own code caused (a broken output gate) lands here too.
      log("warn", "stock object reset mid-call", { error: String(err) });
      throw busy("The stock service restarted while answering");
    }
    if (isTransient(err)) throw busy();
    throw err;
  }
}

/**
 * Overloaded, or a transient failure of the runtime rather than of our code (the object restarting or
 * moving: `.retryable` and not `.remote`, see Cloudflare's "Durable Objects error handling"). Every
 * stock RPC is idempotent (a reservation by its token's nonce, a payment by its event id), so the
 * client's retry with the same request is safe: the answer is `503 BUSY`, never a `500`.
 */
function isTransient(err: Error): boolean {
  const flags = err as { overloaded?: boolean; retryable?: boolean; remote?: boolean };
  return flags.overloaded === true || (flags.retryable === true && flags.remote !== true);
}

/**
 * The object was reset (`ctx.abort()`, a code update, a broken output gate) while this call was in
 * flight or queued: workerd marks that error `.durableObjectReset`, with neither `.retryable` nor
 * always `.remote`. Its in-memory state is gone, its storage kept only what it had committed, and the
 * next call starts a fresh instance, so the same request sent again is answered as if it came first.
 */
function isReset(err: Error): boolean {
  return (err as { durableObjectReset?: boolean }).durableObjectReset === true;
}

/**
 * `400 INVALID_REQUEST` of a request whose `variants` do not fit its SKU (API.md v1.4 "Sizes"): the
 * stock object decides it, as it knows the SKU's variants.
 */
export function variantInvalid(): ApiError {
  return new ApiError(
    "INVALID_REQUEST",
    "variants does not fit this SKU: a SKU with sizes needs variants (1 to 5 of its variant ids, in order of preference); a SKU without them takes none. Nothing was held.",
    {},
    { fields: [{ path: "variants", message: "1 to 5 of the SKU's variant ids; none for a SKU without variants" }] },
  );
}
