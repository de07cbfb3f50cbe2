import type { Access } from "./access";
import { bindsEach, chunks, groups, LAZY_EXPIRY_BATCH, type Ledger } from "./ledger";
import type { DrawPlace, OpeningDraw } from "./opening-draw";
import {
  availableOf,
  fail,
  notOnSale,
  type Outcome,
  ok,
  overLimit,
  type Refusal,
  type Reservation,
  type ReservationRow,
  type ReserveAnswer,
  type ReserveRequest,
  rowOnSale,
  type SkuRow,
  type StockErrorCode,
} from "./types";
import { listedVariants, variantsColumn, variantsFit } from "./variants";
import type { Waitlist } from "./waitlist";

type QuotaRow = { user_id: string; active: number };

/** What {@link Holds.admit} lets through: the variant the units come from (null: a SKU without variants). */
export type Admitted = { ok: true; variant: string | null };

/**
 * Holds: reservations made, cancelled and expired, the Durable Object equivalent of
 * `lua/reserve.lua` and `lua/release.lua`. A reservation's order of checks, the same as the Lua script:
 *   1. holds past their expiry are released first (so a late alarm never under-sells);
 *   2. a token nonce already used replays its reservation (same quantity) or is a mismatch;
 *   3. the sale is on and inside its window (or, before it, the token's early access tier is open);
 *   4. the user's held + sold plus the quantity stays within the per-user limit;
 *   5. enough stock is available;
 *   6. the hold is written, with the user's quota, the nonce and an outbox event.
 * A rejected request writes nothing. Between 2 and 3 the fair opening and a resize's fence have
 * their say (a pending draw takes entries; a fenced shard answers BUSY).
 */
export class Holds {
  constructor(
    private readonly ledger: Ledger,
    private readonly draw: OpeningDraw,
    private readonly waitlist: Waitlist,
    private readonly access: Access,
  ) {}

  /** Decides a batch of reservations in one transaction, in arrival order, one answer each. */
  reserve(requests: readonly ReserveRequest[], now: number): Outcome<ReserveAnswer>[] {
    const ledger = this.ledger;
    return ledger.run(() => {
      ledger.expireDue(now, LAZY_EXPIRY_BATCH);
      if (ledger.row()) this.#prefetch(requests);
      return requests.map((request) => ledger.onBehalfOf(request.requestId, () => this.one(request, now)));
    });
  }

  /**
   * Shard 0 of a sharded SKU serving its waitlist: holds for a waiting buyer on the buyer's home
   * shard (this one), ignoring the waitlist itself. The entry id is the nonce, so serving an entry
   * again (after a crash) replays its hold: a buyer is served exactly once.
   */
  forWaitlist(
    entryId: string,
    userId: string,
    quantity: number,
    now: number,
    variants?: readonly string[],
    pulled = false,
  ): Outcome<ReserveAnswer> {
    return this.ledger.run(() => {
      this.ledger.expireDue(now, LAZY_EXPIRY_BATCH);
      return this.one({ userId, nonce: entryId, quantity, variants, pulled }, now, true);
    });
  }

  /** Releases a held reservation of `userId`. Cancelling a cancelled one again changes nothing. */
  cancel(reservationId: string, userId: string, now: number): Outcome<Reservation> {
    const ledger = this.ledger;
    if (!ledger.configured) return fail("RESERVATION_NOT_FOUND");
    return ledger.run(() => {
      ledger.expireDue(now, LAZY_EXPIRY_BATCH);
      const row = ledger.reservationRow(reservationId);
      if (!row || row.user_id !== userId) return fail<Reservation>("RESERVATION_NOT_FOUND");
      if (row.status === "cancelled") return ok(this.#withDraw(row, ledger.toReservation(row)));
      if (row.status !== "held") return fail<Reservation>("INVALID_STATE");
      return ok(this.#withDraw(row, ledger.release(row, "cancelled", now)));
    });
  }

  /** Releases every hold whose expiry is at or before `now`. Idempotent: alarms are at-least-once. */
  expireDue(now: number, limit = Number.MAX_SAFE_INTEGER): number {
    return this.ledger.run(() => this.ledger.expireDue(now, limit));
  }

  reservation(reservationId: string): Reservation | null {
    if (!this.ledger.configured) return null;
    const row = this.ledger.reservationRow(reservationId);
    return row ? this.#withDraw(row, this.ledger.toReservation(row)) : null;
  }

  /** A reservation the opening draw made carries its place in the draw, as its `202` did. */
  #withDraw(row: ReservationRow, reservation: Reservation): Reservation {
    const draw = row.nonce ? this.draw.placeOfNonce(row.nonce) : null;
    return draw ? { ...reservation, draw } : reservation;
  }

  /** The earliest expiry among live holds: when the alarm must fire next. */
  nextExpiry(): number | null {
    return this.ledger.nextExpiry();
  }

  /** A user's active quantity (held + sold) on this shard: the per-user limit's count. */
  quotaOf(userId: string): number {
    return this.ledger.configured ? this.ledger.quota(userId) : 0;
  }

  /**
   * The user's quota as it stands at `now`, less their holds already due, without expiring them:
   * what another shard reads of a home shard whose alarm may be late (a hold is released at its
   * expiry, whenever the alarm comes). The due holds are read through the expiry index: none, mostly.
   */
  quotaAt(userId: string, now: number): number {
    const quota = this.quotaOf(userId);
    if (quota === 0) return 0;
    let due = 0;
    for (const row of this.ledger.sql.exec<{ quantity: number }>(
      "SELECT quantity FROM reservations WHERE status = 'held' AND expires_at <= ? AND user_id = ?",
      now,
      userId,
    )) {
      due += row.quantity;
    }
    return quota - due;
  }

  /**
   * The units a user holds on this shard now (live holds, not what they bought): what the line's
   * `held` leaves out for them (API.md v1.4 "Clarified"). Nothing reads reservations by user (no
   * index: it would cost every hold a b-tree insert), so the user's quota (held + sold, one row)
   * is read first: a buyer who holds nothing, every buyer of a limit of 1 who waits, costs that row
   * only. Else the live holds are walked through their expiry index for the user's, stopping once
   * they make up the quota.
   */
  heldBy(userId: string, now: number): number {
    if (!this.ledger.configured) return 0;
    const sql = this.ledger.sql;
    const quota =
      sql.exec<{ active: number }>("SELECT active FROM user_quota WHERE user_id = ?", userId).toArray()[0]?.active ?? 0;
    if (quota === 0) return 0;
    let held = 0;
    const rows = sql.exec<{ quantity: number }>(
      "SELECT quantity FROM reservations WHERE status = 'held' AND expires_at > ? AND user_id = ?",
      now,
      userId,
    );
    for (const row of rows) {
      held += row.quantity;
      if (held >= quota) break;
    }
    return held;
  }

  /** Units released or added since the last call (0 when nothing was): the shell tells the waitlist. */
  takeFreed(): number {
    return this.ledger.takeFreed();
  }

  /** See {@link Ledger.onBehalfOf}. */
  onBehalfOf<T>(requestId: string | undefined, decide: () => T): T {
    return this.ledger.onBehalfOf(requestId, decide);
  }

  /**
   * One reservation, in the caller's transaction. `served`: for a buyer the waitlist or the draw
   * serves, so buyers waiting ahead do not turn it away.
   */
  one(request: ReserveRequest, now: number, served = false): Outcome<ReserveAnswer> {
    const ledger = this.ledger;
    const sku = ledger.row();
    if (!sku) return fail("SKU_NOT_FOUND");
    const available = availableOf(sku);

    const prior = this.#priorOf(request.nonce);
    if (prior) {
      if (
        prior.quantity !== request.quantity ||
        prior.user_id !== request.userId ||
        !this.#sameVariants(prior, request.variants)
      ) {
        return fail("IDEMPOTENCY_MISMATCH", available);
      }
      const draw = this.draw.placeOfNonce(request.nonce) ?? undefined;
      return ok({ reservation: ledger.toReservation(prior), replayed: true, available, ...(draw ? { draw } : {}) });
    }
    const drawn = this.drawAnswer(request, available, served);
    // A token's answer is final. A line's entry waits until it is served: a draw it entered and that
    // refused it answered that pass only, so the entry is decided afresh (units may have come since).
    if (drawn && (drawn.ok || !served || drawn.code === "DRAW_PENDING")) return drawn;
    // Archived: not sold any more (a token's replay above still answers its hold, which keeps its course).
    if (sku.status === "archived") return fail("SKU_NOT_FOUND");
    if (!variantsFit(ledger.variants(), request.variants)) return fail("VARIANT_INVALID");
    if (ledger.fenced()) return fail("BUSY", available);
    if (request.shards !== undefined && request.shards !== sku.shards) return fail("TOKEN_INVALID");

    // Before the public start, only a token the edge signed for a tier open by this shard's clock.
    if (!rowOnSale(sku, now) && !this.access.admits(request.tier, sku, now)) return notOnSale(sku, available);
    // Whoever asks (a token, the line, the draw): a sharded shard takes a later choice only after a pull.
    const strict = sku.shards > 1 && request.pulled !== true;
    const admitted = this.admit(sku, request.userId, request.quantity, now, served, request.variants, strict);
    // A token enters a pending draw; the line waits for it, and is served from what its entrants leave.
    if (!admitted.ok)
      return admitted.code === "DRAW_PENDING" && !served ? this.#enterDraw(request, sku, now) : admitted;

    const { userId, quantity, nonce, tokenExpiresAt } = request;
    // A token's hold of a size keeps the list it was asked with: its replay must ask the same.
    const listed = admitted.variant !== null && nonce !== null ? variantsColumn(request.variants) : null;
    const reservation = ledger.hold(sku, userId, quantity, nonce, now, tokenExpiresAt, admitted.variant, listed);
    return ok({ reservation, replayed: false, available: available - request.quantity });
  }

  /**
   * May this buyer take `quantity` more units of this shard now? The one rule for a new reservation
   * and for a late payment (engine/payments.ts), asked on the buyer's home shard, which keeps their
   * held + sold: within the per-user limit, no undecided draw (`DRAW_PENDING`: the units are the
   * draw's), no waitlist the units are promised to, and enough available (a short answer on a
   * sharded SKU makes the shell pull from siblings and ask again). On a SKU with variants the units
   * come from the first of `variants` that has `quantity` available (the limit counts across them).
   */
  admit(
    sku: SkuRow,
    userId: string,
    quantity: number,
    now: number,
    served = false,
    variants?: readonly string[],
    strict = false,
  ): Refusal | Admitted {
    const held = this.ledger.quota(userId);
    if (held + quantity > sku.per_user_limit) return overLimit(sku, held, availableOf(sku)) as Refusal;
    if (this.draw.pending(now)) return fail("DRAW_PENDING") as Refusal;
    // The units are the waitlist's: shard 0 says so (sharded), or one shard's line takes them.
    if (!served && this.waitlist.ahead) return fail("SOLD_OUT", 0) as Refusal;
    const claimed = served ? null : this.waitlist.claimed(now);
    const available = availableOf(sku) - (claimed?.units ?? 0);
    if (variants !== undefined && variants.length > 0)
      return this.#pick(variants, quantity, available, strict, claimed?.sizes);
    if (available === 0) return fail("SOLD_OUT", 0) as Refusal;
    if (available < quantity) return fail("INSUFFICIENT_STOCK", available) as Refusal;
    return { ok: true, variant: null };
  }

  /**
   * Sizes: the first listed variant with `quantity` available; else `SOLD_OUT` (none has a unit) or
   * `INSUFFICIENT_STOCK`, each with what every listed variant has. `available` stays the shard's
   * whole count, which says whether the SKU (not these sizes) is sold out. `strict` (a sharded SKU
   * before its shell pulled): only the first choice, so a first choice a sibling has is pulled
   * before a later one is taken here. `claimed`: what one shard's line takes of each, gone for this request.
   */
  #pick(
    variants: readonly string[],
    quantity: number,
    available: number,
    strict: boolean,
    claimed?: ReadonlyMap<string, number>,
  ): Refusal | Admitted {
    const stock = this.ledger.variants();
    const counts: Record<string, number> = {};
    let any = false;
    let fits: string | null = null;
    for (const id of variants) {
      const v = stock.get(id);
      const left = v ? availableOf(v) - (claimed?.get(id) ?? 0) : 0;
      fits ??= left >= quantity ? id : null;
      counts[id] = left;
      if (left > 0) any = true;
    }
    if (fits !== null && (!strict || fits === variants[0])) return { ok: true, variant: fits };
    return { ok: false, code: any ? "INSUFFICIENT_STOCK" : "SOLD_OUT", available, variants: counts };
  }

  /**
   * Fair opening, on the reservation path: a token that joined an entry of the draw gets the
   * entry's answer once it is decided, and waits until then (never decided on arrival). A token
   * sent again asking otherwise (another quantity, or other sizes) is refused, as any replay.
   */
  drawAnswer(request: ReserveRequest, available: number, served = false): Outcome<ReserveAnswer> | undefined {
    if (this.draw.deciding) return undefined;
    const entry = this.draw.entryOfToken(request.nonce);
    if (!entry) return undefined;
    // A line's entry that joined its buyer's own entry (before lines stopped entering draws) is not
    // served by that entry's hold: it is decided afresh.
    if (served && entry.nonce !== request.nonce) return undefined;
    const asked = variantsColumn(request.variants);
    if (entry.quantity !== request.quantity || entry.user_id !== request.userId || (entry.variants ?? null) !== asked) {
      return fail("IDEMPOTENCY_MISMATCH", available);
    }
    if (entry.code === null || entry.position === null || entry.entry_id === null) return fail("DRAW_PENDING");
    return this.drawnOutcome(entry, { entryId: entry.entry_id, position: entry.position }, available);
  }

  /**
   * A decided entry's answer: its hold (as it is now), or the code it was refused with. A refusal of
   * listed sizes says what each had when decided; one decided elsewhere or with the rest (no figures
   * kept): none, for SOLD_OUT, else what each has here now.
   */
  drawnOutcome(
    entry: { opening: number; code: string | null; answer: string | null; variants?: string | null },
    at: { entryId: string; position: number },
    available: number,
  ): Outcome<ReserveAnswer> {
    const draw: DrawPlace = { ...at, entrants: this.draw.entrantCount(entry.opening) };
    if (entry.code === "HELD" && entry.answer) {
      const stored = JSON.parse(entry.answer) as Reservation;
      const row = this.ledger.reservationRow(stored.id);
      return ok({ reservation: row ? this.ledger.toReservation(row) : stored, replayed: true, available, draw });
    }
    const code = (entry.code ?? "BUSY") as StockErrorCode;
    const listed = listedVariants(entry);
    if (!listed || (code !== "SOLD_OUT" && code !== "INSUFFICIENT_STOCK")) return { ok: false, code, available, draw };
    const kept = entry.answer
      ? (JSON.parse(entry.answer) as { variants?: Record<string, number> }).variants
      : undefined;
    const stock = this.ledger.variants();
    const now = (id: string) =>
      code === "SOLD_OUT" ? 0 : Math.max(0, availableOf(stock.get(id) ?? { total: 0, held: 0, sold: 0 }));
    const variants = kept ?? Object.fromEntries(listed.map((id) => [id, now(id)]));
    return { ok: false, code, available, draw, variants };
  }

  /**
   * A reservation while the draw is pending: inside the window, an entry (one per user; a user's
   * other tokens join it); after the window, before the decision, it waits and is then decided on
   * arrival. Either way the edge waits (`DRAW_PENDING`).
   */
  #enterDraw(request: ReserveRequest, sku: SkuRow, now: number): Outcome<ReserveAnswer> {
    const opening = this.draw.open(now);
    if (opening === null) return fail("DRAW_PENDING");
    const { userId, nonce, quantity, tier, variants } = request;
    const entered = this.draw.enter(opening, userId, nonce, quantity, sku.shard, now, tier, variants);
    return entered === "mismatch" ? fail("IDEMPOTENCY_MISMATCH") : fail("DRAW_PENDING");
  }

  /**
   * Reads what a batch's decisions need in two statements, not two per request: the reservations of
   * its nonces (replays) and its users' quotas. Users absent from `user_quota` hold nothing (0). A
   * batch of up to 100 binds each nonce and user (see `bindsEach`), a larger one a JSON array.
   */
  #prefetch(requests: readonly ReserveRequest[]): void {
    const ledger = this.ledger;
    const work = ledger.work;
    ledger.writePending();
    const nonces = requests.map((r) => r.nonce);
    for (const nonce of nonces) work.nonces.set(nonce, null);
    for (const chunk of chunks(nonces)) {
      const priors = (
        bindsEach(chunk.length, 1)
          ? ledger.sql.exec<ReservationRow>(
              `SELECT * FROM reservations WHERE nonce IN (${groups(chunk.length, 1, "?")})`,
              ...chunk,
            )
          : ledger.sql.exec<ReservationRow>(
              "SELECT * FROM reservations WHERE nonce IN (SELECT value FROM json_each(?))",
              JSON.stringify(chunk),
            )
      ).toArray();
      for (const row of priors) if (row.nonce !== null) work.nonces.set(row.nonce, row);
    }
    const users: string[] = [];
    for (const { userId } of requests) {
      if (work.quotas.has(userId)) continue;
      work.quotas.set(userId, 0);
      users.push(userId);
    }
    for (const chunk of chunks(users)) {
      const quotas = (
        bindsEach(chunk.length, 1)
          ? ledger.sql.exec<QuotaRow>(
              `SELECT user_id, active FROM user_quota WHERE user_id IN (${groups(chunk.length, 1, "?")})`,
              ...chunk,
            )
          : ledger.sql.exec<QuotaRow>(
              "SELECT user_id, active FROM user_quota WHERE user_id IN (SELECT value FROM json_each(?))",
              JSON.stringify(chunk),
            )
      ).toArray();
      for (const q of quotas) work.quotas.set(q.user_id, q.active);
    }
  }

  /**
   * Whether a replayed token asks what its reservation was made with: no sizes for a hold of none;
   * for a hold of a size, the same list, in the same order (a hold from before the lists were kept:
   * a list naming the size it took).
   */
  #sameVariants(prior: ReservationRow, asked: readonly string[] | undefined): boolean {
    if (prior.variant == null) return asked === undefined || asked.length === 0;
    const kept =
      prior.listed !== undefined
        ? prior.listed
        : this.ledger.sql
            .exec<{ listed: string }>("SELECT listed FROM hold_lists WHERE reservation_id = ?", prior.id)
            .toArray()[0]?.listed;
    if (kept != null) return kept === variantsColumn(asked);
    return asked?.includes(prior.variant) === true;
  }

  /** The reservation made with `nonce`, if any: from this transaction's working set, else SQLite. */
  #priorOf(nonce: string): ReservationRow | null {
    const work = this.ledger.work;
    const known = work.nonces.get(nonce);
    if (known !== undefined) return known;
    this.ledger.writePending();
    const row = this.ledger.sql.exec<ReservationRow>("SELECT * FROM reservations WHERE nonce = ?", nonce).toArray()[0];
    work.nonces.set(nonce, row ?? null);
    return row ?? null;
  }
}
