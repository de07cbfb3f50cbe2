import type { WebhookBatch } from "../db/schema";
import { deliveryId, type Taken } from "./deliveries";
import { eventOf } from "./sender";

/**
 * Webhook batches (API.md v1.4 "Webhook batches"): which due rows of a batched endpoint go out
 * together, and the signed message that carries them. A message's `webhook-id` is made from its
 * endpoint and the positions it carries, so the same events make the same id; the rows keep it
 * (`batch_id`) once attempted, and a batch not delivered is formed again from the rows that share
 * it: retried whole, with the same id.
 */

export const MAX_BATCH_EVENTS = 100;
export const MAX_BATCH_WAIT_MS = 10_000;
/** API.md: a batch message is at most 256 KiB. */
export const MAX_MESSAGE_BYTES = 256 * 1024;

/** The `webhook-id` of a batch message carrying these positions (in feed order) to this endpoint. */
export function batchIdOf(endpointId: string, positions: readonly number[]): string {
  // FNV-1a (32 bits) over the positions: with the first one and the count, it tells batches apart.
  let hash = 0x811c9dc5;
  for (const position of positions) {
    const text = `${position},`;
    for (let i = 0; i < text.length; i++) hash = Math.imul(hash ^ text.charCodeAt(i), 0x01000193) >>> 0;
  }
  const first = positions[0] ?? 0;
  const key = first < 0 ? `pay${-first}` : String(first);
  return `msg_batch_${key}_${positions.length}_${hash.toString(16).padStart(8, "0")}_${endpointId}`;
}

/** What goes out now of an endpoint's due rows. */
export interface Formed {
  /** The messages to send now, each its positions in feed order; the oldest due first. */
  messages: number[][];
  /** When (D1's clock) the fresh rows held back for more events may go anyway; null if none are. */
  holdUntil: number | null;
  /** Due rows were left for another round (more than a round's messages, or rows not read). */
  more: boolean;
}

/**
 * A message's order: order changes in feed order; a payment's deliveries (negative positions:
 * src/db/schema.ts) before them, in payment order.
 */
const orderKey = (position: number) => (position < 0 ? -1e16 - position : position);
const byPosition = (a: number, b: number) => orderKey(a) - orderKey(b);

/** What forming the messages needs of a due row. */
export type Due = Pick<Taken, "position" | "batch_id" | "written_at">;

/**
 * Forms the messages of a batched endpoint from its due rows as a take read them (oldest due
 * first; `truncated`: more were due than read). Rows that a batch carried before go
 * out with that batch again (cut to `maxEvents` if the setting shrank since); the others, in feed
 * order, by `maxEvents`, and a last part shorter than that only once its oldest row waited
 * `maxWaitMs` (by D1's clock, `now`). At most `maxMessages` messages.
 */
export function formMessages(
  rows: readonly Due[],
  truncated: boolean,
  batch: WebhookBatch,
  now: number,
  maxMessages: number,
): Formed {
  const formed: { at: number; positions: number[] }[] = [];
  const earlier = new Map<string, { at: number; positions: number[] }>();
  const fresh: { at: number; row: Due }[] = [];
  rows.forEach((row, at) => {
    if (row.batch_id === null) {
      fresh.push({ at, row });
      return;
    }
    const group = earlier.get(row.batch_id);
    if (group) group.positions.push(row.position);
    else earlier.set(row.batch_id, { at, positions: [row.position] });
  });
  let more = false;
  // The last row read may belong to a batch whose other rows were not read: it waits for a round that reads it whole.
  const last = rows.at(-1);
  if (truncated && last?.batch_id) {
    earlier.delete(last.batch_id);
    more = true;
  }
  for (const { at, positions } of earlier.values()) {
    positions.sort(byPosition);
    for (let i = 0; i < positions.length; i += batch.maxEvents) {
      formed.push({ at, positions: positions.slice(i, i + batch.maxEvents) });
    }
  }
  fresh.sort((a, b) => byPosition(a.row.position, b.row.position));
  let holdUntil: number | null = null;
  for (let i = 0; i < fresh.length; i += batch.maxEvents) {
    const part = fresh.slice(i, i + batch.maxEvents);
    if (part.length < batch.maxEvents) {
      if (truncated) {
        more = true;
        break;
      }
      const oldest = Math.min(...part.map((p) => p.row.written_at));
      if (oldest + batch.maxWaitMs > now) {
        holdUntil = oldest + batch.maxWaitMs;
        break;
      }
    }
    formed.push({ at: Math.min(...part.map((p) => p.at)), positions: part.map((p) => p.row.position) });
  }
  formed.sort((a, b) => a.at - b.at);
  if (formed.length > maxMessages) more = true;
  if (truncated) more = true;
  return { messages: formed.slice(0, maxMessages).map((f) => f.positions), holdUntil, more };
}

/** One batch message: its id, the rows it delivers, and its body. */
export interface BatchMessage {
  id: string;
  rows: Taken[];
  body: string;
}

const encoder = new TextEncoder();
/** Anything past ASCII: a character that takes more than one byte in UTF-8. */
const WIDE = /[\u0080-\uffff]/;
/** `text`'s length in UTF-8; an ASCII text (most events) is not encoded to be measured. */
const utf8Bytes = (text: string) => (WIDE.test(text) ? encoder.encode(text).length : text.length);
/** `{"type":"batch","timestamp":"<24 characters>","data":{"events":[` and `]}}`, with room to spare. */
const ENVELOPE_BYTES = 128;

/**
 * The messages carrying the formed batches, of the rows this sender took (a row another took
 * meanwhile is left out). A batch whose events pass 256 KiB goes as several messages, each cut
 * where the next event would not fit, each with the id of what it carries.
 */
export function batchMessagesOf(endpointId: string, formed: readonly number[][], taken: readonly Taken[]) {
  const rowAt = new Map(taken.map((row) => [row.position, row]));
  const messages: BatchMessage[] = [];
  for (const positions of formed) {
    let rows: Taken[] = [];
    let events: string[] = [];
    let bytes = ENVELOPE_BYTES;
    let timestamp = "";
    const flush = () => {
      if (rows.length === 0) return;
      const id = batchIdOf(
        endpointId,
        rows.map((row) => row.position),
      );
      const body = `{"type":"batch","timestamp":${JSON.stringify(timestamp)},"data":{"events":[${events.join(",")}]}}`;
      messages.push({ id, rows, body });
      rows = [];
      events = [];
      bytes = ENVELOPE_BYTES;
      timestamp = "";
    };
    for (const position of positions) {
      const row = rowAt.get(position);
      if (!row) continue;
      const event = eventOf(row);
      const json = JSON.stringify({ id: deliveryId(endpointId, row.position), ...event });
      const size = utf8Bytes(json) + 1;
      if (rows.length > 0 && bytes + size > MAX_MESSAGE_BYTES) flush();
      rows.push(row);
      events.push(json);
      bytes += size;
      // The message's time: its newest event's (ISO strings of one form sort as times), the same on every attempt.
      if (event.timestamp > timestamp) timestamp = event.timestamp;
    }
    flush();
  }
  return messages;
}
