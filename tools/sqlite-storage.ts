import initSqlJs, { type Database, type Statement } from "sql.js";
import type { EngineStorage } from "../durable-objects/engine/types";

/**
 * A stock object's storage in plain Node, for the unit tier (vitest.unit.config.ts): the part of the
 * Durable Object storage API the engine uses (`sql.exec` with bindings and its cursor,
 * `transactionSync`, and `deleteAll` for tests), over real SQLite compiled to WebAssembly (sql.js).
 *
 * Held to workerd's behaviour where the engine can tell: numbers are bound as REAL as workerd binds
 * them, blobs come back as ArrayBuffer, `one()` throws unless exactly one row, a transaction that
 * throws rolls back (savepoints, so they nest). Where it cannot be: `rowsRead` is NaN, since workerd
 * counts it in a patched SQLite; the tests of read bounds run in workerd (test/*.workerd.test.ts).
 */

// Only SQLite's own functions, as in workerd (not sql.js's extra math and string extension).
const SQL = await initSqlJs({ useOldExtensionFunctions: false });
const bindDouble = SQL.cwrap("sqlite3_bind_double", "number", ["number", "number", "number"]);

/**
 * A database held in memory only: sql.js keeps its file in an emulated file system, slow to sync.
 * Empty, or a copy of `image` (the bytes {@link NodeStorage.export} gave).
 */
function open(image?: Uint8Array): Database {
  const db = new SQL.Database(image);
  db.exec(
    "PRAGMA journal_mode = MEMORY; PRAGMA synchronous = OFF; PRAGMA locking_mode = EXCLUSIVE; PRAGMA temp_store = MEMORY",
  );
  return db;
}

type Row = Record<string, SqlStorageValue>;

/** Statements that change no row (their `rowsWritten` is 0). */
const READS = /^\s*(SELECT|PRAGMA|CREATE|DROP|ALTER|SAVEPOINT|RELEASE|ROLLBACK|BEGIN|COMMIT|END)\b/i;

export interface TestStorage extends EngineStorage {
  /** A fresh database, as `DurableObjectStorage.deleteAll` leaves it (or the image it started from). */
  deleteAll(): Promise<void>;
}

export interface NodeStorage extends TestStorage {
  /** Frees the database's WebAssembly memory; the storage is unusable after. */
  close(): void;
  /** The database's bytes, for {@link sqliteStorage} to start others from; the storage is unusable after. */
  export(): Uint8Array;
}

/**
 * A schema made once and copied (the simulator's objects): `first` is the first statement of the
 * code that makes it, `image` the database that code leaves (what `export` gave).
 */
export interface SchemaImage {
  first: string;
  image: Uint8Array;
}

/**
 * A new in-memory database behind the storage API: empty, or a copy of `image` (what `export` gave),
 * which `deleteAll` then brings it back to.
 *
 * With `schema`: when an empty database is asked `schema.first`, it becomes a copy of `schema.image`
 * before that statement runs, so the object's own schema code runs on and finds everything made
 * (its `IF NOT EXISTS` and its version read), as on a database where it had run; a copy's bytes cost
 * far less than the statements. Until the outermost transaction open then commits, the empty
 * database is kept: rolled back to a savepoint from before, it is the database again, as SQLite
 * would have undone the statements.
 */
export function sqliteStorage(image?: Uint8Array, schema?: SchemaImage): NodeStorage {
  let db = open(image);
  let prepared = new Map<string, Statement[]>();
  let depth = 0;
  /** The empty database a schema image replaced, and at what depth, while a transaction it began in lasts. */
  let before: { db: Database; prepared: Map<string, Statement[]>; depth: number } | null = null;

  const toImage = (copy: SchemaImage) => {
    if (before) return;
    const probe = db.prepare("SELECT 1 FROM sqlite_master LIMIT 1");
    const made = probe.step();
    probe.free();
    if (made) return;
    const empty = { db, prepared, depth };
    db = open(copy.image);
    prepared = new Map();
    for (let level = 0; level < depth; level++) db.exec(`SAVEPOINT tx${level}`);
    if (depth > 0) before = empty;
    else empty.db.close();
  };

  const statements = (query: string): Statement[] => {
    let list = prepared.get(query);
    if (!list) {
      // Several statements: split them (the iterator frees each as it moves on), then prepare each.
      const texts: string[] = [];
      if (query.includes(";")) for (const statement of db.iterateStatements(query)) texts.push(statement.getSQL());
      else texts.push(query);
      list = texts.map((text) => db.prepare(text));
      for (const statement of list) {
        statement.bindNumber = (num, pos) => {
          statement.db.handleError(bindDouble(statement.stmt, pos, num));
          return true;
        };
      }
      prepared.set(query, list);
    }
    return list;
  };

  /** Runs every statement of `query` to its end; the rows and columns are the last statement's. */
  function run(query: string, bindings: unknown[], columns?: string[]): SqlStorageValue[][] {
    if (schema && query === schema.first) toImage(schema);
    const list = statements(query);
    let rows: SqlStorageValue[][] = [];
    list.forEach((statement, i) => {
      const last = i === list.length - 1;
      statement.bind(last ? bindings.map(bindable) : []);
      rows = [];
      try {
        while (statement.step()) rows.push(statement.get().map(fromSqlite));
      } catch (error) {
        statement.reset(); // a statement done needs none: the next bind resets it
        throw error;
      }
      if (last && columns) columns.push(...statement.getColumnNames());
    });
    return rows;
  }

  const sql = {
    exec<T extends Row>(query: string, ...bindings: unknown[]): SqlStorageCursor<T> {
      const columns: string[] = [];
      const rows = run(query, bindings, columns);
      // SQLite's count of the last INSERT, UPDATE or DELETE's rows (a read leaves it as it was).
      const written = READS.test(query) ? 0 : db.getRowsModified();
      return new Cursor<T>(rows, columns, written) as unknown as SqlStorageCursor<T>;
    },
    get databaseSize(): number {
      const [pages] = run("SELECT page_count * page_size FROM pragma_page_count, pragma_page_size", []);
      return Number(pages?.[0] ?? 0);
    },
  } as unknown as SqlStorage;

  const reset = () => {
    before?.db.close();
    before = null;
    db.close();
    db = open(image);
    prepared = new Map();
  };

  return {
    sql,
    transactionSync<T>(fn: () => T): T {
      const level = depth++;
      const name = `tx${level}`;
      run(`SAVEPOINT ${name}`, []);
      try {
        const result = fn();
        run(`RELEASE ${name}`, []);
        if (level === 0 && before) {
          before.db.close(); // committed: the copy is the database now
          before = null;
        }
        return result;
      } catch (error) {
        if (before && level < before.depth) {
          // Rolled back past the copy: the empty database, whose savepoints are still open, again.
          db.close();
          ({ db, prepared } = before);
          before = null;
        }
        run(`ROLLBACK TO ${name}`, []);
        run(`RELEASE ${name}`, []);
        throw error;
      } finally {
        depth--;
      }
    },
    async deleteAll() {
      reset();
    },
    close() {
      before?.db.close();
      db.close();
    },
    export() {
      // sql.js frees the prepared statements and reopens the file without its pragmas: close it.
      const bytes = db.export();
      before?.db.close();
      db.close();
      return bytes;
    },
  };
}

/** The values workerd's `exec` takes: string, number, null, ArrayBuffer (anything else is a TypeError there too). */
function bindable(value: unknown): string | number | null | Uint8Array {
  if (value === null || typeof value === "string" || typeof value === "number") return value;
  if (value instanceof ArrayBuffer) return new Uint8Array(value);
  if (ArrayBuffer.isView(value)) return new Uint8Array(value.buffer, value.byteOffset, value.byteLength);
  throw new TypeError(`SQL binding of type ${typeof value} (workerd takes string, number, null, ArrayBuffer)`);
}

function fromSqlite(value: string | number | Uint8Array | null): SqlStorageValue {
  return value instanceof Uint8Array ? value.slice().buffer : value;
}

/** The rows of a finished statement, read the ways a workerd cursor is read. */
class Cursor<T extends Row> {
  #next = 0;
  readonly rowsRead = Number.NaN;

  constructor(
    private readonly rows: SqlStorageValue[][],
    readonly columnNames: string[],
    readonly rowsWritten: number,
  ) {}

  #object(values: SqlStorageValue[]): T {
    const row: Row = {};
    this.columnNames.forEach((name, i) => {
      row[name] = values[i] ?? null;
    });
    return row as T;
  }

  next(): { done?: false; value: T } | { done: true; value?: never } {
    const values = this.rows[this.#next];
    if (!values) return { done: true };
    this.#next++;
    return { done: false, value: this.#object(values) };
  }

  toArray(): T[] {
    const rest = this.rows.slice(this.#next).map((values) => this.#object(values));
    this.#next = this.rows.length;
    return rest;
  }

  one(): T {
    const rest = this.toArray();
    if (rest.length === 0) throw new Error("Expected exactly one result from SQL query, but got no results.");
    if (rest.length > 1) throw new Error("Expected exactly one result from SQL query, but got multiple results.");
    return rest[0] as T;
  }

  *raw<U extends SqlStorageValue[]>(): IterableIterator<U> {
    while (this.#next < this.rows.length) yield this.rows[this.#next++] as U;
  }

  *[Symbol.iterator](): IterableIterator<T> {
    for (let step = this.next(); !step.done; step = this.next()) yield step.value;
  }
}
