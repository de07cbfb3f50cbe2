import { PAYMENT_COLUMNS, type PaymentRow } from "../db/payment-records";
import { type DeliveryStatus, PARKED, type WebhookBatch, type WebhookEventType } from "../db/schema";
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
export const D1_NOW = "CAST((julianday('now') - 2440587.5) * 86400000 AS INTEGER)";

/** The `next_attempt_at` of a parked delivery (src/db/schema.ts, where retention reads it too). */
export { PARKED };

/** A sender holds the endpoint (`e`): its lease is set and has not lapsed. */
const HELD = `(e.lease IS NOT NULL AND e.lease_until > ${D1_NOW})`;
/** The endpoint (`e`) is free for the sender named by parameter `n`: no sender holds it, or that one does. */
const freeFor = (n: number) => `(NOT ${HELD} OR e.lease = ?${n})`;

/** Whether a delivery is due now at an enabled endpoint. */
const DUE_DELIVERIES_SQL = `SELECT EXISTS (
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

/** A taken delivery's key, attempts and times (its endpoint is the take's: {@link Target}). */
interface Leased {
  /** Attempts answered before this one. */
  attempts: number;
  /** The delivery's key: the order change's position, or the negative of the payment's. */
  position: number;
  /** The batch message that last carried it (its `webhook-id`), null if none did. */
  batch_id: string | null;
  /** When it was due (D1's clock): a take's rows come oldest due first. */
  due_at: number;
  /** When the delivery was written (D1's clock): how long a batched endpoint's event has waited. */
  written_at: number;
  /** Its `updated_at` when taken: a manual retry after the take changes it, and the recording keeps it due. */
  seen_at: number;
}

/** A delivery a sender took: its key, and the order change or payment it carries. */
export type Taken =
  | (Leased & ChangeRow & { type: Exclude<WebhookEventType, "payment.refund_required"> })
  | (Leased & { type: "payment.refund_required"; payment: PaymentRow });

/** Where a take's deliveries go: its endpoint's URL and secret, read once a take, not once a row. */
export interface Target {
  url: string;
  secret: string;
}

/** The enabled endpoints with a delivery due now (one probe of the due index each). */
export const ENDPOINTS_DUE_SQL = `SELECT e.id FROM webhook_endpoints e WHERE e.enabled = 1 AND EXISTS (
  SELECT 1 FROM webhook_deliveries d
  WHERE d.endpoint_id = e.id AND d.status = 'pending' AND d.next_attempt_at <= ${D1_NOW})`;

export async function endpointsDue(db: D1Database): Promise<string[]> {
  const { results } = await db.prepare(ENDPOINTS_DUE_SQL).all<{ id: string }>();
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
                 WHERE d.endpoint_id = e.id AND d.status = 'pending' AND d.next_attempt_at < ${PARKED})) / 1000), 0) AS lag
       FROM webhook_endpoints e WHERE ?1 IS NULL OR e.id = ?1`,
    )
    .bind(endpointId ?? null)
    .all<{ id: string; lag: number }>();
  return new Map(results.map((row) => [row.id, row.lag]));
}

/**
 * When the endpoint's next pending delivery that a sender would take is due (ms, D1's clock): null
 * when there is none, or the endpoint is disabled (its rows wait for the PUT that enables it, which
 * wakes the sender), so that no alarm comes back for rows it would not take. `afterNow`: the first
 * due after now (a batched endpoint's rows held back for more are due already).
 */
export async function nextDueAt(
  db: D1Database,
  endpointId: string,
  afterNow = false,
): Promise<{ at: number; now: number } | null> {
  // The due index in order, stopping at the first row a sender would take (MIN() walked them all).
  const row = await db
    .prepare(
      `SELECT d.next_attempt_at AS at, ${D1_NOW} AS now
       FROM webhook_deliveries d JOIN webhook_endpoints e ON e.id = d.endpoint_id
       WHERE d.endpoint_id = ?1 AND d.status = 'pending' AND e.enabled = 1 AND d.${subscribed(1)}
         AND (?2 = 0 OR d.next_attempt_at > ${D1_NOW}) AND d.next_attempt_at < ${PARKED}
       ORDER BY d.next_attempt_at LIMIT 1`,
    )
    .bind(endpointId, afterNow ? 1 : 0)
    .first<{ at: number; now: number }>();
  return row ? { at: row.at, now: row.now } : null;
}

const dueFirst = (a: Taken, b: Taken) => a.due_at - b.due_at || a.position - b.position;

/** A take's rows, oldest due first (each read is; a payment's are few and rare). */
function takenOf(orders: D1Result | undefined, payments: D1Result | undefined): Taken[] {
  type PaymentTaken = Omit<Leased, "position"> & PaymentRow & { delivery_position: number };
  const changes = (orders?.results ?? []) as Taken[];
  const paid = ((payments?.results ?? []) as PaymentTaken[]).map(
    ({ delivery_position, attempts, batch_id, due_at, written_at, seen_at, ...payment }): Taken => ({
      attempts,
      batch_id,
      due_at,
      written_at,
      seen_at,
      position: delivery_position,
      type: "payment.refund_required",
      payment,
    }),
  );
  return paid.length === 0 ? changes : [...changes, ...paid].sort(dueFirst);
}

/** An enabled endpoint's target and batch setting, and D1's now (the last statement of a take). */
function readEndpoint(db: D1Database, endpointId: string): D1PreparedStatement {
  return db
    .prepare(`SELECT url, secret, batch, ${D1_NOW} AS now FROM webhook_endpoints WHERE id = ?1 AND enabled = 1`)
    .bind(endpointId);
}

/** A take of one endpoint's due rows, where they go, the endpoint's batch setting as it is now, and D1's now. */
export interface TakenPage {
  /** Oldest due first (then in feed order). */
  taken: Taken[];
  /** Where they go; null when the endpoint is gone or disabled (and nothing was taken). */
  target: Target | null;
  /** The endpoint's batch setting; null: one event a message. */
  batch: WebhookBatch | null;
  /** D1's clock at the take. */
  now: number;
}

/** What {@link readEndpoint} read, with the rows taken (none: gone or disabled). */
function pageOf(endpoint: D1Result | undefined, orders: D1Result | undefined, payments: D1Result | undefined) {
  const row = endpoint?.results[0] as (Target & { batch: string | null; now: number }) | undefined;
  if (!row) return { taken: [], target: null, batch: null, now: 0 };
  return {
    taken: takenOf(orders, payments),
    target: { url: row.url, secret: row.secret },
    batch: row.batch ? (JSON.parse(row.batch) as WebhookBatch) : null,
    now: row.now,
  };
}

/**
 * The due rows of the endpoint (parameter 2) that `lease` (parameter 1) holds, oldest due first,
 * up to parameter 4, but those in `out` (JSON, parameter 5); due by the take's own now, the lease's
 * start (`lease_until` less its length, parameter 3), so that the take's two reads pick the same
 * rows. A table expression that each of them opens with.
 */
const PAGE_OF_HELD = `WITH page AS MATERIALIZED (
  SELECT d.position, d.next_attempt_at AS due_at
  FROM webhook_endpoints e CROSS JOIN webhook_deliveries d ON d.endpoint_id = e.id
  WHERE e.id = ?2 AND e.lease = ?1 AND e.enabled = 1
    AND d.status = 'pending' AND d.next_attempt_at <= e.lease_until - ?3 AND d.${subscribed(2)}
    AND d.position NOT IN (SELECT value FROM json_each(?5))
  ORDER BY d.next_attempt_at, d.position LIMIT ?4)`;

/**
 * Takes up to `limit` due deliveries of one endpoint, oldest due first, while the endpoint is
 * enabled and subscribed to their type, but those at `out` (the lane's attempts still unrecorded),
 * with what each carries. The take holds the endpoint, not its rows: its lease (the sender's name)
 * for `leaseMs`, while no other sender holds it (nothing is taken otherwise), so the rows are
 * written once, by their outcome. A sender that dies leaves its rows due, taken again once its
 * lease lapses (at once by its own next run), its attempts not counted. One round trip (one
 * transaction), which also reads the endpoint's URL, secret and batch setting; the lease is kept
 * until {@link release} or {@link recordBatch}. It first records `recorded`, the outcomes of the
 * lane's last round (while the lease still holds, as {@link recordOutcomes}), so that a batched
 * lane's rounds cost one round trip each, and those rows are not taken again.
 */
export async function takeDuePage(
  db: D1Database,
  endpointId: string,
  limit: number,
  lease: string,
  leaseMs: number,
  out: readonly number[] = [],
  recorded: readonly Outcome[] = [],
): Promise<TakenPage> {
  const page = [lease, endpointId, leaseMs, limit, JSON.stringify(out)] as const;
  const results = await db.batch([
    ...(recorded.length === 0 ? [] : [recording(db, endpointId, recorded, lease)]),
    db
      .prepare(
        `UPDATE webhook_endpoints AS e SET lease = ?1, lease_until = ${D1_NOW} + ?2
         WHERE id = ?3 AND enabled = 1 AND ${freeFor(1)}`,
      )
      .bind(lease, leaseMs, endpointId),
    db
      .prepare(
        `${PAGE_OF_HELD}
         SELECT d.type, d.attempts, d.batch_id, page.due_at, d.created_at AS written_at, d.updated_at AS seen_at,
           ${CHANGE_COLUMNS}
         FROM page CROSS JOIN webhook_deliveries d ON d.endpoint_id = ?2 AND d.position = page.position
           JOIN order_changes c ON c.position = d.position JOIN orders o ON o.reservation_id = c.reservation_id
         ORDER BY page.due_at, page.position`,
      )
      .bind(...page),
    db
      .prepare(
        `${PAGE_OF_HELD}
         SELECT d.position AS delivery_position, d.attempts, d.batch_id, page.due_at, d.created_at AS written_at,
           d.updated_at AS seen_at, ${PAYMENT_COLUMNS}
         FROM page CROSS JOIN webhook_deliveries d ON d.endpoint_id = ?2 AND d.position = page.position
           JOIN payments p ON p.position = -d.position
         WHERE page.position < 0`,
      )
      .bind(...page),
    readEndpoint(db, endpointId),
  ]);
  const [, orders, payments, endpoint] = results.slice(-4);
  return pageOf(endpoint, orders, payments);
}

/** What one attempt of a taken delivery leaves in its row. */
export interface Outcome {
  position: number;
  /** The row's `updated_at` when it was taken ({@link Taken}'s `seen_at`). */
  seenAt: number;
  status: DeliveryStatus;
  /** The HTTP status answered, null when none was (timeout, refused connection). */
  code: number | null;
  /** The answer's body or the error, at most 1 KB. */
  response: string;
  /** What went wrong, in words; null when delivered. */
  error: string | null;
  /** How long after now it is due again (pending), else null. */
  delayMs: number | null;
  /** The `webhook-id` of the batch message that carried it; null when it went alone. */
  batchId: string | null;
}

/**
 * Outcomes alike but for their position, as one entry with their positions: a page mostly answers
 * alike (all delivered, 204) and a batch's rows always do, so what travels is an entry per answer
 * and a pair per row (its position and `seenAt`).
 */
function groupsOf(outcomes: readonly Outcome[]) {
  const groups = new Map<string, Omit<Outcome, "position" | "seenAt"> & { positions: [number, number][] }>();
  for (const { position, seenAt, ...answer } of outcomes) {
    const key = `${answer.status}\u0000${answer.code}\u0000${answer.delayMs}\u0000${answer.batchId}\u0000${answer.error}\u0000${answer.response}`;
    const group = groups.get(key);
    if (group) group.positions.push([position, seenAt]);
    else groups.set(key, { ...answer, positions: [[position, seenAt]] });
  }
  return [...groups.values()];
}

/**
 * The statement that records a lane's outcomes at one endpoint (parameter 3), each an attempt counted,
 * while the lane's lease (parameter 2) still holds the endpoint (lapsed or not: no other took it). The outcomes travel as one
 * JSON parameter (1), grouped by answer; they are materialized first, so that the plan reads each
 * outcome once and finds its row by key (otherwise SQLite walked the endpoint's rows, or the leased
 * ones, and scanned the whole array for each, on D1's one thread). A row retried by hand since it was
 * taken (its `updated_at` moved: {@link retryNow}) has its attempt counted but stays due now: the
 * retry asked for an attempt after the one in flight, which the outcome would otherwise overwrite.
 * So do the other rows of the batch message that carried it (not parked): on a batch's first attempt
 * its rows have no `batch_id` yet for the retry to find them by, and left on the schedule they would
 * go apart from it, the batch cut in two under two new ids (API.md v1.4: retried whole, with its id).
 */
/**
 * A row parked (its type unticked) while its attempt was out, whose outcome leaves it pending: it stays
 * parked, else it would be due again with nobody to take it (takes read subscribed types only).
 */
const STAYS_PARKED = `(webhook_deliveries.next_attempt_at >= ${PARKED} AND webhook_deliveries.updated_at <= j.seen_at
  AND j.status = 'pending')`;
/** Retried by hand while its attempt was out: the row itself, or another of its batch message's (then not if parked). */
const RETRIED = `(webhook_deliveries.updated_at > j.seen_at
  OR (j.mate_retried AND webhook_deliveries.next_attempt_at < ${PARKED}))`;

function recording(db: D1Database, endpointId: string, outcomes: readonly Outcome[], lease: string) {
  return db
    .prepare(
      `WITH g AS MATERIALIZED (
         SELECT json_extract(value, '$.status') AS status, json_extract(value, '$.code') AS code,
                json_extract(value, '$.response') AS response, json_extract(value, '$.error') AS error,
                json_extract(value, '$.delayMs') AS delay_ms, json_extract(value, '$.batchId') AS batch_id,
                json_extract(value, '$.positions') AS positions
         FROM json_each(?1)),
       j AS MATERIALIZED (
         SELECT p.value ->> 0 AS position, p.value ->> 1 AS seen_at, g.status, g.code, g.response, g.error,
                g.delay_ms, g.batch_id
         FROM g, json_each(g.positions) p),
       r AS MATERIALIZED (
         SELECT DISTINCT m.batch_id FROM j m JOIN webhook_deliveries d ON d.endpoint_id = ?3 AND d.position = m.position
         WHERE m.batch_id IS NOT NULL AND d.updated_at > m.seen_at),
       k AS MATERIALIZED (
         SELECT j.*, COALESCE(j.batch_id IN (SELECT batch_id FROM r), 0) AS mate_retried FROM j)
       UPDATE webhook_deliveries SET
         status = CASE WHEN ${RETRIED} THEN 'pending' ELSE j.status END,
         attempts = attempts + 1,
         last_status_code = j.code,
         last_response = j.response,
         last_error = j.error,
         next_attempt_at = CASE WHEN ${STAYS_PARKED} THEN webhook_deliveries.next_attempt_at
           ELSE ${D1_NOW} + CASE WHEN ${RETRIED} THEN 0 ELSE j.delay_ms END END,
         parked_at = CASE WHEN ${STAYS_PARKED} THEN webhook_deliveries.parked_at END,
         batch_id = j.batch_id,
         updated_at = ${D1_NOW}
       FROM k AS j
       WHERE webhook_deliveries.endpoint_id = ?3 AND webhook_deliveries.position = j.position
         AND EXISTS (SELECT 1 FROM webhook_endpoints WHERE id = ?3 AND lease = ?2)`,
    )
    .bind(JSON.stringify(groupsOf(outcomes)), lease, endpointId);
}

/**
 * Records the outcomes of an unbatched lane's page ({@link takeDuePage}) in one statement, while its
 * lease still holds the endpoint: a sender whose lease lapsed and was taken by another records
 * nothing (the other sends those rows). The lease is kept: the lane's next page may be out.
 */
export async function recordOutcomes(db: D1Database, endpointId: string, outcomes: readonly Outcome[], lease: string) {
  if (outcomes.length === 0) return;
  await recording(db, endpointId, outcomes, lease).run();
}

/** Lets the endpoint go, if `lease` still holds it. */
const releasing = (db: D1Database, endpointId: string, lease: string) =>
  db
    .prepare("UPDATE webhook_endpoints SET lease = NULL, lease_until = NULL WHERE id = ?1 AND lease = ?2")
    .bind(endpointId, lease);

/** Lets the endpoint go: at the end of an unbatched lane's pages (their outcomes recorded), or of a take that sends nothing. */
export async function release(db: D1Database, endpointId: string, lease: string) {
  await releasing(db, endpointId, lease).run();
}

/**
 * Records a batched lane's outcomes while its lease still holds the endpoint (a sender whose lease
 * lapsed records nothing), and lets the endpoint go: one round trip.
 */
export async function recordBatch(db: D1Database, endpointId: string, outcomes: readonly Outcome[], lease: string) {
  await db.batch([
    ...(outcomes.length === 0 ? [] : [recording(db, endpointId, outcomes, lease)]),
    releasing(db, endpointId, lease),
  ]);
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
  /** The `webhook-id` of the batch message that last carried it (API.md v1.4), null if none did. */
  batchId: string | null;
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
  batch_id: string | null;
}

const iso = (ms: number | null) => (ms === null ? null : new Date(ms).toISOString());

const LIST_COLUMNS = `endpoint_id, position, type, reservation_id, status, attempts, last_status_code, last_response,
  last_error, next_attempt_at, created_at, updated_at, batch_id`;

/**
 * Newest change first, of the rows `from` and `where` pick (with `endpoint_id = ?1`, a limit of ?2):
 * order changes (positive keys) by their key backwards, and payments' deliveries (negative keys:
 * src/db/schema.ts), whose newest has the most negative key, by their key forwards. Each is one
 * range walked from its start for at most the limit, and the two are merged by when they were
 * written, so a payment owed back lists among the changes around it, not after all of them.
 */
function newestFirst(from: string, where: string): string {
  const part = (sign: string, order: string) =>
    `SELECT * FROM (SELECT ${LIST_COLUMNS} FROM ${from}
       WHERE endpoint_id = ?1 AND position ${sign} 0${where} ORDER BY position ${order} LIMIT ?2)`;
  return `SELECT * FROM (${part(">", "DESC")} UNION ALL ${part("<", "ASC")})
    ORDER BY created_at DESC, abs(position) DESC LIMIT ?2`;
}

/**
 * Each listing reads ranges of an index: all and `delivered` the table's key, `failed` its own
 * partial index (newest change first, {@link newestFirst}), `pending` the due index (the next to go
 * out first).
 */
const LISTINGS: Record<DeliveryStatus | "all", string> = {
  all: newestFirst("webhook_deliveries", ""),
  delivered: newestFirst("webhook_deliveries", " AND status = 'delivered'"),
  // Named: the key's order fits ORDER BY too, and SQLite would walk every delivered row to find these.
  failed: newestFirst("webhook_deliveries INDEXED BY webhook_deliveries_failed", " AND status = 'failed'"),
  pending: `SELECT ${LIST_COLUMNS} FROM webhook_deliveries WHERE endpoint_id = ?1 AND status = 'pending'
    ORDER BY next_attempt_at LIMIT ?2`,
};

export async function listDeliveries(
  db: D1Database,
  endpointId: string,
  status: DeliveryStatus | undefined,
  limit: number,
): Promise<DeliveryView[]> {
  const { results } = await db
    .prepare(LISTINGS[status ?? "all"])
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
    // A pending row's due time (passed while a sender is attempting it).
    nextAttemptAt: row.status === "pending" && (row.next_attempt_at ?? 0) < PARKED ? iso(row.next_attempt_at) : null,
    createdAt: new Date(row.created_at).toISOString(),
    updatedAt: new Date(row.updated_at).toISOString(),
    batchId: row.batch_id,
  }));
}

/**
 * The rows that the batch message `batchId` carried at the endpoint: a walk of the endpoint's key
 * from the message's first position (its id names it and the count: ./batches.ts), stopping once
 * it found them all. A message led by a payment's delivery has no such bound for its order changes,
 * and walks from the endpoint's first row. The positions as a table expression `mates`, the batch
 * id parameter 3, the bound 4 and the count 5.
 */
const BATCH_MATES = `mates AS (
  SELECT position FROM webhook_deliveries
  WHERE endpoint_id = ?1 AND position >= ?4 AND batch_id = ?3 ORDER BY position LIMIT ?5)`;

/** Where {@link BATCH_MATES} starts and how many it looks for, from the batch's id. */
function batchBounds(batchId: string | null): { from: number; count: number } {
  const match = batchId ? /^msg_batch_(pay)?(\d+)_(\d+)_/.exec(batchId) : null;
  if (!match) return { from: 0, count: 0 };
  return { from: match[1] ? Number.MIN_SAFE_INTEGER : Number(match[2]), count: Number(match[3]) };
}

/**
 * Makes one delivery of an endpoint due now, whatever its status (a failed one gets one more
 * attempt; a delivered one is sent again, with its webhook-id), and, when a batch message carried it
 * last, every row of that message with it, in the same statement: the lane sends them as that batch
 * again, with its id (API.md v1.4 "Webhook batches"), where a row due alone would go in a new one.
 * `updated_at` moves even within one millisecond, which is how a lane attempting the row right now
 * knows to leave it due ({@link recording}). `missing` when the endpoint has no such delivery;
 * `unsubscribed` when its type is no longer one the endpoint takes (no sender would send it, so it
 * is left as it is, and so is its batch).
 */
export async function retryNow(
  db: D1Database,
  endpointId: string,
  id: string,
): Promise<"retried" | "missing" | "unsubscribed"> {
  const key = keyOf(id);
  if (!key || key.endpointId !== endpointId) return "missing";
  const row = await db
    .prepare("SELECT batch_id FROM webhook_deliveries WHERE endpoint_id = ?1 AND position = ?2")
    .bind(endpointId, key.position)
    .first<{ batch_id: string | null }>();
  if (!row) return "missing";
  const { from, count } = batchBounds(row.batch_id);
  const { results } = await db
    .prepare(
      `WITH ${BATCH_MATES}
       UPDATE webhook_deliveries SET status = 'pending', next_attempt_at = ${D1_NOW},
         updated_at = MAX(${D1_NOW}, updated_at + 1)
       WHERE endpoint_id = ?1 AND (position = ?2 OR position IN (SELECT position FROM mates)) AND ${SUBSCRIBED}
         AND EXISTS (SELECT 1 FROM webhook_deliveries r WHERE r.endpoint_id = ?1 AND r.position = ?2 AND r.${SUBSCRIBED})
       RETURNING position`,
    )
    .bind(endpointId, key.position, row.batch_id, from, count)
    .all<{ position: number }>();
  return results.length > 0 ? "retried" : "unsubscribed";
}

/**
 * Whether a delivery row's type is one its endpoint subscribes to, the endpoint being parameter
 * `?n` of the statement: a subquery of the parameter alone, which SQLite reads once a statement,
 * where one naming the row's endpoint parses its events for every row.
 */
function subscribed(n: number): string {
  return `type IN (SELECT value FROM webhook_endpoints s, json_each(s.events) WHERE s.id = ?${n})`;
}
const SUBSCRIBED = subscribed(1);

/**
 * Makes every failed and pending delivery of an endpoint due now (API.md v1.3 "Webhook deliveries"),
 * but those of types it no longer subscribes to and those a sender is attempting right now (tried
 * now already): while a sender holds the endpoint, those due already. Returns how many are tried
 * now, those under way included (an operator who retries an endpoint mid-run is told what is owed,
 * not 0), counted in the same transaction.
 */
export async function retryAll(db: D1Database, endpointId: string): Promise<number> {
  const [, counted] = await db.batch<{ n: number }>([
    db
      .prepare(
        `UPDATE webhook_deliveries SET status = 'pending', next_attempt_at = ${D1_NOW}, updated_at = ${D1_NOW}
         WHERE endpoint_id = ?1 AND status IN ('failed', 'pending') AND ${SUBSCRIBED}
           AND NOT (status = 'pending' AND next_attempt_at <= ${D1_NOW}
             AND EXISTS (SELECT 1 FROM webhook_endpoints e WHERE e.id = ?1 AND ${HELD}))`,
      )
      .bind(endpointId),
    db
      .prepare(
        `SELECT COUNT(*) AS n FROM webhook_deliveries
         WHERE endpoint_id = ?1 AND status = 'pending' AND next_attempt_at <= ${D1_NOW} AND ${SUBSCRIBED}`,
      )
      .bind(endpointId),
  ]);
  return counted?.results[0]?.n ?? 0;
}
