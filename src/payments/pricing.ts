import type { PaymentTotals } from "../../durable-objects/stock/stock-model";
import { adminShard, callStock } from "../stock/stock-client";

/**
 * A SKU's price lives in each of its stock objects, next to the payments it checks: a payment is
 * decided by the shard that holds its reservation, in one transaction with its idempotency record.
 * A PUT sets it on every shard with the rest of the SKU's settings (durable-objects/stock/sku-change.ts).
 */

/** The SKU's payment outcomes over all its shards (the admin view's `payments`). */
export async function readPaymentTotals(env: Env, sku: string, shards: number): Promise<PaymentTotals> {
  const totals = await Promise.all(
    Array.from({ length: shards }, (_, shard) => callStock(() => adminShard(env, sku, shard).paymentTotals())),
  );
  return { refund_required: totals.reduce((sum, t) => sum + t.refund_required, 0) };
}
