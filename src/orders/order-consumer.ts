import { log, withLogContext } from "../observability/log";
import { increment } from "../observability/metrics";
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
      increment("flashgate_queue_events_total", { result: "invalid" });
      message.retry({ delaySeconds: 0 });
      continue;
    }
    const event = parsed.data;
    await withLogContext({ requestId: event.requestId, eventId: event.id, reservationId: event.reservationId }, () =>
      consumeOne(env, message, event, now, fault),
    );
  }
}

async function consumeOne(env: Env, message: Message, event: OrderEvent, now: number, fault?: ConsumerFault) {
  try {
    fault?.(event, message.attempts);
    const changed = await applyOrderEvent(env.DB, event, now);
    message.ack();
    increment("flashgate_queue_events_total", { result: changed ? "applied" : "duplicate" });
    log("info", changed ? "order event applied" : "order event changed nothing", {
      type: event.type,
      seq: event.seq,
      attempts: message.attempts,
    });
  } catch (err) {
    increment("flashgate_queue_events_total", { result: "retried" });
    log("warn", "order event failed, will retry", { attempts: message.attempts, error: String(err) });
    message.retry({ delaySeconds: backoffSeconds(message.attempts) });
  }
}
