import { log } from "../../durable-objects/shared/log";
import { eventsOfMessage, type OrderEvent } from "../../durable-objects/stock/stock-model";
import { wakeEndpoints } from "../handoff/delivery-consumer";
import { increment } from "../observability/metrics";
import { applyOrderEvents } from "./order-store";

/**
 * Consumer of `order-events`: the idempotent consumer of the classic design.
 *
 * A message carries one event or many (`{"events": [...]}`, durable-objects/shared/order-events.ts). The events of a
 * whole delivery are applied together in one `db.batch` (multi-row statements, one transaction); if
 * that fails, each message's events are applied on their own and each message is acked or retried on
 * its own, so one poison message never holds back the rest of its batch. A message is acked when all
 * its events were written and retried whole otherwise; applying an event again is harmless (the event
 * ids are recorded and an order only moves to a higher seq). Retries back off exponentially; after
 * `max_retries` (wrangler.toml) the queue moves a message to the dead-letter queue, whose replay
 * applies its events again.
 */

const MAX_BACKOFF_SECONDS = 60;

function backoffSeconds(attempts: number): number {
  return Math.min(MAX_BACKOFF_SECONDS, 2 ** Math.max(0, attempts - 1));
}

export async function consumeOrderEvents(batch: MessageBatch<unknown>, env: Env): Promise<void> {
  const now = Date.now();
  const deliveries = batch.messages.map((message) => {
    const { events, invalid } = eventsOfMessage(message.body);
    if (invalid !== null) {
      log("warn", "order event failed validation", { messageId: message.id, error: invalid });
      increment("flashgate_queue_events_total", { result: "invalid" });
    }
    return { message, events, invalid };
  });

  // All events in one D1 batch (one round trip); if it fails, each message's on their own, so that
  // only the messages that really fail are retried.
  let changed: boolean[] | null = null;
  let dueEndpoints: string[] = [];
  const all = deliveries.flatMap((d) => d.events);
  try {
    ({ changed, dueEndpoints } = await applyOrderEvents(env.DB, all, now));
  } catch (err) {
    log("warn", "order events batch failed, applying message by message", {
      messages: deliveries.length,
      events: all.length,
      error: String(err),
    });
  }
  // A test sale's events say so in the log too (API.md "Test sales": its log entries carry `test: true`).
  const applied: { requestId: string | undefined; eventId: string; type: string; seq: number; test?: true }[] = [];
  let unchanged = 0;
  let offset = 0;
  for (const { message, events, invalid } of deliveries) {
    let rows: boolean[];
    try {
      if (changed) rows = changed.slice(offset, offset + events.length);
      else {
        const applied = await applyOrderEvents(env.DB, events, now);
        rows = applied.changed;
        dueEndpoints = [...new Set([...dueEndpoints, ...applied.dueEndpoints])];
      }
    } catch (err) {
      retryMessage(message, events, err);
      continue;
    } finally {
      offset += events.length;
    }
    for (const [i, event] of events.entries()) {
      if (rows[i]) {
        const entry = { requestId: event.requestId, eventId: event.id, type: event.type, seq: event.seq };
        applied.push(event.test ? { ...entry, test: true } : entry);
      } else unchanged++;
    }
    // Not valid (in part): retrying cannot help; let the queue dead-letter it quickly. Its valid
    // events are written above all the same.
    if (invalid !== null) message.retry({ delaySeconds: 0 });
    else message.ack();
  }
  // The changes' webhook deliveries were written with them; a wake-up lost here is sent again by the
  // cron's check-back (src/handoff/check-back.ts), so it never holds the acks back.
  if (dueEndpoints.length > 0)
    await wakeEndpoints(env, dueEndpoints).catch((err) =>
      log("warn", "could not wake the webhook senders", { error: String(err) }),
    );
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

/**
 * A message whose write failed: counted (its events), logged (their ids and request ids), and retried
 * whole after the backoff of its attempts.
 */
export function retryMessage(message: Message, events: readonly OrderEvent[], err: unknown): void {
  increment("flashgate_queue_events_total", { result: "retried" }, Math.max(1, events.length));
  log("warn", "order event failed, will retry", {
    messageId: message.id,
    requestIds: events.flatMap((e) => (e.requestId ? [e.requestId] : [])),
    eventIds: events.map((e) => e.id),
    attempts: message.attempts,
    error: String(err),
  });
  message.retry({ delaySeconds: backoffSeconds(message.attempts) });
}
