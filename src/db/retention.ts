import { PARKED } from "./schema";

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
 * - `checkout_claims` and `checkout_sessions` (src/payments/checkout.ts): 7 days after the session's
 *   expiry (`expires_at`, both). Only a checkout of a hold still held reads them: a session while it
 *   is open, a claim for the request and idempotency key its hold sends Stripe. A hold lasts at most a
 *   day (`holdSeconds` ≤ 86400) and began before its claim, whose session expires about half an hour
 *   after it; Stripe forgets a key a day after its first use. So a claim is gone only long after its
 *   hold ended and Stripe forgot its key: a hold never claims again at attempt 0 under a key Stripe
 *   still knows. Stripe's payment events name their reservation themselves (`client_reference_id`,
 *   metadata), not through these rows, and its late ones (up to 3 days) are inside the 7 days anyway.
 *
 * - The order hand-off (./../handoff): delivered deliveries of order changes, and the changes (the
 *   feed), `HANDOFF_RETENTION_DAYS` (default 30) after the change, by {@link pruneHandoff}. A change
 *   that a pending or failed delivery still carries is kept until it is delivered or its endpoint is
 *   deleted, and one applied long after it happened until the changes before it are old too. A
 *   flagged payment's delivered deliveries go as long after they were written (the payment record
 *   stays). A delivery parked by a PUT that dropped its type goes once parked that long: the
 *   endpoint never took the type back, so it is owed to no endpoint that will take it.
 *
 * Each statement deletes at most `PRUNE_BATCH` rows (a D1 statement is bounded in time), and a run
 * at most `PRUNE_ROUNDS` batches per table: a backlog drains over successive minutes.
 */
export const PROCESSED_EVENTS_RETENTION_MS = 7 * 24 * 3600 * 1000;
export const RECONCILE_HISTORY_RETENTION_MS = 7 * 24 * 3600 * 1000;
export const PAYMENT_EVENT_IDS_RETENTION_MS = 7 * 24 * 3600 * 1000;
export const CHECKOUT_RETENTION_MS = 7 * 24 * 3600 * 1000;
export const PRUNE_BATCH = 2_000;
export const PRUNE_ROUNDS = 10;
export const DEFAULT_HANDOFF_RETENTION_DAYS = 30;

/** `HANDOFF_RETENTION_DAYS` in ms: a positive number of days, else the default. */
export function handoffRetentionMs(text: string | undefined): number {
  const days = Number(text);
  const valid = text !== undefined && text.trim() !== "" && Number.isFinite(days) && days > 0;
  return (valid ? days : DEFAULT_HANDOFF_RETENTION_DAYS) * 24 * 3600 * 1000;
}

export interface Pruned {
  processedEvents: number;
  paymentEventIds: number;
  reconcileRuns: number;
  reconcileDifferences: number;
  checkoutClaims: number;
  checkoutSessions: number;
}

export async function pruneHistory(db: D1Database, now: number): Promise<Pruned> {
  const pruned: Pruned = {
    processedEvents: 0,
    paymentEventIds: 0,
    reconcileRuns: 0,
    reconcileDifferences: 0,
    checkoutClaims: 0,
    checkoutSessions: 0,
  };
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
  // Checkout claims and sessions expired past retention: a range of each one's expiry index.
  for (const [table, key] of [
    ["checkout_claims", "checkoutClaims"],
    ["checkout_sessions", "checkoutSessions"],
  ] as const) {
    for (let round = 0; round < PRUNE_ROUNDS; round++) {
      const result = await db
        .prepare(
          `DELETE FROM ${table} WHERE rowid IN
             (SELECT rowid FROM ${table} WHERE expires_at < ?1 ORDER BY expires_at LIMIT ?2)`,
        )
        .bind(now - CHECKOUT_RETENTION_MS, PRUNE_BATCH)
        .run();
      pruned[key] += result.meta.changes;
      if (result.meta.changes < PRUNE_BATCH) break;
    }
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

export interface PrunedHandoff {
  deliveries: number;
  changes: number;
}

/**
 * Deletes what the hand-off no longer owes anyone: first the delivered deliveries of changes below
 * the cut (per endpoint, a range of the table's key), then those changes that no delivery row names
 * any more. The cut is the first feed position whose change is inside retention: `changed_at` is the
 * event's own time, which does not rise with position (a dead letter replayed weeks later is a new
 * position with an old time), so only the positions below the first young one are all old. It is
 * found by walking the feed's key from its start, past what is left of the old changes, so each
 * delete walks a key range from its start too.
 */
export async function pruneHandoff(db: D1Database, now: number, retentionMs: number): Promise<PrunedHandoff> {
  const pruned: PrunedHandoff = { deliveries: 0, changes: 0 };
  // The key in order, stopping at the first young change; none: everything is old.
  const [cut, endpoints] = await db.batch([
    db
      .prepare(
        `SELECT COALESCE(
           (SELECT position FROM order_changes WHERE changed_at >= ?1 ORDER BY position LIMIT 1),
           (SELECT MAX(position) + 1 FROM order_changes)) AS position`,
      )
      .bind(now - retentionMs),
    db.prepare("SELECT id FROM webhook_endpoints"),
  ]);
  const first = (cut?.results[0] as { position: number | null } | undefined)?.position ?? null;
  const before = now - retentionMs;
  for (const { id } of (endpoints?.results ?? []) as { id: string }[]) {
    // Rows parked without parked_at (by the release before it) start their clock now, a batch at a
    // time as every statement here: the parked index's null range, never a walk of the parked rows.
    const stamp = db
      .prepare(
        `UPDATE webhook_deliveries SET parked_at = ?2 WHERE endpoint_id = ?1 AND position IN (
             SELECT position FROM webhook_deliveries INDEXED BY webhook_deliveries_parked
             WHERE endpoint_id = ?1 AND status = 'pending' AND next_attempt_at >= ${PARKED} AND parked_at IS NULL
             LIMIT ?3)`,
      )
      .bind(id, now, PRUNE_BATCH);
    for (let round = 0; round < PRUNE_ROUNDS; round++) {
      if ((await stamp.run()).meta.changes < PRUNE_BATCH) break;
    }
    const deletes = [
      // Parked longer than retention: the endpoint never took the type back (a range of the parked index).
      db
        .prepare(
          `DELETE FROM webhook_deliveries WHERE endpoint_id = ?1 AND position IN (
             SELECT position FROM webhook_deliveries INDEXED BY webhook_deliveries_parked
             WHERE endpoint_id = ?1 AND status = 'pending' AND next_attempt_at >= ${PARKED} AND parked_at < ?2
             LIMIT ?3)`,
        )
        .bind(id, before, PRUNE_BATCH),
      // Delivered payments owed back (negative keys) written before retention: the payment record stays.
      db
        .prepare(
          `DELETE FROM webhook_deliveries WHERE endpoint_id = ?1 AND position IN (
             SELECT position FROM webhook_deliveries
             WHERE endpoint_id = ?1 AND position < 0 AND status = 'delivered' AND created_at < ?2
             ORDER BY position LIMIT ?3)`,
        )
        .bind(id, before, PRUNE_BATCH),
    ];
    // Delivered order changes below the cut, a range of the key.
    if (first !== null) {
      deletes.push(
        db
          .prepare(
            `DELETE FROM webhook_deliveries WHERE endpoint_id = ?1 AND position IN (
               SELECT position FROM webhook_deliveries
               WHERE endpoint_id = ?1 AND position > 0 AND position < ?2 AND status = 'delivered'
               ORDER BY position LIMIT ?3)`,
          )
          .bind(id, first, PRUNE_BATCH),
      );
    }
    for (const statement of deletes) {
      for (let round = 0; round < PRUNE_ROUNDS; round++) {
        const result = await statement.run();
        pruned.deliveries += result.meta.changes;
        if (result.meta.changes < PRUNE_BATCH) break;
      }
    }
  }
  if (first === null) return pruned;
  for (let round = 0; round < PRUNE_ROUNDS; round++) {
    // A change is kept while any delivery row still names it: pending, failed, or delivered and not
    // pruned yet (this run's rounds ran out). CROSS JOIN keeps the endpoints outer, a key lookup each:
    // left to itself SQLite scanned webhook_deliveries per change.
    const result = await db
      .prepare(
        `DELETE FROM order_changes WHERE position IN (
           SELECT c.position FROM order_changes c WHERE c.position < ?1 AND NOT EXISTS (
             SELECT 1 FROM webhook_endpoints e CROSS JOIN webhook_deliveries d
             WHERE d.endpoint_id = e.id AND d.position = c.position)
           ORDER BY c.position LIMIT ?2)`,
      )
      .bind(first, PRUNE_BATCH)
      .run();
    pruned.changes += result.meta.changes;
    if (result.meta.changes < PRUNE_BATCH) break;
  }
  return pruned;
}
