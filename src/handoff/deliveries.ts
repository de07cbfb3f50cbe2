import type { DeliveryStatus, WebhookEventType } from "../db/schema";
import { CHANGE_COLUMNS, type ChangeRow } from "./order-object";

/**
 * The D1 side of webhook deliveries: taking the due ones, recording what each attempt got, the
 * delivery log and the manual retry. The rows are the truth; queue messages only wake a sender
 * (./delivery-consumer.ts), so a lost message delays a delivery but never loses it.
 */

/**
 * Now, in ms since the epoch, by D1's clock. Every time of the delivery schedule is D1's: the
 * trigger that writes a delivery (migration 0006) has no other clock, and a Worker's `Date.now()`
 * may be behind it (it moves only on I/O), which would leave a new delivery "not due yet" to the
 * very sender woken for it.
 */
const D1_NOW = "CAST((julianday('now') - 2440587.5) * 86400000 AS INTEGER)";

/** Whether a delivery is due now at an enabled endpoint. */
export const DUE_DELIVERIES_SQL = `SELECT EXISTS (
  SELECT 1 FROM webhook_deliveries d JOIN webhook_endpoints e ON e.id = d.endpoint_id
  WHERE d.status = 'pending' AND d.next_attempt_at <= ${D1_NOW} AND e.enabled = 1) AS due`;

export async function deliveriesDue(db: D1Database): Promise<boolean> {
  return (await db.prepare(DUE_DELIVERIES_SQL).first<{ due: number }>())?.due === 1;
}

/** A delivery a sender took: where it goes, with what key, and the change it carries. */
export interface Taken extends ChangeRow {
  id: string;
  endpoint_id: string;
  type: WebhookEventType;
  /** This attempt's number (1 for the first). */
  attempts: number;
  url: string;
  secret: string;
}

/**
 * Takes up to `limit` due deliveries of enabled endpoints, oldest due first: marks them with
 * `lease`, counts the attempt, and moves their due time past it (`leaseMs`), so no other sender
 * takes them meanwhile and they are due again if this one never reports. One round trip.
 */
export async function takeDue(db: D1Database, limit: number, lease: string, leaseMs: number) {
  const [, taken] = await db.batch<Taken>([
    db
      .prepare(
        `UPDATE webhook_deliveries SET lease = ?1, next_attempt_at = ${D1_NOW} + ?2, attempts = attempts + 1,
           updated_at = ${D1_NOW}
         WHERE id IN (SELECT d.id FROM webhook_deliveries d JOIN webhook_endpoints e ON e.id = d.endpoint_id
                      WHERE d.status = 'pending' AND d.next_attempt_at <= ${D1_NOW} AND e.enabled = 1
                      ORDER BY d.next_attempt_at LIMIT ?3)`,
      )
      .bind(lease, leaseMs, limit),
    db
      .prepare(
        `SELECT d.id, d.endpoint_id, d.type, d.attempts, e.url, e.secret, ${CHANGE_COLUMNS}
         FROM webhook_deliveries d JOIN webhook_endpoints e ON e.id = d.endpoint_id
           JOIN order_changes c ON c.position = d.position JOIN orders o ON o.reservation_id = c.reservation_id
         WHERE d.lease = ?1`,
      )
      .bind(lease),
  ]);
  return taken?.results ?? [];
}

/** What one attempt of a taken delivery leaves in its row. */
export interface Outcome {
  id: string;
  status: DeliveryStatus;
  /** The HTTP status answered, null when none was (timeout, refused connection). */
  code: number | null;
  /** The answer's body or the error, at most 1 KB. */
  response: string;
  /** How long after now it is due again (pending), else null. */
  delayMs: number | null;
}

/**
 * Records the outcomes of one sender's attempts in one statement (the outcomes travel as one JSON
 * parameter). Only rows still under `lease` change: a sender whose lease lapsed and whose
 * deliveries another took leaves that one's record alone. The lease is compared as `+lease`, which
 * keeps SQLite off its index: with it, the plan reads the leased rows by that index and scans the
 * whole JSON array for each (a page squared of `json_extract`s, all on D1's one thread); without
 * it, each outcome finds its row by primary key.
 */
export async function recordOutcomes(db: D1Database, outcomes: readonly Outcome[], lease: string) {
  if (outcomes.length === 0) return;
  await db
    .prepare(
      `UPDATE webhook_deliveries SET
         status = json_extract(j.value, '$.status'),
         last_status_code = json_extract(j.value, '$.code'),
         last_response = json_extract(j.value, '$.response'),
         next_attempt_at = ${D1_NOW} + json_extract(j.value, '$.delayMs'),
         lease = NULL,
         updated_at = ${D1_NOW}
       FROM json_each(?1) AS j
       WHERE webhook_deliveries.id = json_extract(j.value, '$.id') AND +webhook_deliveries.lease = ?2`,
    )
    .bind(JSON.stringify(outcomes), lease)
    .run();
}

/** A row of the delivery log (API.md: `GET /admin/webhooks/:id/deliveries`). */
export interface DeliveryView {
  id: string;
  type: WebhookEventType;
  reservationId: string;
  status: DeliveryStatus;
  attempts: number;
  lastStatusCode: number | null;
  lastResponse: string | null;
  nextAttemptAt: string | null;
  createdAt: string;
  updatedAt: string;
}

interface DeliveryRow {
  id: string;
  position: number;
  type: WebhookEventType;
  reservation_id: string;
  status: DeliveryStatus;
  attempts: number;
  last_status_code: number | null;
  last_response: string | null;
  next_attempt_at: number | null;
  created_at: number;
  updated_at: number;
}

const iso = (ms: number | null) => (ms === null ? null : new Date(ms).toISOString());

/**
 * An endpoint's deliveries, newest change first, of one status or all. Each status is one range
 * of the (endpoint, status, position) index; all three are read and merged for "all".
 */
export async function listDeliveries(
  db: D1Database,
  endpointId: string,
  status: DeliveryStatus | undefined,
  limit: number,
): Promise<DeliveryView[]> {
  const statuses: DeliveryStatus[] = status ? [status] : ["pending", "delivered", "failed"];
  const pages = await db.batch<DeliveryRow>(
    statuses.map((s) =>
      db
        .prepare(
          `SELECT id, position, type, reservation_id, status, attempts, last_status_code, last_response,
                  next_attempt_at, created_at, updated_at
           FROM webhook_deliveries WHERE endpoint_id = ?1 AND status = ?2 ORDER BY position DESC LIMIT ?3`,
        )
        .bind(endpointId, s, limit),
    ),
  );
  const rows = pages.flatMap((p) => p.results).sort((a, b) => b.position - a.position || a.id.localeCompare(b.id));
  return rows.slice(0, limit).map((row) => ({
    id: row.id,
    type: row.type,
    reservationId: row.reservation_id,
    status: row.status,
    attempts: row.attempts,
    lastStatusCode: row.last_status_code,
    lastResponse: row.last_response,
    // A pending row's due time; while a sender holds it, when that sender's lease lapses.
    nextAttemptAt: row.status === "pending" ? iso(row.next_attempt_at) : null,
    createdAt: new Date(row.created_at).toISOString(),
    updatedAt: new Date(row.updated_at).toISOString(),
  }));
}

/**
 * Makes one delivery due now, whatever its status (a failed one gets one more attempt; a delivered
 * one is sent again, with its webhook-id). False when the endpoint has no such delivery.
 */
export async function retryNow(db: D1Database, endpointId: string, deliveryId: string) {
  const row = await db
    .prepare(
      `UPDATE webhook_deliveries SET status = 'pending', next_attempt_at = ${D1_NOW}, lease = NULL, updated_at = ${D1_NOW}
       WHERE id = ?2 AND endpoint_id = ?1 RETURNING id`,
    )
    .bind(endpointId, deliveryId)
    .first();
  return row !== null;
}
