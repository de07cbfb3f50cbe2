import { log, withLogContext } from "../observability/log";
import { increment } from "../observability/metrics";
import { type OrderEvent, OrderEventSchema } from "./events";
import { applyOrderEvent, applyOrderEvents } from "./order-store";

/**
 * Consumer of `order-events`: the idempotent consumer of the classic design.
 *
 * The messages of a delivery are applied together in one `db.batch`; if that fails, each is applied
 * on its own and acked or retried on its own, so one poison message never holds back the rest of its
 * batch. Retries back off exponentially; after `max_retries` (wrangler.toml) the queue moves a
 * message to the dead-letter queue.
 */

/** Test and chaos seam: called before each write; throwing makes that message fail. */
export type ConsumerFault = (event: OrderEvent, attempts: number) => void;

const MAX_BACKOFF_SECONDS = 60;

export function backoffSeconds(attempts: number): number {
  return Math.min(MAX_BACKOFF_SECONDS, 2 ** Math.max(0, attempts - 1));
}

export async function consumeOrderEvents(batch: MessageBatch<unknown>, env: Env, fault?: ConsumerFault): Promise<void> {
  const now = Date.now();
  const ready: { message: Message; event: OrderEvent }[] = [];
  for (const message of batch.messages) {
    const parsed = OrderEventSchema.safeParse(message.body);
    if (!parsed.success) {
      // Not an event at all: retrying cannot help; let the queue dead-letter it quickly.
      log("warn", "order event failed validation", { messageId: message.id, error: parsed.error.message });
      increment("flashgate_queue_events_total", { result: "invalid" });
      message.retry({ delaySeconds: 0 });
      continue;
    }
    try {
      fault?.(parsed.data, message.attempts);
      ready.push({ message, event: parsed.data });
    } catch (err) {
      retryLater(message, parsed.data, err);
    }
  }
  // All events in one D1 batch (one round trip); if it fails, each on its own, so that only the
  // messages that really fail are retried.
  let changed: boolean[] | null = null;
  try {
    changed = await applyOrderEvents(
      env.DB,
      ready.map((r) => r.event),
      now,
    );
  } catch (err) {
    log("warn", "order events batch failed, applying one by one", { events: ready.length, error: String(err) });
  }
  for (const [i, { message, event }] of ready.entries()) {
    await withLogContext(
      { requestId: event.requestId, eventId: event.id, reservationId: event.reservationId },
      async () => {
        try {
          const applied = changed ? changed[i] === true : await applyOrderEvent(env.DB, event, now);
          message.ack();
          increment("flashgate_queue_events_total", { result: applied ? "applied" : "duplicate" });
          log("info", applied ? "order event applied" : "order event changed nothing", {
            type: event.type,
            seq: event.seq,
            attempts: message.attempts,
          });
        } catch (err) {
          retryLater(message, event, err);
        }
      },
    );
  }
}

function retryLater(message: Message, event: OrderEvent, err: unknown): void {
  increment("flashgate_queue_events_total", { result: "retried" });
  log("warn", "order event failed, will retry", {
    requestId: event.requestId,
    eventId: event.id,
    attempts: message.attempts,
    error: String(err),
  });
  message.retry({ delaySeconds: backoffSeconds(message.attempts) });
}
