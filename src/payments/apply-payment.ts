import type { PaymentAnswer, PaymentMoney, PaymentType, Reservation } from "../../durable-objects/stock-model";
import { callStock, locateReservation, stockShard } from "../edge/stock-client";
import { increment } from "../observability/metrics";
import { settledReservation } from "../orders/settled";

/**
 * What both webhooks do once a provider's event is verified and read: the payment, applied by the
 * stock object that holds the reservation, once per event id, its money checked there (see
 * StockEngine.applyPayment). Each first answer is counted in `flashgate_payments_total{outcome}`.
 */

export interface PaymentCommand {
  /** The idempotency key: a second command with the same key gets the first answer. */
  eventId: string;
  type: PaymentType;
  reservationId: string;
  /** Checked against the SKU's price; absent for a failure. */
  money?: PaymentMoney | undefined;
  /** The id of the webhook request that carries it, for the object's log lines and queue events. */
  requestId?: string | undefined;
}

/** The answer of a handled payment, or null when no reservation has this id. */
export async function applyPaymentEvent(env: Env, command: PaymentCommand): Promise<PaymentAnswer | null> {
  const where = locateReservation(command.reservationId);
  if (!where) return null;
  const stub = stockShard(env, where.sku, where.shard);
  const apply = (settled?: Reservation) =>
    callStock(() =>
      stub.applyPayment(
        command.eventId,
        command.type,
        command.reservationId,
        command.money,
        command.requestId,
        settled,
      ),
    );
  let outcome = await apply();
  if (!outcome.ok && outcome.code === "RESERVATION_NOT_FOUND") {
    // The object forgets settled reservations; D1 has them, and the object decides with the row put back.
    const settled = await settledReservation(env.DB, command.reservationId);
    if (!settled) return null;
    outcome = await apply(settled);
  }
  if (!outcome.ok) {
    if (outcome.code === "RESERVATION_NOT_FOUND") return null;
    throw new Error(`stock object refused a payment: ${outcome.code}`);
  }
  if (!outcome.value.replayed) increment("flashgate_payments_total", { outcome: outcome.value.outcome });
  return outcome.value;
}

/** The acknowledgement both webhooks send for a handled event. */
export function paymentAck(answer: PaymentAnswer) {
  return { received: true as const, reservationStatus: answer.status, outcome: answer.outcome };
}
