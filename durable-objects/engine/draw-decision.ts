import type { Holds } from "./holds";
import { LAZY_EXPIRY_BATCH, type Ledger } from "./ledger";
import type { DrawPlace, Entrant, OpeningDraw, RankedEntrant } from "./opening-draw";
import { availableOf, fail, isShort, type Outcome, ok, type ReserveAnswer, type ReserveRequest } from "./types";
import { listedVariants } from "./variants";
import type { Waitlist } from "./waitlist";

/**
 * The fair opening's decision, on the engine's transaction: the draw (opening-draw.ts) stores entries
 * and their order; this unit closes it, decides each entry in draw order as a reservation of its
 * first token, and records the answers. Shard 0 ranks the entrants with its seed outside any
 * transaction (durable-objects/stock/draw-runner.ts), then calls these steps; every step is idempotent.
 */
export class DrawDecision {
  constructor(
    private readonly ledger: Ledger,
    private readonly draw: OpeningDraw,
    private readonly holds: Holds,
    private readonly waitlist: Waitlist,
  ) {}

  /**
   * A waiting request's draw answer, read without a transaction (SkuStock.awaitDraw): its entry's
   * recorded answer, `DRAW_PENDING` until there is one, or undefined when its token joined no entry.
   * It only reads, so a woken request costs a read, not a transaction.
   */
  answerOf(request: ReserveRequest): Outcome<ReserveAnswer> | undefined {
    const sku = this.ledger.row();
    return sku ? this.holds.drawAnswer(request, availableOf(sku)) : undefined;
  }

  /** The opening whose draw shard 0 must decide now (its window closed, no decision yet), if any. */
  due(now: number): number | null {
    return this.draw.dueOpening(now);
  }

  /**
   * Closes this shard's entries (idempotent: nobody enters after; a sibling not told of the opening
   * yet records it closed, of `windowMs`) and returns them. Shard 0 then
   * ranks all of the SKU's entrants with its seed (`rankEntrants`, outside any transaction).
   */
  close(opening: number, now: number, windowMs?: number): Entrant[] {
    return this.ledger.run(() => this.draw.close(opening, now, this.ledger.requireRow().shard, windowMs));
  }

  /**
   * Decides a one-shard SKU's draw in one transaction, given its entrants ranked by the seed: each
   * is decided in that order as a reservation of its first token (limit, stock, first fit), and the
   * seed is revealed. Once nothing is left, the rest are SOLD_OUT in one statement; then the line is
   * served from what is left. Exactly once: a decided draw is not decided again. Returns the number
   * of entrants decided now.
   */
  decide(opening: number, ranked: readonly RankedEntrant[], now: number): number {
    const ledger = this.ledger;
    return ledger.run(() => {
      if (this.draw.decided(opening)) return 0;
      ledger.expireDue(now, LAZY_EXPIRY_BATCH);
      const order = this.draw.place(opening, ranked, now);
      const seedHash = this.draw.seedHashOf(opening);
      this.#deciding(() => {
        for (const e of order) {
          const sku = ledger.row(); // the memory row: each hold below changes it
          if (!sku || availableOf(sku) === 0) break;
          if (e.code !== null) continue;
          const outcome = this.#hold(seedHash, e.position, () => this.holds.one(e, now, true));
          this.#record(
            opening,
            e.userId,
            { entryId: e.entryId, position: e.position, entrants: order.length },
            outcome,
          );
        }
        this.draw.decideRest(opening, "SOLD_OUT");
        this.draw.finish(opening, now);
      });
      // Units the entrants left (or freed while the draw was pending) go to the line now.
      this.waitlist.fill(now);
      return order.length;
    });
  }

  /** Shard 0 of a sharded SKU: writes the order of all shards' entrants (idempotent). */
  place(opening: number, ranked: readonly RankedEntrant[], now: number): ReturnType<OpeningDraw["place"]> {
    return this.ledger.run(() => this.draw.place(opening, ranked, now));
  }

  /**
   * The home shard of an entry of a sharded SKU's draw, asked by shard 0 in draw order: reserves
   * for the entry (its first token's nonce, its quantity, the user's limit here). A short answer is
   * recorded only when `record` (the caller first pulls stock from siblings and asks again); an
   * entry already decided answers what it got. `seedHash`: the draw's, which only shard 0 keeps
   * (null from a shard 0 that does not send it: the hold then names no draw).
   */
  decideEntry(
    opening: number,
    userId: string,
    place: DrawPlace,
    now: number,
    record: boolean,
    seedHash: string | null = null,
  ): Outcome<ReserveAnswer> {
    const ledger = this.ledger;
    return ledger.run(() => {
      const e = this.draw.entrantOf(opening, userId);
      if (!e) return fail<ReserveAnswer>("RESERVATION_NOT_FOUND");
      const available = availableOf(ledger.requireRow());
      if (e.code !== null) return this.holds.drawnOutcome(e, place, available);
      ledger.expireDue(now, LAZY_EXPIRY_BATCH);
      const variants = listedVariants(e);
      // Once no shard has a unit left, the rest are SOLD_OUT whatever their limit, as on one shard
      // (decide above): with none here, the caller asks the siblings first (a short answer, not recorded).
      const outcome =
        variants === undefined && availableOf(ledger.requireRow()) === 0
          ? fail<ReserveAnswer>("SOLD_OUT")
          : this.#deciding(() =>
              this.#hold(seedHash, place.position, () =>
                this.holds.one(
                  {
                    userId,
                    nonce: e.nonce,
                    quantity: e.quantity,
                    tier: e.tier ?? undefined,
                    variants,
                    pulled: record, // asked again after the pull: a later size this shard has may serve
                  },
                  now,
                  true,
                ),
              ),
            );
      if (!isShort(outcome) || record) this.#record(opening, userId, place, outcome);
      return outcome.ok ? ok({ ...outcome.value, draw: place }) : { ...outcome, draw: place };
    });
  }

  /** Records results decided elsewhere (shard 0's copies; a home shard's entries left SOLD_OUT). */
  record(opening: number, results: readonly { userId: string; place: DrawPlace; code: string }[]): void {
    this.ledger.run(() => {
      for (const r of results) this.draw.recordDecision(opening, r.userId, r.code, r.place, null, true);
    });
  }

  /** The draw is decided (shard 0: the seed is revealed) or, on a sibling, over. */
  finish(opening: number, now: number): void {
    this.ledger.run(() => this.draw.finish(opening, now));
  }

  /** Reservations made while deciding are the draw's own, not new entries of it. */
  #deciding<T>(decide: () => T): T {
    this.draw.deciding = true;
    try {
      return decide();
    } finally {
      this.draw.deciding = false;
    }
  }

  /**
   * The hold `reserve` makes names the draw and its place (its log entry's `draw`), so anyone ties the
   * draw's outcomes to its order. A replayed decision holds nothing new: the hold keeps its first event.
   */
  #hold<T>(seedHash: string | null, position: number, reserve: () => T): T {
    return this.ledger.forDraw(seedHash === null ? undefined : { seedHash, position }, reserve);
  }

  #record(opening: number, userId: string, place: DrawPlace, outcome: Outcome<ReserveAnswer>): void {
    // A hold's reservation; a refusal by sizes keeps what each listed size had (its answer says so).
    const answer = outcome.ok
      ? { ...outcome.value.reservation }
      : outcome.variants
        ? { variants: outcome.variants }
        : null;
    this.draw.recordDecision(opening, userId, outcome.ok ? "HELD" : outcome.code, place, answer);
  }
}
