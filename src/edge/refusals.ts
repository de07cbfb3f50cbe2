import type { Outcome } from "../../durable-objects/stock/stock-model";
import { ApiError } from "../http/errors";
import { callStock, stockShard, unwrap } from "../stock/stock-client";
import { saleNotActive } from "./sale-phase";

/**
 * A stock object's refusals as the contract says them (API.md: what happened, what to do next), for
 * the reservation path and the line alike.
 */

/**
 * A refused reservation or waitlist entry, said with its figures (API.md: what happened, what to do
 * next): the per-user limit and what this user holds, when the sale opens or closed, the units left.
 * The figures come with the object's refusal, as it decided by them, so a bot retrying at its limit
 * costs one call; only a draw's decided entry, stored as its code, is read again from the user's home
 * shard. Any other outcome is unwrapped as it is.
 */
export async function explainRefusal<T>(
  env: Env,
  where: { sku: string; shard: number; userId: string; quantity: number },
  outcome: Outcome<T>,
): Promise<T> {
  if (outcome.ok) return outcome.value;
  const { sku, shard, userId, quantity } = where;
  if (outcome.code === "SALE_NOT_ACTIVE") {
    const sale = outcome.sale ?? (await callStock(() => stockShard(env, sku, shard).state()));
    if (sale) throw saleNotActive(sale, Date.now());
  }
  if (outcome.code === "LIMIT_EXCEEDED") {
    if (outcome.limit) throw limitExceeded(outcome.limit.perUserLimit, outcome.limit.held, quantity);
    const stub = stockShard(env, sku, shard);
    const [state, held] = await Promise.all([callStock(() => stub.state()), callStock(() => stub.quotaOf(userId))]);
    if (state) throw limitExceeded(state.perUserLimit, held, quantity);
  }
  if (outcome.variants && (outcome.code === "SOLD_OUT" || outcome.code === "INSUFFICIENT_STOCK")) {
    throw sizesShort(outcome.code, outcome.variants, quantity);
  }
  if (outcome.code === "INSUFFICIENT_STOCK" && outcome.available !== undefined) {
    throw new ApiError(
      "INSUFFICIENT_STOCK",
      `Only ${outcome.available} ${outcome.available === 1 ? "unit is" : "units are"} left and you asked for ${quantity}: ask for ${outcome.available} or fewer.`,
      {},
      { available: outcome.available, requested: quantity },
    );
  }
  return unwrap(outcome);
}

/** `409 LIMIT_EXCEEDED` with the limit, what the user already holds or bought, and what they may still ask for. */
function limitExceeded(perUserLimit: number, held: number, requested: number): ApiError {
  const room = Math.max(0, perUserLimit - held);
  const next =
    room > 0
      ? `You can still buy ${room}: ask for ${room} or fewer.`
      : "Pay for or cancel a hold you have, or let it lapse, to free room.";
  return new ApiError(
    "LIMIT_EXCEEDED",
    `At most ${perUserLimit} per shopper: you already hold or bought ${held}, so ${requested} more would be over the limit. ${next}`,
    {},
    { perUserLimit, held, requested },
  );
}

/**
 * Sizes: none of the listed variants has the quantity (API.md v1.4): `SOLD_OUT` when none has a
 * unit, else `INSUFFICIENT_STOCK`, each with what every listed variant has.
 */
export function sizesShort(
  code: "SOLD_OUT" | "INSUFFICIENT_STOCK",
  variants: Record<string, number>,
  quantity: number,
) {
  const each = Object.entries(variants)
    .map(([id, n]) => `${id}: ${n}`)
    .join(", ");
  const message =
    code === "SOLD_OUT"
      ? `Every size you listed is sold out (${each}): list other sizes, or join the waitlist for these.`
      : `None of the sizes you listed has ${quantity} units (${each}): ask for fewer, or list other sizes.`;
  return new ApiError(code, message, {}, { variants, requested: quantity });
}

/** A draw's refusal says where its entry came, as a winner's reservation does (API.md v1.3). */
export function withDrawPlace(err: unknown, draw: { entryId: string; position: number; entrants: number }): unknown {
  if (!(err instanceof ApiError)) return err;
  const place = { entryId: draw.entryId, position: draw.position, entrants: draw.entrants };
  return new ApiError(err.code, err.message, err.headers, { ...err.details, draw: place });
}
