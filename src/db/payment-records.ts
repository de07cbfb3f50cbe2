import type { PaymentAnswer, PaymentCommand, PaymentReason } from "../../durable-objects/stock/stock-model";

/**
 * The D1 record of payments (API.md "Payments owed back"): what `GET /admin/payments` lists and what
 * a `payment.refund_required` webhook carries. One row per succeeded payment event, as the stock
 * object first answered it; failures move no money and are not listed.
 */

/** The webhook a payment came by. */
export type PaymentSource = "payments" | "stripe";

/** A payment as the list and the `payment.refund_required` webhook show it. */
export interface PaymentObject {
  eventId: string;
  source: PaymentSource;
  reservationId: string;
  sku: string;
  userId: string;
  amount: number;
  currency: string;
  outcome: PaymentAnswer["outcome"];
  reason: PaymentReason | null;
  /** A payment of a test SKU's order (API.md v1.4 "Test sales"). */
  test: boolean;
  /** Sizes (API.md v1.4): the variant of the reservation paid; null for a SKU without variants. */
  variant: string | null;
  receivedAt: string;
  /** Its refund, issued through Stripe or marked done (API.md v1.4); null while none was. */
  refund: Refund | null;
}

/** A refund of a payment owed back. */
export interface Refund {
  status: "refunded" | "pending" | "failed";
  via: "stripe" | "marked";
  /** Stripe's refund id; null when marked. */
  id: string | null;
  at: string;
}

/** A row of `payments`. */
export interface PaymentRow {
  position: number;
  event_id: string;
  source: PaymentSource;
  reservation_id: string;
  sku: string;
  user_id: string;
  amount: number;
  currency: string;
  outcome: PaymentAnswer["outcome"];
  reason: PaymentReason | null;
  /** 0 or 1 (SQLite). */
  test: number;
  variant: string | null;
  received_at: number;
  refund_status: Refund["status"] | null;
  refund_via: Refund["via"] | null;
  refund_id: string | null;
  refund_at: number | null;
  refund_attempts: number;
}

/** The SELECT list of {@link PaymentRow}, for `payments p`. */
export const PAYMENT_COLUMNS =
  "p.position, p.event_id, p.source, p.reservation_id, p.sku, p.user_id, p.amount, p.currency, p.outcome, p.reason, p.test, p.variant, p.received_at, p.refund_status, p.refund_via, p.refund_id, p.refund_at, p.refund_attempts";

export function paymentObjectOf(row: PaymentRow): PaymentObject {
  return {
    eventId: row.event_id,
    source: row.source,
    reservationId: row.reservation_id,
    sku: row.sku,
    userId: row.user_id,
    amount: row.amount,
    currency: row.currency,
    outcome: row.outcome,
    reason: row.reason,
    test: row.test === 1,
    variant: row.variant,
    receivedAt: new Date(row.received_at).toISOString(),
    refund:
      row.refund_status === null || row.refund_via === null
        ? null
        : {
            status: row.refund_status,
            via: row.refund_via,
            id: row.refund_id,
            at: new Date(row.refund_at ?? row.received_at).toISOString(),
          },
  };
}

/**
 * Records a payment's answer unless its event id is recorded already; true when this call wrote it.
 * Called on replays too: a record whose first write failed (the provider then retries the event and
 * the stock object replays its answer) is written then, and a recorded one is left as it is.
 */
export async function recordPayment(
  db: D1Database,
  source: PaymentSource,
  command: PaymentCommand,
  answer: PaymentAnswer & { skuCurrency: string; skuTest?: boolean },
  now: number,
): Promise<boolean> {
  if (command.type !== "payment.succeeded") return false;
  const { reservation } = answer;
  const row = await db
    .prepare(
      `INSERT INTO payments (event_id, source, reservation_id, sku, user_id, amount, currency, outcome, reason, received_at, test, variant, reservation_status)
       VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13)
       ON CONFLICT (event_id) DO NOTHING RETURNING position`,
    )
    .bind(
      command.eventId,
      source,
      reservation.id,
      reservation.sku,
      reservation.userId,
      command.money?.amount ?? 0,
      // An event that names no currency paid in the SKU's.
      command.money?.currency?.toLowerCase() ?? answer.skuCurrency,
      answer.outcome,
      answer.outcome === "applied" ? null : answer.reason,
      now,
      answer.skuTest === true ? 1 : 0,
      reservation.variant ?? null,
      answer.status,
    )
    .first();
  return row !== null;
}

export interface PaymentsPage {
  payments: PaymentObject[];
  /** The position of the last payment on the page (the one asked after, when the page is empty). */
  last: number;
}

/**
 * The payments after a position, in the order received; with `outcome`, only those (one index
 * range); with `refunded`, only those refunded (`true`) or not (`false`: none, pending or failed).
 */
export async function paymentsPage(
  db: D1Database,
  outcome: PaymentAnswer["outcome"] | undefined,
  after: number,
  limit: number,
  refunded?: boolean,
): Promise<PaymentsPage> {
  const where = ["p.position > ?1"];
  if (outcome) where.unshift("p.outcome = ?3");
  if (refunded === true) where.push("p.refund_status = 'refunded'");
  if (refunded === false) where.push("(p.refund_status IS NULL OR p.refund_status <> 'refunded')");
  const statement = db.prepare(
    `SELECT ${PAYMENT_COLUMNS} FROM payments p WHERE ${where.join(" AND ")} ORDER BY p.position LIMIT ?2`,
  );
  const { results } = await (outcome
    ? statement.bind(after, limit, outcome)
    : statement.bind(after, limit)
  ).all<PaymentRow>();
  return { payments: results.map(paymentObjectOf), last: results.at(-1)?.position ?? after };
}

/** The payment recorded for an event id, or null. */
export async function paymentOf(db: D1Database, eventId: string): Promise<PaymentRow | null> {
  return db
    .prepare(`SELECT ${PAYMENT_COLUMNS} FROM payments p WHERE p.event_id = ?1`)
    .bind(eventId)
    .first<PaymentRow>();
}

/**
 * Records a refund of a payment owed back, unless one refunded or pending is recorded already (two
 * operators at once: the second changes nothing); true when this call wrote it. With `claimedAt`, it
 * settles the Stripe refund this request claimed then ({@link claimRefund}) and nothing else.
 */
export async function recordRefund(
  db: D1Database,
  eventId: string,
  refund: { status: Refund["status"]; via: Refund["via"]; id: string | null; note?: string | undefined },
  now: number,
  claimedAt?: number,
): Promise<boolean> {
  const open =
    claimedAt === undefined
      ? "(refund_status IS NULL OR refund_status = 'failed')"
      : "refund_status = 'pending' AND refund_via = 'stripe' AND refund_id IS NULL AND refund_at = ?7";
  const row = await db
    .prepare(
      `UPDATE payments SET refund_status = ?2, refund_via = ?3, refund_id = ?4, refund_note = ?5, refund_at = ?6,
         refund_attempts = refund_attempts + (?2 = 'failed')
       WHERE event_id = ?1 AND outcome = 'refund_required' AND ${open}
       RETURNING position`,
    )
    .bind(
      eventId,
      refund.status,
      refund.via,
      refund.id,
      refund.note ?? null,
      now,
      ...(claimedAt === undefined ? [] : [claimedAt]),
    )
    .first();
  return row !== null;
}

/**
 * Claims a payment's refund for a call to Stripe, as `pending` with no refund id yet, if the row is
 * still as `seen` (its refund fields unchanged): one request at a time asks Stripe, and a mark
 * refused meanwhile (pending) cannot pay the money back a second time. True when this call claimed it.
 */
export async function claimRefund(db: D1Database, eventId: string, seen: PaymentRow, at: number): Promise<boolean> {
  const row = await db
    .prepare(
      `UPDATE payments SET refund_status = 'pending', refund_via = 'stripe', refund_id = NULL, refund_note = NULL, refund_at = ?2
       WHERE event_id = ?1 AND outcome = 'refund_required' AND refund_status IS ?3 AND refund_via IS ?4
         AND refund_id IS ?5 AND refund_at IS ?6
       RETURNING position`,
    )
    .bind(eventId, at, seen.refund_status, seen.refund_via, seen.refund_id, seen.refund_at)
    .first();
  return row !== null;
}

/**
 * Gives a claim back (Stripe did not answer, or refused): the row as it was when claimed. With `spent`,
 * the claim's idempotency key is used up (Stripe answered it an error, `5xx`, which it saved under the
 * key and replays to every retry of it): the attempts move on, so the next refund asks under the next key.
 */
export async function releaseRefundClaim(db: D1Database, eventId: string, seen: PaymentRow, at: number, spent = false) {
  await db
    .prepare(
      `UPDATE payments SET refund_status = ?3, refund_via = ?4, refund_id = ?5, refund_at = ?6,
         refund_attempts = refund_attempts + ?7
       WHERE event_id = ?1 AND refund_status = 'pending' AND refund_via = 'stripe' AND refund_id IS NULL AND refund_at = ?2`,
    )
    .bind(eventId, at, seen.refund_status, seen.refund_via, seen.refund_id, seen.refund_at, spent ? 1 : 0)
    .run();
}

/**
 * How far a recorded refund has come, in SQL: pending, then refunded, then failed (Stripe may fail a
 * card refund after it succeeded, the card closed meanwhile; a failed one is final).
 */
const REFUND_PROGRESS = "CASE refund_status WHEN 'pending' THEN 0 WHEN 'refunded' THEN 1 ELSE 2 END";
const PROGRESS: Record<Refund["status"], number> = { pending: 0, refunded: 1, failed: 2 };

/**
 * Moves the Stripe refund `refundId` of a payment to what Stripe now says of it, only forward, so a
 * duplicate or a late, out-of-order event changes nothing; a refund that fails counts as a failed
 * attempt (the next `/refund` is a new refund at Stripe, under a new idempotency key). True when
 * this call moved it.
 */
export async function settleStripeRefund(
  db: D1Database,
  eventId: string,
  refundId: string,
  status: Refund["status"],
  now: number,
): Promise<boolean> {
  const row = await db
    .prepare(
      `UPDATE payments SET refund_status = ?3, refund_at = ?4, refund_attempts = refund_attempts + (?3 = 'failed')
       WHERE event_id = ?1 AND outcome = 'refund_required' AND refund_via = 'stripe' AND refund_id = ?2
         AND ${REFUND_PROGRESS} < ?5
       RETURNING position`,
    )
    .bind(eventId, refundId, status, now, PROGRESS[status])
    .first();
  return row !== null;
}
