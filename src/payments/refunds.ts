import { log } from "../../durable-objects/shared/log";
import {
  claimRefund,
  type PaymentObject,
  type PaymentRow,
  paymentObjectOf,
  paymentOf,
  type Refund,
  recordRefund,
  releaseRefundClaim,
  settleStripeRefund,
} from "../db/payment-records";
import { ApiError, busy } from "../http/errors";
import { StripeRefused, StripeUnavailable, stripeConfigured, stripeGet, stripePostAnswer } from "./stripe-api";

/**
 * Money owed back, paid back (API.md v1.4 "Paying and refunding through Stripe"): a `refund_required`
 * payment is refunded through Stripe's refund API, or marked refunded when it was paid back outside
 * Flashgate. Either is recorded on the payment's D1 row, once: a payment already refunded (or with a
 * refund pending) is `409 INVALID_STATE`; one whose refund failed may be refunded again. A refund
 * Stripe answers `pending` is settled later, by Stripe's refund events or by asking Stripe again.
 */

/** A Stripe refund as Stripe answers it (the fields read). */
interface StripeRefund {
  id: string;
  status: "succeeded" | "pending" | "requires_action" | "failed" | "canceled";
  /** Unix seconds. */
  created?: number;
}

/** How much older than its claim a refund Stripe answers with may be before it is taken for a replay. */
const REPLAY_SKEW_MS = 30_000;

/** What a Stripe refund's status is here: `succeeded` refunded, `failed` and `canceled` failed, else pending. */
export function refundStatusOf(status: string | null | undefined): Refund["status"] {
  if (status === "succeeded") return "refunded";
  return status === "failed" || status === "canceled" ? "failed" : "pending";
}

/** The payment intent a Stripe payment's event id names (`stripe:paid:<pi_…>`), or null. */
function paymentIntentOf(eventId: string): string | null {
  const match = /^stripe:paid:(pi_[A-Za-z0-9_]+)$/.exec(eventId);
  return match?.[1] ?? null;
}

/**
 * How long a refund claimed for Stripe ({@link claimRefund}) waits for Stripe's answer to be recorded
 * before another refund request may ask again, under the same idempotency key (the same refund at
 * Stripe): a Worker that died between the two leaves the payment refundable, not pending for ever.
 */
export const CLAIM_MS = 60_000;

/** A claim whose answer was never recorded: Stripe was asked (or not) and nothing came back. */
const staleClaim = (row: PaymentRow, now: number) =>
  row.refund_status === "pending" &&
  row.refund_via === "stripe" &&
  row.refund_id === null &&
  (row.refund_at ?? 0) <= now - CLAIM_MS;

async function owedBack(db: D1Database, eventId: string, reclaimAt?: number): Promise<PaymentRow> {
  const row = await paymentOf(db, eventId);
  if (!row) throw new ApiError("NOT_FOUND", `No payment has event id ${eventId} (see GET /admin/payments).`);
  if (row.outcome !== "refund_required") {
    throw new ApiError(
      "INVALID_STATE",
      `Payment ${eventId} was applied: it bought its reservation, and nothing is owed back.`,
      {},
      { state: row.outcome },
    );
  }
  if (reclaimAt !== undefined && staleClaim(row, reclaimAt)) return row;
  if (row.refund_status === "refunded" || row.refund_status === "pending") {
    throw new ApiError(
      "INVALID_STATE",
      row.refund_status === "refunded"
        ? `Payment ${eventId} is refunded already: nothing more to do.`
        : `Payment ${eventId} is being refunded (Stripe's refund is pending): Stripe's refund event settles it, or POST /admin/payments/${eventId}/refund asks Stripe where it stands.`,
      {},
      { state: row.refund_status },
    );
  }
  return row;
}

/** `POST /admin/payments/:eventId/refunded`: paid back outside Flashgate. */
export async function markRefunded(
  db: D1Database,
  eventId: string,
  note: string | undefined,
  now: number,
): Promise<PaymentObject> {
  await owedBack(db, eventId);
  if (!(await recordRefund(db, eventId, { status: "refunded", via: "marked", id: null, note }, now))) {
    await owedBack(db, eventId); // refunded meanwhile: says so
  }
  return paymentObjectOf((await paymentOf(db, eventId)) as PaymentRow);
}

/**
 * `POST /admin/payments/:eventId/refund`: the payment's intent refunded in full through Stripe, under
 * an idempotency key of the event and of the attempts that failed before it (refunds that failed, and
 * requests Stripe answered 5xx, whose key it replays that 5xx to), so a retried call (a lost answer,
 * two operators at once) is the same refund at Stripe.
 */
export async function refundThroughStripe(env: Env, eventId: string, now: number): Promise<PaymentObject> {
  if (!stripeConfigured(env)) {
    throw new ApiError("NOT_FOUND", "Stripe is not configured here (STRIPE_SECRET_KEY): mark the refund done instead.");
  }
  const seen = await paymentOf(env.DB, eventId);
  if (seen && pendingAtStripe(seen)) return askStripe(env, seen, now);
  const row = await owedBack(env.DB, eventId, now);
  const intent = row.source === "stripe" ? paymentIntentOf(row.event_id) : null;
  if (!intent) {
    throw new ApiError(
      "INVALID_STATE",
      `Payment ${eventId} did not come through Stripe with a payment intent: refund it where it was paid, then POST /admin/payments/${eventId}/refunded.`,
      {},
      { state: "not_stripe" },
    );
  }
  // Claimed first, so that a mark (or a second refund) sent meanwhile is refused, not paid twice.
  if (!(await claimRefund(env.DB, eventId, row, now))) {
    await owedBack(env.DB, eventId); // changed meanwhile: says how
    throw busy("The payment's refund changed meanwhile; ask again");
  }
  let refund: { status: "refunded" | "pending" | "failed"; id: string | null };
  try {
    const { object: answer, replayed } = await stripePostAnswer<StripeRefund>(
      env,
      "/v1/refunds",
      {
        payment_intent: intent,
        "metadata[flashgate_event_id]": eventId,
        "metadata[reservationId]": row.reservation_id,
      },
      `flashgate-refund:${eventId}:${row.refund_attempts}`,
    );
    // A replay (an earlier answer under this key was lost) is the refund as it was then: Stripe may have
    // settled it since, and its events, sent while no id was recorded here, were not taken. So it is
    // read where it stands now (Stripe unreachable: 503 below, nothing recorded).
    const stale = replayed || (answer.created !== undefined && answer.created * 1000 < now - REPLAY_SKEW_MS);
    const current = stale
      ? await stripeGet<StripeRefund>(env, `/v1/refunds/${encodeURIComponent(answer.id)}`).catch((err: unknown) => {
          if (err instanceof StripeRefused) return answer;
          throw err;
        })
      : answer;
    refund = { id: answer.id, status: refundStatusOf(current.status) };
  } catch (err) {
    if (err instanceof StripeRefused && err.code === "charge_already_refunded") {
      // Refunded at Stripe already (from its dashboard, say): recorded as such.
      refund = { status: "refunded", id: null };
    } else if (err instanceof StripeRefused) {
      // Refused under this key, so no refund was made with it: a claim taken over goes back to owed
      // (else it would stay pending, and a mark could never settle it); a new one to what it was.
      const owed = { ...row, refund_status: null, refund_via: null, refund_id: null, refund_at: null };
      await releaseRefundClaim(env.DB, eventId, staleClaim(row, now) ? owed : row, now);
      throw new ApiError(
        "INVALID_STATE",
        `Stripe refused the refund of ${intent}: ${err.message}`,
        {},
        { state: "stripe_refused" },
      );
    } else if (err instanceof StripeUnavailable) {
      // 409: Stripe is making a refund under this key now (an earlier request's, whose answer was not
      // waited for): the claim stays pending, so no mark pays it back meanwhile; once it is a minute old
      // a /refund takes it over under the same key and gets that refund (a replay). A 5xx Stripe answered
      // is saved under the key and replayed to every retry of it for a day: the key is spent, and the
      // attempts move on, so the next /refund asks under the next key (Stripe refunds a payment intent
      // once: if the failed request made the refund, the next is `charge_already_refunded`, recorded
      // refunded). A claim taken over goes back to owed, as on a refusal (else it would stay pending
      // for ever, and a mark could never settle it). A timeout keeps the key: Stripe may answer it yet.
      const owed = { ...row, refund_status: null, refund_via: null, refund_id: null, refund_at: null };
      const spent = err.status !== null && err.status >= 500;
      const seen = spent && staleClaim(row, now) ? owed : row;
      if (err.status !== 409) await releaseRefundClaim(env.DB, eventId, seen, now, spent);
      throw busy(
        spent
          ? "Stripe failed the refund, which it may have made: ask again (Stripe refunds the payment once) before paying it back another way"
          : "Stripe did not answer the refund, which it may have made: ask again (the same refund) before paying it back another way",
      );
    } else throw err;
  }
  await recordRefund(env.DB, eventId, { ...refund, via: "stripe" }, now, now);
  return paymentObjectOf((await paymentOf(env.DB, eventId)) as PaymentRow);
}

/** A Stripe refund whose answer is recorded and still pending: Stripe decides it later. */
const pendingAtStripe = (row: PaymentRow) =>
  row.outcome === "refund_required" &&
  row.refund_status === "pending" &&
  row.refund_via === "stripe" &&
  row.refund_id !== null;

/**
 * `/refund` on a refund pending at Stripe: Stripe is asked where it stands (its refund retrieved by
 * id) rather than for another refund, and that is recorded. Settled, the payment is answered (its
 * refund `refunded`, or `failed`: ask again for a new refund, or mark it); still pending, 409.
 */
async function askStripe(env: Env, row: PaymentRow, now: number): Promise<PaymentObject> {
  const id = row.refund_id as string;
  let answer: StripeRefund;
  try {
    answer = await stripeGet<StripeRefund>(env, `/v1/refunds/${encodeURIComponent(id)}`);
  } catch (err) {
    if (err instanceof StripeUnavailable) throw busy("Stripe did not answer; the refund is still pending");
    if (err instanceof StripeRefused) {
      throw new ApiError(
        "INVALID_STATE",
        `Stripe did not show refund ${id}: ${err.message}`,
        {},
        { state: "stripe_refused" },
      );
    }
    throw err;
  }
  await settle(env.DB, row.event_id, id, answer.status, now);
  const after = (await paymentOf(env.DB, row.event_id)) as PaymentRow;
  if (after.refund_status === "pending" && after.refund_id === id) {
    throw new ApiError(
      "INVALID_STATE",
      `Stripe's refund ${id} of payment ${row.event_id} is still ${answer.status}: Stripe's refund event settles it, or ask again later.`,
      {},
      { state: "pending" },
    );
  }
  return paymentObjectOf(after);
}

/** Records what Stripe says of a refund (forward only); a refund that failed is logged: money is owed again. */
async function settle(
  db: D1Database,
  eventId: string,
  refundId: string,
  stripeStatus: string | null | undefined,
  now: number,
) {
  const status = refundStatusOf(stripeStatus);
  if ((await settleStripeRefund(db, eventId, refundId, status, now)) && status === "failed") {
    log("warn", "stripe refund failed", { eventId, refundId, stripeStatus });
  }
}

/** A refund as Stripe's refund events carry it (`data.object`): Flashgate's own name its payment in its metadata. */
export interface RefundUpdate {
  id: string;
  status: string | null | undefined;
  /** `metadata.flashgate_event_id`: the payment Flashgate made it for. */
  eventId: string;
}

/**
 * A Stripe refund event (`refund.updated`, `refund.failed`, `charge.refund.updated`): the refund
 * recorded as Stripe now says, only forward (see {@link settleStripeRefund}). The payment as it now
 * stands, or null when the refund is not the one recorded (made in Stripe's dashboard, or an earlier
 * attempt that failed). A refund whose creation is still being recorded (a claim younger than
 * {@link CLAIM_MS}, no id yet) is `503 BUSY`: Stripe sends the event again, and it finds the id then.
 */
export async function settleRefundEvent(env: Env, refund: RefundUpdate, now: number): Promise<PaymentObject | null> {
  const row = await paymentOf(env.DB, refund.eventId);
  if (row?.outcome !== "refund_required" || row.refund_via !== "stripe") return null;
  if (row.refund_status === "pending" && row.refund_id === null && !staleClaim(row, now)) {
    throw busy("The refund's creation is being recorded; send the event again");
  }
  if (row.refund_id !== refund.id) return null;
  await settle(env.DB, row.event_id, refund.id, refund.status, now);
  return paymentObjectOf((await paymentOf(env.DB, row.event_id)) as PaymentRow);
}
