import { log } from "../observability/log";
import { increment } from "../observability/metrics";
import { eventsOfMessage, type OrderEvent } from "./events";
import { applyOrderEvents } from "./order-store";

/**
 * Consumer of `order-events`: the idempotent consumer of the classic design.
 *
 * A message carries one event or many (`{"events": [...]}`, src/orders/events.ts). The events of a
 * whole delivery are applied together in one `db.batch` (multi-row statements, one transaction); if
 * that fails, each message's events are applied on their own and each message is acked or retried on
 * its own, so one poison message never holds back the rest of its batch. A message is retried, whole,
 * when any of its events failed; its other events are applied anyway (applying again is harmless: the
 * event ids are recorded and an order only moves to a higher seq). Retries back off exponentially;
 * after `max_retries` (wrangler.toml) the queue moves a message to the dead-letter queue, whose
 * replay applies its events again.
 */

/** Test and chaos seam: called before each event's write; throwing makes that event's message fail. */
export type ConsumerFault = (event: OrderEvent, attempts: number) => void;

const MAX_BACKOFF_SECONDS = 60;

export function backoffSeconds(attempts: number): number {
  return Math.min(MAX_BACKOFF_SECONDS, 2 ** Math.max(0, attempts - 1));
}

interface Delivery {
  message: Message;
  /** The events to write (the valid ones whose fault hook did not throw). */
  events: OrderEvent[];
  /** Events in the message in all (for counting a retry). */
  carried: number;
  /** Why the message must be retried even if its writes succeed, or null. */
  invalid: string | null;
  /** The first failure of one of its events (fault hook or write), or null. */
  failed: unknown;
  /** The events that failed (named in the retry log line). */
  failedEvents: OrderEvent[];
}

export async function consumeOrderEvents(batch: MessageBatch<unknown>, env: Env, fault?: ConsumerFault): Promise<void> {
  const now = Date.now();
  const deliveries: Delivery[] = batch.messages.map((message) => {
    const { events, invalid } = eventsOfMessage(message.body);
    const delivery: Delivery = { message, events: [], carried: events.length, invalid, failed: null, failedEvents: [] };
    for (const event of events) {
      try {
        fault?.(event, message.attempts);
        delivery.events.push(event);
      } catch (err) {
        delivery.failed ??= err;
        delivery.failedEvents.push(event);
      }
    }
    if (invalid !== null) {
      log("warn", "order event failed validation", { messageId: message.id, error: invalid });
      increment("flashgate_queue_events_total", { result: "invalid" });
    }
    return delivery;
  });

  // All events in one D1 batch (one round trip); if it fails, each message's on their own, so that
  // only the messages that really fail are retried.
  let changed: boolean[] | null = null;
  const all = deliveries.flatMap((d) => d.events);
  try {
    changed = await applyOrderEvents(env.DB, all, now);
  } catch (err) {
    log("warn", "order events batch failed, applying message by message", {
      messages: deliveries.length,
      events: all.length,
      error: String(err),
    });
  }
  const applied: { requestId: string | undefined; eventId: string; type: string; seq: number }[] = [];
  let unchanged = 0;
  let offset = 0;
  for (const delivery of deliveries) {
    const { message, events } = delivery;
    let rows: boolean[];
    try {
      rows = changed ? changed.slice(offset, offset + events.length) : await applyOrderEvents(env.DB, events, now);
    } catch (err) {
      rows = [];
      delivery.failed ??= err;
      delivery.failedEvents.push(...events);
    }
    offset += events.length;
    for (const [i, event] of events.entries()) {
      if (rows[i] === undefined) continue; // not written (the message's own write failed)
      if (rows[i]) applied.push({ requestId: event.requestId, eventId: event.id, type: event.type, seq: event.seq });
      else unchanged++;
    }
    if (delivery.failed !== null) retryLater(delivery, backoffSeconds(message.attempts));
    else if (delivery.invalid !== null)
      retryLater(delivery, 0); // retrying cannot help: dead-letter it soon
    else message.ack();
  }
  // Counted per delivery: a series key is built per call, and a delivery holds thousands of events.
  if (applied.length > 0) increment("flashgate_queue_events_total", { result: "applied" }, applied.length);
  if (unchanged > 0) increment("flashgate_queue_events_total", { result: "duplicate" }, unchanged);
  // One line per delivery, not per event: it names every request id it carried, so a purchase is
  // still followed from the edge to D1, at the cost of one log write per batch.
  if (applied.length > 0 || unchanged > 0) {
    log("info", "order events applied", {
      messages: deliveries.length,
      applied: applied.length,
      unchanged,
      requestIds: applied.flatMap((e) => (e.requestId ? [e.requestId] : [])),
      events: applied,
    });
  }
}

function retryLater(delivery: Delivery, delaySeconds: number): void {
  const { message } = delivery;
  increment("flashgate_queue_events_total", { result: "retried" }, Math.max(1, delivery.carried));
  if (delivery.failed !== null) {
    log("warn", "order event failed, will retry", {
      messageId: message.id,
      requestIds: delivery.failedEvents.flatMap((e) => (e.requestId ? [e.requestId] : [])),
      eventIds: delivery.failedEvents.map((e) => e.id),
      attempts: message.attempts,
      error: String(delivery.failed),
    });
  }
  message.retry({ delaySeconds });
}
