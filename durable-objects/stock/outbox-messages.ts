import type { OutboxRow } from "../engine/outbox";
import { MAX_EVENTS_PER_MESSAGE } from "../shared/order-events";

/**
 * How a stock object's outbox becomes queue messages: its rows (each up to a message's events of one
 * transaction, stored as JSON text), oldest first, joined whole into message bodies
 * `{"events":[…]}` of at most {@link MAX_EVENTS_PER_MESSAGE} events, and messages into `sendBatch`
 * calls, each within the Queues limits (https://developers.cloudflare.com/queues/platform/limits/):
 * 128 KB per message, 100 messages or 256 KB per `sendBatch`. The margins leave room for the ~100
 * bytes of metadata per message that count towards those limits. The text goes out as it was
 * stored (content type `text`): a flush parses and serializes nothing. A row always fits a message:
 * an event is at most about 1.5 KB (user ids of 128 characters, SKUs of 64, request ids of 200), so
 * 32 of them stay far below {@link MAX_MESSAGE_BYTES} (rows are never split).
 */
export const MAX_MESSAGE_BYTES = 120_000;
export const MAX_SEND_BATCH_BYTES = 250_000;
const MAX_SEND_BATCH_MESSAGES = 100;

const encoder = new TextEncoder();
const PREFIX = '{"events":[';
const SUFFIX = "]}";

/** One `sendBatch` call: its message bodies (JSON text) and the last seq of the rows they carry. */
interface SendBatch {
  bodies: string[];
  lastSeq: number;
}

/** UTF-8 bytes of `text`: its length when it is ASCII (nearly always: ids, ISO dates, numbers). */
function utf8Bytes(text: string): number {
  // biome-ignore lint/suspicious/noControlCharactersInRegex: the ASCII range, control characters included
  return /^[\u0000-\u007f]*$/.test(text) ? text.length : encoder.encode(text).byteLength;
}

/** Packs outbox rows (oldest first) into `sendBatch` calls of multi-event messages, order kept. */
export function packOutbox(rows: readonly OutboxRow[]): SendBatch[] {
  const batches: SendBatch[] = [];
  let batch: (SendBatch & { bytes: number }) | undefined;
  let parts: string[] = [];
  let events = 0;
  let bytes = 0;
  let lastSeq = 0;
  const endMessage = () => {
    if (parts.length === 0) return;
    const body = `${PREFIX}${parts.join(",")}${SUFFIX}`;
    if (!batch || batch.bodies.length >= MAX_SEND_BATCH_MESSAGES || batch.bytes + bytes > MAX_SEND_BATCH_BYTES) {
      batch = { bodies: [], lastSeq, bytes: 0 };
      batches.push(batch);
    }
    batch.bodies.push(body);
    batch.bytes += bytes;
    batch.lastSeq = lastSeq;
    parts = [];
    events = 0;
  };
  for (const row of rows) {
    const rowBytes = utf8Bytes(row.events) + 1; // + the comma
    if (events + row.count > MAX_EVENTS_PER_MESSAGE || bytes + rowBytes > MAX_MESSAGE_BYTES) endMessage();
    if (parts.length === 0) bytes = PREFIX.length + SUFFIX.length;
    parts.push(row.events);
    events += row.count;
    bytes += rowBytes;
    lastSeq = row.lastSeq;
  }
  endMessage();
  return batches.map(({ bodies, lastSeq }) => ({ bodies, lastSeq }));
}
