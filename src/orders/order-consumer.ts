import { type OrderEvent, OrderEventSchema } from "./events";
import { applyOrderEvent } from "./order-store";

/**
 * Consumer of `order-events`: the idempotent consumer of the classic design.
 *
 * Each message is applied on its own (one `db.batch`) and acked or retried on its own, so one
 * poison message never holds back the rest of its batch. Retries back off exponentially; after
 * `max_retries` (wrangler.toml) the queue moves a message to the dead-letter queue.
 */

/** Test and chaos seam: called before each write; throwing makes that message fail. */
export type ConsumerFault = (event: OrderEvent, attempts: number) => void;

const MAX_BACKOFF_SECONDS = 60;

export function backoffSeconds(attempts: number): number {
  return Math.min(MAX_BACKOFF_SECONDS, 2 ** Math.max(0, attempts - 1));
}

export async function consumeOrderEvents(batch: MessageBatch<unknown>, env: Env, fault?: ConsumerFault): Promise<void> {
  const now = Date.now();
  for (const message of batch.messages) {
    const parsed = OrderEventSchema.safeParse(message.body);
    if (!parsed.success) {
      // Not an event at all: retrying cannot help; let the queue dead-letter it quickly.
      log("warn", "order event failed validation", { messageId: message.id, error: parsed.error.message });
      message.retry({ delaySeconds: 0 });
      continue;
    }
    try {
      fault?.(parsed.data, message.attempts);
      await applyOrderEvent(env.DB, parsed.data, now);
      message.ack();
    } catch (err) {
      log("warn", "order event failed, will retry", {
        eventId: parsed.data.id,
        attempts: message.attempts,
        error: String(err),
      });
      message.retry({ delaySeconds: backoffSeconds(message.attempts) });
    }
  }
}

function log(level: "warn" | "error", msg: string, fields: Record<string, unknown>): void {
  console[level](JSON.stringify({ level, msg, ...fields }));
}
