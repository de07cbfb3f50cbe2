import { createHash, createHmac } from "node:crypto";
import { userOf } from "../shared/sale-entries";
import { listedVariants, variantsColumn } from "./variants";

/**
 * Fair opening (API.md "Fair opening"): the reservations of the first `openingWindowMs` after a
 * sale's `startsAt` are not decided on arrival but in one random order, fixed by a seed whose hash
 * was published before the window opened.
 *
 * This module keeps a stock object's part of the draw in the object's own SQLite database, so a
 * restart mid-window loses nothing:
 *
 * - `draw`: one row per opening (each early access tier's `startsAt` and the public one, keyed by
 *   that time): the window and, on shard 0 (the SKU's draws), its own seed and seed hash, and whether
 *   it names its entrants by their salted `user` (the sale log was kept when it was made); when
 *   entries closed and when the draw was decided (on a sibling shard: when shard 0 said it was).
 *   Openings are at least one window apart (the catalog refuses closer tiers), so at most one
 *   window is open at a time, and the draws are decided in the order they opened.
 * - `draw_entrants`: one entry per user and opening (a user's many tokens are one entry). A shard
 *   records the entries of its home users; shard 0 also keeps a copy of every shard's entries once
 *   entries close, to order them. Entry ids and positions are written when the draw is ordered.
 * - `draw_tokens`: every token that joined an entry, so a retried token gets the entry's answer.
 *
 * The order (the procedure docs/API.md gives to shoppers): entries sorted by
 * `HMAC-SHA256(key = seed, message = entryId)` in hex, ascending (ties, which would need a hash
 * collision, by entry id); `entryId` = the buyer's `user` on the SKU as the sale log names them, hex
 * SHA-256 of `<salt>:<userId>` (durable-objects/shared/sale-entries.ts), so a guessed user id finds
 * no entry and no place in the log; a draw made with no log kept (or before salted ids) has ids of
 * `<sku>:<userId>`. Positions count from 1. The seed is 64 hex digits and `seedHash` the hex
 * SHA-256 of its UTF-8 text.
 *
 * The storage side runs inside the engine's transactions. The hashes of the order are computed
 * before the deciding transaction, once entries have closed (the set is fixed then): three per
 * entrant, too many to spend in a transaction or on the entry path (bench point `draw_decide`,
 * docs/PERFORMANCE.md).
 */

/** Where a drawn reservation (or a refused entry) came in the draw. */
export interface DrawPlace {
  entryId: string;
  /** 1 for the first entry decided. */
  position: number;
  entrants: number;
}

/** One opening's draw as `GET /api/skus/:sku/draw` lists it (`openings`). */
export interface OpeningInfo {
  opensAt: number;
  closesAt: number;
  seedHash: string | null;
  /** Null until the draw is decided. */
  seed: string | null;
  entrants: number;
  decidedAt: number | null;
  /** What its entry ids hash with the user id: the buyer's salt (its `user` in the log), or the SKU. */
  entryIdPrefix: "salt" | "sku";
  /**
   * Why a closed, undecided draw is not being decided (shard 0 says; null otherwise):
   * `log_key_missing`, a salted draw while the object runs without LOG_SIGNING_KEY.
   */
  stalled: "log_key_missing" | null;
}

/** What `GET /api/skus/:sku/draw` shows (shard 0): the public opening's draw, and every opening's. */
export interface DrawInfo extends OpeningInfo {
  openingWindowMs: number;
  /** Every opening's draw, earliest first (the tiers', then the public one). */
  openings: OpeningInfo[];
}

export interface Entrant {
  userId: string;
  nonce: string;
  quantity: number;
  home: number;
  /** The early access tier that admitted the entry's token (none in the public window). */
  tier?: string | undefined;
  /** Sizes: the entry's variants in order of preference (left out on a SKU without them). */
  variants?: string[] | undefined;
}

export interface DrawnEntry {
  entryId: string;
  position: number;
  quantity: number;
  /** "HELD" or the refusal code. */
  result: string;
}

type DrawRow = {
  window_ms: number;
  opens_at: number;
  seed: string | null;
  seed_hash: string | null;
  /** Shard 0: 1 when it names its entrants by their salted `user` (the log was kept when it was made). */
  salted: number;
  closed_at: number | null;
  decided_at: number | null;
  told: number;
  /** The SKU's entrant count, once entries closed (on a sibling: as shard 0 said). */
  entrants: number | null;
};

type EntrantRow = {
  opening: number;
  entry_id: string | null;
  user_id: string;
  nonce: string;
  quantity: number;
  home: number;
  position: number | null;
  code: string | null;
  answer: string | null;
  tier: string | null;
  variants?: string | null;
};

/** An entrant as its row keeps it (its entry id and position are the decision's). */
function entrantOf(r: EntrantRow): Entrant {
  return {
    userId: r.user_id,
    nonce: r.nonce,
    quantity: r.quantity,
    home: r.home,
    ...(r.tier === null ? {} : { tier: r.tier }),
    ...(r.variants == null ? {} : { variants: listedVariants(r) }),
  };
}

/** Hex SHA-256 of UTF-8 text (the seed's hash, an entry's id). */
export function sha256Hex(text: string): string {
  return createHash("sha256").update(text, "utf8").digest("hex");
}

/**
 * A user's one entry in a SKU's draw, public: their salted `user` under the sale log's salt secret
 * (`saltSecret` of its key), or hex SHA-256 of `<sku>:<userId>` for a draw that is not salted.
 */
export function entryIdOf(sku: string, userId: string, secret: Uint8Array | null = null): string {
  return secret === null ? sha256Hex(`${sku}:${userId}`) : userOf(secret, sku, userId);
}

/** Entry ids in draw order (first decided first): by hex HMAC-SHA256(seed, entryId), ascending. */
export function drawOrder(seed: string, entryIds: readonly string[]): string[] {
  return entryIds
    .map((id) => ({ id, key: createHmac("sha256", seed).update(id, "utf8").digest("hex") }))
    .sort((a, b) => (a.key < b.key ? -1 : a.key > b.key ? 1 : a.id < b.id ? -1 : a.id > b.id ? 1 : 0))
    .map((e) => e.id);
}

/** What shard 0 makes a draw with: its secret seed (revealed at the decision), and whether it is salted. */
export interface NewDraw {
  seed: string;
  salted: boolean;
}

/** An entrant with its place in the draw. */
export type RankedEntrant = Entrant & { entryId: string; position: number };

/**
 * Ranks a closed draw's entrants (all shards') with the seed: the draw's order, computed once. `secret`:
 * the sale log's salt secret for a salted draw, else null.
 */
export function rankEntrants(
  seed: string,
  sku: string,
  entrants: readonly Entrant[],
  secret: Uint8Array | null = null,
): RankedEntrant[] {
  const ids = entrants.map((e) => entryIdOf(sku, e.userId, secret));
  const byId = new Map(ids.map((id, i) => [id, entrants[i] as Entrant]));
  return drawOrder(seed, ids).map((entryId, i) => ({
    ...(byId.get(entryId) as Entrant),
    entryId,
    position: i + 1,
  }));
}

/** The result of a decided entry as stored: an answer object the engine built, opaque here. */
type StoredAnswer = Record<string, unknown>;

/**
 * One stock object's draws, one per opening (an opening is named by its time, `opens_at`). The
 * draw rows are cached in memory, earliest first (they are read on the reservation path, and
 * change only through this class); so is each opening's count of entrants.
 */
export class OpeningDraw {
  readonly #sql: SqlStorage;
  #rows: DrawRow[] = [];
  #installed = false;
  #stale = false;
  /** Entrants per opening recorded here, counted once then kept (a COUNT per GET would read them all). */
  readonly #counts = new Map<number, number>();
  /** True while shard 0 decides: reservations it makes for entrants are not entries again. */
  deciding = false;

  /** Reads nothing: an unconfigured stock object has no tables (engine/schema.ts makes them). */
  constructor(sql: SqlStorage) {
    this.#sql = sql;
  }

  /** Reads the draws: at every start of a configured object, and once its tables are made. */
  install(): void {
    this.#installed = true;
    this.#read();
  }

  /** Reads the draws again (after a transaction that changed them was rolled back). */
  reload(): void {
    if (this.#installed) this.#read();
  }

  /** The tables went with a rolled-back first configure: the object is blank again. */
  uninstall(): void {
    this.#installed = false;
    this.#stale = false;
    this.#rows = [];
    this.#counts.clear();
  }

  /**
   * A transaction was rolled back (the ledger forgot its memory): what this kept may be of it, so
   * the rows are read again when next wanted (not now: the object may be broken).
   */
  invalidate(): void {
    if (this.#installed) this.#stale = true;
  }

  #read(): void {
    this.#rows = this.#sql.exec<DrawRow>("SELECT * FROM draw ORDER BY opens_at").toArray();
    this.#counts.clear();
    this.#stale = false;
  }

  get #all(): DrawRow[] {
    if (this.#stale) this.#read();
    return this.#rows;
  }

  #row(opening: number): DrawRow | undefined {
    return this.#all.find((r) => r.opens_at === opening);
  }

  get windowMs(): number {
    return this.#all[0]?.window_ms ?? 0;
  }

  /**
   * Applies a SKU's `openingWindowMs` and its openings (the public `startsAt` and the tiers'), after
   * a configure. Returns false, changing nothing, when the change would resize a window that already
   * opened, move or drop an opening whose window opened and whose draw is not decided yet, or open
   * the public one now or in the past (its seed hash must be public before it opens). A decided
   * draw is history: its row stays as it was decided, and its tier may move (a later opening gets a
   * draw of its own) or go. A tier that opened before its window was set gets no draw (it had no
   * seed hash published): its buyers were decided on arrival. `newDraw` gives shard 0 its draws'
   * seeds; without it (a sibling) nothing is refused, and the openings added are those still ahead
   * and those shard 0 has not decided (`undecided`): a sibling told of a window after it opened
   * enters its arrivals in the draw rather than holding them on arrival.
   */
  configure(
    windowMs: number | undefined,
    startsAt: number | null,
    tierStarts: readonly number[],
    now: number,
    newDraw: (() => NewDraw) | null,
    undecided: readonly number[] = [],
  ): boolean {
    const rows = this.#all;
    const wanted = windowMs ?? rows[0]?.window_ms ?? 0;
    const openings = new Set(startsAt === null ? tierStarts : [...tierStarts, startsAt]);
    // Shard 0 judges a change of the openings. A sibling takes what shard 0 decided: its refusal would
    // leave the change half made (a shard new to the SKU after an opening has no row for it).
    const judge = newDraw !== null;
    // Opened: each window is what it was (a later PUT that repeats it, or leaves it out, is fine),
    // and its opening stays until its draw is decided.
    for (const row of judge ? rows : []) {
      if (now < row.opens_at) continue;
      if (wanted !== row.window_ms || (!openings.has(row.opens_at) && row.decided_at === null)) return false;
    }
    if (judge && wanted > 0 && (startsAt === null || (now >= startsAt && !this.#row(startsAt)))) return false;
    // An opening moved before it opens keeps its row, and so the seed hash already published. A
    // sibling also adds an opened one shard 0 still draws: its copy of the settings came late.
    const drawing = new Set(judge ? [] : undecided);
    const added =
      wanted === 0
        ? []
        : [...openings].filter((o) => (o > now || drawing.has(o)) && !this.#row(o)).sort((a, b) => a - b);
    for (const row of rows) {
      if (now >= row.opens_at) continue;
      if (wanted === 0 || !openings.has(row.opens_at)) {
        const to = added.shift();
        if (to === undefined) this.#sql.exec("DELETE FROM draw WHERE opens_at = ?", row.opens_at);
        else this.#sql.exec("UPDATE draw SET opens_at = ?, window_ms = ? WHERE opens_at = ?", to, wanted, row.opens_at);
      } else if (row.window_ms !== wanted) {
        this.#sql.exec("UPDATE draw SET window_ms = ? WHERE opens_at = ?", wanted, row.opens_at);
      }
    }
    if (wanted > 0) {
      for (const opening of added) {
        const made = newDraw?.() ?? null;
        this.#sql.exec(
          "INSERT INTO draw (opens_at, window_ms, seed, seed_hash, salted) VALUES (?, ?, ?, ?, ?)",
          opening,
          wanted,
          made?.seed ?? null,
          made === null ? null : sha256Hex(made.seed),
          made?.salted ? 1 : 0,
        );
      }
    }
    this.#read();
    return true;
  }

  /**
   * Whether reservations at `now` are not decided on arrival: a window opened and its draw is not
   * decided yet (after its close, they wait for the decision, then go on arrival or to the next draw).
   */
  pending(now: number): boolean {
    return !this.deciding && this.#all.some((r) => r.decided_at === null && now >= r.opens_at);
  }

  /** The opening whose entries are open at `now` (its window, entries not closed), if any. */
  open(now: number): number | null {
    if (this.deciding) return null;
    const row = this.#all.find((r) => now >= r.opens_at && now < r.opens_at + r.window_ms);
    return row && row.closed_at === null && row.decided_at === null ? row.opens_at : null;
  }

  /** The close of the earliest undecided window (the last window's once all are decided). */
  closesAt(): number | null {
    const row = this.#all.find((r) => r.decided_at === null) ?? this.#all.at(-1);
    return row ? row.opens_at + row.window_ms : null;
  }

  /** The close of the last window opened by `now` (a waiting request's draw, or the one before it). */
  lastCloseBy(now: number): number | null {
    const row = this.#all.findLast((r) => r.opens_at <= now);
    return row ? row.opens_at + row.window_ms : null;
  }

  /** The earliest opening whose window closed by `now` and whose draw is not decided. */
  dueOpening(now: number): number | null {
    const row = this.#all.find((r) => r.decided_at === null);
    return row && now >= row.opens_at + row.window_ms ? row.opens_at : null;
  }

  /** Whether the opening at `opensAt` has a draw whose window opened by `now` and which is not decided. */
  drawing(opensAt: number, now: number): boolean {
    const row = this.#row(opensAt);
    return row !== undefined && row.decided_at === null && now >= row.opens_at;
  }

  /** The earliest undecided opening, if any. */
  undecided(): number | null {
    return this.#all.find((r) => r.decided_at === null)?.opens_at ?? null;
  }

  /** Shard 0: every opening whose draw is not decided, earliest first (its siblings' settings carry them). */
  undecidedOpenings(): number[] {
    return this.#all.filter((r) => r.decided_at === null).map((r) => r.opens_at);
  }

  decided(opening: number): boolean {
    return this.#row(opening)?.decided_at != null;
  }

  /** The entry a token joined, if any. */
  entryOfToken(nonce: string): EntrantRow | undefined {
    if (this.#all.length === 0) return undefined;
    return this.#sql
      .exec<EntrantRow>(
        `SELECT e.* FROM draw_tokens t JOIN draw_entrants e ON e.opening = t.opening AND e.user_id = t.user_id
         WHERE t.nonce = ?`,
        nonce,
      )
      .toArray()[0];
  }

  /**
   * Records a token as (part of) its user's entry in an opening's draw. A user's first token makes
   * the entry; later ones join it. Returns "mismatch" when a later token asks another quantity.
   */
  enter(
    opening: number,
    userId: string,
    nonce: string,
    quantity: number,
    home: number,
    now: number,
    tier?: string,
    variants?: readonly string[],
  ): "entered" | "mismatch" {
    const listed = variantsColumn(variants);
    const existing = this.#sql
      .exec<{ quantity: number; variants: string | null }>(
        "SELECT quantity, variants FROM draw_entrants WHERE opening = ? AND user_id = ?",
        opening,
        userId,
      )
      .toArray()[0];
    // A user's later token joins the entry only asking what it asks (quantity, and sizes in order).
    if (existing && (existing.quantity !== quantity || existing.variants !== listed)) return "mismatch";
    if (!existing) {
      const count = this.#countOf(opening);
      this.#sql.exec(
        "INSERT INTO draw_entrants (opening, user_id, nonce, quantity, home, entered_at, tier, variants) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
        opening,
        userId,
        nonce,
        quantity,
        home,
        now,
        tier ?? null,
        listed,
      );
      this.#counts.set(opening, count + 1);
    }
    this.#sql.exec(
      "INSERT OR IGNORE INTO draw_tokens (nonce, opening, user_id) VALUES (?, ?, ?)",
      nonce,
      opening,
      userId,
    );
    return "entered";
  }

  /**
   * Closes an opening's entries (idempotent) and returns this shard's own entrants of it. A sibling
   * not told of the opening yet records it closed (of `windowMs`): a copy of the settings that comes
   * after this adds no row, so it can neither take entries shard 0 no longer collects nor wait for
   * a draw shard 0 already told over.
   */
  close(opening: number, now: number, shard: number, windowMs = this.windowMs): Entrant[] {
    const row = this.#row(opening);
    if (row === undefined && windowMs > 0) {
      this.#sql.exec("INSERT INTO draw (opens_at, window_ms, closed_at) VALUES (?, ?, ?)", opening, windowMs, now);
      this.#read();
    } else if (row?.closed_at === null) {
      this.#sql.exec("UPDATE draw SET closed_at = ? WHERE opens_at = ?", now, opening);
      this.#read();
    }
    return this.#sql
      .exec<EntrantRow>("SELECT * FROM draw_entrants WHERE opening = ? AND home = ?", opening, shard)
      .toArray()
      .map(entrantOf);
  }

  /** An opening's window (shard 0 tells a sibling it closes, see {@link close}). */
  windowOf(opening: number): number {
    return this.#row(opening)?.window_ms ?? this.windowMs;
  }

  /** Shard 0: the seed an opening's draw is ordered with (secret until the decision reveals it). */
  seedForDecision(opening: number): string | null {
    return this.#row(opening)?.seed ?? null;
  }

  /** Shard 0: whether an opening's draw names its entrants by their salted `user` (the log's). */
  saltedFor(opening: number): boolean {
    return this.#row(opening)?.salted === 1;
  }

  /** Shard 0: the seed hash an opening's draw committed to (its holds name it in their events). */
  seedHashOf(opening: number): string | null {
    return this.#row(opening)?.seed_hash ?? null;
  }

  /** Shard 0: whether an opening's order is written (its entrants counted, ids and positions set). */
  placed(opening: number): boolean {
    return this.#row(opening)?.entrants != null;
  }

  /**
   * Shard 0: an opening's order as written (every shard's entrants, with their entry ids and
   * positions), or null before it is: once written it is the draw's, kept by every retry of its decision.
   */
  placedOrder(opening: number): RankedEntrant[] | null {
    if (!this.placed(opening)) return null;
    return this.#sql
      .exec<EntrantRow>(
        "SELECT * FROM draw_entrants WHERE opening = ? AND position IS NOT NULL ORDER BY position",
        opening,
      )
      .toArray()
      .map((r) => ({ ...entrantOf(r), entryId: r.entry_id as string, position: r.position as number }));
  }

  /**
   * Shard 0: writes an opening's order (entry ids and positions; the siblings' entrants are copied in
   * first). Idempotent: the same closed set and seed give the same order. Then the entrants in
   * order, with what was recorded for them so far.
   */
  place(opening: number, ranked: readonly RankedEntrant[], now: number): (RankedEntrant & { code: string | null })[] {
    for (const e of ranked) {
      this.#sql.exec(
        `INSERT INTO draw_entrants (opening, user_id, entry_id, nonce, quantity, home, entered_at, position, tier, variants)
         VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
         ON CONFLICT (opening, user_id) DO UPDATE SET entry_id = excluded.entry_id, position = excluded.position`,
        opening,
        e.userId,
        e.entryId,
        e.nonce,
        e.quantity,
        e.home,
        now,
        e.position,
        e.tier ?? null,
        variantsColumn(e.variants),
      );
    }
    this.#sql.exec("UPDATE draw SET entrants = ? WHERE opens_at = ?", ranked.length, opening);
    this.#read();
    const codes = new Map(
      this.#sql
        .exec<{ user_id: string; code: string | null }>(
          "SELECT user_id, code FROM draw_entrants WHERE opening = ?",
          opening,
        )
        .toArray()
        .map((r) => [r.user_id, r.code]),
    );
    return ranked.map((e) => ({ ...e, code: codes.get(e.userId) ?? null }));
  }

  /** Records an entry's result (and, on its home shard, the answer its tokens get). */
  recordDecision(
    opening: number,
    userId: string,
    code: string,
    place: DrawPlace,
    answer: StoredAnswer | null,
    onlyOpen = false,
  ): void {
    const row = this.#row(opening);
    if (row && row.entrants !== place.entrants) {
      this.#sql.exec("UPDATE draw SET entrants = ? WHERE opens_at = ?", place.entrants, opening);
      this.#read();
    }
    this.#sql.exec(
      `UPDATE draw_entrants SET code = ?, entry_id = ?, position = ?, answer = ?
       WHERE opening = ? AND user_id = ?${onlyOpen ? " AND code IS NULL" : ""}`,
      code,
      place.entryId,
      place.position,
      answer === null ? null : JSON.stringify(answer),
      opening,
      userId,
    );
  }

  /** Shard 0: every ordered entry of an opening without a result gets `code` (the stock ran out). */
  decideRest(opening: number, code: string): void {
    this.#sql.exec(
      "UPDATE draw_entrants SET code = ? WHERE opening = ? AND code IS NULL AND position IS NOT NULL",
      code,
      opening,
    );
  }

  /** A user's entry in an opening's draw, as recorded here. */
  entrantOf(opening: number, userId: string): EntrantRow | undefined {
    return this.#sql
      .exec<EntrantRow>("SELECT * FROM draw_entrants WHERE opening = ? AND user_id = ?", opening, userId)
      .toArray()[0];
  }

  /** Marks an opening's draw decided (shard 0, with the seed revealed) or, on a sibling, over. */
  finish(opening: number, now: number): void {
    if (this.#row(opening)?.decided_at === null) {
      this.#sql.exec(
        "UPDATE draw SET decided_at = ?, closed_at = coalesce(closed_at, ?) WHERE opens_at = ?",
        now,
        now,
        opening,
      );
      this.#read();
    }
  }

  /**
   * A shard outside the SKU's count (a cut left it out): every draw whose window opened by `now` and
   * is not decided is over here. No draw closes or decides on such a shard (shard 0 closes and tells
   * the shards of the count only), and none took an entry there (it was fenced from before the
   * opening until the cut committed; after, a token of the old count is refused): kept, it would stay
   * pending for good. Openings still ahead are the configure's (a cut drops them, a grow keeps them).
   */
  retire(now: number): void {
    if (!this.#all.some((r) => r.decided_at === null && now >= r.opens_at)) return;
    this.#sql.exec(
      "UPDATE draw SET decided_at = ?, closed_at = coalesce(closed_at, ?) WHERE decided_at IS NULL AND opens_at <= ?",
      now,
      now,
      now,
    );
    this.#read();
  }

  /** Shard 0: every sibling was told this opening's draw is over. */
  markTold(opening: number): void {
    this.#sql.exec("UPDATE draw SET told = 1 WHERE opens_at = ?", opening);
    this.#read();
  }

  /** Shard 0: the decided openings whose siblings were not all told yet, earliest first. */
  untold(): number[] {
    return this.#all.filter((r) => r.decided_at !== null && r.told !== 1).map((r) => r.opens_at);
  }

  /**
   * The draws as `GET /api/skus/:sku/draw` shows them (shard 0), or null without a window: the
   * public opening's (the last: every tier opens before it) at the top, every opening's in `openings`.
   */
  info(): DrawInfo | null {
    const last = this.#all.at(-1);
    if (!last) return null;
    const openings = this.#all.map((row) => ({
      opensAt: row.opens_at,
      closesAt: row.opens_at + row.window_ms,
      seedHash: row.seed_hash,
      seed: row.decided_at === null ? null : row.seed,
      entrants: this.entrantCount(row.opens_at),
      decidedAt: row.decided_at,
      entryIdPrefix: row.salted === 1 ? ("salt" as const) : ("sku" as const),
      stalled: null,
    }));
    return { openingWindowMs: last.window_ms, ...(openings.at(-1) as OpeningInfo), openings };
  }

  /**
   * Decided entries of the public opening's draw (the last) in draw order after position `after`, a
   * page at a time (shard 0, after the decision). A keyset page through the position index: a page
   * deep in the draw reads what the first page reads (an OFFSET would read every row it skips).
   */
  entries(after: number, limit: number, opensAt?: number): DrawnEntry[] {
    // The public opening's (the last), or the one that opens at `opensAt` (a tier's: API.md v1.4).
    const last = opensAt === undefined ? this.#all.at(-1) : this.#all.find((o) => o.opens_at === opensAt);
    if (!last || last.decided_at === null) return [];
    return this.#sql
      .exec<{ entry_id: string; position: number; quantity: number; code: string | null }>(
        `SELECT entry_id, position, quantity, code FROM draw_entrants
         WHERE opening = ? AND position > ? ORDER BY position LIMIT ?`,
        last.opens_at,
        after,
        limit,
      )
      .toArray()
      .map((r) => ({ entryId: r.entry_id, position: r.position, quantity: r.quantity, result: r.code ?? "PENDING" }));
  }

  /** The draw place of a reservation made for an entry (a replayed token shows it again). */
  placeOfNonce(nonce: string): DrawPlace | null {
    if (this.#all.length === 0) return null;
    const row = this.#sql
      .exec<{ opening: number; entry_id: string | null; position: number | null }>(
        "SELECT opening, entry_id, position FROM draw_entrants WHERE nonce = ? AND position IS NOT NULL",
        nonce,
      )
      .toArray()[0];
    if (!row || row.position === null || row.entry_id === null) return null;
    return { entryId: row.entry_id, position: row.position, entrants: this.entrantCount(row.opening) };
  }

  /** An opening's entrants: as ordered once entries closed, else those this shard has so far. */
  entrantCount(opening: number): number {
    const row = this.#row(opening);
    if (row?.entrants != null) return row.entrants;
    return this.#countOf(opening);
  }

  /**
   * The openings whose window opened by `now` and whose entrants are not counted yet (shard 0 counts
   * them when it orders the draw): until then each shard holds its own home users' entries.
   */
  uncounted(now: number): number[] {
    return this.#all.filter((r) => r.opens_at <= now && r.entrants === null).map((r) => r.opens_at);
  }

  /** Entries recorded on this shard (a sibling's: its home users'; they reach shard 0 when entries close). */
  entriesHere(opening: number): number {
    return this.#countOf(opening);
  }

  #countOf(opening: number): number {
    if (this.#stale) this.#read();
    const known = this.#counts.get(opening);
    if (known !== undefined) return known;
    const n = this.#sql
      .exec<{ n: number }>("SELECT COUNT(*) AS n FROM draw_entrants WHERE opening = ?", opening)
      .one().n;
    this.#counts.set(opening, n);
    return n;
  }
}
