import { LAZY_EXPIRY_BATCH, type Ledger } from "./ledger";
import type { OpeningDraw } from "./opening-draw";
import { availableOf, fail, notOnSale, type Outcome, ok, overLimit, rowOnSale, type SkuRow } from "./types";
import { listedVariants, variantsColumn, variantsFit } from "./variants";

/**
 * The waitlist: buyers waiting for released units, served first-fit in FIFO order, each within the
 * per-user limit, in the same transaction that released the units (a 1-shard SKU). A sharded SKU
 * keeps its waitlist on shard 0, which serves it across shards (durable-objects/stock/waitlist-server.ts);
 * every shard keeps the waitlist's {@link WaitlistMode} as shard 0 last told it.
 */

export interface WaitlistEntry {
  waitlistId: string;
  /** 1 for the first in line. */
  position: number;
}

/** A waiting buyer's place (`GET /api/skus/:sku/waitlist`), read where the line's order is kept. */
export interface WaitlistPlace {
  waitlistId: string;
  /** 1 for the next in line (FIFO; first fit may serve a smaller entry behind it first). */
  position: number;
  quantity: number;
  /** Units the entries before this one want. */
  unitsAhead: number;
  joinedAt: number;
  /** Sizes: the entry's variants in order of preference (left out on a SKU without them). */
  variants?: string[];
  /**
   * Units the buyer holds themselves now (their live holds, on their home shard; not what they
   * bought): the line's `held` is the SKU's held units less these. Given by `GET` only.
   */
  ownHeld?: number;
}

/** An entry as shard 0 serves it. */
interface WaitingBuyer {
  id: string;
  userId: string;
  quantity: number;
  variants?: string[] | undefined;
}

/** The units one shard's line claims while its sale is not on ({@link Waitlist.claimed}). */
export interface Claimed {
  units: number;
  /** Sizes: by variant. */
  sizes: Map<string, number>;
}

/**
 * The SKU's waitlist as a shard knows it: 0 nobody waits; 1 buyers wait and the SKU's units are
 * theirs (newcomers are refused, they join the waitlist); 2 buyers wait but want more than the SKU
 * has, so newcomers may buy what there is, and freed units are still offered to the waitlist first.
 */
export type WaitlistMode = 0 | 1 | 2;

type EntryRow = { id: string; user_id: string; quantity: number; position: number; variants?: string | null };

export class Waitlist {
  readonly #ledger: Ledger;
  readonly #sql: SqlStorage;
  /** A pending draw's entrants come before the line (fair opening). */
  readonly #draw: OpeningDraw;
  /** Kept in memory (read on the reservation path) and in `waitlist_state`. */
  #mode: WaitlistMode = 0;
  /**
   * Entries waiting, counted once and then kept in step with every insert and delete, so the SKU's
   * state (read on every display and mirror publish) costs no COUNT. Valid while the ledger keeps
   * the same memory row: a rolled-back transaction makes it read the row again, and this count too.
   */
  #count: { n: number; row: object } | undefined;

  constructor(ledger: Ledger, draw: OpeningDraw) {
    this.#ledger = ledger;
    this.#draw = draw;
    this.#sql = ledger.sql;
    if (ledger.configured) this.load();
  }

  /** Reads the mode shard 0 last told this shard. */
  load(): void {
    const row = this.#sql.exec<{ mode: WaitlistMode }>("SELECT mode FROM waitlist_state WHERE id = 1").toArray()[0];
    this.#mode = row?.mode ?? 0;
  }

  get mode(): WaitlistMode {
    return this.#mode;
  }

  /** Buyers wait and the SKU's units are theirs: newcomers are answered SOLD_OUT. */
  get ahead(): boolean {
    return this.#mode === 1;
  }

  /** Buyers wait: units freed here are offered to the waitlist (shard 0 serves it). */
  get waiting(): boolean {
    return this.#mode !== 0;
  }

  /** Shard 0 tells every shard what the SKU's waitlist is now. */
  setMode(mode: WaitlistMode): void {
    this.#sql.exec(
      "INSERT INTO waitlist_state (id, mode) VALUES (1, ?) ON CONFLICT (id) DO UPDATE SET mode = excluded.mode",
      mode,
    );
    this.#mode = mode;
  }

  /**
   * Puts a buyer on the waitlist, in a transaction of its own. Only while nothing is available for
   * newcomers (else `STOCK_AVAILABLE`), only within the per-user limit; joining twice keeps the first
   * place. A sharded SKU's waitlist (on shard 0) is joined given the SKU's available units and the
   * buyer's count on their home shard (`homeQuota`, read there).
   */
  join(
    userId: string,
    quantity: number,
    now: number,
    skuAvailable?: number,
    homeQuota?: number,
    variants?: readonly string[],
  ): Outcome<WaitlistEntry> {
    return this.#ledger.run(() => {
      this.#ledger.expireDue(now, LAZY_EXPIRY_BATCH);
      return this.#join(userId, quantity, now, skuAvailable, homeQuota, variants);
    });
  }

  #join(
    userId: string,
    quantity: number,
    now: number,
    skuAvailable?: number,
    homeQuota?: number,
    variants?: readonly string[],
  ) {
    const ledger = this.#ledger;
    const sku = ledger.row();
    if (!sku || sku.status === "archived") return fail<WaitlistEntry>("SKU_NOT_FOUND");
    if (!variantsFit(ledger.variants(), variants)) return fail<WaitlistEntry>("VARIANT_INVALID");
    if (!rowOnSale(sku, now)) return notOnSale<WaitlistEntry>(sku);
    if (ledger.fenced()) return fail<WaitlistEntry>("BUSY");
    if (variants && variants.length > 0) {
      // Sizes: only when none of the listed variants has the quantity (`skuAvailable`: the best of
      // them over a sharded SKU's shards, as the edge read it).
      const best =
        sku.shards > 1
          ? (skuAvailable ?? 0)
          : Math.max(...variants.map((id) => availableOf(ledger.variants().get(id) ?? { total: 0, held: 0, sold: 0 })));
      if (best >= quantity) return fail<WaitlistEntry>("STOCK_AVAILABLE", best);
    } else {
      const available = sku.shards > 1 ? (this.#mode === 1 ? 0 : (skuAvailable ?? 0)) : availableOf(sku);
      if (available > 0) return fail<WaitlistEntry>("STOCK_AVAILABLE");
    }
    const existing = this.#sql
      .exec<{ id: string; position: number }>("SELECT id, position FROM waitlist WHERE user_id = ?", userId)
      .toArray()[0];
    if (existing) return ok({ waitlistId: existing.id, position: this.#positionOf(existing.position) });
    const held = homeQuota ?? ledger.quota(userId);
    if (held + quantity > sku.per_user_limit) return overLimit<WaitlistEntry>(sku, held);
    const row = this.#sql
      .exec<{ id: string; position: number }>(
        "INSERT INTO waitlist (id, user_id, quantity, created_at, variants) VALUES (?, ?, ?, ?, ?) RETURNING id, position",
        `w.${ledger.newId().replaceAll("-", "")}`,
        userId,
        quantity,
        now,
        variantsColumn(variants),
      )
      .one();
    this.#changed(1);
    return ok({ waitlistId: row.id, position: this.#positionOf(row.position) });
  }

  /**
   * Hands available units to waiting buyers, first fit in FIFO order, each within the per-user
   * limit, in the caller's transaction (the one that released the units). Entries lapse with the
   * sale; while the sale is paused or not started they wait, and while a draw is pending the units
   * are its entrants' (the decision serves the line from what it leaves).
   */
  fill(now: number): void {
    const ledger = this.#ledger;
    const sku = ledger.row();
    if (!sku) return;
    if (sku.ends_at !== null && now >= sku.ends_at) {
      this.#lapse();
      return;
    }
    if (sku.shards > 1) return; // shard 0 serves a sharded SKU's waitlist across shards
    if (!rowOnSale(sku, now) || this.#draw.pending(now)) return;
    if (ledger.variants().size > 0) {
      this.#fillSizes(now);
      return;
    }
    let available = availableOf(sku);
    // Per quantity, the position up to which entries were found over their limit (skipped this time).
    const skipped = new Map<number, number>();
    for (let entry = this.#next(sku, available, skipped); entry; entry = this.#next(sku, available, skipped)) {
      this.leave(entry.id);
      ledger.hold(ledger.requireRow(), entry.user_id, entry.quantity, null, now);
      available -= entry.quantity;
    }
  }

  /**
   * One shard, while its sale is not on (a pass serves at once otherwise) and not over: the units the
   * line's entries would take now, first fit within their buyers' limits as a pass takes them, in
   * all and by size. Those units are the line's, as shard 0's mode 1 makes them on a sharded SKU: a
   * late payment or an early access tier's hold finds them gone; the rest are anyone's. Null when
   * the line claims none.
   */
  claimed(now: number): Claimed | null {
    if (this.length() === 0) return null;
    const sku = this.#ledger.row();
    if (!sku || sku.shards > 1 || rowOnSale(sku, now) || (sku.ends_at !== null && now >= sku.ends_at)) return null;
    const stock = this.#ledger.variants();
    const claimed: Claimed = { units: 0, sizes: new Map() };
    if (stock.size === 0) {
      const skipped = new Map<number, number>();
      for (
        let left = availableOf(sku), entry = this.#next(sku, left, skipped);
        entry;
        entry = this.#next(sku, left, skipped)
      ) {
        claimed.units += entry.quantity;
        left -= entry.quantity;
        skipped.set(entry.quantity, entry.position); // taken: the next of its quantity is after it
      }
    } else {
      const left = new Map([...stock].map(([id, v]) => [id, availableOf(v)]));
      for (const entry of this.#rows()) {
        const size = this.#sizeFor(entry, (id) => left.get(id) ?? 0, sku);
        if (size === undefined) continue;
        left.set(size, (left.get(size) ?? 0) - entry.quantity);
        claimed.sizes.set(size, (claimed.sizes.get(size) ?? 0) + entry.quantity);
        claimed.units += entry.quantity;
      }
    }
    return claimed.units === 0 ? null : claimed;
  }

  /** The entry a pass serves next from `available` units: the longest-waiting that fits, within its buyer's limit. */
  #next(sku: SkuRow, available: number, skipped: Map<number, number>): EntryRow | undefined {
    for (;;) {
      const entry = this.#firstThatFits(available, skipped);
      if (!entry || this.#ledger.quota(entry.user_id) + entry.quantity <= sku.per_user_limit) return entry;
      skipped.set(entry.quantity, entry.position);
    }
  }

  /**
   * Sizes: entries in line order, each taking its first listed variant with its quantity (first fit),
   * within the limit. The line is walked until no variant has a unit left (each entry's variants are
   * its own, so no index says which entries fit).
   */
  #fillSizes(now: number): void {
    const ledger = this.#ledger;
    const stock = ledger.variants();
    const left = () => [...stock.values()].some((v) => availableOf(v) > 0);
    if (!left()) return;
    const availableIn = (id: string) => {
      const v = stock.get(id);
      return v ? availableOf(v) : 0;
    };
    const sku = ledger.requireRow();
    for (const entry of this.#rows()) {
      const fits = this.#sizeFor(entry, availableIn, sku);
      if (fits === undefined) continue;
      this.leave(entry.id);
      ledger.hold(ledger.requireRow(), entry.user_id, entry.quantity, null, now, undefined, fits);
      if (!left()) return;
    }
  }

  /** Every entry, first in line first (sizes: each entry's variants are its own, so no index says which fit). */
  #rows(): EntryRow[] {
    return this.#sql
      .exec<EntryRow>("SELECT id, user_id, quantity, position, variants FROM waitlist ORDER BY position")
      .toArray();
  }

  /** Sizes: the first of the entry's variants with its quantity available, if its buyer is within the limit. */
  #sizeFor(entry: EntryRow, available: (variant: string) => number, sku: SkuRow): string | undefined {
    if (this.#ledger.quota(entry.user_id) + entry.quantity > sku.per_user_limit) return undefined;
    return (listedVariants(entry) ?? []).find((id) => available(id) >= entry.quantity);
  }

  /**
   * The longest-waiting entry whose quantity fits in `available`, read through the (quantity,
   * position) index: one seek per distinct quantity that fits (bounded by the per-user limit), never
   * the whole waitlist, so entries that cannot fit cost nothing however many wait.
   */
  #firstThatFits(available: number, skipped: ReadonlyMap<number, number>): EntryRow | undefined {
    let first: EntryRow | undefined;
    for (let quantity = 0; ; ) {
      const next = this.#sql
        .exec<{ q: number | null }>(
          "SELECT MIN(quantity) AS q FROM waitlist WHERE quantity > ? AND quantity <= ?",
          quantity,
          available,
        )
        .one().q;
      if (next === null) return first;
      quantity = next;
      const head = this.#sql
        .exec<EntryRow>(
          "SELECT id, user_id, quantity, position FROM waitlist WHERE quantity = ? AND position > ? ORDER BY position LIMIT 1",
          quantity,
          skipped.get(quantity) ?? 0,
        )
        .toArray()[0];
      if (head && (!first || head.position < first.position)) first = head;
    }
  }

  /** The waitlist, first in line first (shard 0 of a sharded SKU). Lapses it when the sale has ended. */
  entries(now: number): WaitingBuyer[] {
    const sku = this.#ledger.row();
    if (!sku) return [];
    if (sku.ends_at !== null && now >= sku.ends_at) this.#ledger.run(() => this.#lapse());
    return this.#sql
      .exec<{ id: string; user_id: string; quantity: number; variants: string | null }>(
        "SELECT id, user_id, quantity, variants FROM waitlist ORDER BY position",
      )
      .toArray()
      .map((r) => ({ id: r.id, userId: r.user_id, quantity: r.quantity, variants: listedVariants(r) }));
  }

  /** The SKU is archived: nobody is ever served, so nobody is left waiting (and newcomers are not held off). */
  clear(): void {
    this.#lapse();
    this.setMode(0);
  }

  /** An entry served (its hold made) or left: off the waitlist, in the caller's transaction. */
  leave(entryId: string): void {
    const gone = this.#sql.exec("DELETE FROM waitlist WHERE id = ? RETURNING 1", entryId).toArray().length;
    if (gone > 0) this.#changed(-gone);
  }

  /** Shard 0 of a sharded SKU: an entry its pass served, in a transaction of its own. */
  served(entryId: string): void {
    this.#ledger.run(() => this.leave(entryId));
  }

  /** Whether an entry still waits (shard 0 checks before it serves one: its buyer may have left). */
  has(entryId: string): boolean {
    return this.#sql.exec("SELECT 1 FROM waitlist WHERE id = ?", entryId).toArray().length > 0;
  }

  /**
   * The buyer's place in the line, or null when they do not wait (the sale ended: entries lapse).
   * Two reads through the primary key: the entry, then one range of the rows before it (a COUNT and
   * a SUM over them), so the cost grows with the entries ahead, never with those behind.
   */
  place(userId: string, now: number): WaitlistPlace | null {
    const sku = this.#ledger.row();
    if (!sku || (sku.ends_at !== null && now >= sku.ends_at)) return null;
    const entry = this.#sql
      .exec<{ id: string; position: number; quantity: number; created_at: number; variants: string | null }>(
        "SELECT id, position, quantity, created_at, variants FROM waitlist WHERE user_id = ?",
        userId,
      )
      .toArray()[0];
    if (!entry) return null;
    const ahead = this.#sql
      .exec<{ n: number; units: number }>(
        "SELECT COUNT(*) AS n, coalesce(SUM(quantity), 0) AS units FROM waitlist WHERE position < ?",
        entry.position,
      )
      .one();
    const variants = listedVariants(entry);
    const place: WaitlistPlace = {
      waitlistId: entry.id,
      position: ahead.n + 1,
      quantity: entry.quantity,
      unitsAhead: variants ? this.#unitsAheadFor(entry.position, variants) : ahead.units,
      joinedAt: entry.created_at,
    };
    if (variants) place.variants = variants;
    return place;
  }

  /**
   * The buyer leaves the line, in a transaction of its own: their entry, or null when they do not
   * wait (already served: the hold stands). Everyone behind moves up one place.
   */
  leaveLine(userId: string, now: number): WaitlistPlace | null {
    return this.#ledger.run(() => {
      const place = this.place(userId, now);
      if (place) this.leave(place.waitlistId);
      return place;
    });
  }

  /** Sizes: units wanted by the entries ahead that list any of the same variants (they compete for them). */
  #unitsAheadFor(position: number, variants: readonly string[]): number {
    const mine = new Set(variants);
    let units = 0;
    const rows = this.#sql.exec<{ quantity: number; variants: string | null }>(
      "SELECT quantity, variants FROM waitlist WHERE position < ?",
      position,
    );
    for (const row of rows) if (listedVariants(row)?.some((id) => mine.has(id))) units += row.quantity;
    return units;
  }

  /**
   * When the line next needs a pass that no release starts: the sale's start (units freed before it
   * wait for it) or its end (the line lapses, and a sharded SKU's shards stop holding units for it).
   * Null when nobody waits and no shard holds units for the line, or neither time is ahead. Shard 0,
   * which keeps the line, books it.
   */
  turnAt(now: number): number | null {
    const sku = this.#ledger.configured ? this.#ledger.row() : null;
    if (sku?.shard !== 0 || sku.status === "archived" || (this.#mode === 0 && this.length() === 0)) return null;
    // A paused sale starts at no time (its resume serves the line); it ends at its end all the same.
    const times = sku.status === "on_sale" ? [sku.starts_at, sku.ends_at] : [sku.ends_at];
    let next: number | null = null;
    for (const at of times) if (at !== null && at > now && (next === null || at < next)) next = at;
    return next;
  }

  /** The line's turn came (its alarm): a 1-shard SKU serves or lapses it now, in a transaction of its own. */
  take(now: number): void {
    if (this.length() > 0) this.#ledger.run(() => this.fill(now));
  }

  /** Buyers waiting on this shard. */
  length(): number {
    if (!this.#ledger.configured) return 0;
    const row = this.#ledger.row();
    if (!row) return 0;
    if (this.#count?.row !== row) {
      this.#count = { n: this.#sql.exec<{ n: number }>("SELECT COUNT(*) AS n FROM waitlist").one().n, row };
    }
    return this.#count.n;
  }

  /** The line changed: its count, and the shard's seq (the mirror publishes the new `waiting`). */
  #changed(by: number): void {
    const row = this.#ledger.row();
    if (this.#count && this.#count.row === row) this.#count.n += by;
    this.#ledger.bumpSeq();
  }

  /** Every entry lapses (the sale ended) or goes (the SKU is archived). */
  #lapse(): void {
    const gone = this.#sql.exec("DELETE FROM waitlist RETURNING 1").toArray().length;
    if (gone > 0) this.#changed(-gone);
  }

  #positionOf(position: number): number {
    return this.#sql.exec<{ n: number }>("SELECT COUNT(*) AS n FROM waitlist WHERE position <= ?", position).one().n;
  }
}
