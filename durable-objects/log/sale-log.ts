import { DurableObject } from "cloudflare:workers";
import { sha256 } from "@noble/hashes/sha2.js";
import { log } from "../shared/log";
import {
  appendedHashes,
  HASH_SIZE,
  type Hash,
  inclusionProof,
  leafHash,
  TILE_HEIGHT,
  TILE_WIDTH,
  treeHash,
} from "../shared/merkle";
import {
  type ConfigEntry,
  drawRevealEntry,
  entryEventsOf,
  paymentEntry,
  type RefundEntryEvent,
  reservationEntry,
  saltSecret,
  userCommitment,
  userSalt,
} from "../shared/sale-entries";
import { shardName } from "../shared/shard-name";
import { checkpointText, parseSigner, type Signer, signNote } from "../shared/signed-note";

/**
 * One SKU's public log (API.md v1.4 "The verifiable sale"): an RFC 6962 Merkle tree of the SKU's
 * decisions, one object per SKU (named by the SKU), SQLite-backed.
 *
 * Entries arrive from each stock shard's outbox sender (durable-objects/stock/outbox-sender.ts),
 * which appends a flush's events here before the queue takes them and forgets them only once both
 * did: a decision is never acknowledged without its entry durably on its way (the outbox), and an
 * event sent twice (a retried flush, reconciliation's re-emit) is one entry, kept by
 * (reservation, type). Configuration and archive entries come from the catalog's success path.
 *
 * Every table is append-only (triggers refuse UPDATE and DELETE), and a tree head is recorded only
 * larger than the last (a trigger again), from the hashes stored as entries were appended: each
 * checkpoint is consistent with every earlier one, across restarts. The alarm records a new head
 * within LOG_CHECKPOINT_SECONDS of a new entry; a head is signed (Ed25519, LOG_SIGNING_KEY) as a C2SP
 * checkpoint for the origin a reader names (LOG_ORIGIN or the request's host): Ed25519 is
 * deterministic, so one head gives one note per origin, whenever it is signed.
 */

const SCHEMA = [
  `CREATE TABLE IF NOT EXISTS entries (
     idx INTEGER PRIMARY KEY,
     data TEXT NOT NULL,
     reservation TEXT,
     type TEXT NOT NULL,
     dedupe TEXT UNIQUE
   )`,
  `CREATE TABLE IF NOT EXISTS hashes (
     level INTEGER NOT NULL,
     idx INTEGER NOT NULL,
     hash BLOB NOT NULL,
     PRIMARY KEY (level, idx)
   ) WITHOUT ROWID`,
  "CREATE TABLE IF NOT EXISTS checkpoints (size INTEGER PRIMARY KEY, root BLOB NOT NULL, at INTEGER NOT NULL)",
  // The fair opening's draws a configuration committed to, whose reveal the alarm appends once decided.
  "CREATE TABLE IF NOT EXISTS draws (seed_hash TEXT PRIMARY KEY, sku TEXT NOT NULL, closes_at INTEGER NOT NULL)",
  `CREATE TRIGGER IF NOT EXISTS checkpoints_grow BEFORE INSERT ON checkpoints
     WHEN NEW.size <= (SELECT COALESCE(MAX(size), 0) FROM checkpoints)
     BEGIN SELECT RAISE(ABORT, 'a checkpoint only grows'); END`,
  ...["entries", "hashes", "checkpoints"].flatMap((table) => [
    `CREATE TRIGGER IF NOT EXISTS ${table}_no_update BEFORE UPDATE ON ${table}
       BEGIN SELECT RAISE(ABORT, 'the log is append-only'); END`,
    `CREATE TRIGGER IF NOT EXISTS ${table}_no_delete BEFORE DELETE ON ${table}
       BEGIN SELECT RAISE(ABORT, 'the log is append-only'); END`,
  ]),
];

/** An entry on its way in: its JSON text, its reservation and type (the receipts' lookup), its dedupe key. */
interface NewEntry {
  data: string;
  reservation: string | null;
  type: string;
  dedupe: string | null;
}

/**
 * Undone at open, for logs made before: an index of entries by reservation, one more write per
 * entry; the receipts find a reservation's entries by their dedupe keys (`<reservation>:<type>`).
 */
const RETIRED = ["DROP INDEX IF EXISTS entries_by_reservation"];

/** A recorded tree head. */
export interface TreeHead {
  size: number;
  root: Uint8Array;
  at: number;
}

/** A receipt (API.md: the reservation body's `receipts`): a C2SP tlog-proof of one entry. */
export interface Receipt {
  entry: string;
  index: number;
  proof: string;
}

const base64 = (bytes: Uint8Array) => btoa(String.fromCharCode(...bytes));
const EMPTY_ROOT = sha256(new Uint8Array());
const encoder = new TextEncoder();
/** A hash as SQLite stores it (a BLOB is an ArrayBuffer). */
const blob = (hash: Uint8Array): ArrayBuffer => hash.slice().buffer as ArrayBuffer;

/** `parts` end to end, `length` bytes in all. */
function concat(parts: readonly Uint8Array[], length: number): Uint8Array {
  const out = new Uint8Array(length);
  let at = 0;
  for (const part of parts) {
    out.set(part, at);
    at += part.length;
  }
  return out;
}

/** The C2SP tlog-proof of entry `index`: its bytes as `extra`, the inclusion proof, the signed checkpoint. */
export function tlogProof(entry: Uint8Array, index: number, proof: readonly Hash[], checkpoint: string): string {
  const hashes = proof.map((hash) => `${base64(hash)}\n`).join("");
  return `c2sp.org/tlog-proof@v1\nextra ${base64(entry)}\nindex ${index}\n${hashes}\n${checkpoint}`;
}

/** How often the alarm asks shard 0 for a closed draw's reveal until it has one. */
const DRAW_POLL_MS = 2_000;

/** A tile's index and width as C2SP tlog-tiles has them: width 1 to 256. */
const validTile = (index: number, width: number) =>
  Number.isSafeInteger(index) && index >= 0 && Number.isInteger(width) && width >= 1 && width <= TILE_WIDTH;

export class SaleLog extends DurableObject<Env> {
  readonly #sql: SqlStorage;
  /** Entries appended (the next index). */
  #size: number;
  /** The alarm's time as last set or read (null: none; undefined: not read yet). */
  #alarmAt: number | null | undefined;
  #signer: Promise<Signer | null> | undefined;
  /** The last note signed, per origin. */
  readonly #notes = new Map<string, { size: number; note: string }>();

  constructor(ctx: DurableObjectState, env: Env) {
    super(ctx, env);
    this.#sql = ctx.storage.sql;
    // Tables are made by the first append: a log only read (a SKU never configured) stores nothing.
    this.#ready =
      this.#sql.exec("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'entries'").toArray().length > 0;
    this.#size = this.#ready
      ? this.#sql.exec<{ n: number }>("SELECT COALESCE(MAX(idx) + 1, 0) AS n FROM entries").one().n
      : 0;
    if (this.#ready) for (const statement of RETIRED) this.#sql.exec(statement);
  }

  /** Whether the tables exist. */
  #ready: boolean;

  #createTables(): void {
    if (this.#ready) return;
    for (const statement of SCHEMA) this.#sql.exec(statement);
    this.#ready = true;
  }

  /** The stored hash of a complete subtree (level 0: a leaf). */
  #at = (level: number, index: number): Hash => {
    const edge = this.#edge[level];
    if (edge?.index === index) return edge.hash;
    const row = this.#sql
      .exec<{ hash: ArrayBuffer }>("SELECT hash FROM hashes WHERE level = ? AND idx = ?", level, index)
      .toArray()[0];
    if (!row) throw new Error(`the log lacks hash ${level}/${index}`);
    return new Uint8Array(row.hash);
  };

  /**
   * Appends the entries whose `dedupe` key the log lacks (nor an earlier one of `entries`), in
   * order; inside a transaction. Returns how many. Three statements whatever their number: the keys
   * the log has, the new entries, their tree hashes (about two an entry). An entry's text is stored
   * from the very bytes its leaf hash took (one BLOB, cut in pieces), so what is hashed is what is kept.
   */
  #appendAll(entries: readonly NewEntry[]): number {
    const keys = entries.flatMap((e) => (e.dedupe === null ? [] : [e.dedupe]));
    const seen = new Set(
      keys.length === 0
        ? []
        : this.#sql
            .exec<{ dedupe: string }>(
              "SELECT dedupe FROM entries WHERE dedupe IN (SELECT value FROM json_each(?))",
              JSON.stringify(keys),
            )
            .toArray()
            .map((row) => row.dedupe),
    );
    const first = this.#size;
    const rows: [number, number, string | null, string, string | null][] = [];
    const bytes: Uint8Array[] = [];
    const positions: [number, number][] = [];
    const hashes: Hash[] = [];
    let offset = 0;
    for (const { data, reservation, type, dedupe } of entries) {
      if (dedupe !== null) {
        if (seen.has(dedupe)) continue;
        seen.add(dedupe);
      }
      const index = first + rows.length;
      const encoded = encoder.encode(data);
      rows.push([offset, encoded.length, reservation, type, dedupe]);
      bytes.push(encoded);
      offset += encoded.length;
      for (const { level, index: at, hash } of appendedHashes(index, leafHash(encoded), this.#at)) {
        positions.push([level, at]);
        hashes.push(hash);
        this.#edge[level] = { index: at, hash };
      }
    }
    if (rows.length === 0) return 0;
    this.#sql.exec(
      `INSERT INTO entries (idx, data, reservation, type, dedupe)
       SELECT ?3 + key, CAST(substr(?2, (value ->> 0) + 1, value ->> 1) AS TEXT), value ->> 2, value ->> 3, value ->> 4
         FROM json_each(?1)`,
      JSON.stringify(rows),
      concat(bytes, offset).buffer,
      first,
    );
    // The positions as one JSON parameter (SQLite's json_each), the hashes as one BLOB cut in pieces.
    this.#sql.exec(
      `INSERT INTO hashes (level, idx, hash)
       SELECT value ->> 0, value ->> 1, substr(?2, key * ${HASH_SIZE} + 1, ${HASH_SIZE}) FROM json_each(?1)`,
      JSON.stringify(positions),
      concat(hashes, hashes.length * HASH_SIZE).buffer,
    );
    this.#size = first + rows.length;
    return rows.length;
  }

  /**
   * The tree's right edge: per level, the last complete subtree's hash, which the next appends
   * read. Forgotten with any transaction that failed (its hashes were rolled back).
   */
  #edge: ({ index: number; hash: Hash } | undefined)[] = [];

  /** Buyers' commitments already made, per SKU and user (a hold's and its payment's are one). */
  readonly #users = new Map<string, string>();

  #secret: Uint8Array | undefined;
  async #userOf(sku: string, userId: string): Promise<string> {
    const key = `${sku}\n${userId}`;
    const known = this.#users.get(key);
    if (known !== undefined) return known;
    this.#secret ??= saltSecret(this.env.LOG_SIGNING_KEY ?? "");
    const user = userCommitment(await userSalt(this.#secret, sku, userId), userId);
    if (this.#users.size >= 10_000) this.#users.clear();
    this.#users.set(key, user);
    return user;
  }

  /**
   * A stock shard's outbox flush: the queue message bodies it is about to send (`{"events":[…]}`),
   * each event one entry unless the log has it already. Returns the entries appended.
   */
  async append(shard: number, bodies: readonly string[]): Promise<number> {
    const entries: NewEntry[] = [];
    for (const body of bodies) {
      const { events, invalid } = entryEventsOf(body);
      if (invalid !== null) log("warn", "sale log: an outbox event failed validation", { error: invalid });
      for (const event of events) {
        const entry = reservationEntry(event, shard, await this.#userOf(event.sku, event.userId));
        const dedupe = `${event.reservationId}:${entry.type}`;
        entries.push({ data: JSON.stringify(entry), reservation: event.reservationId, type: entry.type, dedupe });
      }
    }
    const appended = this.#transaction(() => {
      this.#createTables();
      return this.#appendAll(entries);
    });
    if (appended > 0) await this.#arm();
    return appended;
  }

  /**
   * A payment of `sku` answered `refund_required` that changed no reservation, decided at `time`:
   * its `payment` entry, the buyer as their commitment, once per `dedupe` (`payment:<event id>`).
   */
  async appendPayment(sku: string, payment: RefundEntryEvent, time: number, dedupe: string): Promise<boolean> {
    const entry = paymentEntry(payment, time, await this.#userOf(sku, payment.userId));
    const appended = this.#transaction(() => {
      this.#createTables();
      return (
        this.#appendAll([
          { data: JSON.stringify(entry), reservation: payment.reservationId, type: entry.type, dedupe },
        ]) > 0
      );
    });
    if (appended) await this.#arm();
    return appended;
  }

  /**
   * Runs `work` in one SQLite transaction; if it fails, what memory keeps of the tables (their
   * existence, the size, the right edge) is read again, since the transaction's writes were undone.
   */
  #transaction<T>(work: () => T): T {
    const size = this.#size;
    try {
      return this.ctx.storage.transactionSync(work);
    } catch (err) {
      this.#size = size;
      this.#edge = [];
      this.#ready =
        this.#sql.exec("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'entries'").toArray().length > 0;
      throw err;
    }
  }

  /**
   * A configuration, archive or draw-reveal entry, once per `dedupe` when given. `sku`: the log's
   * SKU, to ask its shard 0 for the reveal of the draws a configuration commits to (`draws`).
   */
  async appendConfig(entry: ConfigEntry, dedupe?: string, sku?: string): Promise<boolean> {
    const draws = Array.isArray(entry.draws) ? (entry.draws as { seedHash: string; closesAt: string }[]) : [];
    const appended = this.#transaction(() => {
      this.#createTables();
      const added =
        this.#appendAll([
          { data: JSON.stringify(entry), reservation: null, type: entry.type, dedupe: dedupe ?? null },
        ]) > 0;
      // An opening moved before it opens keeps its seed hash: its reveal is due at its new close.
      if (added && sku !== undefined) {
        for (const draw of draws)
          this.#sql.exec(
            `INSERT INTO draws (seed_hash, sku, closes_at) VALUES (?, ?, ?)
             ON CONFLICT (seed_hash) DO UPDATE SET closes_at = excluded.closes_at`,
            draw.seedHash,
            sku,
            Date.parse(draw.closesAt),
          );
        // One no longer listed was taken off before it opened (an opened one stays listed, decided
        // or not): it owes no reveal, and the alarm would ask shard 0 for it every 2 s for good.
        this.#sql.exec(
          "DELETE FROM draws WHERE seed_hash NOT IN (SELECT value ->> 'seedHash' FROM json_each(?))",
          JSON.stringify(draws),
        );
      }
      return added;
    });
    if (appended) await this.#arm();
    return appended;
  }

  /** Draws committed to and not revealed in the log yet, earliest close first. */
  #pendingDraws(): { seedHash: string; sku: string; closesAt: number }[] {
    if (!this.#ready) return [];
    return this.#sql
      .exec<{ seed_hash: string; sku: string; closes_at: number }>(
        `SELECT seed_hash, sku, closes_at FROM draws
          WHERE NOT EXISTS (SELECT 1 FROM entries WHERE dedupe = 'draw-reveal:' || draws.seed_hash)
          ORDER BY closes_at`,
      )
      .toArray()
      .map((r) => ({ seedHash: r.seed_hash, sku: r.sku, closesAt: r.closes_at }));
  }

  /** Appends the reveal of every committed draw whose window closed and that shard 0 has decided. */
  async #revealDraws(now: number): Promise<void> {
    const due = this.#pendingDraws().filter((d) => d.closesAt <= now);
    const first = due[0];
    if (!first) return;
    const shard0 = this.env.SKU_STOCK.getByName(shardName(first.sku, 0));
    // The SKU's test flag, set at its creation for good, from the object that keeps it.
    const [info, state] = await Promise.all([shard0.drawInfo(), shard0.state()]);
    for (const opening of info?.openings ?? []) {
      const { seed, seedHash, decidedAt } = opening;
      if (seed === null || seedHash === null || decidedAt === null) continue;
      if (!due.some((d) => d.seedHash === seedHash)) continue;
      const entry = drawRevealEntry({ ...opening, seed, seedHash, decidedAt }, state?.test === true);
      await this.appendConfig(entry, `draw-reveal:${seedHash}`);
    }
  }

  /** Keeps the alarm at or before `at` (default: a checkpoint's delay from now). */
  async #arm(at?: number): Promise<void> {
    const seconds = Number(this.env.LOG_CHECKPOINT_SECONDS ?? "1");
    const delay = Number.isFinite(seconds) && seconds >= 0 ? seconds * 1000 : 1000;
    const when = at ?? Date.now() + delay;
    if (this.#alarmAt === undefined) this.#alarmAt = await this.ctx.storage.getAlarm();
    if (this.#alarmAt !== null && this.#alarmAt <= when) return;
    await this.ctx.storage.setAlarm(when);
    this.#alarmAt = when;
  }

  /**
   * Reveals the draws due (a failure is retried by the next alarm), records the head of the tree as
   * it is now, and wakes again while a committed draw waits for its reveal.
   */
  override async alarm(): Promise<void> {
    this.#alarmAt = null; // it fired
    const now = Date.now();
    await this.#revealDraws(now).catch((err) =>
      log("warn", "sale log: a draw's reveal not appended yet", { error: String(err) }),
    );
    this.recordHead();
    const waiting = this.#pendingDraws()[0];
    if (waiting) await this.#arm(Math.max(Date.now() + DRAW_POLL_MS, waiting.closesAt));
  }

  /** Records the current tree head if the tree grew (the alarm; tests call it to skip the wait). */
  recordHead(): TreeHead {
    const last = this.head();
    if (this.#size <= last.size) return last;
    const head = { size: this.#size, root: treeHash(this.#size, this.#at), at: Date.now() };
    this.#sql.exec("INSERT INTO checkpoints (size, root, at) VALUES (?, ?, ?)", head.size, blob(head.root), head.at);
    return head;
  }

  /** The last recorded tree head (size 0 with the empty tree's root before any). */
  head(): TreeHead {
    if (!this.#ready) return { size: 0, root: EMPTY_ROOT, at: 0 };
    const row = this.#sql
      .exec<{ size: number; root: ArrayBuffer; at: number }>(
        "SELECT size, root, at FROM checkpoints ORDER BY size DESC LIMIT 1",
      )
      .toArray()[0];
    return row ? { size: row.size, root: new Uint8Array(row.root), at: row.at } : { size: 0, root: EMPTY_ROOT, at: 0 };
  }

  /** Entries appended so far, recorded in a head or not. */
  size(): number {
    return this.#size;
  }

  #signerOf(): Promise<Signer | null> {
    this.#signer ??= parseSigner(this.env.LOG_SIGNING_KEY ?? "");
    return this.#signer;
  }

  /** The last head as a C2SP checkpoint for `origin`, signed; null when no signing key is set. */
  async checkpoint(origin: string, head = this.head()): Promise<string | null> {
    const cached = this.#notes.get(origin);
    if (cached?.size === head.size) return cached.note;
    const signer = await this.#signerOf();
    if (!signer) return null;
    const note = await signNote(checkpointText({ origin, size: head.size, root: head.root }), signer);
    this.#notes.set(origin, { size: head.size, note });
    return note;
  }

  /**
   * A hash tile of the last head's tree: `width` hashes of level `level`·8 from index `index`·256;
   * null when the tree has not that many.
   */
  tile(level: number, index: number, width: number): Uint8Array | null {
    if (!this.#ready || !validTile(index, width)) return null;
    const size = this.head().size;
    const first = index * TILE_WIDTH;
    if ((first + width) * 2 ** (level * TILE_HEIGHT) > size) return null;
    const rows = this.#sql
      .exec<{ hash: ArrayBuffer }>(
        "SELECT hash FROM hashes WHERE level = ? AND idx >= ? AND idx < ? ORDER BY idx",
        level * TILE_HEIGHT,
        first,
        first + width,
      )
      .toArray();
    if (rows.length !== width) return null;
    const out = new Uint8Array(width * 32);
    for (const [i, row] of rows.entries()) out.set(new Uint8Array(row.hash), i * 32);
    return out;
  }

  /** An entry bundle of the last head's tree: each entry as a big-endian uint16 length and its bytes. */
  entryBundle(index: number, width: number): Uint8Array | null {
    if (!this.#ready || !validTile(index, width)) return null;
    const first = index * TILE_WIDTH;
    if (first + width > this.head().size) return null;
    const rows = this.#sql
      .exec<{ data: string }>("SELECT data FROM entries WHERE idx >= ? AND idx < ? ORDER BY idx", first, first + width)
      .toArray();
    if (rows.length !== width) return null;
    const parts = rows.map((row) => encoder.encode(row.data));
    const out = new Uint8Array(parts.reduce((n, part) => n + 2 + part.length, 0));
    let at = 0;
    for (const part of parts) {
      out[at] = part.length >> 8;
      out[at + 1] = part.length & 0xff;
      out.set(part, at + 2);
      at += 2 + part.length;
    }
    return out;
  }

  /**
   * The receipts of a reservation's entries that the last head holds, each a C2SP tlog-proof whose
   * checkpoint is signed for `origin`. Empty when no signing key is set.
   */
  async receipts(reservationId: string, origin: string): Promise<Receipt[]> {
    if (!this.#ready) return [];
    const head = this.head();
    const rows = this.#sql
      .exec<{ idx: number; data: string; type: string }>(
        `SELECT idx, data, type FROM entries
          WHERE dedupe >= ? AND dedupe < ? AND reservation = ? AND idx < ? ORDER BY idx`,
        `${reservationId}:`,
        `${reservationId};`, // ';' follows ':': the keys that begin with `<reservation>:`
        reservationId,
        head.size,
      )
      .toArray();
    if (rows.length === 0) return [];
    const checkpoint = await this.checkpoint(origin, head);
    if (!checkpoint) return [];
    return rows.map((row) => ({
      entry: row.type,
      index: row.idx,
      proof: tlogProof(encoder.encode(row.data), row.idx, inclusionProof(row.idx, head.size, this.#at), checkpoint),
    }));
  }
}
