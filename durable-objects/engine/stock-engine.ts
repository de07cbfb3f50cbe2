import { Access } from "./access";
import { Audits } from "./audit";
import { Configuration, type SkuSettings } from "./configuration";
import { DrawDecision } from "./draw-decision";
import { LAZY_EXPIRY_BATCH, Ledger } from "./ledger";
import { OpeningDraw } from "./opening-draw";
import { Outbox } from "./outbox";
import { Payments } from "./payments";
import { Reserver } from "./reserve";
import { Retention } from "./retention";
import { Transfers } from "./transfers";
import {
  type EngineStorage,
  fail,
  type Outcome,
  ok,
  type Pricing,
  type Reservation,
  type ReserveAnswer,
  type ReserveRequest,
  type SkuRow,
  type SkuState,
  toState,
} from "./types";
import { Waitlist } from "./waitlist";

/**
 * The stock engine of one SKU shard: the Durable Object equivalent of `lua/reserve.lua`,
 * `lua/release.lua` and `lua/confirm.lua`, as a facade over its units in `engine/`:
 *
 *   ledger        the shared transaction: SKU row, working set, hold/release/status/event
 *   reserve       reservations, in the Lua script's order of checks
 *   payments      payment events, once per event id; a late one decided on the buyer's home shard
 *   waitlist      buyers waiting for released units
 *   transfers     stock moved between shards, once per transfer id
 *   configuration settings, totals, prices, and the steps of a resize
 *   draw          the fair opening's stored draw; draw-decision decides it
 *   retention     what is forgotten, and the spent-nonce digest
 *   outbox, audit what the queue and reconciliation read
 *   schema        the object's tables, as numbered steps
 *
 * It is synchronous on purpose. Every method that changes state is one `transactionSync` with no
 * `await` inside and no clock read (time comes in as `now`, epoch milliseconds), so a decision can
 * never interleave with another and the whole thing is testable step by step. The methods here are
 * the ones most callers need; the rest are on the units, all sharing one ledger.
 */
export class StockEngine {
  readonly #ledger: Ledger;
  /** Fair opening: this shard's part of the SKU's draw. */
  readonly draw: OpeningDraw;
  readonly drawDecision: DrawDecision;
  readonly waitlist: Waitlist;
  readonly payments: Payments;
  readonly transfers: Transfers;
  readonly configuration: Configuration;
  readonly retention: Retention;
  readonly outbox: Outbox;
  readonly audits: Audits;
  /** Early access: the tiers (every shard) and the access codes (shard 0). */
  readonly access: Access;
  readonly #reserver: Reserver;

  /**
   * `newId` returns a fresh UUID (reservation and event ids); `newSeed` an opening draw's secret seed,
   * 64 hex digits (by default two of `newId`'s, without dashes). Tests pass seeded ones.
   */
  constructor(
    storage: EngineStorage,
    newId: () => string,
    newSeed: () => string = () => `${newId()}${newId()}`.replaceAll("-", ""),
  ) {
    // Units released in a transaction go to the waitlist in that transaction.
    this.#ledger = new Ledger(storage, newId, (now) => this.waitlist.fill(now));
    this.draw = new OpeningDraw(storage.sql);
    this.#ledger.onForget = () => this.draw.invalidate();
    if (this.#ledger.configured) this.draw.install();
    this.waitlist = new Waitlist(this.#ledger);
    this.access = new Access(this.#ledger);
    this.#reserver = new Reserver(this.#ledger, this.draw, this.waitlist, this.access);
    this.drawDecision = new DrawDecision(this.#ledger, this.draw, this.#reserver);
    this.payments = new Payments(this.#ledger, this.#reserver, this.waitlist);
    this.transfers = new Transfers(this.#ledger, this.waitlist);
    const units = {
      draw: this.draw,
      waitlist: this.waitlist,
      transfers: this.transfers,
      payments: this.payments,
      access: this.access,
    };
    this.configuration = new Configuration(this.#ledger, units, newSeed, (row) => this.#stateOf(row));
    this.retention = new Retention(this.#ledger);
    this.outbox = new Outbox(this.#ledger);
    this.audits = new Audits(this.#ledger, this.outbox, this.configuration);
  }

  /** Whether this object was ever configured (it has tables); before that it stores nothing. */
  get configured(): boolean {
    return this.#ledger.configured;
  }

  /** The SKU's configuration and counts, or null before the first `configure`. */
  state(): SkuState | null {
    const row = this.#ledger.row();
    return row ? this.#stateOf(row) : null;
  }

  /** See {@link Configuration.configure}. */
  configure(settings: SkuSettings, now?: number): Outcome<SkuState> {
    return this.configuration.configure(settings, now);
  }

  /** Decides a batch of reservations in one transaction, in arrival order, one answer each. */
  reserve(requests: readonly ReserveRequest[], now: number): Outcome<ReserveAnswer>[] {
    return this.#reserver.batch(requests, now);
  }

  /** Holds for a buyer the waitlist serves, on their home shard (see {@link Reserver.forWaitlist}). */
  holdForWaitlist(entryId: string, userId: string, quantity: number, now: number): Outcome<ReserveAnswer> {
    return this.#reserver.forWaitlist(entryId, userId, quantity, now);
  }

  /** Releases a held reservation of `userId`. Cancelling a cancelled one again changes nothing. */
  cancel(reservationId: string, userId: string, now: number): Outcome<Reservation> {
    const ledger = this.#ledger;
    if (!ledger.configured) return fail("RESERVATION_NOT_FOUND");
    return ledger.run(() => {
      ledger.expireDue(now, LAZY_EXPIRY_BATCH);
      const row = ledger.reservationRow(reservationId);
      if (!row || row.user_id !== userId) return fail<Reservation>("RESERVATION_NOT_FOUND");
      if (row.status === "cancelled") return ok(ledger.toReservation(row));
      if (row.status !== "held") return fail<Reservation>("INVALID_STATE");
      return ok(ledger.release(row, "cancelled", now));
    });
  }

  /** Releases every hold whose expiry is at or before `now`. Idempotent: alarms are at-least-once. */
  expireDue(now: number, limit = Number.MAX_SAFE_INTEGER): number {
    return this.#ledger.run(() => this.#ledger.expireDue(now, limit));
  }

  reservation(reservationId: string): Reservation | null {
    if (!this.#ledger.configured) return null;
    const row = this.#ledger.reservationRow(reservationId);
    return row ? this.#ledger.toReservation(row) : null;
  }

  /** The earliest expiry among live holds: when the alarm must fire next. */
  nextExpiry(): number | null {
    return this.#ledger.nextExpiry();
  }

  /** A user's active quantity (held + sold) on this shard: the per-user limit's count. */
  quotaOf(userId: string): number {
    return this.#ledger.configured ? this.#ledger.quota(userId) : 0;
  }

  /** Units released or added since the last call (0 when nothing was): the shell tells the waitlist. */
  takeFreed(): number {
    return this.#ledger.takeFreed();
  }

  /** See {@link Ledger.onBehalfOf}. */
  onBehalfOf<T>(requestId: string | undefined, decide: () => T): T {
    return this.#ledger.onBehalfOf(requestId, decide);
  }

  /**
   * Forgets what memory keeps of SQLite (the SKU row, the earliest expiry), to read it again: for
   * whatever changes the object's SQLite behind the engine (tests that play a bug or a lost row).
   */
  forget(): void {
    this.#ledger.forget();
    this.access.reload();
  }

  /** The SKU's price and currency (no row: no price, the default currency). */
  pricing(): Pricing {
    return this.#ledger.pricing();
  }

  #stateOf(row: SkuRow): SkuState {
    const state: SkuState = toState(row, this.#ledger.pricing());
    // Only when one is set: a SKU without a window answers exactly as the Lua script does (lua-parity).
    if (this.draw.windowMs > 0) state.openingWindowMs = this.draw.windowMs;
    const access = this.access.tiers();
    if (access.length > 0) state.access = access;
    if (this.#ledger.config().plan !== null) state.reconfiguring = true;
    // The shard that keeps the line (shard 0) says how many wait; only when some do, as for the window.
    const waiting = this.waitlist.length();
    if (waiting > 0) state.waiting = waiting;
    return state;
  }
}
