import { type DrawPlace, type Entrant, OpeningDraw, type RankedEntrant } from "./opening-draw";
import { eventTypeOf, MAX_EVENTS_PER_MESSAGE, type OrderEvent, type ReservationStatus } from "./order-events";
import { fnv1a } from "./shard-name";
import { migrateColumns, STOCK_SCHEMA } from "./stock-schema";

/**
 * The stock engine of one SKU shard: the Durable Object equivalent of `lua/reserve.lua`,
 * `lua/release.lua` and `lua/confirm.lua`.
 *
 * It is synchronous on purpose. Every public method is one `transactionSync` with no `await`
 * inside and no clock read (time comes in as `now`, epoch milliseconds), so a decision can never
 * interleave with another and the whole thing is testable step by step.
 *
 * Order of checks in `reserve`, the same as the Lua script:
 *   1. holds past their expiry are released first (so a late alarm never under-sells);
 *   2. a token nonce already used replays its reservation (same quantity) or is a mismatch;
 *   3. the sale is on and inside its window;
 *   4. the user's held + sold plus the quantity stays within the per-user limit;
 *   5. enough stock is available;
 *   6. the hold is written, with the user's quota, the nonce and an outbox event.
 * A rejected request writes nothing.
 */

type StockErrorCode =
  | "SKU_NOT_FOUND"
  | "SALE_NOT_ACTIVE"
  | "IDEMPOTENCY_MISMATCH"
  | "LIMIT_EXCEEDED"
  | "SOLD_OUT"
  | "INSUFFICIENT_STOCK"
  | "RESERVATION_NOT_FOUND"
  | "INVALID_STATE"
  | "STOCK_AVAILABLE"
  /** A purchase token minted for another shard layout (before `shards` changed). */
  | "TOKEN_INVALID"
  /** A sibling shard that could not answer: the outcome is unknown, retry (503). */
  | "BUSY"
  /**
   * Fair opening: not decided on arrival. The request is an entry of the draw (or came after the
   * window, before the decision); the edge waits for its answer (`SkuStock.awaitDraw`). Never sent
   * to a client.
   */
  | "DRAW_PENDING";

export type Outcome<T> =
  | { ok: true; value: T }
  | {
      ok: false;
      code: StockErrorCode;
      available?: number;
      draw?: DrawPlace | undefined;
      /** A cut of a sharded SKU's total: the units shard 0 lacks (it pulls them, then asks again). */
      missing?: number;
    };

export type SaleStatus = "on_sale" | "paused";

export interface SkuSettings {
  sku: string;
  shard: number;
  shards: number;
  name?: string | undefined;
  /** This shard's stock; `undefined` keeps the current value (0 on create). */
  totalStock?: number | undefined;
  perUserLimit?: number | undefined;
  holdSeconds?: number | undefined;
  /** Epoch ms; `null` clears it, `undefined` keeps the current value. */
  startsAt?: number | null | undefined;
  endsAt?: number | null | undefined;
  status?: SaleStatus | undefined;
  /**
   * Shard 0 only: the SKU's total over all shards, recorded as the base of later PUTs (see
   * {@link StockEngine.retarget}). Given when every shard's total is set at once (create, reshard).
   */
  skuTotal?: number | undefined;
  /** Fair opening window in ms (0: off); `undefined` keeps the current value. See opening-draw.ts. */
  openingWindowMs?: number | undefined;
  /** Price and currency, applied in the same transaction (left out: kept). */
  price?: number | null | undefined;
  currency?: string | undefined;
  /**
   * Shard 0 of a sharded SKU: set the SKU's total to `total` as the difference from the total it
   * recorded for the last PUT (see {@link StockEngine.retarget}); `assumed` stands for that record on
   * a SKU configured before it was kept. A cut this shard cannot cover answers `missing`.
   */
  retarget?: { total: number; assumed: number } | undefined;
  /**
   * A resize's commit (durable-objects/sku-change.ts): applied only by a shard that this change
   * fenced, or one never configured; a shard that already applied it answers its state.
   */
  changeId?: string | undefined;
  /** Shard 0: the resize plan it commits, kept until every sibling has applied it. */
  plan?: string | undefined;
  /** A follower: shard 0's version of these settings; an older or equal one changes nothing. */
  version?: number | undefined;
}

/**
 * The SKU's line as a shard knows it: 0 nobody waits; 1 buyers wait and the SKU's units are theirs
 * (newcomers are refused, they join the line); 2 buyers wait but want more than the SKU has, so
 * newcomers may buy what there is, and freed units are still offered to the line first.
 */
export type LineMode = 0 | 1 | 2;

/** A resize shard 0 runs: phase `preparing` (fences being set) or `committing` (being applied). */
export interface ResizePlanRow {
  plan: string;
  phase: "preparing" | "committing";
}

type ConfigRow = { version: number; fence: string | null; plan: string | null; phase: ResizePlanRow["phase"] | null };

export interface StockCounts {
  total: number;
  available: number;
  held: number;
  sold: number;
}

export interface SkuState {
  sku: string;
  shard: number;
  shards: number;
  name: string;
  status: SaleStatus;
  perUserLimit: number;
  holdSeconds: number;
  startsAt: number | null;
  endsAt: number | null;
  stock: StockCounts;
  /** Grows with every change; the Redis mirror keeps the newest snapshot by it. */
  version: number;
  /** Price of one unit in minor units of `currency`; null: no price, payment amounts are not checked. */
  price: number | null;
  /** ISO 4217, lower case. */
  currency: string;
  /** Fair opening window in ms after `startsAt` (0: none). */
  openingWindowMs?: number;
  /**
   * Shard 0: a change of the SKU's shards is being applied (for moments): no purchase token is minted
   * until every shard has it, so none routes a buyer to a shard that has not.
   */
  reconfiguring?: true;
}

/** What a SKU costs (set by {@link StockEngine.configure}). */
export interface Pricing {
  price: number | null;
  currency: string;
}

/** A change of pricing: fields left out (or `undefined`) keep their value. */
export interface PricingChange {
  price?: number | null | undefined;
  currency?: string | undefined;
}

/** The money a payment event carries, checked against the SKU's price. */
export interface PaymentMoney {
  /** Minor units. */
  amount: number;
  /** ISO 4217; left out, the SKU's currency is assumed. */
  currency?: string | undefined;
}

export interface WaitlistEntry {
  waitlistId: string;
  /** 1 for the first in line. */
  position: number;
}

interface PendingTransfer {
  id: string;
  /** The shard asked to give stock. */
  from: number;
  requested: number;
}

export interface Reservation {
  id: string;
  sku: string;
  userId: string;
  quantity: number;
  status: ReservationStatus;
  createdAt: number;
  expiresAt: number;
  updatedAt: number;
}

export interface ReserveRequest {
  userId: string;
  nonce: string;
  quantity: number;
  /**
   * The SKU's shard count the purchase token was minted for. A token from before a change of
   * `shards` routes its user by the old count and would let them hold on two shards, so a new hold
   * needs the current count (replays of the token's own reservation still answer).
   */
  shards?: number | undefined;
  /**
   * When the purchase token expires (epoch ms). Its reservation and its nonce in the spent-nonce
   * digest are kept until then (plus a clock margin), whatever the token lifetime is now. Left out
   * (holds of the line, tokens from before), the token lifetime of now is assumed.
   */
  tokenExpiresAt?: number | undefined;
  /** The edge request asking (for logs and the events it causes). */
  requestId?: string | undefined;
}

export interface ReserveAnswer {
  reservation: Reservation;
  /** True when the nonce had been used: this is the first answer again, nothing new was held. */
  replayed: boolean;
  /** Units still available after this request, so the edge can learn "sold out" at once. */
  available: number;
  /** Fair opening: where this reservation came in the draw that decided it. */
  draw?: DrawPlace | undefined;
}

/**
 * A reservation answer as the stock object sends it. `soldOut` says the answer shows the whole SKU
 * sold out (the object decides it, see `showsSoldOut`), and such an answer carries the shard's
 * spent-nonce digest, so the edge's sold-out cache can tell a replayed token (which must get its
 * reservation back) from a new one (see src/edge/sold-out-cache.ts).
 */
export type ReserveOutcome = Outcome<ReserveAnswer> & { soldOut?: true; spent?: SpentDigest };

/** FNV-1a hashes of the nonces a shard has taken recently, read at the shard's `seq`. */
export interface SpentDigest {
  seq: number;
  nonces: readonly number[];
}

/**
 * `applied`: the event took effect (or had nothing to do, e.g. a failure after the hold ended).
 * `refund_required`: the money was taken by the provider but buys nothing here: wrong amount or
 * currency, the reservation already paid by another event, or too late to take the stock again.
 */
type PaymentOutcome = "applied" | "refund_required";

export interface PaymentAnswer {
  reservation: Reservation;
  /** The status this payment event left the reservation in (the same answer on a replay). */
  status: ReservationStatus;
  outcome: PaymentOutcome;
  replayed: boolean;
}

/** Payment events by outcome, counted once each (the admin view's `payments`). */
export interface PaymentTotals {
  refund_required: number;
}

export type PaymentType = "payment.succeeded" | "payment.failed";

/** A reservation as reconciliation sees it: its status and the seq of its latest event. */
export interface AuditedReservation {
  id: string;
  status: ReservationStatus;
  seq: number;
  updatedAt: number;
}

export interface Audit {
  state: SkuState;
  /** Reservations whose latest event is after the watermark, oldest first (one page). */
  changed: AuditedReservation[];
  /** Seq and time of the oldest outbox event not yet sent, or null. */
  oldestUnsent: { seq: number; occurredAt: number } | null;
  /** Holds past their expiry that no alarm has released yet. */
  overdueHolds: number;
  /** Transfers this shard asked for and never completed. */
  pendingTransfers: number;
  /**
   * Reservations this shard ever created (kept in the SKU row by every hold, since settled rows are
   * pruned), read with the SKU row. Compared with D1's order counts.
   */
  created: number;
  /** Shard 0: the SKU's total as the last PUT set it (see {@link StockEngine.retarget}); else null. */
  skuTotal: number | null;
  /** Rows this audit read from the object's SQLite database. */
  rowsRead: number;
}

interface PendingEvent {
  seq: number;
  event: OrderEvent;
}

/**
 * Unsent outbox events as stored: up to {@link MAX_EVENTS_PER_MESSAGE} events of one transaction,
 * their JSON comma-separated (a JSON array's inside), ready to be joined into a message body.
 */
export interface OutboxRow {
  lastSeq: number;
  count: number;
  events: string;
}

/** The part of `DurableObjectStorage` the engine needs (kept narrow so the contract is clear). */
export interface EngineStorage {
  sql: SqlStorage;
  transactionSync<T>(fn: () => T): T;
}

const DEFAULTS = { perUserLimit: 1, holdSeconds: 900, status: "on_sale", currency: "usd" } as const;

/** How many overdue holds one request releases on its way in; the alarm takes the rest. */
const LAZY_EXPIRY_BATCH = 64;

/** How long a giver keeps a finished transfer's record, so a receiver's retry gets the same grant. */
const TRANSFER_RECORD_RETENTION_MS = 3600 * 1000;
/** How long payment event ids are remembered (Stripe retries an event for up to 3 days). */
const PAYMENT_EVENT_RETENTION_MS = 7 * 24 * 3600 * 1000;

/** What {@link StockEngine.pruneSettled} removed. */
export interface Pruned {
  reservations: number;
  quotas: number;
  transfers: number;
  payments: number;
  /** Rows the deletes read (what "bounded" is measured in). */
  rowsRead: number;
}

type SkuRow = {
  sku: string;
  shard: number;
  shards: number;
  name: string;
  status: string;
  per_user_limit: number;
  hold_seconds: number;
  starts_at: number | null;
  ends_at: number | null;
  total: number;
  held: number;
  sold: number;
  seq: number;
  /** Reservations this shard ever created (rows may be pruned since; see {@link StockEngine.pruneSettled}). */
  created: number;
};

type ReservationRow = {
  id: string;
  user_id: string;
  quantity: number;
  status: string;
  nonce: string | null;
  created_at: number;
  expires_at: number;
  updated_at: number;
  /** The purchase token's own expiry, when the request said it (see {@link ReserveRequest}). */
  token_expires_at: number | null;
};

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

/**
 * Rows per multi-row statement (and per read of a batch's nonces or users): a batch of the group
 * commit (64) is one statement; a larger one (an alarm releasing thousands, a test's batch of
 * 10,000) is several, each far below SQLite's limit on a bound value.
 */
const WRITE_CHUNK = 256;

function chunks<T>(items: readonly T[]): T[][] {
  const out: T[][] = [];
  for (let i = 0; i < items.length; i += WRITE_CHUNK) out.push(items.slice(i, i + WRITE_CHUNK));
  return out;
}

const newWork = (): TxWork => ({ quotas: new Map(), dirtyQuotas: new Set(), nonces: new Map(), holds: [], events: [] });

/**
 * `new Date(ms).toISOString()`, remembering the last two: a batch's events share their time and
 * their holds' expiry, so a batch of 64 formats two dates, not 128.
 */
const isoCache: [number, string][] = [
  [Number.NaN, ""],
  [Number.NaN, ""],
];
function isoTime(ms: number): string {
  for (const [at, text] of isoCache) if (at === ms) return text;
  const text = new Date(ms).toISOString();
  isoCache.pop();
  isoCache.unshift([ms, text]);
  return text;
}

const ok = <T>(value: T): Outcome<T> => ({ ok: true, value });

/** Thrown inside a transaction to roll it back whole and answer its refusal (see `configure`). */
class Refusal extends Error {
  constructor(readonly outcome: Outcome<unknown>) {
    super("refused");
  }
}
const fail = <T>(code: StockErrorCode, available?: number): Outcome<T> =>
  available === undefined ? { ok: false, code } : { ok: false, code, available };

export class StockEngine {
  readonly #storage: EngineStorage;
  readonly #sql: SqlStorage;
  readonly #newId: () => string;
  readonly #newSeed: () => string;
  #sku: string | undefined;
  /** False until the first `configure` makes the tables (see the constructor). */
  #configured: boolean;
  /**
   * The `config` row (settings version, resize fence and plan), kept in memory: the reservation path
   * reads the fence (undefined: read it again).
   */
  #configRow: ConfigRow | undefined;
  /** The request being decided (see {@link onBehalfOf}), written into the events it causes. */
  #requestId: string | undefined;
  /**
   * Sharded SKU: the SKU's line (on shard 0) as shard 0 last told this shard ({@link LineMode}). Kept
   * in memory (read on the reservation path) and in `line_state`.
   */
  #line: LineMode = 0;
  /** Units released or added since the last {@link takeFreed} (the shell tells the line). */
  #freed = 0;
  /** The SKU's pricing, read once and kept: it changes only through {@link configure}. */
  #pricing: Pricing | undefined;
  /**
   * The SKU row, kept in memory (undefined: not read yet; null: no row). Decisions read and change
   * this copy; {@link #transaction} writes it back with one UPDATE before its commit, and forgets it
   * when a transaction throws (the rollback undid what it described), so it is read again.
   */
  #skuRow: SkuRow | null | undefined;
  #skuDirty = false;
  /** The earliest expiry among live holds (null: none; undefined: not known, read it again). */
  #earliest: number | null | undefined;
  /** What the current transaction decided and writes before its commit (see {@link #writeBack}). */
  #work: TxWork = newWork();
  /** Fair opening: this shard's part of the SKU's draw (see opening-draw.ts). */
  readonly draw: OpeningDraw;

  /**
   * `newId` returns a fresh UUID (reservation and event ids); `newSeed` an opening draw's secret seed,
   * 64 hex digits (by default two of `newId`'s, without dashes). Tests pass seeded ones.
   */
  constructor(
    storage: EngineStorage,
    newId: () => string,
    newSeed: () => string = () => `${newId()}${newId()}`.replaceAll("-", ""),
  ) {
    this.#storage = storage;
    this.#sql = storage.sql;
    this.#newId = newId;
    this.#newSeed = newSeed;
    // An object nobody configured writes nothing (API.md: requests about unknown SKUs store nothing):
    // its tables are made by its first `configure`, and until then every read answers "unknown".
    this.#configured =
      this.#sql.exec("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'sku'").toArray().length > 0;
    this.draw = new OpeningDraw(this.#sql);
    if (this.#configured) this.#migrate();
    else {
      this.#skuRow = null;
      this.#earliest = null;
    }
    if (this.#configured) {
      this.#line = (this.#sql.exec<{ mode: LineMode }>("SELECT mode FROM line_state WHERE id = 1").toArray()[0]?.mode ??
        0) as LineMode;
    }
  }

  /** Whether this object was ever configured (it has tables); before that it stores nothing. */
  get configured(): boolean {
    return this.#configured;
  }

  /** Makes or brings up to date the object's tables (each step idempotent: this runs at every start). */
  #migrate(): void {
    for (const statement of STOCK_SCHEMA) this.#sql.exec(statement);
    // `sku.created` came after the table: an object from before gets it, counted from its rows (none
    // were pruned then, so the largest rowid is the count). Settled rows are pruned since, so the
    // count is kept in the row that every hold updates anyway, not derived from the table.
    const columns = this.#sql.exec<{ name: string }>("SELECT name FROM pragma_table_info('sku')").toArray();
    if (!columns.some((c) => c.name === "created")) {
      this.#sql.exec("ALTER TABLE sku ADD COLUMN created INTEGER NOT NULL DEFAULT 0");
      this.#sql.exec("UPDATE sku SET created = (SELECT coalesce(MAX(rowid), 0) FROM reservations)");
    }
    migrateColumns(this.#sql); // columns added since (token expiry, payment content), and their indexes
    this.draw.install();
    this.#configured = true;
    this.#configRow = undefined;
  }

  /** The SKU's configuration and counts, or null before the first `configure`. */
  state(): SkuState | null {
    const row = this.#row();
    return row ? this.#stateOf(row) : null;
  }

  #stateOf(row: SkuRow): SkuState {
    const state: SkuState = { ...toState(row, this.#pricingNow()), ...this.#windowOf() };
    if (this.#config().plan !== null) state.reconfiguring = true;
    return state;
  }

  /**
   * Forgets what memory keeps of SQLite (the SKU row, the earliest expiry), to read it again: for
   * whatever changes the object's SQLite behind the engine (tests that play a bug or a lost row).
   */
  forget(): void {
    this.#configRow = undefined;
    this.#skuRow = undefined;
    this.#skuDirty = false;
    this.#earliest = undefined;
    this.#pricing = undefined;
  }

  /**
   * One transaction: `fn` decides on the in-memory SKU row and the transaction's working set, then
   * what it decided is written in a few statements (new holds and events as one multi-row INSERT
   * each, the SKU row as one UPDATE, the quotas touched as one upsert), all before the commit. A
   * throw rolls SQLite back and makes memory forget what it kept, so both read the same again.
   */
  #transaction<T>(fn: () => T): T {
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

  /** Writes the transaction's decisions: the SKU row and the quotas it changed, its holds and events. */
  #writeBack(): void {
    this.#writePending();
    const work = this.#work;
    if (work.dirtyQuotas.size > 0) {
      const quotas = [...work.dirtyQuotas].map((user) => [user, work.quotas.get(user) ?? 0]);
      for (const chunk of chunks(quotas)) {
        this.#sql.exec(
          `INSERT INTO user_quota (user_id, active) SELECT value ->> 0, value ->> 1 FROM json_each(?) WHERE true
           ON CONFLICT (user_id) DO UPDATE SET active = excluded.active`,
          JSON.stringify(chunk),
        );
      }
      work.dirtyQuotas.clear();
    }
    const sku = this.#skuRow;
    if (this.#skuDirty && sku) {
      this.#sql.exec(
        "UPDATE sku SET total = ?, held = ?, sold = ?, seq = ?, created = ? WHERE id = 1",
        sku.total,
        sku.held,
        sku.sold,
        sku.seq,
        sku.created,
      );
      this.#skuDirty = false;
    }
  }

  /**
   * Writes the holds and outbox events decided so far in this transaction (one statement each):
   * at its end, before any read of the tables they go to, and whenever {@link WRITE_CHUNK} are
   * waiting (a statement's JSON stays far below SQLite's limit on a bound value, and memory bounded).
   */
  #writePending(): void {
    const work = this.#work;
    if (work.holds.length > 0) {
      this.#sql.exec(
        `INSERT INTO reservations
           (id, user_id, quantity, status, nonce, created_at, expires_at, updated_at, seq, token_expires_at)
         SELECT value ->> 0, value ->> 1, value ->> 2, 'held', value ->> 3, value ->> 4, value ->> 5, value ->> 4,
                value ->> 6, value ->> 7
           FROM json_each(?)`,
        JSON.stringify(
          work.holds.map((r) => [
            r.id,
            r.user_id,
            r.quantity,
            r.nonce,
            r.created_at,
            r.expires_at,
            r.seq,
            r.token_expires_at,
          ]),
        ),
      );
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
      this.#sql.exec(
        `INSERT INTO outbox_events (first_seq, last_seq, count, events) VALUES ${Array(values.length / 4)
          .fill("(?, ?, ?, ?)")
          .join(", ")}`,
        ...values,
      );
      work.events = [];
    }
  }

  /** Payment events answered `refund_required` on this shard, each counted once. */
  paymentTotals(): PaymentTotals {
    if (!this.#configured) return { refund_required: 0 };
    const row = this.#sql
      .exec<{ count: number }>("SELECT count FROM payment_totals WHERE outcome = 'refund_required'")
      .toArray()[0];
    return { refund_required: row?.count ?? 0 };
  }

  /**
   * Creates or updates the SKU in one transaction: settings, this shard's total (absolute, or on
   * shard 0 of a sharded SKU `retarget`), price and currency. Refuses to drop the total below
   * held + sold. A refusal rolls the whole transaction back: a refused change writes nothing, and an
   * object never configured stays without tables. Given `now`, units that become available go to
   * the waitlist first.
   */
  configure(settings: SkuSettings, now?: number): Outcome<SkuState> {
    const installing = !this.#configured;
    try {
      return this.#transaction(() => {
        if (installing) this.#migrate();
        const outcome = this.#configureNow(settings, now);
        if (!outcome.ok) throw new Refusal(outcome);
        return outcome;
      });
    } catch (err) {
      if (installing) this.#unconfigure();
      else this.draw.reload(); // the draw's row in memory may be the rolled-back one
      if (err instanceof Refusal) return err.outcome as Outcome<SkuState>;
      throw err;
    }
  }

  #configureNow(settings: SkuSettings, now: number | undefined): Outcome<SkuState> {
    const current = this.#row();
    const config = this.#config();
    if (settings.version !== undefined && current && settings.version <= config.version) return ok(this.#stateNow());
    if (config.fence !== null && settings.changeId !== config.fence) return fail("BUSY");
    // A resize's commit that this shard applied already (it is no longer fenced): a repeat.
    if (settings.changeId !== undefined && config.fence === null && current) return ok(this.#stateNow());
    let total = settings.totalStock ?? current?.total ?? 0;
    if (settings.retarget && current) {
      const recorded = this.skuTarget() ?? settings.retarget.assumed;
      const change = settings.retarget.total - recorded;
      const available = current.total - current.held - current.sold;
      if (change < 0 && available < -change) return { ok: false, code: "INVALID_STATE", missing: -change - available };
      total = current.total + change;
    }
    if (current && total < current.held + current.sold) {
      return fail<SkuState>("INVALID_STATE");
    }
    // A new shard count moves users between shards: only while this shard holds and sells nothing
    // (nor keeps entries of an opening draw that is not decided yet: they wait on their home shard).
    if (current && settings.shards !== current.shards && current.held + current.sold > 0) {
      return fail<SkuState>("INVALID_STATE");
    }
    if (current && settings.shards !== current.shards && this.draw.pending(now ?? 0)) {
      return fail<SkuState>("INVALID_STATE");
    }
    const keep = <T>(next: T | undefined, prior: T | undefined, fallback: T): T =>
      next !== undefined ? next : prior !== undefined ? prior : fallback;
    // Fair opening: a window is set before it opens and never moved once open (opening-draw.ts).
    const startsAt = keep(settings.startsAt, current?.starts_at, null);
    const newSeed = settings.shard === 0 ? this.#newSeed : null;
    if (!this.draw.configure(settings.openingWindowMs, startsAt, now ?? 0, newSeed)) {
      return fail<SkuState>("INVALID_STATE");
    }
    // Nothing is dirty at a transaction's start: SQLite's row is memory's, and this writes both.
    const written = this.#sql.exec<SkuRow>(
      `INSERT INTO sku (id, sku, shard, shards, name, status, per_user_limit, hold_seconds, starts_at, ends_at, total, seq)
       VALUES (1, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, 1)
       ON CONFLICT (id) DO UPDATE SET
         shards = excluded.shards, name = excluded.name, status = excluded.status,
         per_user_limit = excluded.per_user_limit, hold_seconds = excluded.hold_seconds,
         starts_at = excluded.starts_at, ends_at = excluded.ends_at, total = excluded.total,
         seq = sku.seq + 1
       RETURNING *`,
      settings.sku,
      settings.shard,
      settings.shards,
      keep(settings.name, current?.name, settings.sku),
      keep(settings.status, current?.status as SaleStatus | undefined, DEFAULTS.status),
      keep(settings.perUserLimit, current?.per_user_limit, DEFAULTS.perUserLimit),
      keep(settings.holdSeconds, current?.hold_seconds, DEFAULTS.holdSeconds),
      startsAt,
      keep(settings.endsAt, current?.ends_at, null),
      total,
    );
    this.#skuRow = written.one();
    if (settings.retarget) this.#setTarget(settings.retarget.total);
    else if (settings.skuTotal !== undefined) this.#setTarget(settings.skuTotal);
    this.#applyPricing(settings);
    this.#writeConfig({
      version: settings.version ?? config.version,
      fence: settings.changeId === config.fence ? null : config.fence,
      plan: settings.plan ?? config.plan,
      phase: settings.plan !== undefined ? "committing" : config.phase,
    });
    if (current && total > current.total) this.#freed += total - current.total;
    if (now !== undefined) this.#fillWaitlist(now);
    return ok(this.#stateNow());
  }

  #fenced(): boolean {
    return this.#configured && this.#config().fence !== null;
  }

  /** Forgets the tables a configure that was rolled back had made: the object is blank again. */
  #unconfigure(): void {
    this.#configured = false;
    this.#skuRow = null;
    this.#earliest = null;
    this.#configRow = undefined;
    this.draw.uninstall();
  }

  #config(): ConfigRow {
    this.#configRow ??= this.#sql.exec<ConfigRow>("SELECT version, fence, plan, phase FROM config WHERE id = 1").one();
    return this.#configRow;
  }

  #writeConfig(config: ConfigRow): void {
    this.#sql.exec(
      "UPDATE config SET version = ?, fence = ?, plan = ?, phase = ? WHERE id = 1",
      config.version,
      config.fence,
      config.plan,
      config.phase,
    );
    this.#configRow = { ...config };
  }

  /**
   * A resize, step 1 on each shard it reaches: stages this shard for change `changeId` if it is idle
   * (nothing held or sold, nobody waiting, no undecided draw, no transfer in flight): from then on
   * it takes no new hold or waitlist entry (`BUSY`) until the change commits or is lifted. `plan`:
   * shard 0 records the resize it runs (phase `preparing`). A shard never configured is idle and
   * stays blank. Again with the same id: the same answer.
   */
  fence(changeId: string, now: number, plan?: string): Outcome<null> {
    if (!this.#configured) return ok(null);
    return this.#transaction(() => {
      this.#expireDue(now, LAZY_EXPIRY_BATCH);
      const config = this.#config();
      if (config.fence === changeId) return ok(null);
      if (config.fence !== null || config.plan !== null) return fail<null>("BUSY");
      const sku = this.#row();
      if (sku && (sku.held + sku.sold > 0 || this.waitlistLength() > 0 || this.draw.pending(now))) {
        return fail<null>("INVALID_STATE");
      }
      if (this.pendingTransfers().length > 0) return fail<null>("BUSY"); // units in flight: retry
      this.#writeConfig({ ...config, fence: changeId, plan: plan ?? null, phase: plan ? "preparing" : null });
      return ok(null);
    });
  }

  /** Lifts the fence of a change that will not commit (and, on shard 0, its plan). */
  unfence(changeId: string): void {
    if (!this.#configured) return;
    this.#transaction(() => {
      const config = this.#config();
      if (config.fence !== changeId) return;
      this.#writeConfig({ ...config, fence: null, plan: null, phase: null });
    });
  }

  /** Shard 0: the resize it runs, if one is left (its alarm finishes or undoes it). */
  resizePlan(): ResizePlanRow | null {
    if (!this.#configured) return null;
    const config = this.#config();
    return config.plan !== null && config.phase !== null ? { plan: config.plan, phase: config.phase } : null;
  }

  /** Shard 0: every sibling applied the resize: it is over. */
  endPlan(): void {
    if (!this.#configured) return;
    this.#transaction(() => {
      const config = this.#config();
      if (config.phase === "committing") this.#writeConfig({ ...config, plan: null, phase: null });
    });
  }

  /**
   * Applies a price and currency in the caller's transaction (fields left out keep their value). A
   * change takes a new version, so the mirror and displays show it.
   */
  #applyPricing(change: PricingChange): void {
    const current = this.#pricingNow();
    const next: Pricing = {
      price: change.price !== undefined ? change.price : current.price,
      currency: change.currency ?? current.currency,
    };
    if (next.price === current.price && next.currency === current.currency) return;
    this.#sql.exec(
      `INSERT INTO sku_pricing (id, price, currency) VALUES (1, ?, ?)
       ON CONFLICT (id) DO UPDATE SET price = excluded.price, currency = excluded.currency`,
      next.price,
      next.currency,
    );
    this.#pricing = next;
    this.#bumpSeq();
  }

  /** Decides a batch of reservations in one transaction, in arrival order, one answer each. */
  reserve(requests: readonly ReserveRequest[], now: number): Outcome<ReserveAnswer>[] {
    return this.#transaction(() => {
      this.#expireDue(now, LAZY_EXPIRY_BATCH);
      if (this.#row()) this.#prefetch(requests);
      return requests.map((request) => this.onBehalfOf(request.requestId, () => this.#reserveOne(request, now)));
    });
  }

  /**
   * Runs `decide` for an edge request: the events it emits (a cancel, a payment, and the waitlist
   * holds they cause) carry the request's id. Holds that lazy expiry releases on the way carry none.
   */
  onBehalfOf<T>(requestId: string | undefined, decide: () => T): T {
    this.#requestId = requestId;
    try {
      return decide();
    } finally {
      this.#requestId = undefined;
    }
  }

  /**
   * The shard's spent-nonce digest: FNV-1a hashes of the nonces whose token can still be replayed,
   * and the seq it was read at. A token whose expiry its reservation recorded counts until it expired
   * before `expiredBefore`; one without, when its reservation was made since `since` (older tokens of
   * the lifetime of now have expired). Each half reads its own index: the tokens it returns.
   */
  spentNonces(since: number, expiredBefore: number): SpentDigest {
    const row = this.#row();
    if (!row) return { seq: 0, nonces: [] };
    const nonces = this.#sql
      .exec<{ nonce: string }>(
        `SELECT nonce FROM reservations
          WHERE nonce IS NOT NULL AND token_expires_at IS NOT NULL AND token_expires_at >= ?
         UNION ALL
         SELECT nonce FROM reservations WHERE nonce IS NOT NULL AND token_expires_at IS NULL AND created_at >= ?`,
        expiredBefore,
        since,
      )
      .toArray()
      .map((r) => fnv1a(r.nonce));
    return { seq: row?.seq ?? 0, nonces };
  }

  /** Releases a held reservation of `userId`. Cancelling a cancelled one again changes nothing. */
  cancel(reservationId: string, userId: string, now: number): Outcome<Reservation> {
    if (!this.#configured) return fail("RESERVATION_NOT_FOUND");
    return this.#transaction(() => {
      this.#expireDue(now, LAZY_EXPIRY_BATCH);
      const row = this.#reservationRow(reservationId);
      if (!row || row.user_id !== userId) return fail<Reservation>("RESERVATION_NOT_FOUND");
      if (row.status === "cancelled") return ok(this.#toReservation(row));
      if (row.status !== "held") return fail<Reservation>("INVALID_STATE");
      return ok(this.#release(row, "cancelled", now));
    });
  }

  /**
   * Applies a payment event once per event id (invariant 6); a replay gets the first answer again.
   * One id is one event: the same id naming another reservation, type, amount or currency is
   * `IDEMPOTENCY_MISMATCH` and changes nothing (the edge checks it first for all objects, in D1).
   *
   * - Failure releases a hold and leaves any other status as it is.
   * - Success is checked first: with a price set, `money` must be exactly quantity × price in the
   *   SKU's currency (no `money`: not checked). A wrong one changes nothing.
   * - Success turns a hold into sold; after expiry or cancel it re-takes stock when it can
   *   (respecting the per-user limit), else the reservation becomes `refund_required`.
   * - A reservation is paid once: success for one already paid (or refund_required) changes nothing.
   * Whatever changed nothing for a success answers outcome `refund_required`, and is counted.
   */
  applyPayment(
    eventId: string,
    type: PaymentType,
    reservationId: string,
    now: number,
    money?: PaymentMoney,
    settled?: Reservation,
  ): Outcome<PaymentAnswer> {
    if (!this.#configured) return fail("RESERVATION_NOT_FOUND");
    const amount = money?.amount ?? null;
    const currency = money?.currency?.toLowerCase() ?? null;
    return this.#transaction(() => {
      this.#expireDue(now, LAZY_EXPIRY_BATCH);
      const seen = this.#sql
        .exec<{
          reservation_id: string;
          status: string;
          outcome: string;
          type: string | null;
          amount: number | null;
          currency: string | null;
        }>(
          "SELECT reservation_id, status, outcome, type, amount, currency FROM payment_events WHERE event_id = ?",
          eventId,
        )
        .toArray()[0];
      // Rows from before the content was recorded (type NULL) can only be compared by reservation.
      const sameEvent =
        seen?.reservation_id === reservationId &&
        (seen.type === null || (seen.type === type && seen.amount === amount && seen.currency === currency));
      if (seen && !sameEvent) return fail<PaymentAnswer>("IDEMPOTENCY_MISMATCH");
      if (settled && settled.id === reservationId) this.#restoreSettled(settled);
      const row = this.#reservationRow(reservationId);
      if (!row) return fail<PaymentAnswer>("RESERVATION_NOT_FOUND");
      if (seen) {
        return ok({
          reservation: this.#toReservation(row),
          status: seen.status as ReservationStatus,
          outcome: seen.outcome as PaymentOutcome,
          replayed: true,
        });
      }

      let reservation = this.#toReservation(row);
      let outcome: PaymentOutcome = "applied";
      if (type === "payment.failed") {
        if (row.status === "held") reservation = this.#release(row, "cancelled", now);
      } else if (money && !this.#moneyMatches(row.quantity, money)) {
        outcome = "refund_required";
      } else if (row.status === "held") {
        const sku = this.#requireRow();
        sku.held -= row.quantity;
        sku.sold += row.quantity;
        this.#skuDirty = true;
        this.#leftHeld(row);
        reservation = this.#setStatus(row, "paid", now);
      } else if (row.status === "expired" || row.status === "cancelled") {
        const sku = this.#requireRow();
        const available = sku.total - sku.held - sku.sold;
        const withinLimit = this.#quota(row.user_id) + row.quantity <= sku.per_user_limit;
        if (available >= row.quantity && withinLimit) {
          sku.sold += row.quantity;
          this.#skuDirty = true;
          this.#addQuota(row.user_id, row.quantity);
          reservation = this.#setStatus(row, "paid", now);
        } else {
          reservation = this.#setStatus(row, "refund_required", now);
          outcome = "refund_required";
        }
      } else {
        outcome = "refund_required"; // paid already, or refunded already: never paid twice
      }
      this.#sql.exec(
        `INSERT INTO payment_events (event_id, reservation_id, status, outcome, created_at, type, amount, currency)
         VALUES (?, ?, ?, ?, ?, ?, ?, ?)`,
        eventId,
        reservationId,
        reservation.status,
        outcome,
        now,
        type,
        amount,
        currency,
      );
      if (outcome === "refund_required") {
        this.#sql.exec(
          `INSERT INTO payment_totals (outcome, count) VALUES ('refund_required', 1)
           ON CONFLICT (outcome) DO UPDATE SET count = count + 1`,
        );
      }
      return ok({ reservation, status: reservation.status, outcome, replayed: false });
    });
  }

  /**
   * Forgets what no decision needs any more, at most `limit` reservations per call:
   * - finished reservations (not held) whose latest event reconciliation found in D1 (`seq` at or
   *   below `settledSeq`, its watermark) and whose token can no longer be replayed (its own expiry,
   *   when the reservation recorded it, before `expiredBefore`; else made before `replayableSince`):
   *   D1 keeps them, and the edge reads them there (see src/orders/settled.ts);
   * - quota rows at 0, finished transfers (a giver's record after {@link TRANSFER_RECORD_RETENTION_MS}),
   *   payment event ids after {@link PAYMENT_EVENT_RETENTION_MS}.
   * Open holds, quotas, nonces of tokens not expired and unfinished transfers stay.
   */
  pruneSettled(settledSeq: number, replayableSince: number, expiredBefore: number, now: number, limit: number): Pruned {
    if (!this.#configured) return { reservations: 0, quotas: 0, transfers: 0, payments: 0, rowsRead: 0 };
    return this.#transaction(() => {
      let rowsRead = 0;
      const written = (cursor: SqlStorageCursor<Record<string, SqlStorageValue>>): number => {
        cursor.toArray();
        rowsRead += cursor.rowsRead;
        return cursor.rowsWritten;
      };
      // Found through the token indexes: what is read is what goes, plus the expired rows that stay
      // (open holds, rows changed after the watermark), not the rows of tokens still replayable.
      let reservations = written(
        this.#sql.exec(
          `DELETE FROM reservations WHERE id IN (
             SELECT id FROM reservations
              WHERE nonce IS NOT NULL AND token_expires_at IS NOT NULL AND token_expires_at < ?
                AND seq <= ? AND status != 'held'
              ORDER BY token_expires_at LIMIT ?)`,
          expiredBefore,
          settledSeq,
          limit,
        ),
      );
      // Tokens whose expiry is not known (rows from before, holds of the draw and of a sharded line):
      // by the token lifetime of now, as before.
      reservations += written(
        this.#sql.exec(
          `DELETE FROM reservations WHERE id IN (
             SELECT id FROM reservations
              WHERE nonce IS NOT NULL AND token_expires_at IS NULL AND created_at < ? AND seq <= ? AND status != 'held'
              ORDER BY created_at LIMIT ?)`,
          replayableSince,
          settledSeq,
          Math.max(0, limit - reservations),
        ),
      );
      // Rows put back for a late payment (no nonce: no token to replay), through the nonce index.
      reservations += written(
        this.#sql.exec(
          `DELETE FROM reservations WHERE id IN (
             SELECT id FROM reservations WHERE nonce IS NULL AND seq <= ? AND status != 'held' LIMIT ?)`,
          settledSeq,
          Math.max(0, limit - reservations),
        ),
      );
      const quotas = written(this.#sql.exec("DELETE FROM user_quota WHERE active = 0"));
      const transfers = written(
        this.#sql.exec(
          "DELETE FROM transfers WHERE granted IS NOT NULL AND (direction = 'in' OR created_at < ?)",
          now - TRANSFER_RECORD_RETENTION_MS,
        ),
      );
      const payments = written(
        this.#sql.exec("DELETE FROM payment_events WHERE created_at < ?", now - PAYMENT_EVENT_RETENTION_MS),
      );
      return { reservations, quotas, transfers, payments, rowsRead };
    });
  }

  /**
   * Puts back a finished reservation that was pruned (its D1 row, given by the edge), so a late
   * payment is decided as if the row had stayed: re-take the stock, or refund. Its seq is 0 (settled);
   * a change it then takes is a new event. A reservation this shard still has is left alone.
   */
  #restoreSettled(r: Reservation): void {
    if (r.status === "held") return; // holds are never pruned: a held D1 row lags the object
    this.#sql.exec(
      `INSERT INTO reservations (id, user_id, quantity, status, nonce, created_at, expires_at, updated_at, seq)
       VALUES (?, ?, ?, ?, NULL, ?, ?, ?, 0) ON CONFLICT (id) DO NOTHING`,
      r.id,
      r.userId,
      r.quantity,
      r.status,
      r.createdAt,
      r.expiresAt,
      r.updatedAt,
    );
  }

  /** Whether a payment pays `quantity` units at the SKU's price; anything goes without a price. */
  #moneyMatches(quantity: number, money: PaymentMoney): boolean {
    const { price, currency } = this.#pricingNow();
    if (price === null) return true;
    if (money.currency !== undefined && money.currency.toLowerCase() !== currency) return false;
    return money.amount === quantity * price;
  }

  #pricingNow(): Pricing {
    if (!this.#pricing) {
      const row = this.#sql
        .exec<{ price: number | null; currency: string }>("SELECT price, currency FROM sku_pricing WHERE id = 1")
        .toArray()[0];
      this.#pricing = row ?? { price: null, currency: DEFAULTS.currency };
    }
    return this.#pricing;
  }

  /** Releases every hold whose expiry is at or before `now`. Idempotent: alarms are at-least-once. */
  expireDue(now: number, limit = Number.MAX_SAFE_INTEGER): number {
    return this.#transaction(() => this.#expireDue(now, limit));
  }

  /**
   * Puts a buyer in line for released units. Only while nothing is available on this shard
   * (else `STOCK_AVAILABLE`), only within the per-user limit; joining twice keeps the first place.
   */
  joinWaitlist(
    userId: string,
    quantity: number,
    now: number,
    skuAvailable?: number,
    homeQuota?: number,
  ): Outcome<WaitlistEntry> {
    return this.#transaction(() => {
      this.#expireDue(now, LAZY_EXPIRY_BATCH);
      const sku = this.#row();
      if (!sku) return fail<WaitlistEntry>("SKU_NOT_FOUND");
      if (!isOnSale({ status: sku.status, startsAt: sku.starts_at, endsAt: sku.ends_at }, now)) {
        return fail<WaitlistEntry>("SALE_NOT_ACTIVE");
      }
      // A sharded SKU's line (on shard 0) is joined while the whole SKU has nothing for newcomers:
      // nothing available, or buyers already waiting for what is.
      const available = sku.shards > 1 ? (this.#line === 1 ? 0 : (skuAvailable ?? 0)) : sku.total - sku.held - sku.sold;
      if (this.#fenced()) return fail<WaitlistEntry>("BUSY");
      if (available > 0) return fail<WaitlistEntry>("STOCK_AVAILABLE");
      const existing = this.#sql
        .exec<{ id: string; position: number }>("SELECT id, position FROM waitlist WHERE user_id = ?", userId)
        .toArray()[0];
      if (existing) return ok({ waitlistId: existing.id, position: this.#positionOf(existing.position) });
      // A sharded SKU's line is here, the buyer's count on their home shard (`homeQuota`, read there).
      if ((homeQuota ?? this.#quota(userId)) + quantity > sku.per_user_limit)
        return fail<WaitlistEntry>("LIMIT_EXCEEDED");
      const row = this.#sql
        .exec<{ id: string; position: number }>(
          "INSERT INTO waitlist (id, user_id, quantity, created_at) VALUES (?, ?, ?, ?) RETURNING id, position",
          `w.${this.#newId().replaceAll("-", "")}`,
          userId,
          quantity,
          now,
        )
        .toArray()[0];
      if (!row) throw new Error("waitlist insert returned no row");
      return ok({ waitlistId: row.id, position: this.#positionOf(row.position) });
    });
  }

  /**
   * Giver side of a transfer between shards: takes up to `requested` available units out of this
   * shard's total, once per transfer id (a retry returns what the first call granted; a call that
   * granted nothing leaves no trace).
   */
  giveStock(transferId: string, toShard: number, requested: number, now: number): number {
    if (!this.#configured) return 0;
    return this.#transaction(() => {
      const done = this.#sql
        .exec<{ granted: number }>("SELECT granted FROM transfers WHERE id = ? AND direction = 'out'", transferId)
        .toArray()[0];
      if (done) return done.granted;
      this.#expireDue(now, LAZY_EXPIRY_BATCH);
      const sku = this.#requireRow();
      const granted = Math.max(0, Math.min(requested, sku.total - sku.held - sku.sold));
      // Nothing to give changes nothing: no row, no new seq, no mirror publish. A retry of this
      // id may then grant units; the receiver records whichever answer reached it first.
      if (granted === 0) return 0;
      sku.total -= granted;
      this.#skuDirty = true;
      this.#sql.exec(
        "INSERT INTO transfers (id, direction, peer, requested, granted, created_at) VALUES (?, 'out', ?, ?, ?, ?)",
        transferId,
        toShard,
        requested,
        granted,
        now,
      );
      this.#bumpSeq();
      return granted;
    });
  }

  /** Receiver side, step 1: the intent, recorded before the giver is asked. */
  beginTransfer(transferId: string, fromShard: number, requested: number, now: number): void {
    this.#sql.exec(
      `INSERT INTO transfers (id, direction, peer, requested, granted, created_at) VALUES (?, 'in', ?, ?, NULL, ?)
       ON CONFLICT (id) DO NOTHING`,
      transferId,
      fromShard,
      requested,
      now,
    );
  }

  /** Receiver side, step 2: adds what the giver granted, once; waiting buyers are served first. */
  completeTransfer(transferId: string, granted: number, now: number): void {
    this.#transaction(() => {
      const pending = this.#sql
        .exec("SELECT 1 FROM transfers WHERE id = ? AND direction = 'in' AND granted IS NULL", transferId)
        .toArray();
      if (pending.length === 0) return;
      this.#sql.exec("UPDATE transfers SET granted = ? WHERE id = ?", granted, transferId);
      if (granted === 0) return;
      const sku = this.#requireRow();
      sku.total += granted;
      this.#skuDirty = true;
      this.#bumpSeq();
      this.#fillWaitlist(now);
    });
  }

  /** Transfers this shard asked for whose answer it never recorded (the alarm finishes them). */
  pendingTransfers(): PendingTransfer[] {
    if (!this.#configured) return [];
    return this.#sql
      .exec<{ id: string; peer: number; requested: number }>(
        "SELECT id, peer, requested FROM transfers WHERE direction = 'in' AND granted IS NULL ORDER BY created_at",
      )
      .toArray()
      .map((row) => ({ id: row.id, from: row.peer, requested: row.requested }));
  }

  /** The SKU's total as the operator last set it (shard 0 only), or null if never recorded. */
  skuTarget(): number | null {
    if (!this.#configured) return null;
    return this.#sql.exec<{ total: number }>("SELECT total FROM sku_target WHERE id = 1").toArray()[0]?.total ?? null;
  }

  #setTarget(total: number): void {
    this.#sql.exec(
      "INSERT INTO sku_target (id, total) VALUES (1, ?) ON CONFLICT (id) DO UPDATE SET total = excluded.total",
      total,
    );
  }

  /**
   * What reconciliation needs to compare this shard with D1, reading one page of what changed
   * after `afterSeq` through the seq index: its cost follows the changes, not the history.
   */
  audit(afterSeq: number, limit: number, now: number): Audit | null {
    const sku = this.#row();
    if (!sku) return null;
    let rowsRead = 1;
    const read = <T extends Record<string, SqlStorageValue>>(cursor: SqlStorageCursor<T>): T[] => {
      const rows = cursor.toArray();
      rowsRead += cursor.rowsRead;
      return rows;
    };
    const changed = read(
      this.#sql.exec<{ id: string; status: string; seq: number; updated_at: number }>(
        "SELECT id, status, seq, updated_at FROM reservations WHERE seq > ? ORDER BY seq LIMIT ?",
        afterSeq,
        limit,
      ),
    ).map((r) => ({ id: r.id, status: r.status as ReservationStatus, seq: r.seq, updatedAt: r.updated_at }));
    const unsentRow = read(
      this.#sql.exec<{ events: string }>("SELECT events FROM outbox_events ORDER BY first_seq LIMIT 1"),
    )[0];
    const unsentEvent = unsentRow ? (JSON.parse(`[${unsentRow.events}]`) as OrderEvent[])[0] : undefined;
    const unsentSeq = unsentEvent?.seq;
    const overdue = read(
      this.#sql.exec<{ n: number }>(
        "SELECT COUNT(*) AS n FROM reservations WHERE status = 'held' AND expires_at <= ?",
        now,
      ),
    )[0];
    const transfers = read(
      this.#sql.exec<{ n: number }>("SELECT COUNT(*) AS n FROM transfers WHERE direction = 'in' AND granted IS NULL"),
    )[0];

    return {
      state: toState(sku, this.#pricingNow()),
      changed,
      oldestUnsent:
        unsentSeq !== undefined && unsentEvent
          ? { seq: unsentSeq, occurredAt: Date.parse(unsentEvent.occurredAt) }
          : null,
      overdueHolds: overdue?.n ?? 0,
      pendingTransfers: transfers?.n ?? 0,
      created: sku.created,
      skuTotal: this.skuTarget(),
      rowsRead,
    };
  }

  /**
   * The check-back's repair: writes a fresh event with the current status of each reservation
   * (a higher seq, so the consumer applies it over whatever D1 holds). Returns how many.
   */
  reemit(reservationIds: readonly string[], now: number): number {
    if (!this.#configured) return 0;
    return this.#transaction(() => {
      let count = 0;
      for (const id of reservationIds) {
        const row = this.#reservationRow(id);
        if (!row) continue;
        this.#emit(this.#toReservation(row), now);
        count++;
      }
      return count;
    });
  }

  reservation(reservationId: string): Reservation | null {
    if (!this.#configured) return null;
    const row = this.#reservationRow(reservationId);
    return row ? this.#toReservation(row) : null;
  }

  /** The earliest expiry among live holds: when the alarm must fire next. */
  nextExpiry(): number | null {
    if (this.#earliest === undefined) {
      this.#writePending();
      const row = this.#sql
        .exec<{ at: number | null }>("SELECT MIN(expires_at) AS at FROM reservations WHERE status = 'held'")
        .toArray()[0];
      this.#earliest = row?.at ?? null;
    }
    return this.#earliest;
  }

  /** Whether the outbox holds events not yet sent (one row read, nothing parsed). */
  hasPendingEvents(): boolean {
    if (!this.#configured) return false;
    this.#writePending();
    return this.#sql.exec("SELECT 1 FROM outbox_events LIMIT 1").toArray().length > 0;
  }

  /**
   * Outbox rows not yet sent, oldest first, until they hold at least `limit` events (one more row's
   * worth at most), their text as stored: the sender joins it into message bodies unparsed.
   */
  pendingRows(limit: number): OutboxRow[] {
    if (!this.#configured) return [];
    this.#writePending();
    const out: OutboxRow[] = [];
    let events = 0;
    for (let after = -1; events < limit; ) {
      const rows = this.#sql
        .exec<{ last_seq: number; count: number; events: string }>(
          "SELECT last_seq, count, events FROM outbox_events WHERE first_seq > ? ORDER BY first_seq LIMIT 32",
          after,
        )
        .toArray();
      for (const row of rows) {
        if (events >= limit) return out;
        out.push({ lastSeq: row.last_seq, count: row.count, events: row.events });
        events += row.count;
        after = row.last_seq;
      }
      if (rows.length < 32) break;
    }
    return out;
  }

  /** The events of {@link pendingRows}, parsed: what the outbox holds, as the tests read it. */
  pendingEvents(limit: number): PendingEvent[] {
    return this.pendingRows(limit).flatMap((row) =>
      (JSON.parse(`[${row.events}]`) as OrderEvent[]).map((event) => ({ seq: event.seq, event })),
    );
  }

  /**
   * Forgets outbox rows once the queue has their events: the sender sends oldest first and stops at
   * a failure, so what it confirms is a prefix, up to and including the row ending at `lastSeq`.
   */
  markSent(lastSeq: number): void {
    this.#sql.exec("DELETE FROM outbox_events WHERE last_seq <= ?", lastSeq);
  }

  /**
   * Reads what a batch's decisions need in two statements, not two per request: the reservations of
   * its nonces (replays) and its users' quotas. Users absent from `user_quota` hold nothing (0).
   */
  #prefetch(requests: readonly ReserveRequest[]): void {
    const work = this.#work;
    this.#writePending();
    const nonces = requests.map((r) => r.nonce);
    for (const nonce of nonces) work.nonces.set(nonce, null);
    for (const chunk of chunks(nonces)) {
      const priors = this.#sql
        .exec<ReservationRow>(
          "SELECT * FROM reservations WHERE nonce IN (SELECT value FROM json_each(?))",
          JSON.stringify(chunk),
        )
        .toArray();
      for (const row of priors) if (row.nonce !== null) work.nonces.set(row.nonce, row);
    }
    const users: string[] = [];
    for (const { userId } of requests) {
      if (work.quotas.has(userId)) continue;
      work.quotas.set(userId, 0);
      users.push(userId);
    }
    for (const chunk of chunks(users)) {
      const quotas = this.#sql
        .exec<{ user_id: string; active: number }>(
          "SELECT user_id, active FROM user_quota WHERE user_id IN (SELECT value FROM json_each(?))",
          JSON.stringify(chunk),
        )
        .toArray();
      for (const q of quotas) work.quotas.set(q.user_id, q.active);
    }
  }

  /** The reservation made with `nonce`, if any: from this transaction's working set, else SQLite. */
  #priorOf(nonce: string): ReservationRow | null {
    const known = this.#work.nonces.get(nonce);
    if (known !== undefined) return known;
    this.#writePending();
    const row = this.#sql.exec<ReservationRow>("SELECT * FROM reservations WHERE nonce = ?", nonce).toArray()[0];
    this.#work.nonces.set(nonce, row ?? null);
    return row ?? null;
  }

  #reserveOne(request: ReserveRequest, now: number, forLine = false): Outcome<ReserveAnswer> {
    const sku = this.#row();
    if (!sku) return fail("SKU_NOT_FOUND");
    const available = sku.total - sku.held - sku.sold;

    const prior = this.#priorOf(request.nonce);
    if (prior) {
      if (prior.quantity !== request.quantity || prior.user_id !== request.userId) {
        return fail("IDEMPOTENCY_MISMATCH", available);
      }
      const draw = this.draw.placeOfNonce(request.nonce) ?? undefined;
      return ok({ reservation: this.#toReservation(prior), replayed: true, available, ...(draw ? { draw } : {}) });
    }
    const drawn = this.#drawAnswer(request, available);
    if (drawn) return drawn;
    // A resize has staged this shard: no new hold until it commits or is lifted (moments).
    if (this.#fenced()) return fail("BUSY", available);
    if (request.shards !== undefined && request.shards !== sku.shards) return fail("TOKEN_INVALID");

    if (!isOnSale({ status: sku.status, startsAt: sku.starts_at, endsAt: sku.ends_at }, now)) {
      return fail("SALE_NOT_ACTIVE", available);
    }
    if (this.#quota(request.userId) + request.quantity > sku.per_user_limit) {
      return fail("LIMIT_EXCEEDED", available);
    }
    if (this.draw.pending(now)) return this.#enterDraw(request, sku, now);
    // Buyers are waiting for this SKU: its units are theirs, a newcomer joins the line.
    if (this.#line === 1 && !forLine) return fail("SOLD_OUT", 0);
    if (available === 0) return fail("SOLD_OUT", 0);
    if (available < request.quantity) return fail("INSUFFICIENT_STOCK", available);

    const reservation = this.#hold(sku, request.userId, request.quantity, request.nonce, now, request.tokenExpiresAt);
    return ok({ reservation, replayed: false, available: available - request.quantity });
  }

  /**
   * Takes a hold: the held count and the seq in the memory row, the reservation (with its seq), its
   * nonce and its outbox event into the transaction's working set, the user's quota; all written
   * before the commit (see {@link #writeBack}). Returns the reservation.
   */
  #hold(
    sku: SkuRow,
    userId: string,
    quantity: number,
    nonce: string | null,
    now: number,
    tokenExpiresAt?: number,
  ): Reservation {
    sku.held += quantity;
    sku.seq += 1;
    sku.created += 1;
    this.#skuDirty = true;
    const row: ReservationRow & { seq: number } = {
      id: `${sku.sku}.${sku.shard}.${this.#newId().replaceAll("-", "")}`,
      user_id: userId,
      quantity,
      status: "held",
      nonce,
      created_at: now,
      expires_at: now + sku.hold_seconds * 1000,
      updated_at: now,
      token_expires_at: nonce === null ? null : (tokenExpiresAt ?? null),
      seq: sku.seq,
    };
    if (this.#work.holds.push(row) >= WRITE_CHUNK) this.#writePending();
    if (nonce !== null) this.#work.nonces.set(nonce, row);
    if (this.#earliest !== undefined) {
      this.#earliest = this.#earliest === null ? row.expires_at : Math.min(this.#earliest, row.expires_at);
    }
    this.#addQuota(userId, quantity);
    const reservation = this.#toReservation(row);
    this.#emit(reservation, now, row.seq);
    return reservation;
  }

  /**
   * Hands available units to waiting buyers, first fit in FIFO order, each within the per-user
   * limit, in the caller's transaction (the same one that released the units). Entries lapse
   * with the sale; while the sale is paused or not started they wait.
   */
  #fillWaitlist(now: number): void {
    const sku = this.#row();
    if (!sku) return;
    if (sku.ends_at !== null && now >= sku.ends_at) {
      this.#sql.exec("DELETE FROM waitlist");
      return;
    }
    // A sharded SKU's line is served by shard 0 across shards (SkuStock), not from this shard alone.
    if (sku.shards > 1) return;
    if (!isOnSale({ status: sku.status, startsAt: sku.starts_at, endsAt: sku.ends_at }, now)) return;
    let available = sku.total - sku.held - sku.sold;
    // Per quantity, the position up to which entries were found over their limit (skipped this time).
    const skipped = new Map<number, number>();
    while (available > 0) {
      const entry = this.#firstThatFits(available, skipped);
      if (!entry) return;
      if (this.#quota(entry.user_id) + entry.quantity > sku.per_user_limit) {
        skipped.set(entry.quantity, entry.position);
        continue;
      }
      this.#sql.exec("DELETE FROM waitlist WHERE id = ?", entry.id);
      this.#hold(this.#requireRow(), entry.user_id, entry.quantity, null, now);
      available -= entry.quantity;
    }
  }

  /**
   * The longest-waiting entry whose quantity fits in `available`, read through the (quantity,
   * position) index: one seek per distinct quantity that fits (bounded by the per-user limit), never
   * the whole line, so entries that cannot fit cost nothing however many wait.
   */
  #firstThatFits(
    available: number,
    skipped: ReadonlyMap<number, number>,
  ): { id: string; user_id: string; quantity: number; position: number } | undefined {
    let first: { id: string; user_id: string; quantity: number; position: number } | undefined;
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
        .exec<{ id: string; user_id: string; quantity: number; position: number }>(
          "SELECT id, user_id, quantity, position FROM waitlist WHERE quantity = ? AND position > ? ORDER BY position LIMIT 1",
          quantity,
          skipped.get(quantity) ?? 0,
        )
        .toArray()[0];
      if (head && (!first || head.position < first.position)) first = head;
    }
  }

  #expireDue(now: number, limit: number): number {
    // The earliest expiry is known most of the time: a request then reads nothing to learn that
    // no hold is due.
    if (this.#earliest === null || (this.#earliest !== undefined && now < this.#earliest)) return 0;
    this.#writePending();
    const due = this.#sql
      .exec<ReservationRow>(
        "SELECT * FROM reservations WHERE status = 'held' AND expires_at <= ? ORDER BY expires_at LIMIT ?",
        now,
        limit,
      )
      .toArray();
    // Expiry is nobody's request, even when a request's transaction does it on the way.
    const requestId = this.#requestId;
    this.#requestId = undefined;
    try {
      for (const row of due) this.#release(row, "expired", now);
    } finally {
      this.#requestId = requestId;
    }
    return due.length;
  }

  /** Gives a hold's units back: the one place stock returns to `available` (invariant 5). */
  #release(row: ReservationRow, status: "expired" | "cancelled", now: number): Reservation {
    const sku = this.#requireRow();
    sku.held -= row.quantity;
    this.#skuDirty = true;
    this.#leftHeld(row);
    this.#freed += row.quantity;
    this.#addQuota(row.user_id, -row.quantity);
    const reservation = this.#setStatus(row, status, now);
    this.#fillWaitlist(now);
    return reservation;
  }

  /** A live hold ends (released or paid): the earliest expiry may have been its own. */
  #leftHeld(row: ReservationRow): void {
    if (this.#earliest === row.expires_at) this.#earliest = undefined;
  }

  #setStatus(row: ReservationRow, status: ReservationStatus, now: number): Reservation {
    const seq = this.#bumpSeq();
    this.#sql.exec(
      "UPDATE reservations SET status = ?, updated_at = ?, seq = ? WHERE id = ?",
      status,
      now,
      seq,
      row.id,
    );
    const reservation = this.#toReservation({ ...row, status, updated_at: now });
    this.#emit(reservation, now, seq);
    return reservation;
  }

  /**
   * Puts the event of a state change into the outbox, in the caller's transaction (written before its
   * commit). `taken`: the seq the caller already took and wrote into the reservation row.
   */
  #emit(reservation: Reservation, now: number, taken?: number): void {
    const seq = taken ?? this.#bumpSeq();
    const event: OrderEvent = {
      id: this.#newId(),
      type: eventTypeOf(reservation.status),
      reservationId: reservation.id,
      sku: reservation.sku,
      userId: reservation.userId,
      quantity: reservation.quantity,
      occurredAt: isoTime(now),
      expiresAt: isoTime(reservation.expiresAt),
      seq,
    };
    if (this.#requestId !== undefined) event.requestId = this.#requestId;
    if (this.#work.events.push([seq, event]) >= WRITE_CHUNK) this.#writePending();
    if (taken === undefined) this.#sql.exec("UPDATE reservations SET seq = ? WHERE id = ?", seq, reservation.id);
  }

  #positionOf(position: number): number {
    const row = this.#sql
      .exec<{ n: number }>("SELECT COUNT(*) AS n FROM waitlist WHERE position <= ?", position)
      .toArray()[0];
    return row?.n ?? 1;
  }

  /**
   * Shard 0 of a sharded SKU serving its line: holds for a waiting buyer on the buyer's home shard
   * (this one), ignoring the line itself. The entry id is the nonce, so serving an entry again
   * (after a crash) replays its hold: a buyer is served exactly once.
   */
  holdForLine(entryId: string, userId: string, quantity: number, now: number): Outcome<ReserveAnswer> {
    return this.#transaction(() => {
      this.#expireDue(now, LAZY_EXPIRY_BATCH);
      return this.#reserveOne({ userId, nonce: entryId, quantity }, now, true);
    });
  }

  /** The line, first in line first (shard 0 of a sharded SKU). Lapses it when the sale has ended. */
  lineEntries(now: number): { id: string; userId: string; quantity: number }[] {
    const sku = this.#row();
    if (!sku) return [];
    if (sku?.ends_at != null && now >= sku.ends_at) this.#sql.exec("DELETE FROM waitlist");
    return this.#sql
      .exec<{ id: string; user_id: string; quantity: number }>(
        "SELECT id, user_id, quantity FROM waitlist ORDER BY position",
      )
      .toArray()
      .map((r) => ({ id: r.id, userId: r.user_id, quantity: r.quantity }));
  }

  /**
   * Fair opening, on the reservation path: a token that joined an entry of the draw gets the
   * entry's answer once it is decided, and waits until then (never decided on arrival).
   */
  #drawAnswer(request: ReserveRequest, available: number): Outcome<ReserveAnswer> | undefined {
    if (this.draw.deciding) return undefined;
    const entry = this.draw.entryOfToken(request.nonce);
    if (!entry) return undefined;
    if (entry.quantity !== request.quantity || entry.user_id !== request.userId) {
      return fail("IDEMPOTENCY_MISMATCH", available);
    }
    if (entry.code === null || entry.position === null || entry.entry_id === null) return fail("DRAW_PENDING");
    return this.#drawnOutcome(entry, { entryId: entry.entry_id, position: entry.position }, available);
  }

  /**
   * A waiting request's draw answer, read without a transaction (SkuStock.awaitDraw): its entry's
   * recorded answer, `DRAW_PENDING` until there is one, or undefined when its token joined no entry.
   * It only reads, so a woken request costs a read, not a transaction.
   */
  drawAnswerOf(request: ReserveRequest): Outcome<ReserveAnswer> | undefined {
    const sku = this.#row();
    return sku ? this.#drawAnswer(request, sku.total - sku.held - sku.sold) : undefined;
  }

  #drawnOutcome(
    entry: { code: string | null; answer: string | null },
    at: { entryId: string; position: number },
    available: number,
  ): Outcome<ReserveAnswer> {
    const draw: DrawPlace = { ...at, entrants: this.draw.entrantCount() };
    if (entry.code === "HELD" && entry.answer) {
      const stored = JSON.parse(entry.answer) as Reservation;
      const row = this.#reservationRow(stored.id);
      return ok({ reservation: row ? this.#toReservation(row) : stored, replayed: true, available, draw });
    }
    return { ok: false, code: (entry.code ?? "BUSY") as StockErrorCode, available, draw };
  }

  /**
   * A reservation while the draw is pending: inside the window, an entry (one per user; a user's
   * other tokens join it); after the window, before the decision, it waits and is then decided on
   * arrival. Either way the edge waits (`DRAW_PENDING`).
   */
  #enterDraw(request: ReserveRequest, sku: SkuRow, now: number): Outcome<ReserveAnswer> {
    if (!this.draw.open(now)) return fail("DRAW_PENDING");
    const entered = this.draw.enter(request.userId, request.nonce, request.quantity, sku.shard, now);
    return entered === "mismatch" ? fail("IDEMPOTENCY_MISMATCH") : fail("DRAW_PENDING");
  }

  /** Whether shard 0 must decide its draw now (the window closed, no decision yet). */
  drawDue(now: number): boolean {
    const closesAt = this.draw.closesAt();
    return closesAt !== null && !this.draw.decided() && now >= closesAt;
  }

  /**
   * Closes this shard's entries (idempotent: nobody enters after) and returns them. Shard 0 then
   * ranks all of the SKU's entrants with its seed ({@link rankEntrants}, outside any transaction).
   */
  closeDraw(now: number): Entrant[] {
    return this.#transaction(() => this.draw.close(now, this.#requireRow().shard));
  }

  /**
   * Decides a one-shard SKU's draw in one transaction, given its entrants ranked by the seed: each
   * is decided in that order as a reservation of its first token (limit, stock, first fit), and the
   * seed is revealed. Once nothing is left, the rest are SOLD_OUT in one statement. Exactly once:
   * a decided draw is not decided again. Returns the number of entrants decided now.
   */
  decideDraw(ranked: readonly RankedEntrant[], now: number): number {
    return this.#transaction(() => {
      if (this.draw.decided()) return 0;
      this.#expireDue(now, LAZY_EXPIRY_BATCH);
      const order = this.draw.place(ranked, now);
      this.draw.deciding = true;
      try {
        for (const e of order) {
          const sku = this.#row(); // the memory row: each hold below changes it
          const left = sku ? sku.total - sku.held - sku.sold : 0;
          if (left === 0) break;
          if (e.code !== null) continue;
          const outcome = this.#reserveOne(e, now, true);
          this.#recordDrawn(e.userId, { entryId: e.entryId, position: e.position, entrants: order.length }, outcome);
        }
        this.draw.settleRest("SOLD_OUT");
        this.draw.finish(now);
      } finally {
        this.draw.deciding = false;
      }
      return order.length;
    });
  }

  #recordDrawn(userId: string, place: DrawPlace, outcome: Outcome<ReserveAnswer>): void {
    const answer = outcome.ok ? { ...outcome.value.reservation } : null;
    this.draw.settle(userId, outcome.ok ? "HELD" : outcome.code, place, answer);
  }

  /** Shard 0 of a sharded SKU: writes the order of all shards' entrants (idempotent). */
  placeDraw(ranked: readonly RankedEntrant[], now: number): ReturnType<OpeningDraw["place"]> {
    return this.#transaction(() => this.draw.place(ranked, now));
  }

  /**
   * The home shard of an entry of a sharded SKU's draw, asked by shard 0 in draw order: reserves
   * for the entry (its first token's nonce, its quantity, the user's limit here). A short answer is
   * recorded only when `record` (the caller first pulls stock from siblings and asks again); an
   * entry already settled answers what it got.
   */
  settleDrawEntry(userId: string, place: DrawPlace, now: number, record: boolean): Outcome<ReserveAnswer> {
    return this.#transaction(() => {
      const e = this.draw.entrantOf(userId);
      if (!e) return fail<ReserveAnswer>("RESERVATION_NOT_FOUND");
      const sku = this.#requireRow();
      const available = sku.total - sku.held - sku.sold;
      if (e.code !== null) return this.#drawnOutcome(e, place, available);
      this.#expireDue(now, LAZY_EXPIRY_BATCH);
      this.draw.deciding = true;
      let outcome: Outcome<ReserveAnswer>;
      try {
        const request = { userId, nonce: e.nonce, quantity: e.quantity };
        outcome = this.#reserveOne(request, now, true);
      } finally {
        this.draw.deciding = false;
      }
      const short = !outcome.ok && (outcome.code === "SOLD_OUT" || outcome.code === "INSUFFICIENT_STOCK");
      if (!short || record) this.#recordDrawn(userId, place, outcome);
      return outcome.ok ? ok({ ...outcome.value, draw: place }) : { ...outcome, draw: place };
    });
  }

  /** Records results decided elsewhere (shard 0's copies; a home shard's entries left SOLD_OUT). */
  recordDrawResults(results: readonly { userId: string; place: DrawPlace; code: string }[]): void {
    this.#transaction(() => {
      for (const r of results) this.draw.settle(r.userId, r.code, r.place, null, true);
    });
  }

  /** The draw is decided (shard 0: the seed is revealed) or, on a sibling, over. */
  finishDraw(now: number): void {
    this.#transaction(() => this.draw.finish(now));
  }

  /** An entry served (its hold made): out of the line. */
  leaveLine(entryId: string): void {
    this.#sql.exec("DELETE FROM waitlist WHERE id = ?", entryId);
  }

  /** Buyers wait in the SKU's line and its units are theirs: newcomers are answered SOLD_OUT. */
  get lineAhead(): boolean {
    return this.#line === 1;
  }

  /** Buyers wait in the SKU's line: units freed here are offered to it (shard 0 serves it). */
  get lineWaiting(): boolean {
    return this.#line !== 0;
  }

  /** Shard 0 tells every shard what the SKU's line is now (see {@link LineMode}). */
  setLine(mode: LineMode): void {
    this.#sql.exec(
      "INSERT INTO line_state (id, mode) VALUES (1, ?) ON CONFLICT (id) DO UPDATE SET mode = excluded.mode",
      mode,
    );
    this.#line = mode;
  }

  get line(): LineMode {
    return this.#line;
  }

  /** A user's active quantity (held + sold) on this shard: the per-user limit's count. */
  quotaOf(userId: string): number {
    if (!this.#configured) return 0;
    return this.#quota(userId);
  }

  /** Units released or added since the last call (0 when nothing was). */
  takeFreed(): number {
    const freed = this.#freed;
    this.#freed = 0;
    return freed;
  }

  /** Buyers waiting for released units on this shard. */
  waitlistLength(): number {
    if (!this.#configured) return 0;
    return this.#sql.exec<{ n: number }>("SELECT COUNT(*) AS n FROM waitlist").toArray()[0]?.n ?? 0;
  }

  /**
   * The opening window, in the state only when one is set: a SKU without one answers exactly as the
   * classic Lua script does (test/lua-parity), and the views show it as 0.
   */
  #windowOf(): { openingWindowMs?: number } {
    return this.draw.windowMs > 0 ? { openingWindowMs: this.draw.windowMs } : {};
  }

  #stateNow(): SkuState {
    return this.#stateOf(this.#requireRow());
  }

  #bumpSeq(): number {
    const sku = this.#requireRow();
    sku.seq += 1;
    this.#skuDirty = true;
    return sku.seq;
  }

  /**
   * A user's active quantity (held + sold). Kept for the transaction only: the working set of a batch
   * is its users (read in one statement, {@link #prefetch}), so memory never holds every user's quota.
   */
  #quota(userId: string): number {
    const known = this.#work.quotas.get(userId);
    if (known !== undefined) return known;
    const row = this.#sql
      .exec<{ active: number }>("SELECT active FROM user_quota WHERE user_id = ?", userId)
      .toArray()[0];
    this.#work.quotas.set(userId, row?.active ?? 0);
    return row?.active ?? 0;
  }

  /** Changes a user's quota in the working set; written (absolute, CHECK active >= 0) before the commit. */
  #addQuota(userId: string, delta: number): void {
    this.#work.quotas.set(userId, this.#quota(userId) + delta);
    this.#work.dirtyQuotas.add(userId);
  }

  /** The SKU row in memory (read from SQLite once, and again after a transaction threw). */
  #row(): SkuRow | undefined {
    if (this.#skuRow === undefined) {
      this.#skuRow = this.#sql.exec<SkuRow>("SELECT * FROM sku WHERE id = 1").toArray()[0] ?? null;
    }
    return this.#skuRow ?? undefined;
  }

  #requireRow(): SkuRow {
    const row = this.#row();
    if (!row) throw new Error("stock object is not configured");
    return row;
  }

  #skuName(): string {
    this.#sku ??= this.#requireRow().sku;
    return this.#sku;
  }

  #reservationRow(id: string): ReservationRow | undefined {
    this.#writePending();
    return this.#sql.exec<ReservationRow>("SELECT * FROM reservations WHERE id = ?", id).toArray()[0];
  }

  #toReservation(row: ReservationRow): Reservation {
    return {
      id: row.id,
      sku: this.#skuName(),
      userId: row.user_id,
      quantity: row.quantity,
      status: row.status as ReservationStatus,
      createdAt: row.created_at,
      expiresAt: row.expires_at,
      updatedAt: row.updated_at,
    };
  }
}

function toState(row: SkuRow, pricing: Pricing): SkuState {
  return {
    sku: row.sku,
    shard: row.shard,
    shards: row.shards,
    name: row.name,
    status: row.status as SaleStatus,
    perUserLimit: row.per_user_limit,
    holdSeconds: row.hold_seconds,
    startsAt: row.starts_at,
    endsAt: row.ends_at,
    stock: { total: row.total, available: row.total - row.held - row.sold, held: row.held, sold: row.sold },
    version: row.seq,
    price: pricing.price,
    currency: pricing.currency,
  };
}

/** Whether the sale takes reservations at `now`: on sale and inside its window (end excluded). */
export function isOnSale(sale: Pick<SkuState, "startsAt" | "endsAt"> & { status: string }, now: number): boolean {
  return (
    sale.status === "on_sale" &&
    (sale.startsAt === null || now >= sale.startsAt) &&
    (sale.endsAt === null || now < sale.endsAt)
  );
}

/**
 * Whether a shard's reservation answer shows the whole SKU sold out. A shard's "available 0" speaks
 * for the SKU only when it is the only shard; a sharded SKU answers SOLD_OUT only once its siblings
 * had nothing to give either.
 */
export function showsSoldOut(answer: Outcome<ReserveAnswer>, shards: number): boolean {
  if (shards === 1) return (answer.ok ? answer.value.available : answer.available) === 0;
  return !answer.ok && answer.code === "SOLD_OUT";
}

/** Shard states summed into one SKU: the configuration of shard 0, the stock of all. */
export function sumShards(states: readonly SkuState[]): SkuState {
  const [first, ...rest] = states;
  if (!first) throw new Error("a SKU has at least one shard");
  const stock = { ...first.stock };
  let version = first.version;
  for (const shard of rest) {
    stock.total += shard.stock.total;
    stock.available += shard.stock.available;
    stock.held += shard.stock.held;
    stock.sold += shard.stock.sold;
    version += shard.version;
  }
  return { ...first, stock, version };
}
