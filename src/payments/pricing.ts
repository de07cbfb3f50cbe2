import type { PaymentTotals, Pricing, PricingChange, SkuState } from "../../durable-objects/stock-model";
import { callStock, stockShard, unwrap } from "../edge/stock-client";

/**
 * A SKU's price lives in each of its stock objects, next to the payments it checks: a payment is
 * decided by the shard that holds its reservation, in one transaction with its idempotency record.
 */

/**
 * Writes the price and currency of a PUT to every shard of the SKU just configured (`state`, whose
 * pricing is shard 0's). Fields left out keep shard 0's value, so shards a resize added get it too.
 */
export async function applyPricing(env: Env, state: SkuState, body: PricingChange, requestId?: string): Promise<void> {
  const pricing: Pricing = {
    price: body.price !== undefined ? body.price : state.price,
    currency: body.currency ?? state.currency,
  };
  await Promise.all(
    Array.from({ length: state.shards }, (_, shard) =>
      callStock(() => stockShard(env, state.sku, shard).setPricing(pricing, requestId)).then(unwrap),
    ),
  );
}

/** The SKU's payment outcomes over all its shards (the admin view's `payments`). */
export async function readPaymentTotals(env: Env, sku: string, shards: number): Promise<PaymentTotals> {
  const totals = await Promise.all(
    Array.from({ length: shards }, (_, shard) => callStock(() => stockShard(env, sku, shard).paymentTotals())),
  );
  return { refund_required: totals.reduce((sum, t) => sum + t.refund_required, 0) };
}
