import { MAX_EVENTS_PER_MESSAGE, type OrderEvent } from "./events";

/**
 * How a stock object's outbox becomes queue messages: events, oldest first, packed into messages of
 * at most {@link MAX_EVENTS_PER_MESSAGE} events, and messages into `sendBatch` calls, each within the
 * Queues limits (https://developers.cloudflare.com/queues/platform/limits/): 128 KB per message,
 * 100 messages or 256 KB per `sendBatch`. The margins leave room for the ~100 bytes of metadata per
 * message that count towards those limits.
 */
export const MAX_MESSAGE_BYTES = 120_000;
export const MAX_SEND_BATCH_BYTES = 250_000;
export const MAX_SEND_BATCH_MESSAGES = 100;

const encoder = new TextEncoder();
const EMPTY_BODY_BYTES = '{"events":[]}'.length;

/** One queue message: its body and the outbox items it carries. */
interface Message<T> {
  body: { events: OrderEvent[] };
  items: T[];
  bytes: number;
}

/** One `sendBatch` call: its message bodies and the outbox items they carry. */
export interface SendBatch<T> {
  bodies: { events: OrderEvent[] }[];
  items: T[];
}

/** Packs outbox items (oldest first) into `sendBatch` calls of multi-event messages, order kept. */
export function packOutbox<T extends { event: OrderEvent }>(items: readonly T[]): SendBatch<T>[] {
  const messages: Message<T>[] = [];
  let message: Message<T> | undefined;
  for (const item of items) {
    const bytes = encoder.encode(JSON.stringify(item.event)).byteLength + 1; // + the comma
    if (!message || message.items.length >= MAX_EVENTS_PER_MESSAGE || message.bytes + bytes > MAX_MESSAGE_BYTES) {
      message = { body: { events: [] }, items: [], bytes: EMPTY_BODY_BYTES };
      messages.push(message);
    }
    message.body.events.push(item.event);
    message.items.push(item);
    message.bytes += bytes;
  }
  const batches: SendBatch<T>[] = [];
  let batch: SendBatch<T> | undefined;
  let batchBytes = 0;
  for (const m of messages) {
    if (!batch || batch.bodies.length >= MAX_SEND_BATCH_MESSAGES || batchBytes + m.bytes > MAX_SEND_BATCH_BYTES) {
      batch = { bodies: [], items: [] };
      batchBytes = 0;
      batches.push(batch);
    }
    batch.bodies.push(m.body);
    batch.items.push(...m.items);
    batchBytes += m.bytes;
  }
  return batches;
}
