/**
 * How a stock shard reaches its SKU's log (./sale-log.ts): the outbox sender's hook. The log is on
 * when the Worker has a log key (`LOG_SIGNING_KEY`) and the `SALE_LOG` binding; off, a shard's
 * outbox goes to the queue alone, as before the log.
 */

/** Appends a flush's queue message bodies to the log of the shard `<sku>#<shard>`; undefined when the log is off. */
export function saleLogAppender(
  env: Env,
  objectName: string | undefined,
): ((bodies: readonly string[]) => Promise<unknown>) | undefined {
  if (!env.LOG_SIGNING_KEY || !env.SALE_LOG || !objectName) return undefined;
  const split = objectName.lastIndexOf("#");
  if (split < 0) return undefined;
  const sku = objectName.slice(0, split);
  const shard = Number(objectName.slice(split + 1));
  const log = env.SALE_LOG.getByName(sku);
  return (bodies) => log.append(shard, bodies);
}
