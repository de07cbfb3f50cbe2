import { createHash } from "node:crypto";

/**
 * Fair opening (API.md "Fair opening"): the reservations of the first `openingWindowMs` after a
 * sale's `startsAt` are not decided on arrival but in one random order, fixed by a seed whose hash
 * was published before the window opened.
 *
 * This module keeps a stock object's part of the draw in the object's own SQLite database, so a
 * restart mid-window loses nothing:
 *
 * - `draw`: the window and, on shard 0 (the SKU's draw), the seed and its hash; when entries closed
 *   and when the draw was decided (on a sibling shard: when shard 0 said it was).
 * - `draw_entrants`: one entry per user (a user's many tokens are one entry). A shard records the
 *   entries of its home users; shard 0 also keeps a copy of every shard's entries once entries
 *   close, to order them. Entry ids and positions are written when the draw is ordered.
 * - `draw_tokens`: every token that joined an entry, so a retried token gets the entry's answer.
 *
 * The order (the procedure docs/API.md gives to shoppers): entries sorted by
 * `HMAC-SHA256(key = seed, message = entryId)` in hex, ascending (ties, which would need a hash
 * collision, by entry id); `entryId` = hex SHA-256 of the UTF-8 text `<sku>:<userId>`; positions
 * count from 1. The seed is 64 hex digits and `seedHash` the hex SHA-256 of its UTF-8 text.
 *
 * The storage side is synchronous (it runs inside the engine's transactions). The hashes of the
 * order are computed with WebCrypto before the deciding transaction, once entries have closed (the
 * set is fixed then): too slow to spend in a transaction or on the entry path (bench point
 * `draw_decide`, docs/PERFORMANCE.md).
 */

/** Where a drawn reservation (or a refused entry) came in the draw. */
export interface DrawPlace {
  entryId: string;
  /** 1 for the first entry decided. */
  position: number;
  entrants: number;
}

/** What `GET /api/skus/:sku/draw` shows (shard 0). */
export interface DrawInfo {
  openingWindowMs: number;
  opensAt: number;
  closesAt: number;
  seedHash: string | null;
  /** Null until the draw is decided. */
  seed: string | null;
  entrants: number;
  decidedAt: number | null;
}

export interface Entrant {
  userId: string;
  nonce: string;
  quantity: number;
  home: number;
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
  closed_at: number | null;
  decided_at: number | null;
  told: number;
  /** The SKU's entrant count, once entries closed (on a sibling: as shard 0 said). */
  entrants: number | null;
};

type EntrantRow = {
  entry_id: string | null;
  user_id: string;
  nonce: string;
  quantity: number;
  home: number;
  position: number | null;
  code: string | null;
  answer: string | null;
};

const utf8 = new TextEncoder();
const hex = (bytes: ArrayBuffer) => Array.from(new Uint8Array(bytes), (b) => b.toString(16).padStart(2, "0")).join("");

/** Hex SHA-256 of UTF-8 text, synchronously (the seed hash, once, inside a transaction). */
function seedHashOf(seed: string): string {
  return createHash("sha256").update(seed, "utf8").digest("hex");
}

/** Hex SHA-256 of UTF-8 text. */
export async function sha256Hex(text: string): Promise<string> {
  return hex(await crypto.subtle.digest("SHA-256", utf8.encode(text)));
}

/** A user's one entry in a SKU's draw: hex SHA-256 of `<sku>:<userId>` (public; the user id is not). */
export function entryIdOf(sku: string, userId: string): Promise<string> {
  return sha256Hex(`${sku}:${userId}`);
}

/** Hashes a long list a slice at a time: 50,000 pending WebCrypto promises at once cost memory for nothing. */
async function inSlices<T, R>(items: readonly T[], each: (item: T) => Promise<R>): Promise<R[]> {
  const out: R[] = [];
  for (let i = 0; i < items.length; i += 1_000) out.push(...(await Promise.all(items.slice(i, i + 1_000).map(each))));
  return out;
}

/** Entry ids in draw order (first decided first): by hex HMAC-SHA256(seed, entryId), ascending. */
export async function drawOrder(seed: string, entryIds: readonly string[]): Promise<string[]> {
  const key = await crypto.subtle.importKey("raw", utf8.encode(seed), { name: "HMAC", hash: "SHA-256" }, false, [
    "sign",
  ]);
  const keyed = await inSlices(entryIds, async (id) => ({
    id,
    key: hex(await crypto.subtle.sign("HMAC", key, utf8.encode(id))),
  }));
  return keyed
    .sort((a, b) => (a.key < b.key ? -1 : a.key > b.key ? 1 : a.id < b.id ? -1 : a.id > b.id ? 1 : 0))
    .map((e) => e.id);
}

/** An entrant with its place in the draw. */
export type RankedEntrant = Entrant & { entryId: string; position: number };

/** Ranks a closed draw's entrants (all shards') with the seed: the draw's order, computed once. */
export async function rankEntrants(seed: string, sku: string, entrants: readonly Entrant[]): Promise<RankedEntrant[]> {
  const ids = await inSlices(entrants, (e) => entryIdOf(sku, e.userId));
  const byId = new Map(ids.map((id, i) => [id, entrants[i] as Entrant]));
  return (await drawOrder(seed, ids)).map((entryId, i) => ({
    ...(byId.get(entryId) as Entrant),
    entryId,
    position: i + 1,
  }));
}

/** The result of a settled entry as stored: an answer object the engine built, opaque here. */
type StoredAnswer = Record<string, unknown>;

/**
 * One stock object's draw state. The settings row is cached in memory (it is read on the
 * reservation path, and changes only through this class).
 */
export class OpeningDraw {
  readonly #sql: SqlStorage;
  #row: DrawRow | null;
  #installed = false;
  /** True while shard 0 decides: reservations it makes for entrants are not entries again. */
  deciding = false;

  /** Reads nothing: an unconfigured stock object has no tables (engine/schema.ts makes them). */
  constructor(sql: SqlStorage) {
    this.#sql = sql;
    this.#row = null;
  }

  /** Reads the draw: at every start of a configured object, and once its tables are made. */
  install(): void {
    this.#installed = true;
    this.#row = this.#read();
  }

  /** Reads the draw again (after a transaction that changed it was rolled back). */
  reload(): void {
    if (this.#row !== null || this.#installed) this.#row = this.#read();
  }

  /** The tables went with a rolled-back first configure: the object is blank again. */
  uninstall(): void {
    this.#installed = false;
    this.#row = null;
  }

  #read(): DrawRow | null {
    return this.#sql.exec<DrawRow>("SELECT * FROM draw WHERE id = 1").toArray()[0] ?? null;
  }

  get windowMs(): number {
    return this.#row?.window_ms ?? 0;
  }

  /**
   * Applies a SKU's `openingWindowMs` and `startsAt` (after a configure). Returns false, changing
   * nothing, when the change would move a window that already opened, or open one now or in the
   * past (its seed hash must be public before it opens). `newSeed` gives shard 0 its secret seed.
   */
  configure(
    windowMs: number | undefined,
    startsAt: number | null,
    now: number,
    newSeed: (() => string) | null,
  ): boolean {
    const row = this.#row;
    const wanted = windowMs ?? row?.window_ms ?? 0;
    if (row && now >= row.opens_at) {
      // Opened: the window is what it was (a later PUT that repeats it, or leaves it out, is fine).
      return wanted === row.window_ms && startsAt === row.opens_at;
    }
    if (wanted === 0) {
      if (row) this.#sql.exec("DELETE FROM draw");
      this.#row = null;
      return true;
    }
    if (startsAt === null || now >= startsAt) return false;
    if (row) {
      this.#sql.exec("UPDATE draw SET window_ms = ?, opens_at = ? WHERE id = 1", wanted, startsAt);
    } else {
      const seed = newSeed?.() ?? null;
      this.#sql.exec(
        "INSERT INTO draw (id, window_ms, opens_at, seed, seed_hash) VALUES (1, ?, ?, ?, ?)",
        wanted,
        startsAt,
        seed,
        seed === null ? null : seedHashOf(seed),
      );
    }
    this.#row = this.#read();
    return true;
  }

  /** Whether reservations at `now` are not decided on arrival: the window opened, no decision yet. */
  pending(now: number): boolean {
    const row = this.#row;
    return row !== null && !this.deciding && row.decided_at === null && now >= row.opens_at;
  }

  /** Whether a reservation at `now` is an entry (the window is open and entries not closed). */
  open(now: number): boolean {
    const row = this.#row;
    return this.pending(now) && row !== null && row.closed_at === null && now < row.opens_at + row.window_ms;
  }

  closesAt(): number | null {
    const row = this.#row;
    return row ? row.opens_at + row.window_ms : null;
  }

  decided(): boolean {
    return this.#row?.decided_at != null;
  }

  /** The entry a token joined, if any. */
  entryOfToken(nonce: string): EntrantRow | undefined {
    if (this.#row === null) return undefined;
    return this.#sql
      .exec<EntrantRow>(
        "SELECT e.* FROM draw_tokens t JOIN draw_entrants e ON e.user_id = t.user_id WHERE t.nonce = ?",
        nonce,
      )
      .toArray()[0];
  }

  /**
   * Records a token as (part of) its user's entry. A user's first token makes the entry; later ones
   * join it. Returns "mismatch" when a later token asks another quantity (one entry, one quantity).
   */
  enter(userId: string, nonce: string, quantity: number, home: number, now: number): "entered" | "mismatch" {
    const existing = this.#sql
      .exec<{ quantity: number }>("SELECT quantity FROM draw_entrants WHERE user_id = ?", userId)
      .toArray()[0];
    if (existing && existing.quantity !== quantity) return "mismatch";
    if (!existing) {
      this.#sql.exec(
        "INSERT INTO draw_entrants (user_id, nonce, quantity, home, entered_at) VALUES (?, ?, ?, ?, ?)",
        userId,
        nonce,
        quantity,
        home,
        now,
      );
    }
    this.#sql.exec("INSERT OR IGNORE INTO draw_tokens (nonce, user_id) VALUES (?, ?)", nonce, userId);
    return "entered";
  }

  /** Closes entries (idempotent) and returns this shard's own entrants. */
  close(now: number, shard: number): Entrant[] {
    if (this.#row && this.#row.closed_at === null) {
      this.#sql.exec("UPDATE draw SET closed_at = ? WHERE id = 1", now);
      this.#row = this.#read();
    }
    return this.#sql
      .exec<EntrantRow>("SELECT * FROM draw_entrants WHERE home = ?", shard)
      .toArray()
      .map((r) => ({ userId: r.user_id, nonce: r.nonce, quantity: r.quantity, home: r.home }));
  }

  /** Shard 0: the seed the draw is ordered with (secret until the decision reveals it). */
  seedForDecision(): string | null {
    return this.#row?.seed ?? null;
  }

  /**
   * Shard 0: writes the draw's order (entry ids and positions; the siblings' entrants are copied in
   * first). Idempotent: the same closed set and seed give the same order. Then the entrants in
   * order, with what was recorded for them so far.
   */
  place(ranked: readonly RankedEntrant[], now: number): (RankedEntrant & { code: string | null })[] {
    for (const e of ranked) {
      this.#sql.exec(
        `INSERT INTO draw_entrants (user_id, entry_id, nonce, quantity, home, entered_at, position)
         VALUES (?, ?, ?, ?, ?, ?, ?)
         ON CONFLICT (user_id) DO UPDATE SET entry_id = excluded.entry_id, position = excluded.position`,
        e.userId,
        e.entryId,
        e.nonce,
        e.quantity,
        e.home,
        now,
        e.position,
      );
    }
    this.#sql.exec("UPDATE draw SET entrants = ? WHERE id = 1", ranked.length);
    this.#row = this.#read();
    const codes = new Map(
      this.#sql
        .exec<{ user_id: string; code: string | null }>("SELECT user_id, code FROM draw_entrants")
        .toArray()
        .map((r) => [r.user_id, r.code]),
    );
    return ranked.map((e) => ({ ...e, code: codes.get(e.userId) ?? null }));
  }

  /** Records an entry's result (and, on its home shard, the answer its tokens get). */
  settle(userId: string, code: string, place: DrawPlace, answer: StoredAnswer | null, onlyOpen = false): void {
    if (this.#row && this.#row.entrants !== place.entrants) {
      this.#sql.exec("UPDATE draw SET entrants = ? WHERE id = 1", place.entrants);
      this.#row = this.#read();
    }
    const position = place.position;
    this.#sql.exec(
      `UPDATE draw_entrants SET code = ?, entry_id = ?, position = ?, answer = ? WHERE user_id = ?${onlyOpen ? " AND code IS NULL" : ""}`,
      code,
      place.entryId,
      position,
      answer === null ? null : JSON.stringify(answer),
      userId,
    );
  }

  /** Shard 0: every ordered entry without a result gets `code` (the stock ran out before them). */
  settleRest(code: string): void {
    this.#sql.exec("UPDATE draw_entrants SET code = ? WHERE code IS NULL AND position IS NOT NULL", code);
  }

  /**
   * A home shard of a sharded SKU learns an entry's position and result from shard 0. The entry is
   * its own (recorded when it entered); nothing else is written.
   */
  entrantOf(userId: string): EntrantRow | undefined {
    return this.#sql.exec<EntrantRow>("SELECT * FROM draw_entrants WHERE user_id = ?", userId).toArray()[0];
  }

  /** Marks the draw decided (shard 0, with the seed revealed) or, on a sibling, over. */
  finish(now: number): void {
    if (this.#row && this.#row.decided_at === null) {
      this.#sql.exec("UPDATE draw SET decided_at = ?, closed_at = coalesce(closed_at, ?) WHERE id = 1", now, now);
      this.#row = this.#read();
    }
  }

  /** Shard 0: every sibling was told the draw is over. */
  markTold(): void {
    this.#sql.exec("UPDATE draw SET told = 1 WHERE id = 1");
    this.#row = this.#read();
  }

  told(): boolean {
    return this.#row?.told === 1;
  }

  /** The draw as `GET /api/skus/:sku/draw` shows it (shard 0), or null without a window. */
  info(): DrawInfo | null {
    const row = this.#row;
    if (!row) return null;
    const entrants = this.entrantCount();
    return {
      openingWindowMs: row.window_ms,
      opensAt: row.opens_at,
      closesAt: row.opens_at + row.window_ms,
      seedHash: row.seed_hash,
      seed: row.decided_at === null ? null : row.seed,
      entrants,
      decidedAt: row.decided_at,
    };
  }

  /**
   * Decided entries in draw order after position `after`, a page at a time (shard 0, after the
   * decision). A keyset page through the position index: a page deep in the draw reads what the
   * first page reads (an OFFSET would read every row it skips).
   */
  entries(after: number, limit: number): DrawnEntry[] {
    if (!this.decided()) return [];
    return this.#sql
      .exec<{ entry_id: string; position: number; quantity: number; code: string | null }>(
        "SELECT entry_id, position, quantity, code FROM draw_entrants WHERE position > ? ORDER BY position LIMIT ?",
        after,
        limit,
      )
      .toArray()
      .map((r) => ({ entryId: r.entry_id, position: r.position, quantity: r.quantity, result: r.code ?? "PENDING" }));
  }

  /** The draw place of a reservation made for an entry (a replayed token shows it again). */
  placeOfNonce(nonce: string): DrawPlace | null {
    if (this.#row === null) return null;
    const row = this.#sql
      .exec<{ entry_id: string | null; position: number | null }>(
        "SELECT entry_id, position FROM draw_entrants WHERE nonce = ? AND position IS NOT NULL",
        nonce,
      )
      .toArray()[0];
    if (!row || row.position === null || row.entry_id === null) return null;
    return { entryId: row.entry_id, position: row.position, entrants: this.entrantCount() };
  }

  /**
   * The SKU's entrants: as ordered once entries closed, else those this shard has so far. Those are
   * counted by the largest rowid (one row read, where COUNT(*) reads them all, on every GET of the
   * draw): until entries close, rows are only ever inserted here, one per entrant, and never deleted.
   */
  entrantCount(): number {
    if (this.#row?.entrants != null) return this.#row.entrants;
    return this.#sql.exec<{ n: number }>("SELECT coalesce(MAX(rowid), 0) AS n FROM draw_entrants").one().n;
  }
}
