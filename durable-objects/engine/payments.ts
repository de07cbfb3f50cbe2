import type { ReservationStatus } from "../order-events";
import { LAZY_EXPIRY_BATCH, type Ledger } from "./ledger";
import { availableOf, fail, type Outcome, ok, type Reservation, type ReservationRow } from "./types";

/**
 * Payments: the Durable Object equivalent of `lua/confirm.lua`. Each payment event is applied once
 * per event id (invariant 6), and a replay gets the first answer again. One id is one event: the
 * same id naming another reservation, type, amount or currency is `IDEMPOTENCY_MISMATCH` and
 * changes nothing (the edge checks it first for all objects, in D1).
 *
 * - Failure releases a hold and leaves any other status as it is.
 * - Success is checked first: with a price set, the money must be exactly quantity × price in the
 *   SKU's currency (no money given: not checked). A wrong one changes nothing.
 * - Success turns a hold into sold; after expiry or cancel it re-takes stock when it can
 *   (respecting the per-user limit), else the reservation becomes `refund_required`.
 * - A reservation is paid once: success for one already paid (or refund_required) changes nothing.
 * Whatever changed nothing for a success answers outcome `refund_required`, and is counted.
 */

export type PaymentType = "payment.succeeded" | "payment.failed";

/** The money a payment event carries, checked against the SKU's price. */
export interface PaymentMoney {
  /** Minor units. */
  amount: number;
  /** ISO 4217; left out, the SKU's currency is assumed. */
  currency?: string | undefined;
}

/** A verified payment event, as both webhooks hand it to the stock object holding the reservation. */
export interface PaymentCommand {
  /** The idempotency key: a second command with the same key gets the first answer. */
  eventId: string;
  type: PaymentType;
  reservationId: string;
  /** Checked against the SKU's price for a success; part of what the event says either way. */
  money?: PaymentMoney | undefined;
  /** The id of the webhook request that carries it, for the object's log lines and queue events. */
  requestId?: string | undefined;
}

/**
 * `applied`: the event took effect (or had nothing to do, e.g. a failure after the hold ended).
 * `refund_required`: the money was taken by the provider but buys nothing here: wrong amount or
 * currency, the reservation already paid by another event, or too late to take the stock again.
 */
type PaymentOutcome = "applied" | "refund_required";

/**
 * Why a payment was `refund_required` (null when applied): its money is not the price, another event
 * paid the reservation already, or it came late and found no unit (`too_late`) or the buyer at the limit.
 */
export const PAYMENT_REASONS = [
  "amount_mismatch",
  "currency_mismatch",
  "already_paid",
  "too_late",
  "limit_exceeded",
] as const;
export type PaymentReason = (typeof PAYMENT_REASONS)[number];

export interface PaymentAnswer {
  reservation: Reservation;
  /** The status this payment event left the reservation in (the same answer on a replay). */
  status: ReservationStatus;
  outcome: PaymentOutcome;
  /** Why the outcome is `refund_required`; null when applied (and for events recorded before reasons were). */
  reason: PaymentReason | null;
  replayed: boolean;
}

/** Payment events by outcome, counted once each (the admin view's `payments`). */
export interface PaymentTotals {
  refund_required: number;
}

type SeenEvent = {
  reservation_id: string;
  status: string;
  outcome: string;
  type: string | null;
  amount: number | null;
  currency: string | null;
  reason: string | null;
};

export class Payments {
  constructor(private readonly ledger: Ledger) {}

  /**
   * Applies a payment event in a transaction of its own. `settled`: the reservation as D1 has it,
   * for one this shard has pruned (see {@link #restoreSettled}).
   */
  apply(command: PaymentCommand, now: number, settled?: Reservation): Outcome<PaymentAnswer> {
    const ledger = this.ledger;
    if (!ledger.configured) return fail("RESERVATION_NOT_FOUND");
    return ledger.run(() =>
      ledger.onBehalfOf(command.requestId, () => {
        ledger.expireDue(now, LAZY_EXPIRY_BATCH);
        return this.#apply(command, now, settled);
      }),
    );
  }

  #apply(command: PaymentCommand, now: number, settled: Reservation | undefined): Outcome<PaymentAnswer> {
    const ledger = this.ledger;
    const { eventId, type, reservationId, money } = command;
    const amount = money?.amount ?? null;
    const currency = money?.currency?.toLowerCase() ?? null;
    const seen = ledger.sql
      .exec<SeenEvent>(
        "SELECT reservation_id, status, outcome, type, amount, currency, reason FROM payment_events WHERE event_id = ?",
        eventId,
      )
      .toArray()[0];
    // Rows from before the content was recorded (type NULL) can only be compared by reservation.
    const sameEvent =
      seen?.reservation_id === reservationId &&
      (seen.type === null || (seen.type === type && seen.amount === amount && seen.currency === currency));
    if (seen && !sameEvent) return fail("IDEMPOTENCY_MISMATCH");
    if (settled && settled.id === reservationId) this.#restoreSettled(settled);
    const row = ledger.reservationRow(reservationId);
    if (!row) return fail("RESERVATION_NOT_FOUND");
    if (seen) {
      return ok({
        reservation: ledger.toReservation(row),
        status: seen.status as ReservationStatus,
        outcome: seen.outcome as PaymentOutcome,
        reason: seen.reason as PaymentReason | null,
        replayed: true,
      });
    }
    const { reservation, outcome, reason = null } = this.#decide(command, row, now);
    ledger.sql.exec(
      `INSERT INTO payment_events (event_id, reservation_id, status, outcome, created_at, type, amount, currency, reason)
       VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)`,
      eventId,
      reservationId,
      reservation.status,
      outcome,
      now,
      type,
      amount,
      currency,
      reason,
    );
    if (outcome === "refund_required") {
      ledger.sql.exec(
        `INSERT INTO payment_totals (outcome, count) VALUES ('refund_required', 1)
         ON CONFLICT (outcome) DO UPDATE SET count = count + 1`,
      );
    }
    return ok({ reservation, status: reservation.status, outcome, reason, replayed: false });
  }

  /** What a first delivery of the event does to its reservation. */
  #decide(
    command: PaymentCommand,
    row: ReservationRow,
    now: number,
  ): { reservation: Reservation; outcome: PaymentOutcome; reason?: PaymentReason } {
    const ledger = this.ledger;
    const unchanged = ledger.toReservation(row);
    if (command.type === "payment.failed") {
      const reservation = row.status === "held" ? ledger.release(row, "cancelled", now) : unchanged;
      return { reservation, outcome: "applied" };
    }
    const wrongMoney = command.money ? this.#moneyMismatch(row.quantity, command.money) : null;
    if (wrongMoney) return { reservation: unchanged, outcome: "refund_required", reason: wrongMoney };
    const sku = ledger.requireRow();
    if (row.status === "held") {
      sku.held -= row.quantity;
      sku.sold += row.quantity;
      ledger.touch();
      ledger.leftHeld(row);
      return { reservation: ledger.setStatus(row, "paid", now), outcome: "applied" };
    }
    if (row.status === "expired" || row.status === "cancelled") {
      // A late payment is a new sale; an archived SKU makes none (a paused one still takes it: the pause stops newcomers).
      if (sku.status === "archived") {
        return {
          reservation: ledger.setStatus(row, "refund_required", now),
          outcome: "refund_required",
          reason: "too_late",
        };
      }
      const inStock = availableOf(sku) >= row.quantity;
      const withinLimit = ledger.quota(row.user_id) + row.quantity <= sku.per_user_limit;
      if (inStock && withinLimit) {
        sku.sold += row.quantity;
        ledger.touch();
        ledger.addQuota(row.user_id, row.quantity);
        return { reservation: ledger.setStatus(row, "paid", now), outcome: "applied" };
      }
      const reason = inStock ? "limit_exceeded" : "too_late";
      return { reservation: ledger.setStatus(row, "refund_required", now), outcome: "refund_required", reason };
    }
    // Paid or refunded already: never twice.
    return { reservation: unchanged, outcome: "refund_required", reason: "already_paid" };
  }

  /** Payment events answered `refund_required` on this shard, each counted once. */
  totals(): PaymentTotals {
    if (!this.ledger.configured) return { refund_required: 0 };
    const row = this.ledger.sql
      .exec<{ count: number }>("SELECT count FROM payment_totals WHERE outcome = 'refund_required'")
      .toArray()[0];
    return { refund_required: row?.count ?? 0 };
  }

  /**
   * Puts back a finished reservation that was pruned (its D1 row, given by the edge), so a late
   * payment is decided as if the row had stayed: re-take the stock, or refund. Its seq is 0 (settled);
   * a change it then takes is a new event. A reservation this shard still has is left alone.
   */
  #restoreSettled(r: Reservation): void {
    if (r.status === "held") return; // holds are never pruned: a held D1 row lags the object
    this.ledger.sql.exec(
      `INSERT INTO reservations (id, user_id, quantity, status, nonce, created_at, expires_at, updated_at, seq)
       VALUES (?, ?, ?, ?, NULL, ?, ?, ?, 0) ON CONFLICT (id) DO NOTHING`,
      r.id,
      r.userId,
      r.quantity,
      r.status,
      r.createdAt,
      r.expiresAt,
      r.updatedAt,
    );
  }

  /** What is wrong with a payment of `quantity` units at the SKU's price, or null; anything goes without a price. */
  #moneyMismatch(quantity: number, money: PaymentMoney): "amount_mismatch" | "currency_mismatch" | null {
    const { price, currency } = this.ledger.pricing();
    if (price === null) return null;
    if (money.currency !== undefined && money.currency.toLowerCase() !== currency) return "currency_mismatch";
    return money.amount === quantity * price ? null : "amount_mismatch";
  }
}
