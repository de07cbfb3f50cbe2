import {
  type DrawTag,
  eventTypeOf,
  MAX_EVENTS_PER_MESSAGE,
  type OrderEvent,
  type ReservationStatus,
} from "../shared/order-events";
import { migrate, schemaCurrent } from "./schema";
import {
  DEFAULT_CURRENCY,
  type EngineStorage,
  type Pricing,
  type Reservation,
  type ReservationRow,
  type SkuRow,
  type VariantRow,
} from "./types";

/**
 * The shared transaction of the stock engine's units: one object per stock object, passed to every
 * unit (holds.ts, payments.ts, waitlist.ts, …), so that any of them can run in the same
 * `transactionSync` as another (`#private` fields cannot be shared across classes; this object can).
 *
 * It keeps in memory what the reservation path reads on every request (the SKU row, the earliest
 * expiry, the config row, the price) and what a transaction decided but has not written yet (holds,
 * outbox events, quotas), and it owns the primitives every unit builds on: a hold, a release, a
 * status change and its outbox event. `run` writes what was decided in a few statements before the
 * commit; a throw rolls SQLite back and makes memory forget, so both read the same again.
 *
 * Invariants it keeps: held + sold <= total (a CHECK too); a hold's units return to `available`
 * only through {@link release}; every reservation change has exactly one event with a new `seq`.
 */

/**
 * Rows per multi-row statement (and per read of a batch's nonces or users): a batch of the group
 * commit is one statement; a larger one (an alarm releasing thousands, a test's batch of 10,000) is
 * several, each far below SQLite's limit on a bound value.
 */
const WRITE_CHUNK = 256;

/**
 * The most values one statement may bind (a Durable Object's SQL limit). A write or read of a few
 * rows binds each value (`VALUES (?, ?), (?, ?)`); a larger one binds one JSON array that SQLite
 * unpacks with `json_each`, which costs more per statement (the JSON is built, parsed and expanded)
 * but stays one statement per {@link WRITE_CHUNK} rows.
 */
const MAX_BOUND_VALUES = 100;

/** Whether `rows` rows of `width` values each can be bound one value per placeholder. */
export function bindsEach(rows: number, width: number): boolean {
  return rows * width <= MAX_BOUND_VALUES;
}

/**
 * `(?, ?), (?, ?)`: `rows` groups of `width` placeholders (`group`, when given, is one group's
 * text), built once per shape: the runtime caches prepared statements by their text.
 */
const groupTexts = new Map<string, string>();
export function groups(rows: number, width: number, group?: string): string {
  const key = `${rows}:${width}:${group ?? ""}`;
  let text = groupTexts.get(key);
  if (text === undefined) {
    text = Array(rows)
      .fill(group ?? `(${Array(width).fill("?").join(", ")})`)
      .join(", ");
    groupTexts.set(key, text);
  }
  return text;
}

export function chunks<T>(items: readonly T[]): T[][] {
  const out: T[][] = [];
  for (let i = 0; i < items.length; i += WRITE_CHUNK) out.push(items.slice(i, i + WRITE_CHUNK));
  return out;
}

/** How many overdue holds one request releases on its way in; the alarm takes the rest. */
export const LAZY_EXPIRY_BATCH = 64;

/**
 * A transaction's working set: the quotas it read or changed (by user; `dirtyQuotas` to write), the
 * nonces it looked up (null: no reservation has it), and the holds and events it has not written yet.
 */
interface TxWork {
  quotas: Map<string, number>;
  dirtyQuotas: Set<string>;
  nonces: Map<string, ReservationRow | null>;
  holds: (ReservationRow & { seq: number })[];
  events: [number, OrderEvent][];
}

const newWork = (): TxWork => ({ quotas: new Map(), dirtyQuotas: new Set(), nonces: new Map(), holds: [], events: [] });

/** The `config` row: settings revision (column `version`), and the resize fence and plan (see configuration.ts). */
type ConfigRow = { revision: number; fence: string | null; plan: string | null; phase: ResizePhase | null };

/** A resize on shard 0: `preparing` (fences being set) or `committing` (being applied). */
export type ResizePhase = "preparing" | "committing";

/**
 * `new Date(ms).toISOString()`, its text up to the second remembered for the last two seconds: an
 * event's time and its hold's expiry are two, shared by a batch and by the calls of the same second,
 * and `toISOString` formats each call through printf.
 */
const isoSeconds: [number, string][] = [
  [Number.NaN, ""],
  [Number.NaN, ""],
];
export function isoTime(ms: number): string {
  const second = Math.floor(ms / 1000);
  const millis = String(Math.floor(ms) - second * 1000).padStart(3, "0");
  for (const [at, prefix] of isoSeconds) if (at === second) return `${prefix}.${millis}Z`;
  const prefix = new Date(second * 1000).toISOString().slice(0, -5); // "…T12:34:56" of "…T12:34:56.000Z"
  isoSeconds.pop();
  isoSeconds.unshift([second, prefix]);
  return `${prefix}.${millis}Z`;
}

export class Ledger {
  readonly sql: SqlStorage;
  readonly newId: () => string;
  /** The request being decided (see `Holds.onBehalfOf`), written into the events it causes. */
  requestId: string | undefined;
  /**
   * The draw place being decided (engine/draw-decision.ts), written into the event of the hold it
   * makes: the public log then ties each of a draw's holds to its position (API.md v1.4).
   */
  drawTag: DrawTag | undefined;
  /** Units released or added since the last {@link takeFreed} (the shell tells the waitlist). */
  freed = 0;
  readonly #storage: EngineStorage;
  /** Called after every release, in its transaction: released units go to the waitlist first. */
  readonly #released: (now: number) => void;
  /** False until the first configure makes the tables; before that the object stores nothing. */
  #configured: boolean;
  #configRow: ConfigRow | undefined;
  #pricing: Pricing | undefined;
  /**
   * The SKU row (undefined: not read yet; null: no row). Decisions read and change this copy;
   * {@link run} writes it back with one UPDATE before its commit.
   */
  #skuRow: SkuRow | null | undefined;
  #skuDirty = false;
  #skuName: string | undefined;
  /** The earliest expiry among live holds (null: none; undefined: not known, read it again). */
  #earliest: number | null | undefined;
  #work: TxWork = newWork();
  /** Sizes: this shard's variants by id, in their order (undefined: not read yet; empty: none). */
  #variants: Map<string, VariantRow> | undefined;
  readonly #dirtyVariants = new Set<string>();
  /** Told when memory is forgotten (a rolled-back transaction): the draw's cached rows go too. */
  onForget: (() => void) | null = null;

  constructor(storage: EngineStorage, newId: () => string, released: (now: number) => void) {
    this.#storage = storage;
    this.sql = storage.sql;
    this.newId = newId;
    this.#released = released;
    // An object nobody configured writes nothing (API.md: requests about unknown SKUs store nothing):
    // its tables are made by its first configure, and until then every read answers "unknown".
    this.#configured =
      this.sql.exec("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'sku'").toArray().length > 0;
    if (!this.#configured) {
      this.#skuRow = null;
      this.#earliest = null;
    } else if (!schemaCurrent(this.sql)) {
      storage.transactionSync(() => migrate(this.sql)); // an object made by older code
    }
  }

  get configured(): boolean {
    return this.#configured;
  }

  /** Makes the tables, in the caller's transaction (a first configure). */
  install(): void {
    migrate(this.sql);
    this.#configured = true;
    this.#configRow = undefined;
  }

  /** Forgets the tables a first configure that was rolled back had made: the object is blank again. */
  uninstall(): void {
    this.#configured = false;
    this.#skuRow = null;
    this.#earliest = null;
    this.#configRow = undefined;
  }

  /**
   * One transaction: `fn` decides on the in-memory SKU row and the working set, then what it decided
   * is written (new holds and events as one multi-row INSERT each, the SKU row as one UPDATE, the
   * quotas touched as one upsert), all before the commit.
   */
  run<T>(fn: () => T): T {
    try {
      return this.#storage.transactionSync(() => {
        const result = fn();
        this.#writeBack();
        return result;
      });
    } catch (err) {
      this.forget();
      throw err;
    } finally {
      this.#work = newWork();
    }
  }

  /**
   * Runs `decide` for an edge request: the events it emits (a cancel, a payment, and the waitlist
   * holds they cause) carry the request's id. Holds that lazy expiry releases on the way carry none.
   */
  onBehalfOf<T>(requestId: string | undefined, decide: () => T): T {
    this.requestId = requestId;
    try {
      return decide();
    } finally {
      this.requestId = undefined;
    }
  }

  /** Runs `decide` for a draw's place: the hold it makes names that place (see {@link drawTag}). */
  forDraw<T>(tag: DrawTag | undefined, decide: () => T): T {
    this.drawTag = tag;
    try {
      return decide();
    } finally {
      this.drawTag = undefined;
    }
  }

  /** Forgets what memory keeps of SQLite, to read it again (after a rollback, or a test's own write). */
  forget(): void {
    this.onForget?.();
    this.#configRow = undefined;
    this.#skuRow = undefined;
    this.#skuDirty = false;
    this.#earliest = undefined;
    this.#pricing = undefined;
    this.#variants = undefined;
    this.#dirtyVariants.clear();
  }

  get work(): TxWork {
    return this.#work;
  }

  #writeBack(): void {
    this.writePending();
    const work = this.#work;
    if (work.dirtyQuotas.size > 0) {
      const quotas = [...work.dirtyQuotas].map((user) => [user, work.quotas.get(user) ?? 0] as const);
      for (const chunk of chunks(quotas)) {
        const upsert = "ON CONFLICT (user_id) DO UPDATE SET active = excluded.active";
        if (bindsEach(chunk.length, 2)) {
          this.sql.exec(
            `INSERT INTO user_quota (user_id, active) VALUES ${groups(chunk.length, 2)} ${upsert}`,
            ...chunk.flat(),
          );
        } else {
          this.sql.exec(
            `INSERT INTO user_quota (user_id, active) SELECT value ->> 0, value ->> 1 FROM json_each(?) WHERE true ${upsert}`,
            JSON.stringify(chunk),
          );
        }
      }
      work.dirtyQuotas.clear();
    }
    const sku = this.#skuRow;
    if (this.#skuDirty && sku) {
      this.sql.exec(
        "UPDATE sku SET total = ?, held = ?, sold = ?, seq = ?, created = ? WHERE id = 1",
        sku.total,
        sku.held,
        sku.sold,
        sku.seq,
        sku.created,
      );
      this.#skuDirty = false;
    }
    for (const id of this.#dirtyVariants) {
      const v = this.#variants?.get(id);
      if (v)
        this.sql.exec(
          "UPDATE variant_stock SET total = ?, held = ?, sold = ? WHERE id = ?",
          v.total,
          v.held,
          v.sold,
          id,
        );
    }
    this.#dirtyVariants.clear();
  }

  /**
   * Writes the holds and outbox events decided so far (one statement each): at the transaction's
   * end, before any read of the tables they go to, and whenever {@link WRITE_CHUNK} are waiting.
   */
  writePending(): void {
    const work = this.#work;
    if (work.holds.length > 0) {
      const holds = work.holds;
      const columns =
        "INSERT INTO reservations (id, user_id, quantity, status, nonce, created_at, expires_at, updated_at, seq, token_expires_at, variant)";
      if (bindsEach(holds.length, 10)) {
        const values: (string | number | null)[] = [];
        for (const r of holds) {
          values.push(r.id, r.user_id, r.quantity, r.nonce, r.created_at, r.expires_at, r.updated_at, r.seq);
          values.push(r.token_expires_at, r.variant ?? null);
        }
        this.sql.exec(
          `${columns} VALUES ${groups(holds.length, 10, "(?, ?, ?, 'held', ?, ?, ?, ?, ?, ?, ?)")}`,
          ...values,
        );
      } else {
        this.sql.exec(
          `${columns} SELECT value ->> 0, value ->> 1, value ->> 2, 'held', value ->> 3, value ->> 4, value ->> 5,
                  value ->> 4, value ->> 6, value ->> 7, value ->> 8
             FROM json_each(?)`,
          JSON.stringify(
            holds.map((r) => [
              r.id,
              r.user_id,
              r.quantity,
              r.nonce,
              r.created_at,
              r.expires_at,
              r.seq,
              r.token_expires_at,
              r.variant ?? null,
            ]),
          ),
        );
      }
      const lists = holds.filter((r) => r.listed != null);
      if (lists.length > 0) {
        this.sql.exec(
          "INSERT INTO hold_lists (reservation_id, listed) SELECT value ->> 0, value ->> 1 FROM json_each(?)",
          JSON.stringify(lists.map((r) => [r.id, r.listed])),
        );
      }
      work.holds = [];
    }
    if (work.events.length > 0) {
      // Outbox rows of up to a message's events each, in one statement: each event serialized once,
      // here, as the queue message will carry it.
      const values: (number | string)[] = [];
      for (let i = 0; i < work.events.length; i += MAX_EVENTS_PER_MESSAGE) {
        const part = work.events.slice(i, i + MAX_EVENTS_PER_MESSAGE);
        const text = JSON.stringify(part.map(([, event]) => event)).slice(1, -1); // the array's inside
        values.push(part[0]?.[0] as number, part[part.length - 1]?.[0] as number, part.length, text);
      }
      this.sql.exec(
        `INSERT INTO outbox_events (first_seq, last_seq, count, events) VALUES ${Array(values.length / 4)
          .fill("(?, ?, ?, ?)")
          .join(", ")}`,
        ...values,
      );
      work.events = [];
    }
  }

  /** The SKU row in memory (read from SQLite once, and again after a transaction threw). */
  row(): SkuRow | undefined {
    if (this.#skuRow === undefined) {
      this.#skuRow = this.sql.exec<SkuRow>("SELECT * FROM sku WHERE id = 1").toArray()[0] ?? null;
    }
    return this.#skuRow ?? undefined;
  }

  requireRow(): SkuRow {
    const row = this.row();
    if (!row) throw new Error("stock object is not configured");
    return row;
  }

  /** The SKU row as a configure wrote it (SQLite's and memory's are the same then). */
  setRow(row: SkuRow): void {
    this.#skuRow = row;
  }

  /** The memory row changed: written back before the commit. */
  touch(): void {
    this.#skuDirty = true;
  }

  bumpSeq(): number {
    const sku = this.requireRow();
    sku.seq += 1;
    this.#skuDirty = true;
    return sku.seq;
  }

  config(): ConfigRow {
    this.#configRow ??= this.sql
      .exec<ConfigRow>("SELECT version AS revision, fence, plan, phase FROM config WHERE id = 1")
      .one();
    return this.#configRow;
  }

  writeConfig(config: ConfigRow): void {
    this.sql.exec(
      "UPDATE config SET version = ?, fence = ?, plan = ?, phase = ? WHERE id = 1",
      config.revision,
      config.fence,
      config.plan,
      config.phase,
    );
    this.#configRow = { ...config };
  }

  /** A resize has staged this shard: no new hold or waitlist entry until it commits or is lifted. */
  fenced(): boolean {
    return this.#configured && this.config().fence !== null;
  }

  pricing(): Pricing {
    if (!this.#pricing) {
      const row = this.sql
        .exec<{ price: number | null; currency: string; test: number }>(
          "SELECT price, currency, test FROM sku_pricing WHERE id = 1",
        )
        .toArray()[0];
      this.#pricing = row
        ? { price: row.price, currency: row.currency, test: row.test === 1 }
        : { price: null, currency: DEFAULT_CURRENCY, test: false };
    }
    return this.#pricing;
  }

  /** Writes a new price, currency and test flag; a change takes a new seq, so the mirror shows it. */
  setPricing(next: Pricing): void {
    this.sql.exec(
      `INSERT INTO sku_pricing (id, price, currency, test) VALUES (1, ?, ?, ?)
       ON CONFLICT (id) DO UPDATE SET price = excluded.price, currency = excluded.currency, test = excluded.test`,
      next.price,
      next.currency,
      next.test ? 1 : 0,
    );
    this.#pricing = next;
    this.bumpSeq();
  }

  /** Sizes: this shard's variants by id, in their order (read from SQLite once; empty: the SKU has none). */
  variants(): Map<string, VariantRow> {
    if (this.#variants === undefined) {
      this.#variants = new Map();
      if (this.#configured) {
        for (const v of this.sql.exec<VariantRow>("SELECT * FROM variant_stock ORDER BY position")) {
          this.#variants.set(v.id, { ...v });
        }
      }
    }
    return this.#variants;
  }

  /** Adds a variant (a configure): written now, in the caller's transaction. */
  addVariant(v: VariantRow): void {
    this.sql.exec(
      "INSERT INTO variant_stock (id, name, position, total, held, sold) VALUES (?, ?, ?, ?, 0, 0)",
      v.id,
      v.name,
      v.position,
      v.total,
    );
    this.variants().set(v.id, { ...v, held: 0, sold: 0 });
  }

  /** Moves `quantity` units of a reservation's variant (if it has one) between its counts. */
  shiftVariant(variant: string | null | undefined, change: { held?: number; sold?: number; total?: number }): void {
    if (variant == null) return;
    const v = this.variants().get(variant);
    if (!v) throw new Error(`variant ${variant} is not on this shard`);
    v.held += change.held ?? 0;
    v.sold += change.sold ?? 0;
    v.total += change.total ?? 0;
    this.#dirtyVariants.add(variant);
  }

  /**
   * A user's active quantity (held + sold): the per-user limit's count. Kept for the transaction
   * only: a batch's working set is its users, so memory never holds every user's quota.
   */
  quota(userId: string): number {
    const known = this.#work.quotas.get(userId);
    if (known !== undefined) return known;
    const row = this.sql
      .exec<{ active: number }>("SELECT active FROM user_quota WHERE user_id = ?", userId)
      .toArray()[0];
    this.#work.quotas.set(userId, row?.active ?? 0);
    return row?.active ?? 0;
  }

  /** Changes a user's quota in the working set; written (absolute, CHECK active >= 0) before the commit. */
  addQuota(userId: string, delta: number): void {
    this.#work.quotas.set(userId, this.quota(userId) + delta);
    this.#work.dirtyQuotas.add(userId);
  }

  /**
   * Takes a hold: the held count and seq in the memory row; the reservation (with its seq), its
   * nonce and its outbox event into the working set; the user's quota. Returns the reservation.
   */
  hold(
    sku: SkuRow,
    userId: string,
    quantity: number,
    nonce: string | null,
    now: number,
    tokenExpiresAt?: number,
    variant: string | null = null,
    listed: string | null = null,
  ): Reservation {
    sku.held += quantity;
    this.shiftVariant(variant, { held: quantity });
    sku.seq += 1;
    sku.created += 1;
    this.#skuDirty = true;
    const row: ReservationRow & { seq: number } = {
      id: `${sku.sku}.${sku.shard}.${this.newId().replaceAll("-", "")}`,
      user_id: userId,
      quantity,
      status: "held",
      nonce,
      created_at: now,
      expires_at: now + sku.hold_seconds * 1000,
      updated_at: now,
      token_expires_at: nonce === null ? null : (tokenExpiresAt ?? null),
      seq: sku.seq,
      variant,
      listed,
    };
    if (this.#work.holds.push(row) >= WRITE_CHUNK) this.writePending();
    if (nonce !== null) this.#work.nonces.set(nonce, row);
    if (this.#earliest !== undefined) {
      this.#earliest = this.#earliest === null ? row.expires_at : Math.min(this.#earliest, row.expires_at);
    }
    this.addQuota(userId, quantity);
    const reservation = this.toReservation(row);
    this.emit(reservation, now, row.seq);
    return reservation;
  }

  /** Gives a hold's units back: the one place stock returns to `available` (invariant 5). */
  release(row: ReservationRow, status: "expired" | "cancelled", now: number): Reservation {
    const sku = this.requireRow();
    sku.held -= row.quantity;
    this.shiftVariant(row.variant, { held: -row.quantity });
    this.#skuDirty = true;
    this.leftHeld(row);
    this.freed += row.quantity;
    this.addQuota(row.user_id, -row.quantity);
    const reservation = this.setStatus(row, status, now);
    this.#released(now);
    return reservation;
  }

  /** A live hold ends (released or paid): the earliest expiry may have been its own. */
  leftHeld(row: ReservationRow): void {
    if (this.#earliest === row.expires_at) this.#earliest = undefined;
  }

  /** `reason`: why a late payment left it `refund_required`, for its event (and the log's entry). */
  setStatus(row: ReservationRow, status: ReservationStatus, now: number, reason?: OrderEvent["reason"]): Reservation {
    const seq = this.bumpSeq();
    this.sql.exec("UPDATE reservations SET status = ?, updated_at = ?, seq = ? WHERE id = ?", status, now, seq, row.id);
    const reservation = this.toReservation({ ...row, status, updated_at: now });
    this.emit(reservation, now, seq, reason);
    return reservation;
  }

  /**
   * Puts the event of a state change into the outbox, in the caller's transaction (written before its
   * commit). `taken`: the seq the caller already took and wrote into the reservation row. Returns
   * the event's seq.
   */
  emit(reservation: Reservation, now: number, taken?: number, reason?: OrderEvent["reason"]): number {
    const seq = taken ?? this.bumpSeq();
    const { price, currency, test } = this.pricing();
    const event: OrderEvent = {
      id: this.newId(),
      type: eventTypeOf(reservation.status),
      reservationId: reservation.id,
      sku: reservation.sku,
      userId: reservation.userId,
      quantity: reservation.quantity,
      occurredAt: isoTime(now),
      expiresAt: isoTime(reservation.expiresAt),
      amount: price === null ? null : price * reservation.quantity,
      currency,
      seq,
    };
    if (this.requestId !== undefined) event.requestId = this.requestId;
    if (this.drawTag !== undefined && reservation.status === "held") event.draw = this.drawTag;
    // Left out without sizes for now: readers of the release before this one refuse `null` (their events
    // would go to the dead-letter queue in a deploy or a rollback); they all take it from this release on.
    if (reservation.variant !== undefined) event.variant = reservation.variant;
    // A hold's own event is dated when it was made; any other (a re-emit of a live hold too) says when.
    if (reservation.status !== "held" || now !== reservation.createdAt) event.heldAt = isoTime(reservation.createdAt);
    if (reason !== undefined && reservation.status === "refund_required") event.reason = reason;
    // Only on a test sale's events (API.md "Test sales"): a real sale's stay as they were.
    if (test) event.test = true;
    if (this.#work.events.push([seq, event]) >= WRITE_CHUNK) this.writePending();
    if (taken === undefined) this.sql.exec("UPDATE reservations SET seq = ? WHERE id = ?", seq, reservation.id);
    return seq;
  }

  /** Releases up to `limit` holds whose expiry is at or before `now`. Idempotent: alarms repeat. */
  expireDue(now: number, limit: number): number {
    // The earliest expiry is known most of the time: a request then reads nothing to learn that
    // no hold is due.
    if (this.#earliest === null || (this.#earliest !== undefined && now < this.#earliest)) return 0;
    this.writePending();
    const due = this.sql
      .exec<ReservationRow>(
        "SELECT * FROM reservations WHERE status = 'held' AND expires_at <= ? ORDER BY expires_at LIMIT ?",
        now,
        limit,
      )
      .toArray();
    // Expiry is nobody's request, even when a request's transaction does it on the way.
    const requestId = this.requestId;
    this.requestId = undefined;
    try {
      for (const row of due) this.release(row, "expired", now);
    } finally {
      this.requestId = requestId;
    }
    return due.length;
  }

  /** The earliest expiry among live holds: when the alarm must fire next. */
  nextExpiry(): number | null {
    if (this.#earliest === undefined) {
      this.writePending();
      const row = this.sql
        .exec<{ at: number | null }>("SELECT MIN(expires_at) AS at FROM reservations WHERE status = 'held'")
        .toArray()[0];
      this.#earliest = row?.at ?? null;
    }
    return this.#earliest;
  }

  /** Units released or added since the last call (0 when nothing was). */
  takeFreed(): number {
    const freed = this.freed;
    this.freed = 0;
    return freed;
  }

  reservationRow(id: string): ReservationRow | undefined {
    this.writePending();
    return this.sql.exec<ReservationRow>("SELECT * FROM reservations WHERE id = ?", id).toArray()[0];
  }

  toReservation(row: ReservationRow): Reservation {
    this.#skuName ??= this.requireRow().sku;
    const reservation: Reservation = {
      id: row.id,
      sku: this.#skuName,
      userId: row.user_id,
      quantity: row.quantity,
      status: row.status as ReservationStatus,
      createdAt: row.created_at,
      expiresAt: row.expires_at,
      updatedAt: row.updated_at,
    };
    if (row.variant != null) reservation.variant = row.variant;
    return reservation;
  }
}
