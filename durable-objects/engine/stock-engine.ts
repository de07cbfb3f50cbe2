import { Access } from "./access";
import { Audits } from "./audit";
import { Configuration } from "./configuration";
import { DrawDecision } from "./draw-decision";
import { Holds } from "./holds";
import { Ledger } from "./ledger";
import { type NewDraw, OpeningDraw } from "./opening-draw";
import { Outbox } from "./outbox";
import { Payments } from "./payments";
import { Retention } from "./retention";
import { Transfers } from "./transfers";
import type { EngineStorage } from "./types";
import { Waitlist } from "./waitlist";

/**
 * The stock engine of one SKU shard, the Durable Object equivalent of `lua/reserve.lua`,
 * `lua/release.lua` and `lua/confirm.lua`. This class is only its wiring: it builds the units over
 * one private ledger and exposes them; every operation lives on the unit that owns it:
 *
 *   holds         reservations (in the Lua script's order of checks), cancels, expiry, quotas
 *   payments      payment events, once per event id; a late one decided on the buyer's home shard
 *   waitlist      buyers waiting for released units
 *   transfers     stock moved between shards, once per transfer id
 *   configuration settings, totals, prices, the shard's state, and the steps of a resize
 *   access        early access: the tiers and the access codes
 *   draw          the fair opening's stored draw; drawDecision decides it
 *   retention     what is forgotten, and the spent-nonce digest
 *   outbox, audits what the queue and reconciliation read
 *
 * The ledger (the shared transaction: SKU row, working set, hold/release/status/event) stays
 * private, so nothing outside a unit releases a hold outside a transaction.
 *
 * It is synchronous on purpose. Every method that changes state is one `transactionSync` with no
 * `await` inside and no clock read (time comes in as `now`, epoch milliseconds), so a decision can
 * never interleave with another and the whole thing is testable step by step.
 */
export class StockEngine {
  readonly #ledger: Ledger;
  readonly holds: Holds;
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

  /**
   * `newId` returns a fresh UUID (reservation and event ids); `newDraw` what an opening's draw is
   * made with: its secret seed, 64 hex digits (by default two of `newId`'s, without dashes), and
   * whether it names entrants by their salted `user` (the object's: when it keeps a sale log).
   */
  constructor(
    storage: EngineStorage,
    newId: () => string,
    newDraw: () => NewDraw = () => ({ seed: `${newId()}${newId()}`.replaceAll("-", ""), salted: false }),
  ) {
    // Units released in a transaction go to the waitlist in that transaction.
    this.#ledger = new Ledger(storage, newId, (now) => this.waitlist.fill(now));
    this.draw = new OpeningDraw(storage.sql);
    this.#ledger.onForget = () => this.draw.invalidate();
    if (this.#ledger.configured) this.draw.install();
    this.waitlist = new Waitlist(this.#ledger, this.draw);
    this.access = new Access(this.#ledger);
    this.holds = new Holds(this.#ledger, this.draw, this.waitlist, this.access);
    this.drawDecision = new DrawDecision(this.#ledger, this.draw, this.holds, this.waitlist);
    this.payments = new Payments(this.#ledger, this.holds, this.waitlist);
    this.transfers = new Transfers(this.#ledger, this.waitlist);
    const units = {
      draw: this.draw,
      waitlist: this.waitlist,
      transfers: this.transfers,
      payments: this.payments,
      access: this.access,
    };
    this.configuration = new Configuration(this.#ledger, units, newDraw);
    this.retention = new Retention(this.#ledger);
    this.outbox = new Outbox(this.#ledger);
    this.audits = new Audits(this.#ledger, this.outbox, this.configuration);
  }

  /**
   * Forgets what memory keeps of SQLite (the SKU row, the earliest expiry, the draw's and the access
   * tiers' rows), to read it again: for whatever changes the object's SQLite behind the engine (tests
   * that play a bug or a lost row). It stays on the wiring because it spans the ledger, draw and access.
   */
  forget(): void {
    this.#ledger.forget();
    this.access.reload();
  }
}
