import { desc, eq, isNull } from "drizzle-orm";
import { drizzle } from "drizzle-orm/d1";
import { log, OrderEventSchema } from "../../durable-objects/stock-model";
import { deadLetters } from "../db/schema";
import { increment } from "../observability/metrics";
import { applyOrderEvent } from "./order-store";

/**
 * Consumer of the dead-letter queue: stores what the order consumer gave up on, so nothing is
 * lost and an operator can replay it once the cause is fixed. Idempotent by message id.
 */
export async function consumeDeadLetters(batch: MessageBatch<unknown>, env: Env): Promise<void> {
  const d1 = drizzle(env.DB);
  const now = Date.now();
  for (const message of batch.messages) {
    await d1
      .insert(deadLetters)
      .values({
        id: message.id,
        queue: batch.queue,
        body: JSON.stringify(message.body),
        attempts: message.attempts,
        receivedAt: now,
      })
      .onConflictDoNothing();
    message.ack();
    increment("flashgate_queue_events_total", { result: "dead_lettered" });
    const body = message.body as { requestId?: unknown; id?: unknown } | null;
    log("error", "order event dead-lettered", {
      messageId: message.id,
      attempts: message.attempts,
      eventId: body?.id,
      requestId: typeof body?.requestId === "string" ? body.requestId : undefined,
    });
  }
}

export type DeadLetter = typeof deadLetters.$inferSelect;

export async function listDeadLetters(db: D1Database, opts: { pendingOnly?: boolean; limit?: number } = {}) {
  const d1 = drizzle(db);
  const query = d1.select().from(deadLetters);
  const filtered = opts.pendingOnly ? query.where(isNull(deadLetters.replayedAt)) : query;
  return filtered.orderBy(desc(deadLetters.receivedAt)).limit(opts.limit ?? 100);
}

type ReplayResult = { found: false } | { found: true; replayedAt: number; applied: boolean; error?: string };

/**
 * Replays a dead letter through the same idempotent apply as the consumer. Replaying twice is
 * harmless: the event id is recorded, and the order only moves to a higher seq.
 */
export async function replayDeadLetter(db: D1Database, id: string, now: number): Promise<ReplayResult> {
  const d1 = drizzle(db);
  const letter = await d1.select().from(deadLetters).where(eq(deadLetters.id, id)).get();
  if (!letter) return { found: false };
  const parsed = OrderEventSchema.safeParse(JSON.parse(letter.body));
  if (!parsed.success) return { found: true, replayedAt: 0, applied: false, error: "not a valid order event" };
  await applyOrderEvent(db, parsed.data, now);
  increment("flashgate_queue_events_total", { result: "replayed" });
  log("info", "dead letter replayed", { deadLetterId: id, eventId: parsed.data.id });
  const replayedAt = letter.replayedAt ?? now;
  if (letter.replayedAt === null) await d1.update(deadLetters).set({ replayedAt }).where(eq(deadLetters.id, id));
  return { found: true, replayedAt, applied: true };
}
