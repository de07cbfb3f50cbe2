import type { ConfigEntry, RefundEntryEvent } from "../shared/sale-entries";

/**
 * How a stock shard reaches its SKU's log (./sale-log.ts): the outbox sender's hook, for its events
 * and (shard 0) the SKU's configuration entries. The log is on when the Worker has a log key
 * (`LOG_SIGNING_KEY`) and the `SALE_LOG` binding; off, a shard's outbox goes to the queue alone.
 *
 * The shard's SKU and number are read from its own state at each flush, not from the object's name:
 * an object woken by its alarm (after a restart, say) may not know its name, and a flush without the
 * log would lose its events' entries. A shard with events to send always has its state.
 */
export function saleLogAppender(env: Env, where: () => { sku: string; shard: number } | null): SaleLogHook | undefined {
  if (!env.LOG_SIGNING_KEY || !env.SALE_LOG) return undefined;
  // Thrown, not skipped: the flush is retried, and what it sends waits in the outbox meanwhile.
  const logOf = () => {
    const at = where();
    if (!at) throw new Error("sale log: this shard does not know its SKU yet");
    return { at, log: env.SALE_LOG.getByName(at.sku) };
  };
  return {
    append: (bodies) => {
      const { at, log } = logOf();
      return log.append(at.shard, bodies);
    },
    appendConfig: (entry, dedupe) => {
      const { at, log } = logOf();
      return log.appendConfig(entry, dedupe, at.sku);
    },
    appendPayment: (payment, time, dedupe) => {
      const { at, log } = logOf();
      return log.appendPayment(at.sku, payment, time, dedupe);
    },
  };
}

/**
 * What a shard's outbox sender hands the log: a flush's message bodies, shard 0's configuration
 * entries, and the payments answered `refund_required` that changed no reservation.
 */
export interface SaleLogHook {
  append(bodies: readonly string[]): Promise<unknown>;
  appendConfig(entry: ConfigEntry, dedupe: string): Promise<unknown>;
  appendPayment(payment: RefundEntryEvent, time: number, dedupe: string): Promise<unknown>;
}
