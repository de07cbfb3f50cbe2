import { SkuStock } from "../../durable-objects/stock/sku-stock";
import type { EngineStorage, ReserveOutcome, ReserveRequest } from "../../durable-objects/stock/stock-model";

/** What `GET /bench/stock/:sku/:shard/stats` answers: the object's storage as the soak watches it. */
export interface StockStats {
  /** Rows read by the engine's SQL statements since this instance started (with COUNT_ROWS_READ). */
  rowsRead: number;
  /** SQL statements the engine ran since this instance started (each one a call from JS into SQLite). */
  statements: number;
  /** Engine transactions (`transactionSync` calls) since this instance started. */
  transactions: number;
  /** Reserve RPCs since this instance started, and the requests they carried (their mean batch). */
  reserveCalls: number;
  reserveRequests: number;
  /** The object's SQLite database, in bytes. */
  databaseSize: number;
  /** Rows per table. */
  rows: Record<string, number>;
}

const TABLES = ["reservations", "user_quota", "payment_events", "waitlist", "transfers", "outbox_events"] as const;

type Cursor = SqlStorageCursor<Record<string, SqlStorageValue>>;
interface Counter {
  statements: number;
  transactions: number;
  rowsRead: number;
  /** The last cursor: its count is final once consumed, which the engine does before its next statement. */
  last: Cursor | null;
}

/** Counters by storage: the engine's storage is made during the base constructor, before fields exist. */
const counters = new WeakMap<DurableObjectStorage, Counter>();

/**
 * The stock object as the harness runs it: the production class plus what chaos and the soak need,
 * exported by the harness entry only, as `SkuStock` (the binding's `class_name` in wrangler.toml).
 * With the var COUNT_ROWS_READ="true" (scripts/soak.ts sets it) the engine's rows read are counted.
 */
export class HarnessStock extends SkuStock {
  protected override engineStorage(storage: DurableObjectStorage): EngineStorage {
    const counter: Counter = { statements: 0, transactions: 0, rowsRead: 0, last: null };
    counters.set(storage, counter);
    // Statements are always counted (the bench reports SQL statements per reservation): a plain
    // closure and an increment, no Proxy, so the measured object costs what production's does.
    // Rows read need the cursor of every statement kept: a Proxy, only when the soak asks for it
    // (that wrapper was the top self-time entry of a hot-SKU profile). Transactions are always counted.
    const transactionSync = <T>(fn: () => T): T => {
      counter.transactions++;
      return storage.transactionSync(fn);
    };
    if (this.env.COUNT_ROWS_READ !== "true") {
      const sql = storage.sql;
      const counted = {
        exec: (query: string, ...bindings: SqlStorageValue[]): Cursor => {
          counter.statements++;
          return sql.exec(query, ...bindings);
        },
      } as unknown as SqlStorage;
      return { sql: counted, transactionSync };
    }
    const exec = (query: string, ...bindings: SqlStorageValue[]): Cursor => {
      counter.statements++;
      if (counter.last) counter.rowsRead += counter.last.rowsRead;
      counter.last = storage.sql.exec(query, ...bindings);
      return counter.last;
    };
    const sql = new Proxy(storage.sql, {
      get: (target, prop) => {
        if (prop === "exec") return exec;
        const value: unknown = Reflect.get(target, prop);
        return typeof value === "function" ? value.bind(target) : value;
      },
    });
    return { sql, transactionSync };
  }

  /** Storage figures, read outside the engine (so not counted in `rowsRead`). */
  #reserveCalls = 0;
  #reserveRequests = 0;

  override reserve(requests: ReserveRequest[]): Promise<ReserveOutcome[]> {
    this.#reserveCalls++;
    this.#reserveRequests += requests.length;
    return super.reserve(requests);
  }

  harnessStats(): StockStats {
    const counter = counters.get(this.ctx.storage);
    if (counter?.last) {
      counter.rowsRead += counter.last.rowsRead;
      counter.last = null;
    }
    const { sql } = this.ctx.storage;
    const rows: Record<string, number> = {};
    for (const table of TABLES) rows[table] = sql.exec<{ n: number }>(`SELECT COUNT(*) AS n FROM ${table}`).one().n;
    return {
      rowsRead: counter?.rowsRead ?? 0,
      statements: counter?.statements ?? 0,
      transactions: counter?.transactions ?? 0,
      reserveCalls: this.#reserveCalls,
      reserveRequests: this.#reserveRequests,
      databaseSize: sql.databaseSize,
      rows,
    };
  }

  /**
   * Fills this stock object for the bench's memory figures (`POST /bench/stock/:sku/:shard/fill`):
   * - `holds` live holds, each a fresh user, made by the engine itself in batches of 64 (one
   *   transaction each, as the reserve RPC makes them);
   * - `paidUsers` users who each bought one unit, as a long sale leaves them once finished rows are
   *   pruned: a quota row per user (`<run>-<i>` from `from`, so the engine route's users of that run
   *   meet them; bound numbers arrive as REAL, hence the CAST),
   *   and the SKU's total and sold raised by as many.
   * The synthetic holds' events are dropped from the outbox (the queue is not what is measured). The
   * engine then forgets its memory, as a restarted object would, and decides on what SQLite holds.
   */
  harnessFill(opts: { run: string; holds?: number; paidUsers?: number; from?: number }): {
    holds: number;
    paidUsers: number;
  } {
    const now = this.now();
    let holds = 0;
    for (let i = 0; i < (opts.holds ?? 0); i += 64) {
      const size = Math.min(64, (opts.holds ?? 0) - i);
      const requests = Array.from({ length: size }, (_, k) => ({
        userId: `${opts.run}-h${i + k}`,
        nonce: crypto.randomUUID(),
        quantity: 1,
      }));
      holds += this.engine.holds.reserve(requests, now).filter((a) => a.ok).length;
    }
    const { sql } = this.ctx.storage;
    const paidUsers = opts.paidUsers ?? 0;
    if (paidUsers > 0) {
      this.ctx.storage.transactionSync(() => {
        sql.exec(
          `WITH RECURSIVE n(i) AS (SELECT ? UNION ALL SELECT i + 1 FROM n WHERE i + 1 < ?)
           INSERT INTO user_quota (user_id, active) SELECT ? || '-' || CAST(i AS INTEGER), 1 FROM n`,
          opts.from ?? 0,
          (opts.from ?? 0) + paidUsers,
          opts.run,
        );
        sql.exec("UPDATE sku SET total = total + ?, sold = sold + ?, seq = seq + 1 WHERE id = 1", paidUsers, paidUsers);
      });
    }
    sql.exec("DELETE FROM outbox_events");
    this.engine.forget();
    return { holds, paidUsers };
  }

  /**
   * Bench (`POST /bench/draw`, bench point `draw_decide`): puts `count` entrants (fresh users, one
   * token each) into this shard's opening window, as batches of 64 through the engine's `reserve`,
   * at a clock set inside the window (the object's `now` seam: the bench's window opens an hour
   * ahead, so the real alarm stays out of the measurement). Returns how many became entries.
   */
  benchDrawEnter(run: string, count: number): number {
    const closesAt = this.engine.draw.closesAt();
    if (closesAt === null) throw new Error("this SKU has no opening window");
    const inside = closesAt - 1;
    this.now = () => inside;
    let entered = 0;
    for (let i = 0; i < count; i += 64) {
      const batch: ReserveRequest[] = Array.from({ length: Math.min(64, count - i) }, (_, k) => ({
        userId: `${run}-${i + k}`,
        nonce: `${run}-n-${i + k}`,
        quantity: 1,
      }));
      for (const answer of this.engine.holds.reserve(batch, inside))
        if (!answer.ok && answer.code === "DRAW_PENDING") entered++;
    }
    return entered;
  }

  /** Bench `draw_decide_sharded`: the answers of the requests {@link benchDrawWait} started, as they come. */
  readonly #benchAnswers: ReserveOutcome[] = [];

  /**
   * Bench `draw_decide_sharded`: the entrants `benchDrawEnter(run, count)` made here each get a
   * request waiting for the draw's answer (`awaitDraw`, as the edge's after `DRAW_PENDING`), left
   * running; {@link benchDrawAnswers} counts the answers.
   */
  benchDrawWait(run: string, count: number): number {
    for (let i = 0; i < count; i++) {
      const request: ReserveRequest = { userId: `${run}-${i}`, nonce: `${run}-n-${i}`, quantity: 1 };
      const answered = this.awaitDraw(request).then(
        (answer) => void this.#benchAnswers.push(answer),
        () => void this.#benchAnswers.push({ ok: false, code: "BUSY" }),
      );
      this.ctx.waitUntil(answered);
    }
    return count;
  }

  /** Bench: the waiting requests answered so far, held or by code. */
  benchDrawAnswers(): { answered: number; held: number; codes: Record<string, number> } {
    const codes: Record<string, number> = {};
    let held = 0;
    for (const answer of this.#benchAnswers) {
      if (answer.ok) held++;
      else codes[answer.code] = (codes[answer.code] ?? 0) + 1;
    }
    return { answered: this.#benchAnswers.length, held, codes };
  }

  /** Bench: this shard's clock at the window's close (a sibling, before shard 0 decides). */
  benchDrawClose(): void {
    const closesAt = this.engine.draw.closesAt();
    if (closesAt === null) throw new Error("this SKU has no opening window");
    this.now = () => closesAt;
  }

  /** Bench: shard 0's clock at the window's close and its alarm started, not awaited (the driver polls answers). */
  benchDrawStart(): void {
    this.benchDrawClose();
    this.ctx.waitUntil(this.alarm());
  }

  /** Bench: the window's close, then what the alarm does there (decide the draw); the draw after. */
  async benchDrawDecide(): Promise<{ entrants: number; held: number; seedRevealed: boolean }> {
    const closesAt = this.engine.draw.closesAt();
    if (closesAt === null) throw new Error("this SKU has no opening window");
    this.now = () => closesAt;
    await this.alarm();
    const info = this.engine.draw.info();
    return {
      entrants: info?.entrants ?? 0,
      held: this.engine.configuration.state()?.stock.held ?? 0,
      seedRevealed: info?.seed != null,
    };
  }

  /**
   * Aborts this object as a crash would (`POST /chaos/stock/:sku/:shard/abort`). In-flight requests
   * fail, in-memory state is lost, storage stays. Refused unless the var CHAOS is "true".
   */
  chaosAbort(): void {
    if (this.env.CHAOS !== "true") throw new Error("chaosAbort is only available when CHAOS is true");
    this.ctx.abort("chaos: stock object aborted");
  }
}
