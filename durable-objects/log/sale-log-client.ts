/**
 * How a stock shard reaches its SKU's log (./sale-log.ts): the outbox sender's hook. The log is on
 * when the Worker has a log key (`LOG_SIGNING_KEY`) and the `SALE_LOG` binding; off, a shard's
 * outbox goes to the queue alone, as before the log.
 *
 * The shard's SKU and number are read from its own state at each flush, not from the object's name:
 * an object woken by its alarm (after a restart, say) may not know its name, and a flush without the
 * log would lose its events' entries. A shard with events to send always has its state.
 */
export function saleLogAppender(
  env: Env,
  where: () => { sku: string; shard: number } | null,
): ((bodies: readonly string[]) => Promise<unknown>) | undefined {
  if (!env.LOG_SIGNING_KEY || !env.SALE_LOG) return undefined;
  return async (bodies) => {
    const at = where();
    // Thrown, not skipped: the flush is retried, and the events wait in the outbox meanwhile.
    if (!at) throw new Error("sale log: this shard does not know its SKU yet");
    return env.SALE_LOG.getByName(at.sku).append(at.shard, bodies);
  };
}
