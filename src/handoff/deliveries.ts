import type { DeliveryStatus, WebhookEventType } from "../db/schema";
import { PAYMENT_COLUMNS, type PaymentRow } from "../payments/payment-records";
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
  SELECT 1 FROM webhook_endpoints e WHERE e.enabled = 1 AND EXISTS (
    SELECT 1 FROM webhook_deliveries d
    WHERE d.endpoint_id = e.id AND d.status = 'pending' AND d.next_attempt_at <= ${D1_NOW})) AS due`;

export async function deliveriesDue(db: D1Database): Promise<boolean> {
  return (await db.prepare(DUE_DELIVERIES_SQL).first<{ due: number }>())?.due === 1;
}

/** A delivery's `webhook-id`, from its key (a payment's position is negative: src/db/schema.ts). */
export const deliveryId = (endpointId: string, position: number) =>
  position < 0 ? `msg_pay_${-position}_${endpointId}` : `msg_${position}_${endpointId}`;

/** The key a `webhook-id` names (null for anything {@link deliveryId} did not make). */
export function keyOf(id: string): { position: number; endpointId: string } | null {
  const match = /^msg_(pay_)?([1-9]\d{0,14})_([A-Za-z0-9_-]{1,64})$/.exec(id);
  if (!match) return null;
  const position = Number(match[2]);
  return { position: match[1] ? -position : position, endpointId: match[3] as string };
}

/** Where a taken delivery goes, and with what key. */
interface Leased {
  endpoint_id: string;
  /** Attempts answered before this one. */
  attempts: number;
  url: string;
  secret: string;
  /** The delivery's key: the order change's position, or the negative of the payment's. */
  position: number;
}

/** A delivery a sender took: where it goes, with what key, and the order change or payment it carries. */
export type Taken =
  | (Leased & ChangeRow & { type: Exclude<WebhookEventType, "payment.refund_required"> })
  | (Leased & { type: "payment.refund_required"; payment: PaymentRow });

/** The enabled endpoints with a delivery due now (one probe of the due index each). */
export async function endpointsDue(db: D1Database): Promise<string[]> {
  const { results } = await db
    .prepare(
      `SELECT e.id FROM webhook_endpoints e WHERE e.enabled = 1 AND EXISTS (
         SELECT 1 FROM webhook_deliveries d
         WHERE d.endpoint_id = e.id AND d.status = 'pending' AND d.next_attempt_at <= ${D1_NOW})`,
    )
    .all<{ id: string }>();
  return results.map((row) => row.id);
}

/**
 * Each endpoint's lag: the age in whole seconds of its oldest pending delivery (0 when none is
 * pending), by D1's clock. Reads each endpoint's pending rows through the due index: a backlog's
 * size, never the delivered history.
 */
export async function endpointLags(db: D1Database, endpointId?: string): Promise<Map<string, number>> {
  const { results } = await db
    .prepare(
      `SELECT e.id, COALESCE(MAX(0, (${D1_NOW} - (SELECT MIN(d.created_at) FROM webhook_deliveries d
                 WHERE d.endpoint_id = e.id AND d.status = 'pending')) / 1000), 0) AS lag
       FROM webhook_endpoints e WHERE ?1 IS NULL OR e.id = ?1`,
    )
    .bind(endpointId ?? null)
    .all<{ id: string; lag: number }>();
  return new Map(results.map((row) => [row.id, row.lag]));
}

/**
 * When the endpoint's next pending delivery that a sender would take is due (ms, D1's clock): null
 * when there is none, or the endpoint is disabled (its rows wait for the PUT that enables it, which
 * wakes the sender), so that no alarm comes back for rows it would not take.
 */
export async function nextDueAt(db: D1Database, endpointId: string): Promise<{ at: number; now: number } | null> {
  const row = await db
    .prepare(
      `SELECT MIN(d.next_attempt_at) AS at, ${D1_NOW} AS now
       FROM webhook_deliveries d JOIN webhook_endpoints e ON e.id = d.endpoint_id
       WHERE d.endpoint_id = ?1 AND d.status = 'pending' AND e.enabled = 1
         AND EXISTS (SELECT 1 FROM json_each(e.events) WHERE value = d.type)`,
    )
    .bind(endpointId)
    .first<{ at: number | null; now: number }>();
  return row && row.at !== null ? { at: row.at, now: row.now } : null;
}

/**
 * Takes up to `limit` due deliveries of one endpoint, oldest due first, while the endpoint is
 * enabled and subscribed to their type: marks them with `lease` and moves their due time past the
 * attempt (`leaseMs`), so no other sender takes them meanwhile and they are due again if this one
 * never reports. One round trip.
 */
export async function takeDue(
  db: D1Database,
  endpointId: string,
  limit: number,
  lease: string,
  leaseMs: number,
): Promise<Taken[]> {
  const [, orders, payments] = await db.batch([
    db
      .prepare(
        `UPDATE webhook_deliveries SET lease = ?1, next_attempt_at = ${D1_NOW} + ?2, updated_at = ${D1_NOW}
         WHERE endpoint_id = ?4 AND position IN (
           SELECT d.position FROM webhook_deliveries d JOIN webhook_endpoints e ON e.id = d.endpoint_id
           WHERE d.endpoint_id = ?4 AND d.status = 'pending' AND d.next_attempt_at <= ${D1_NOW} AND e.enabled = 1
             AND EXISTS (SELECT 1 FROM json_each(e.events) WHERE value = d.type)
           ORDER BY d.next_attempt_at LIMIT ?3)`,
      )
      .bind(lease, leaseMs, limit, endpointId),
    db
      .prepare(
        `SELECT d.endpoint_id, d.type, d.attempts, e.url, e.secret, ${CHANGE_COLUMNS}
         FROM webhook_deliveries d JOIN webhook_endpoints e ON e.id = d.endpoint_id
           JOIN order_changes c ON c.position = d.position JOIN orders o ON o.reservation_id = c.reservation_id
         WHERE d.lease = ?1`,
      )
      .bind(lease),
    db
      .prepare(
        `SELECT d.endpoint_id, d.position AS delivery_position, d.attempts, e.url, e.secret, ${PAYMENT_COLUMNS}
         FROM webhook_deliveries d JOIN webhook_endpoints e ON e.id = d.endpoint_id
           JOIN payments p ON p.position = -d.position
         WHERE d.lease = ?1 AND d.position < 0`,
      )
      .bind(lease),
  ]);
  type PaymentTaken = Omit<Leased, "position"> & PaymentRow & { delivery_position: number };
  return [
    ...((orders?.results ?? []) as Taken[]),
    ...((payments?.results ?? []) as PaymentTaken[]).map(
      ({ endpoint_id, delivery_position, attempts, url, secret, ...payment }): Taken => ({
        endpoint_id,
        attempts,
        url,
        secret,
        position: delivery_position,
        type: "payment.refund_required",
        payment,
      }),
    ),
  ];
}

/** What one attempt of a taken delivery leaves in its row. */
export interface Outcome {
  position: number;
  status: DeliveryStatus;
  /** The HTTP status answered, null when none was (timeout, refused connection). */
  code: number | null;
  /** The answer's body or the error, at most 1 KB. */
  response: string;
  /** What went wrong, in words; null when delivered. */
  error: string | null;
  /** How long after now it is due again (pending), else null. */
  delayMs: number | null;
}

/**
 * Records the outcomes of one lane's attempts at one endpoint in one statement (the outcomes
 * travel as one JSON parameter), each an attempt counted. Only rows still under `lease` change: a
 * sender whose lease lapsed and whose deliveries another took leaves that one's record alone. The
 * outcomes are materialized first and the lease compared as `+lease`, so that the plan reads each
 * outcome once and finds its row by key; otherwise SQLite walked the endpoint's rows (or the leased
 * ones) and scanned the whole array for each, on D1's one thread.
 */
export async function recordOutcomes(db: D1Database, endpointId: string, outcomes: readonly Outcome[], lease: string) {
  if (outcomes.length === 0) return;
  await db
    .prepare(
      `WITH j AS MATERIALIZED (
         SELECT json_extract(value, '$.position') AS position, json_extract(value, '$.status') AS status,
                json_extract(value, '$.code') AS code, json_extract(value, '$.response') AS response,
                json_extract(value, '$.error') AS error,
                json_extract(value, '$.delayMs') AS delay_ms
         FROM json_each(?1))
       UPDATE webhook_deliveries SET
         status = j.status,
         attempts = attempts + 1,
         last_status_code = j.code,
         last_response = j.response,
         last_error = j.error,
         next_attempt_at = ${D1_NOW} + j.delay_ms,
         lease = NULL,
         updated_at = ${D1_NOW}
       FROM j
       WHERE webhook_deliveries.endpoint_id = ?3 AND webhook_deliveries.position = j.position
         AND +webhook_deliveries.lease = ?2`,
    )
    .bind(JSON.stringify(outcomes), lease, endpointId)
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
  lastError: string | null;
  nextAttemptAt: string | null;
  createdAt: string;
  updatedAt: string;
}

interface DeliveryRow {
  endpoint_id: string;
  position: number;
  type: WebhookEventType;
  reservation_id: string;
  status: DeliveryStatus;
  attempts: number;
  last_status_code: number | null;
  last_response: string | null;
  last_error: string | null;
  next_attempt_at: number | null;
  created_at: number;
  updated_at: number;
}

const iso = (ms: number | null) => (ms === null ? null : new Date(ms).toISOString());

/**
 * Each listing is one range of an index: all and `delivered` the table's key backwards (newest
 * change first), `failed` its own partial index (newest first), `pending` the due index (the next
 * to go out first).
 */
const LISTINGS: Record<DeliveryStatus | "all", string> = {
  all: "webhook_deliveries WHERE endpoint_id = ?1 ORDER BY position DESC",
  delivered: "webhook_deliveries WHERE endpoint_id = ?1 AND status = 'delivered' ORDER BY position DESC",
  // Named: the key's order fits ORDER BY too, and SQLite would walk every delivered row to find these.
  failed:
    "webhook_deliveries INDEXED BY webhook_deliveries_failed WHERE endpoint_id = ?1 AND status = 'failed' ORDER BY position DESC",
  pending: "webhook_deliveries WHERE endpoint_id = ?1 AND status = 'pending' ORDER BY next_attempt_at",
};

export async function listDeliveries(
  db: D1Database,
  endpointId: string,
  status: DeliveryStatus | undefined,
  limit: number,
): Promise<DeliveryView[]> {
  const { results } = await db
    .prepare(
      `SELECT endpoint_id, position, type, reservation_id, status, attempts, last_status_code, last_response,
              last_error, next_attempt_at, created_at, updated_at
       FROM ${LISTINGS[status ?? "all"]} LIMIT ?2`,
    )
    .bind(endpointId, limit)
    .all<DeliveryRow>();
  return results.map((row) => ({
    id: deliveryId(row.endpoint_id, row.position),
    type: row.type,
    reservationId: row.reservation_id,
    status: row.status,
    attempts: row.attempts,
    lastStatusCode: row.last_status_code,
    lastResponse: row.last_response,
    lastError: row.last_error,
    // A pending row's due time; while a sender holds it, when that sender's lease lapses.
    nextAttemptAt: row.status === "pending" ? iso(row.next_attempt_at) : null,
    createdAt: new Date(row.created_at).toISOString(),
    updatedAt: new Date(row.updated_at).toISOString(),
  }));
}

/**
 * Makes one delivery of an endpoint due now, whatever its status (a failed one gets one more
 * attempt; a delivered one is sent again, with its webhook-id). `missing` when the endpoint has no
 * such delivery; `unsubscribed` when its type is no longer one the endpoint takes (no sender would
 * send it, so it is left as it is).
 */
export async function retryNow(
  db: D1Database,
  endpointId: string,
  id: string,
): Promise<"retried" | "missing" | "unsubscribed"> {
  const key = keyOf(id);
  if (!key || key.endpointId !== endpointId) return "missing";
  const [updated, found] = await db.batch([
    db
      .prepare(
        `UPDATE webhook_deliveries SET status = 'pending', next_attempt_at = ${D1_NOW}, lease = NULL, updated_at = ${D1_NOW}
         WHERE endpoint_id = ?1 AND position = ?2 AND ${SUBSCRIBED} RETURNING position`,
      )
      .bind(endpointId, key.position),
    db
      .prepare("SELECT 1 FROM webhook_deliveries WHERE endpoint_id = ?1 AND position = ?2")
      .bind(endpointId, key.position),
  ]);
  if ((updated?.results.length ?? 0) > 0) return "retried";
  return (found?.results.length ?? 0) > 0 ? "unsubscribed" : "missing";
}

/** Whether a delivery row's type is one its endpoint subscribes to (in a statement on webhook_deliveries, ?1 its endpoint). */
const SUBSCRIBED = "type IN (SELECT value FROM webhook_endpoints e, json_each(e.events) WHERE e.id = ?1)";

/**
 * Makes every failed and pending delivery of an endpoint due now (API.md v1.3 "Webhook deliveries"),
 * but those of types it no longer subscribes to and those a sender is attempting right now (leased
 * and not lapsed: tried now already). Returns how many.
 */
export async function retryAll(db: D1Database, endpointId: string): Promise<number> {
  const { results } = await db
    .prepare(
      `UPDATE webhook_deliveries SET status = 'pending', next_attempt_at = ${D1_NOW}, lease = NULL, updated_at = ${D1_NOW}
       WHERE endpoint_id = ?1 AND status IN ('failed', 'pending') AND ${SUBSCRIBED}
         AND NOT (lease IS NOT NULL AND next_attempt_at > ${D1_NOW})
       RETURNING position`,
    )
    .bind(endpointId)
    .all();
  return results.length;
}
