import { eq } from "drizzle-orm";
import { drizzle } from "drizzle-orm/d1";
import { log } from "../../durable-objects/shared/log";
import { eventsOfMessage } from "../../durable-objects/stock/stock-model";
import { deadLetters } from "../db/schema";
import { increment } from "../observability/metrics";
import { applyOrderEvents } from "./order-store";

/**
 * The delay before a letter that could not be stored is offered again (seconds): 30 doubling with
 * each attempt, at most an hour. With the consumer's 100 retries (wrangler.toml), about 4 days.
 */
export function letterRetryDelay(attempts: number): number {
  return Math.min(3600, 30 * 2 ** Math.max(0, attempts - 1));
}

/**
 * Consumer of the dead-letter queue: stores what the order consumer gave up on, so nothing is
 * lost and an operator can replay it once the cause is fixed. Idempotent by message id.
 *
 * A letter D1 will not take (most likely the outage that sent it here) is offered again after a
 * growing delay, each letter on its own: the queue's own retries come at once, an outage outlasts
 * them, and a dead-letter queue's message past its last retry is gone for good.
 */
export async function consumeDeadLetters(batch: MessageBatch<unknown>, env: Env): Promise<void> {
  const d1 = drizzle(env.DB);
  const now = Date.now();
  for (const message of batch.messages) {
    try {
      await d1
        .insert(deadLetters)
        .values({
          id: message.id,
          queue: batch.queue,
          body: storedBody(message.body),
          attempts: message.attempts,
          receivedAt: now,
        })
        .onConflictDoNothing();
    } catch (err) {
      const delaySeconds = letterRetryDelay(message.attempts);
      log("error", "dead letter not stored; offered again later", {
        messageId: message.id,
        attempts: message.attempts,
        delaySeconds,
        error: String(err),
      });
      message.retry({ delaySeconds });
      continue;
    }
    message.ack();
    // A message may carry many events (durable-objects/shared/order-events.ts): each is named, so is each request.
    const { events } = eventsOfMessage(message.body);
    increment("flashgate_queue_events_total", { result: "dead_lettered" }, Math.max(1, events.length));
    log("error", "order event dead-lettered", {
      messageId: message.id,
      attempts: message.attempts,
      eventIds: events.map((e) => e.id),
      requestIds: events.flatMap((e) => (e.requestId ? [e.requestId] : [])),
    });
  }
}

/**
 * A letter's body as stored: always JSON. The stock objects send JSON text (kept as it came, so the
 * operator sees the events); any other body is serialized, a text that is not JSON as a string.
 */
function storedBody(body: unknown): string {
  if (typeof body === "string") {
    try {
      JSON.parse(body);
      return body;
    } catch {
      return JSON.stringify(body);
    }
  }
  return JSON.stringify(body);
}

export type DeadLetter = typeof deadLetters.$inferSelect;

/** A stored letter and its place in the list: its `rowid`, which only grows (letters are never deleted). */
export interface ListedLetter {
  position: number;
  id: string;
  queue: string;
  body: string;
  attempts: number;
  received_at: number;
  replayed_at: number | null;
}

/**
 * One page of stored letters, newest stored first: those below `before` (a position a page ended
 * at), so a page is a range of the table's rowid, as cheap deep in the list as at its top.
 */
export async function listDeadLetters(
  db: D1Database,
  opts: { pendingOnly?: boolean; before?: number; limit?: number } = {},
): Promise<ListedLetter[]> {
  const { results } = await db
    .prepare(
      `SELECT rowid AS position, id, queue, body, attempts, received_at, replayed_at FROM dead_letters
       WHERE rowid < ?1 AND (?2 = 0 OR replayed_at IS NULL) ORDER BY rowid DESC LIMIT ?3`,
    )
    .bind(opts.before ?? Number.MAX_SAFE_INTEGER, opts.pendingOnly ? 1 : 0, opts.limit ?? 100)
    .all<ListedLetter>();
  return results;
}

type ReplayResult =
  | { found: false }
  | { found: true; replayedAt: number; applied: boolean; error?: string; dueEndpoints?: string[] };

/**
 * Replays a dead letter (a message: one event, or many) through the same idempotent apply as the
 * consumer, all its events in one transaction. Replaying twice is harmless: the event ids are
 * recorded, and an order only moves to a higher seq. A letter with an event that is not valid is
 * refused whole (the consumer already applied its valid events when it first received it).
 */
export async function replayDeadLetter(db: D1Database, id: string, now: number): Promise<ReplayResult> {
  const d1 = drizzle(db);
  const letter = await d1.select().from(deadLetters).where(eq(deadLetters.id, id)).get();
  if (!letter) return { found: false };
  const { events, invalid } = eventsOfMessage(JSON.parse(letter.body));
  if (invalid !== null || events.length === 0)
    return { found: true, replayedAt: 0, applied: false, error: "not a valid order event" };
  const { dueEndpoints } = await applyOrderEvents(db, events, now);
  increment("flashgate_queue_events_total", { result: "replayed" }, events.length);
  log("info", "dead letter replayed", { deadLetterId: id, eventIds: events.map((e) => e.id) });
  const replayedAt = letter.replayedAt ?? now;
  if (letter.replayedAt === null) await d1.update(deadLetters).set({ replayedAt }).where(eq(deadLetters.id, id));
  return { found: true, replayedAt, applied: true, dueEndpoints };
}
