import { log } from "../observability/log";
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

const MAX_BACKOFF_SECONDS = 60;

export function backoffSeconds(attempts: number): number {
  return Math.min(MAX_BACKOFF_SECONDS, 2 ** Math.max(0, attempts - 1));
}

export async function consumeOrderEvents(batch: MessageBatch<unknown>, env: Env): Promise<void> {
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
    ready.push({ message, event: parsed.data });
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
  const applied: { requestId: string | undefined; eventId: string; type: string; seq: number }[] = [];
  let unchanged = 0;
  for (const [i, { message, event }] of ready.entries()) {
    try {
      const changedRow = changed ? changed[i] === true : await applyOrderEvent(env.DB, event, now);
      message.ack();
      increment("flashgate_queue_events_total", { result: changedRow ? "applied" : "duplicate" });
      if (changedRow) applied.push({ requestId: event.requestId, eventId: event.id, type: event.type, seq: event.seq });
      else unchanged++;
    } catch (err) {
      retryLater(message, event, err);
    }
  }
  // One line per delivery, not per event: it names every request id it carried, so a purchase is
  // still followed from the edge to D1, at the cost of one log write per batch.
  if (applied.length > 0 || unchanged > 0) {
    log("info", "order events applied", {
      applied: applied.length,
      unchanged,
      requestIds: applied.flatMap((e) => (e.requestId ? [e.requestId] : [])),
      events: applied,
    });
  }
}

/** A message whose write failed: counted, logged, and retried after the backoff of its attempts. */
export function retryLater(message: Message, event: OrderEvent, err: unknown): void {
  increment("flashgate_queue_events_total", { result: "retried" });
  log("warn", "order event failed, will retry", {
    requestId: event.requestId,
    eventId: event.id,
    attempts: message.attempts,
    error: String(err),
  });
  message.retry({ delaySeconds: backoffSeconds(message.attempts) });
}
