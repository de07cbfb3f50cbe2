import type { ReservationStatus } from "../shared/order-events";
import type { RefundEntryEvent } from "../shared/sale-entries";
import { homeShard } from "../shared/shard-name";
import type { Holds } from "./holds";
import { LAZY_EXPIRY_BATCH, type Ledger } from "./ledger";
import {
  availableOf,
  fail,
  isShort,
  type Outcome,
  ok,
  type Refusal,
  type Reservation,
  type ReservationRow,
} from "./types";
import { variantsFit } from "./variants";
import type { Waitlist } from "./waitlist";

/**
 * Payments: the Durable Object equivalent of `lua/confirm.lua`. Each payment event is applied once
 * per event id (invariant 6), and a replay gets the first answer again. One id is one event: the
 * same id naming another reservation, type, amount or currency is `IDEMPOTENCY_MISMATCH` and
 * changes nothing (the edge checks it first for all objects, in D1).
 *
 * - Failure releases a hold and leaves any other status as it is.
 * - Success is checked first: with a price set, the money must be exactly quantity × price in the
 *   SKU's currency (no money given: not checked). A wrong one changes nothing.
 * - Success turns a hold into sold; after expiry or cancel (a late payment) it is decided as a new
 *   reservation of the buyer would be now: by the buyer's home shard under the SKU's current shard
 *   count, with the reservation path's own rule (`Holds.admit`), pulling units from siblings
 *   when short; only with no unit left or the limit reached is the reservation `refund_required`.
 * - A reservation is paid once: success for one already paid (or refund_required) changes nothing.
 * Whatever changed nothing for a success answers outcome `refund_required`, and is counted.
 *
 * Why the home shard: it keeps the buyer's held + sold for the whole SKU (a reservation is made
 * there), while the reservation's own shard may hold nothing of the buyer's after a resize. When the
 * home shard is another one, the payment becomes a claim: the reservation's shard records it (the
 * event, before anything is asked, so its alarm finishes it) and asks the home shard for a unit
 * (`grant`, once per reservation: the unit is sold there and counted in the buyer's quota there), then
 * records the answer, the reservation's new status and the event's answer in one transaction
 * (`finishClaim`). The shell runs the steps (durable-objects/stock/payment-claims.ts).
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

/** Whether a `refund_required` for this reason changes no reservation: then a `payment` entry of its own is logged. */
const changesNothing = (reason: PaymentReason | null): reason is RefundEntryEvent["reason"] =>
  reason === "amount_mismatch" || reason === "currency_mismatch" || reason === "already_paid";

export interface PaymentAnswer {
  reservation: Reservation;
  /** The status this payment event left the reservation in (the same answer on a replay). */
  status: ReservationStatus;
  outcome: PaymentOutcome;
  /** Why the outcome is `refund_required`; null when applied (and for events recorded before reasons were). */
  reason: PaymentReason | null;
  replayed: boolean;
}

/** A late payment's ask to the buyer's home shard: a unit for this reservation, once. */
export interface UnitClaim {
  reservationId: string;
  userId: string;
  quantity: number;
  /** The SKU's shard count as the asking shard knows it; a home shard with another answers `moved`. */
  shards: number;
  /** Sizes: the variant the reservation held, which the late payment takes again (else it refunds). */
  variant?: string | undefined;
}

/**
 * The home shard's answer to a claim: the unit is sold there (`granted`, the same on every ask
 * again), or refused for the limit or the stock; `busy` (a resize is staging it, a sibling could
 * not answer) decides nothing; `moved`: the shard count changed, ask the buyer's home under it.
 */
export type GrantAnswer =
  | { kind: "granted" }
  | { kind: "refused"; code: "LIMIT_EXCEEDED" | "SOLD_OUT" }
  | { kind: "busy" }
  | { kind: "moved"; shards: number };

/**
 * What deciding a payment here came to: its answer, or what the shell does first. `pull`: this
 * shard is the buyer's home and lacks units (pull them, then decide with `pulled`). `claim`: the
 * buyer's home is another shard (ask it, then finish the claim); `began`: this event recorded it.
 */
export type PaymentStep =
  | { kind: "answer"; answer: PaymentAnswer }
  | { kind: "pull"; wanted: number; variant?: string | undefined }
  | { kind: "claim"; claim: UnitClaim; began: boolean };

/** A grant step on the home shard: an answer, or `short` (pull `wanted`, then ask with `pulled`). */
export type GrantStep = GrantAnswer | { kind: "short"; wanted: number; variant?: string | undefined };

type ClaimRow = {
  reservation_id: string;
  event_id: string;
  type: string;
  amount: number | null;
  currency: string | null;
  user_id: string;
  quantity: number;
};

/** Why a late payment the buyer's home shard refused is refunded: the limit, or no unit left. */
const reasonOf = (code: "LIMIT_EXCEEDED" | "SOLD_OUT"): "too_late" | "limit_exceeded" =>
  code === "LIMIT_EXCEEDED" ? "limit_exceeded" : "too_late";

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
  constructor(
    private readonly ledger: Ledger,
    private readonly holds: Holds,
    private readonly waitlist: Waitlist,
  ) {}

  /**
   * Decides a payment this shard decides alone: every payment of a one-shard SKU, and on a sharded
   * one all but a late payment that needs units or an answer from another shard (`BUSY` then: the
   * stock object's `applyPayment` runs those steps).
   */
  apply(command: PaymentCommand, now: number, finished?: Reservation): Outcome<PaymentAnswer> {
    const step = this.step(command, now, finished, true);
    if (!step.ok) return step;
    return step.value.kind === "answer" ? ok(step.value.answer) : fail("BUSY");
  }

  /**
   * Decides a payment event in a transaction of its own, as far as this shard can. `finished`: the
   * reservation as D1 has it, for one this shard has pruned (see {@link #restoreFinished}).
   * `pulled`: this shard pulled from its siblings for it already, so short is final.
   */
  step(command: PaymentCommand, now: number, finished: Reservation | undefined, pulled: boolean): Outcome<PaymentStep> {
    const ledger = this.ledger;
    if (!ledger.configured) return fail("RESERVATION_NOT_FOUND");
    return ledger.run(() =>
      ledger.onBehalfOf(command.requestId, () => {
        ledger.expireDue(now, LAZY_EXPIRY_BATCH);
        return this.#step(command, now, finished, pulled);
      }),
    );
  }

  #step(
    command: PaymentCommand,
    now: number,
    finished: Reservation | undefined,
    pulled: boolean,
  ): Outcome<PaymentStep> {
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
    if (finished && finished.id === reservationId) this.#restoreFinished(finished);
    const row = ledger.reservationRow(reservationId);
    if (!row) return fail("RESERVATION_NOT_FOUND");
    if (seen) {
      return ok({
        kind: "answer",
        answer: {
          reservation: ledger.toReservation(row),
          status: seen.status as ReservationStatus,
          outcome: seen.outcome as PaymentOutcome,
          reason: seen.reason as PaymentReason | null,
          replayed: true,
        },
      });
    }
    // A claim in flight for this reservation is finished first, whichever event asks: then this
    // event is decided on what it left (a second payment of a reservation never claims twice).
    const pending = this.#claimRow(reservationId);
    if (pending) return ok({ kind: "claim", claim: this.#claimOf(pending), began: false });
    const decided = this.#decide(command, row, now, pulled);
    if ("kind" in decided) {
      if (decided.kind === "claim") this.#recordClaim(command, row, now);
      return ok(decided);
    }
    if ("code" in decided) return decided;
    const { reservation, outcome, reason = null } = decided;
    this.#record(eventId, reservationId, reservation.status, outcome, reason, now, { type, amount, currency });
    if (changesNothing(reason)) this.#logRefund(eventId, row, reason, amount, currency, now);
    return ok({
      kind: "answer",
      answer: { reservation, status: reservation.status, outcome, reason, replayed: false },
    });
  }

  /**
   * A `refund_required` answer that changed no reservation (the money is not the price, or it was
   * paid already): the SKU's log has no reservation entry for it, so its own entry waits in
   * `log_payments`, written in the decision's transaction; the outbox sender hands it to the log once
   * the events before it are there (API.md v1.4 "The verifiable sale"). Once per event (`payment:<id>`).
   * `currency`: as the event gave it, else the SKU's, which the decision assumed (null without money).
   */
  #logRefund(
    eventId: string,
    row: ReservationRow,
    reason: RefundEntryEvent["reason"],
    amount: number | null,
    currency: string | null,
    now: number,
  ): void {
    const { currency: skuCurrency, test } = this.ledger.pricing();
    const figures: RefundEntryEvent = {
      reservationId: row.id,
      userId: row.user_id,
      reason,
      amount,
      currency: currency ?? (amount === null ? null : skuCurrency),
      ...(test ? { test: true as const } : {}),
    };
    this.ledger.sql.exec(
      "INSERT INTO log_payments (id, time, figures) VALUES (?, ?, ?) ON CONFLICT (id) DO NOTHING",
      `payment:${eventId}`,
      now,
      JSON.stringify(figures),
    );
  }

  /** Records what an event did (its answer on every replay) and counts a refund. */
  #record(
    eventId: string,
    reservationId: string,
    status: ReservationStatus,
    outcome: PaymentOutcome,
    reason: PaymentReason | null,
    now: number,
    said: { type: string; amount: number | null; currency: string | null },
  ): void {
    const sql = this.ledger.sql;
    sql.exec(
      `INSERT INTO payment_events (event_id, reservation_id, status, outcome, created_at, type, amount, currency, reason)
       VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)`,
      eventId,
      reservationId,
      status,
      outcome,
      now,
      said.type,
      said.amount,
      said.currency,
      reason,
    );
    if (outcome === "refund_required") {
      sql.exec(
        `INSERT INTO payment_totals (outcome, count) VALUES ('refund_required', 1)
         ON CONFLICT (outcome) DO UPDATE SET count = count + 1`,
      );
    }
  }

  /**
   * What a first delivery of the event does to its reservation, or the step the shell takes first
   * (a late payment on a sharded SKU), or `BUSY` (nothing decided: a resize is staging the shard, or
   * an opening draw is undecided).
   */
  #decide(
    command: PaymentCommand,
    row: ReservationRow,
    now: number,
    pulled: boolean,
  ):
    | { reservation: Reservation; outcome: PaymentOutcome; reason?: PaymentReason }
    | Exclude<PaymentStep, { kind: "answer" }>
    | Refusal {
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
      ledger.shiftVariant(row.variant, { held: -row.quantity, sold: row.quantity });
      ledger.touch();
      ledger.leftHeld(row);
      return { reservation: ledger.setStatus(row, "paid", now), outcome: "applied" };
    }
    if (row.status === "expired" || row.status === "cancelled") {
      if (homeShard(row.user_id, sku.shards) !== sku.shard) {
        const claim: UnitClaim = {
          reservationId: row.id,
          userId: row.user_id,
          quantity: row.quantity,
          shards: sku.shards,
        };
        if (row.variant != null) claim.variant = row.variant;
        return { kind: "claim", claim, began: true };
      }
      const taken = this.#take(row.user_id, row.quantity, now, pulled, row.variant ?? undefined);
      if (taken.kind === "short") return { kind: "pull", wanted: taken.wanted, variant: taken.variant };
      if (taken.kind === "busy" || taken.kind === "moved") return fail("BUSY") as Refusal;
      if (taken.kind === "granted") return { reservation: ledger.setStatus(row, "paid", now), outcome: "applied" };
      const reason = reasonOf(taken.code);
      const reservation = ledger.setStatus(row, "refund_required", now, reason);
      return { reservation, outcome: "refund_required", reason };
    }
    // Paid or refunded already: never twice.
    return { reservation: unchanged, outcome: "refund_required", reason: "already_paid" };
  }

  /**
   * The buyer's home shard (this one) takes `quantity` units for a late payment, as a reservation
   * would (`Holds.admit`): sold at once, counted in the buyer's quota. Short on a sharded SKU
   * before the siblings were asked: `short`, nothing written.
   */
  #take(userId: string, quantity: number, now: number, pulled: boolean, variant?: string): GrantStep {
    const ledger = this.ledger;
    const sku = ledger.requireRow();
    // A late payment is a new sale; an archived SKU makes none (a paused one still takes it: the pause stops newcomers).
    if (sku.status === "archived") return { kind: "refused", code: "SOLD_OUT" };
    if (ledger.fenced()) return { kind: "busy" }; // a resize is staging this shard: no unit moves
    // A SKU with sizes sells by size only (as a new hold, Holds.one): a hold made before its sizes were
    // given has none to take again, and units taken without one would leave the SKU apart from its sizes.
    if (!variantsFit(ledger.variants(), variant === undefined ? undefined : [variant]))
      return { kind: "refused", code: "SOLD_OUT" };
    const refused = this.holds.admit(sku, userId, quantity, now, false, variant === undefined ? undefined : [variant]);
    if (!refused.ok) {
      // At the limit and short of units too: `too_late`, as the Lua twin says. A sharded SKU's units
      // are its shards' together: this shard short, the siblings are asked first (pulled, then decided).
      const left =
        variant === undefined ? availableOf(sku) : (refused.variants?.[variant] ?? this.#variantLeft(variant));
      if (refused.code === "LIMIT_EXCEEDED") {
        // Units one shard's line takes are gone, as for a reservation (none are on a sharded SKU's shard).
        const claimed = this.waitlist.claimed(now);
        const free = left - (variant === undefined ? (claimed?.units ?? 0) : (claimed?.sizes.get(variant) ?? 0));
        if (free < quantity && sku.shards > 1 && !pulled) return { kind: "short", wanted: quantity - free, variant };
        return { kind: "refused", code: free >= quantity ? "LIMIT_EXCEEDED" : "SOLD_OUT" };
      }
      if (refused.code === "DRAW_PENDING") return { kind: "busy" }; // the units are the draw's until it is decided
      const wanted = quantity - (variant === undefined ? (refused.available ?? 0) : left);
      if (isShort(refused) && sku.shards > 1 && !pulled && !this.waitlist.ahead)
        return { kind: "short", wanted, variant };
      return { kind: "refused", code: "SOLD_OUT" };
    }
    sku.sold += quantity;
    ledger.shiftVariant(variant, { sold: quantity });
    ledger.touch();
    ledger.addQuota(userId, quantity);
    return { kind: "granted" };
  }

  /**
   * The buyer's home shard, asked for a unit by a late payment's claim: decided by {@link #take}
   * once per reservation: asked again, a grant or a refusal answers the same. Two asks of one claim
   * may be in flight at once (two deliveries, a delivery and the alarm), and the first answer back
   * finishes it: a refusal, then a unit freed and granted to the second, would sell a unit for a
   * payment refunded. Its own transaction.
   */
  grant(claim: UnitClaim, now: number, pulled: boolean): GrantStep {
    const ledger = this.ledger;
    if (!ledger.configured) return { kind: "busy" };
    return ledger.run(() => {
      const done = ledger.sql.exec("SELECT 1 FROM unit_grants WHERE reservation_id = ?", claim.reservationId).toArray();
      if (done.length > 0) return { kind: "granted" };
      const refused = ledger.sql
        .exec<{ code: "LIMIT_EXCEEDED" | "SOLD_OUT" }>(
          "SELECT code FROM unit_refusals WHERE reservation_id = ?",
          claim.reservationId,
        )
        .toArray()[0];
      if (refused) return { kind: "refused", code: refused.code };
      ledger.expireDue(now, LAZY_EXPIRY_BATCH);
      const sku = ledger.requireRow();
      if (sku.shards !== claim.shards) return { kind: "moved", shards: sku.shards };
      if (homeShard(claim.userId, sku.shards) !== sku.shard) return { kind: "busy" }; // not asked by our rule
      const taken = this.#take(claim.userId, claim.quantity, now, pulled, claim.variant);
      if (taken.kind === "granted") {
        ledger.sql.exec(
          "INSERT INTO unit_grants (reservation_id, user_id, quantity, created_at) VALUES (?, ?, ?, ?)",
          claim.reservationId,
          claim.userId,
          claim.quantity,
          now,
        );
        ledger.bumpSeq(); // the shard's counts changed: a new seq for the mirror
      }
      if (taken.kind === "refused") {
        ledger.sql.exec(
          "INSERT INTO unit_refusals (reservation_id, code, created_at) VALUES (?, ?, ?)",
          claim.reservationId,
          taken.code,
          now,
        );
      }
      return taken;
    });
  }

  /** Records a late payment's claim, in the transaction that found it needs the home shard. */
  #recordClaim(command: PaymentCommand, row: ReservationRow, now: number): void {
    this.ledger.sql.exec(
      `INSERT INTO payment_claims (reservation_id, event_id, type, amount, currency, user_id, quantity, created_at)
       VALUES (?, ?, ?, ?, ?, ?, ?, ?)`,
      row.id,
      command.eventId,
      command.type,
      command.money?.amount ?? null,
      command.money?.currency?.toLowerCase() ?? null,
      row.user_id,
      row.quantity,
      now,
    );
  }

  #claimRow(reservationId: string): ClaimRow | undefined {
    return this.ledger.sql
      .exec<ClaimRow>("SELECT * FROM payment_claims WHERE reservation_id = ?", reservationId)
      .toArray()[0];
  }

  #claimOf(row: ClaimRow): UnitClaim {
    const claim: UnitClaim = {
      reservationId: row.reservation_id,
      userId: row.user_id,
      quantity: row.quantity,
      shards: this.ledger.requireRow().shards,
    };
    const variant = this.ledger.reservationRow(row.reservation_id)?.variant;
    if (variant != null) claim.variant = variant;
    return claim;
  }

  /** Units of a variant this shard has available (0: it has none of it, or not the variant). */
  #variantLeft(variant: string): number {
    const v = this.ledger.variants().get(variant);
    return v ? availableOf(v) : 0;
  }

  /** Claims this shard recorded and has not finished (its alarm finishes them). */
  pendingClaims(): UnitClaim[] {
    if (!this.ledger.configured) return [];
    return this.ledger.sql
      .exec<ClaimRow>("SELECT * FROM payment_claims ORDER BY created_at")
      .toArray()
      .map((row) => this.#claimOf(row));
  }

  /**
   * Finishes a claim with the home shard's answer, in one transaction: the reservation paid or
   * `refund_required`, the event's answer recorded (and a refund counted), the claim gone. Null
   * when it was finished already (by a concurrent delivery or the alarm).
   */
  finishClaim(
    reservationId: string,
    answer: Extract<GrantAnswer, { kind: "granted" | "refused" }>,
    now: number,
  ): { eventId: string; answer: PaymentAnswer } | null {
    const ledger = this.ledger;
    if (!ledger.configured) return null;
    return ledger.run(() => {
      const claim = this.#claimRow(reservationId);
      const row = ledger.reservationRow(reservationId);
      if (!claim || !row) return null;
      const status = answer.kind === "granted" ? "paid" : "refund_required";
      const outcome: PaymentOutcome = answer.kind === "granted" ? "applied" : "refund_required";
      const reason = answer.kind === "granted" ? null : reasonOf(answer.code);
      const reservation = ledger.setStatus(row, status, now, reason ?? undefined);
      const said = { type: claim.type, amount: claim.amount, currency: claim.currency };
      this.#record(claim.event_id, reservationId, status, outcome, reason, now, said);
      ledger.sql.exec("DELETE FROM payment_claims WHERE reservation_id = ?", reservationId);
      return { eventId: claim.event_id, answer: { reservation, status, outcome, reason, replayed: false } };
    });
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
   * payment is decided as if the row had stayed: re-take the stock, or refund. Its seq is 0 (below any watermark);
   * a change it then takes is a new event. A reservation this shard still has is left alone. Every
   * column the decision reads comes back: a size left out would refuse the size's own units.
   */
  #restoreFinished(r: Reservation): void {
    if (r.status === "held") return; // holds are never pruned: a held D1 row lags the object
    this.ledger.sql.exec(
      `INSERT INTO reservations (id, user_id, quantity, status, nonce, created_at, expires_at, updated_at, seq, variant)
       VALUES (?, ?, ?, ?, NULL, ?, ?, ?, 0, ?) ON CONFLICT (id) DO NOTHING`,
      r.id,
      r.userId,
      r.quantity,
      r.status,
      r.createdAt,
      r.expiresAt,
      r.updatedAt,
      r.variant ?? null,
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
