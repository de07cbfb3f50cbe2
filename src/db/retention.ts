/**
 * How long D1 keeps what only serves a while (the durable history, `orders` and `dead_letters`, is
 * kept), and the pruning the cron trigger runs after each reconciliation:
 *
 * - `processed_events`, the consumer's idempotency keys: 7 days. A queue redelivers within minutes
 *   (5 retries, then the DLQ); a replay of an older dead letter is still applied once, because an
 *   event changes an order only when its `seq` is above the row's `last_seq`.
 * - `payment_event_ids`, what each payment event id said: 7 days, as long as the stock objects keep
 *   their answers (Stripe retries an event for up to 3 days).
 * - `reconcile_runs` and their `reconcile_differences`: 7 days of run history (the admin route and
 *   the dashboard read the latest runs). `flashgate_reconcile_differences_total` counts from
 *   `reconcile_difference_counts`, which pruning never lowers.
 *
 * Each statement deletes at most `PRUNE_BATCH` rows (a D1 statement is bounded in time), and a run
 * at most `PRUNE_ROUNDS` batches per table: a backlog drains over successive minutes.
 */
export const PROCESSED_EVENTS_RETENTION_MS = 7 * 24 * 3600 * 1000;
export const RECONCILE_HISTORY_RETENTION_MS = 7 * 24 * 3600 * 1000;
export const PAYMENT_EVENT_IDS_RETENTION_MS = 7 * 24 * 3600 * 1000;
const PRUNE_BATCH = 2_000;
const PRUNE_ROUNDS = 10;

export interface Pruned {
  processedEvents: number;
  paymentEventIds: number;
  reconcileRuns: number;
  reconcileDifferences: number;
}

export async function pruneHistory(db: D1Database, now: number): Promise<Pruned> {
  const pruned: Pruned = { processedEvents: 0, paymentEventIds: 0, reconcileRuns: 0, reconcileDifferences: 0 };
  const eventsBefore = now - PROCESSED_EVENTS_RETENTION_MS;
  const runsBefore = now - RECONCILE_HISTORY_RETENTION_MS;
  for (let round = 0; round < PRUNE_ROUNDS; round++) {
    const result = await db
      .prepare(
        `DELETE FROM processed_events WHERE rowid IN
           (SELECT rowid FROM processed_events WHERE processed_at < ?1 ORDER BY processed_at LIMIT ?2)`,
      )
      .bind(eventsBefore, PRUNE_BATCH)
      .run();
    pruned.processedEvents += result.meta.changes;
    if (result.meta.changes < PRUNE_BATCH) break;
  }
  for (let round = 0; round < PRUNE_ROUNDS; round++) {
    const result = await db
      .prepare(
        `DELETE FROM payment_event_ids WHERE rowid IN
           (SELECT rowid FROM payment_event_ids WHERE received_at < ?1 ORDER BY received_at LIMIT ?2)`,
      )
      .bind(now - PAYMENT_EVENT_IDS_RETENTION_MS, PRUNE_BATCH)
      .run();
    pruned.paymentEventIds += result.meta.changes;
    if (result.meta.changes < PRUNE_BATCH) break;
  }
  for (let round = 0; round < PRUNE_ROUNDS; round++) {
    // A batch of old runs, their differences first (a run never stays without its differences).
    const { results } = await db
      .prepare("SELECT id FROM reconcile_runs WHERE started_at < ?1 ORDER BY started_at LIMIT 90")
      .bind(runsBefore)
      .all<{ id: string }>();
    if (results.length === 0) break;
    const ids = results.map((r) => r.id);
    const marks = ids.map((_, i) => `?${i + 1}`).join(", ");
    const [differences, runs] = await db.batch([
      db.prepare(`DELETE FROM reconcile_differences WHERE run_id IN (${marks})`).bind(...ids),
      db.prepare(`DELETE FROM reconcile_runs WHERE id IN (${marks})`).bind(...ids),
    ]);
    pruned.reconcileDifferences += differences?.meta.changes ?? 0;
    pruned.reconcileRuns += runs?.meta.changes ?? 0;
    if (results.length < 90) break;
  }
  return pruned;
}
