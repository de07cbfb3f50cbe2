import type { PaymentCommand, PaymentType, PaymentVerdict, Reservation } from "../../durable-objects/stock/stock-model";
import { catalogHasShard } from "../catalog/sku-catalog";
import { readSkuState } from "../catalog/sku-state";
import { type PaymentSource, recordPayment } from "../db/payment-records";
import { wakeSender } from "../handoff/delivery-consumer";
import { ApiError, busy } from "../http/errors";
import { increment } from "../observability/metrics";
import { currentReservation, finishedReservation } from "../orders/finished";
import { adminShard, callStock, locateReservation } from "../stock/stock-client";

/**
 * What both webhooks do once a provider's event is verified and read: the payment, applied by the
 * stock object that holds the reservation, once per event id, its money checked there (see
 * durable-objects/engine/payments.ts). Each first answer is counted in `flashgate_payments_total{outcome}`.
 *
 * One event id is one event: what an id says is recorded in D1 before it is applied, so the same id
 * naming another reservation (whichever stock object has it), type or money is refused everywhere,
 * not only by the object that saw it first.
 *
 * The answer is then recorded in D1 (`GET /admin/payments`, and a `payment.refund_required` webhook
 * for a flagged one). Should that write fail, the webhook answers 500 and the provider retries: the
 * object replays its answer and the record is written then (an insert keyed by the event id).
 */

/**
 * The answer of a handled payment, or null when no reservation has this id. The same event id
 * saying something else than it first did: `422 IDEMPOTENCY_MISMATCH`, nothing changed.
 */
export async function applyPaymentEvent(
  env: Env,
  source: PaymentSource,
  command: PaymentCommand,
): Promise<PaymentAck | null> {
  const where = locateReservation(command.reservationId);
  // A SKU nobody configured has no reservations, and its stock object is not made to say so.
  if (!where || !(await catalogHasShard(env, where.sku, where.shard))) return null;
  const content = contentOf(command);
  const { claimed, fresh, claimedAt, recorded } = await claimEventId(env.DB, command.eventId, content, Date.now());
  // Recorded once answered, kept for good: its answer again. A claim made after the row was (D1 had
  // forgotten the id, 7 days on, and a resend claimed it again) means the object forgot the event too.
  // While the first claim stands (and the object keeps the event), the claim judges the content (its
  // currency included) as before; a row from before `reservation_status` was kept (or written by the
  // release before, during a deploy) is answered by the object, which keeps the status it left.
  const reclaimed = recorded !== undefined && claimedAt !== undefined && claimedAt > recorded.received_at;
  if (recorded && (reclaimed || (claimed && recorded.reservation_status !== null))) {
    try {
      return await replayed(env, content, recorded);
    } catch (err) {
      // Refused: the claim this call made for it goes, or it would refuse the event's own resend.
      if (fresh) await releaseClaimOf(env.DB, command.eventId, content);
      throw err;
    }
  }
  if (!claimed) {
    // The id says something else already. Unless what it says names no reservation: that delivery
    // answers 404 and leaves the id unused, so its claim is let go here as it would be there.
    const freed = await releaseGhostClaim(env, command.eventId);
    if (!freed || !(await claimEventId(env.DB, command.eventId, content, Date.now())).claimed) throw mismatch();
  }
  const stub = adminShard(env, where.sku, where.shard);
  const apply = (finished?: Reservation) => callStock(() => stub.applyPayment(command, finished));
  let outcome = await apply();
  if (!outcome.ok && outcome.code === "RESERVATION_NOT_FOUND") {
    // The object forgets finished reservations; D1 has them, and the object decides with the row put back.
    const finished = await finishedReservation(env.DB, command.reservationId);
    if (finished) outcome = await apply(finished);
  }
  if (!outcome.ok) {
    if (outcome.code === "RESERVATION_NOT_FOUND") {
      // It named no reservation and changed nothing: its id is not spent (and nothing is stored).
      await releaseEventId(env.DB, command.eventId, content.reservationId);
      return null;
    }
    if (outcome.code === "IDEMPOTENCY_MISMATCH") throw mismatch();
    // Not decided now (the buyer's home shard is being resized, or a shard could not answer): the
    // provider retries, and the retry goes on from where this one stopped.
    if (outcome.code === "BUSY") throw busy();
    throw new Error(`stock object refused a payment: ${outcome.code}`);
  }
  const answer = outcome.value;
  const written = await recordPayment(env.DB, source, command, answer, Date.now());
  // Counted where the event is written once: a payment's row, whichever delivery (or the stock
  // object's alarm) finished its claim; a failure's first answer, which no row records.
  const first = command.type === "payment.succeeded" ? written : !answer.replayed;
  if (first) increment("flashgate_payments_total", { outcome: answer.outcome });
  // Its record owes deliveries to the endpoints that take `payment.refund_required` (migration 0007).
  if (written && answer.outcome === "refund_required") await wakeSender(env);
  return paymentAck(answer);
}

/**
 * The acknowledgement both webhooks send for a handled event; a payment refused for its money adds
 * what was due (`expected`: the reservation's quantity × the SKU's price, in its currency).
 */
export interface PaymentAck {
  received: true;
  reservationStatus: string;
  outcome: PaymentVerdict["outcome"];
  expected?: { amount: number; currency: string };
}

function paymentAck(answer: PaymentVerdict): PaymentAck {
  const ack = { received: true as const, reservationStatus: answer.status, outcome: answer.outcome };
  return answer.expected ? { ...ack, expected: answer.expected } : ack;
}

/** A succeeded payment's row in `payments`, as a delivery of its event again is answered from it. */
type RecordedPayment = {
  reservation_id: string;
  sku: string;
  amount: number;
  currency: string;
  outcome: PaymentVerdict["outcome"];
  reason: string | null;
  reservation_status: string | null;
  received_at: number;
};

/**
 * The answer to an event `payments` recorded: the same as its first (API.md: "The same event id
 * again: 200, same answer, no second effect"). The stock object and `payment_event_ids` forget an
 * event after 7 days, and asked again then, the object would decide it anew (a paid reservation's
 * own payment answered `already_paid`, a log entry written); so a recorded event is not asked.
 */
async function replayed(env: Env, content: EventContent, row: RecordedPayment): Promise<PaymentAck> {
  const same =
    row.reservation_id === content.reservationId &&
    content.type === "payment.succeeded" &&
    row.amount === content.amount &&
    (content.currency === null || content.currency === row.currency);
  if (!same) throw mismatch();
  // Rows from before the status was kept: the reservation's now (a paid one's, which its own payment left it in).
  const status = row.reservation_status ?? (await currentReservation(env, row.reservation_id))?.status ?? "paid";
  const ack: PaymentAck = { received: true, reservationStatus: status, outcome: row.outcome };
  if (row.reason !== "amount_mismatch" && row.reason !== "currency_mismatch") return ack;
  // What was due, at the price now, as the object answers it.
  const [sku, reservation] = await Promise.all([
    readSkuState(env, row.sku),
    currentReservation(env, row.reservation_id),
  ]);
  if (sku?.price === null || sku?.price === undefined || !reservation) return ack;
  return { ...ack, expected: { amount: reservation.quantity * sku.price, currency: sku.currency } };
}

/** What a payment event says, as `payment_event_ids` records it under its id. */
interface EventContent {
  reservationId: string;
  type: PaymentType;
  amount: number | null;
  currency: string | null;
}

function contentOf(command: PaymentCommand): EventContent {
  return {
    reservationId: command.reservationId,
    type: command.type,
    amount: command.money?.amount ?? null,
    currency: command.money?.currency?.toLowerCase() ?? null,
  };
}

type StoredContent = {
  reservation_id: string;
  type: string;
  amount: number | null;
  currency: string | null;
  received_at: number;
};

/**
 * Records what `eventId` says unless it is recorded already, and tells whether the record is this
 * content (a first delivery, or a replay of it). The batch is one D1 transaction and D1 applies
 * writes one at a time, so of two deliveries of one id at once, only one content is ever recorded.
 */
async function claimEventId(
  db: D1Database,
  eventId: string,
  content: EventContent,
  now: number,
): Promise<{ claimed: boolean; fresh: boolean; claimedAt: number | undefined; recorded: RecordedPayment | undefined }> {
  const [inserted, read, payment] = await db.batch<StoredContent | RecordedPayment>([
    db
      .prepare(
        `INSERT INTO payment_event_ids (event_id, reservation_id, type, amount, currency, received_at)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6) ON CONFLICT (event_id) DO NOTHING`,
      )
      .bind(eventId, content.reservationId, content.type, content.amount, content.currency, now),
    db
      .prepare("SELECT reservation_id, type, amount, currency, received_at FROM payment_event_ids WHERE event_id = ?1")
      .bind(eventId),
    db
      .prepare(
        "SELECT reservation_id, sku, amount, currency, outcome, reason, reservation_status, received_at FROM payments WHERE event_id = ?1",
      )
      .bind(eventId),
  ]);
  const stored = read?.results[0] as StoredContent | undefined;
  const claimed =
    stored !== undefined &&
    stored.reservation_id === content.reservationId &&
    stored.type === content.type &&
    stored.amount === content.amount &&
    stored.currency === content.currency;
  // Recorded by this call: D1 had forgotten the id (7 days on), or never had it.
  const fresh = (inserted?.meta.changes ?? 0) > 0;
  return {
    claimed,
    fresh,
    claimedAt: stored?.received_at,
    recorded: payment?.results[0] as RecordedPayment | undefined,
  };
}

/** Forgets the record of an event that named no reservation (only if it is still this content). */
/**
 * Lets go of the id's claim when the reservation it names does not exist (no stock object nor D1 has
 * it): a delivery naming an unknown reservation, whose own request lets go of it when it answers 404.
 * True when the claim is gone, by this or by that request.
 */
async function releaseGhostClaim(env: Env, eventId: string): Promise<boolean> {
  const stored = await env.DB.prepare("SELECT reservation_id FROM payment_event_ids WHERE event_id = ?1")
    .bind(eventId)
    .first<{ reservation_id: string }>();
  if (!stored) return true;
  if (await currentReservation(env, stored.reservation_id)) return false;
  await releaseEventId(env.DB, eventId, stored.reservation_id);
  return true;
}

async function releaseEventId(db: D1Database, eventId: string, reservationId: string): Promise<void> {
  await db
    .prepare("DELETE FROM payment_event_ids WHERE event_id = ?1 AND reservation_id = ?2")
    .bind(eventId, reservationId)
    .run();
}

/** Lets go of an id's claim only if it still says `content` (the claim a refused delivery made). */
async function releaseClaimOf(db: D1Database, eventId: string, content: EventContent): Promise<void> {
  await db
    .prepare(
      `DELETE FROM payment_event_ids WHERE event_id = ?1 AND reservation_id = ?2 AND type = ?3
         AND amount IS ?4 AND currency IS ?5`,
    )
    .bind(eventId, content.reservationId, content.type, content.amount, content.currency)
    .run();
}

function mismatch(): ApiError {
  return new ApiError(
    "IDEMPOTENCY_MISMATCH",
    "This payment event id was already received with another reservation, type or amount.",
  );
}
