import initSqlJs, { type Database, type Statement } from "sql.js";
import type { EngineStorage } from "../durable-objects/engine/types";

/**
 * A stock object's storage in plain Node, for the unit tier (vitest.unit.config.ts): the part of the
 * Durable Object storage API the engine uses (`sql.exec` with bindings and its cursor,
 * `transactionSync`, and `deleteAll` for tests), over real SQLite compiled to WebAssembly (sql.js).
 *
 * Held to workerd's behaviour where the engine can tell: blobs come back as ArrayBuffer, `one()`
 * throws unless exactly one row, a transaction that throws rolls back (savepoints, so they nest).
 * Where it is not: `rowsRead` is NaN, since workerd counts it in a patched SQLite (the tests of read
 * bounds run in workerd, test/suites/stock-engine-workerd.ts); and a number binds as sql.js binds it, a 32-bit
 * integer as INTEGER and any other as REAL (test/sqlite-storage.unit.test.ts), as it always has here.
 */

// Only SQLite's own functions, as in workerd (not sql.js's extra math and string extension).
const SQL = await initSqlJs({ useOldExtensionFunctions: false });

/**
 * SQLite's C functions called as the WebAssembly module exports them: sql.js's `Statement` methods
 * go through `cwrap`, whose conversions cost more than most of the engine's statements take to run.
 */
const C = SQL;

/**
 * The property of sql.js's `Statement` that holds its pointer (its build minifies the name `stmt`):
 * of two statements, the numeric property whose values differ.
 */
const STMT = (() => {
  const db = new SQL.Database();
  const [a, b] = [db.prepare("SELECT 1"), db.prepare("SELECT 2")] as unknown as Record<string, unknown>[];
  const key = Object.keys(a ?? {}).find((k) => typeof a?.[k] === "number" && a[k] !== b?.[k]);
  db.close();
  if (!key) throw new Error("sql.js's Statement holds no pointer this code can find");
  return key;
})();
const pointer = (statement: Statement) => (statement as unknown as Record<string, number>)[STMT] as number;

const SQLITE_ROW = 100;
const SQLITE_DONE = 101;
const SQLITE_INTEGER = 1;
const SQLITE_FLOAT = 2;
const SQLITE_TEXT = 3;
const SQLITE_BLOB = 4;

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
  /**
   * Goes up whenever the database's content may have changed (a row written, the schema changed, a
   * rollback, the database replaced): equal twice, nothing changed between (a check may keep what it read).
   */
  readonly changes: number;
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
  let prepared = new Map<string, Compiled>();
  let depth = 0;
  /** The empty database a schema image replaced, and at what depth, while a transaction it began in lasts. */
  let before: { db: Database; prepared: Map<string, Compiled>; depth: number } | null = null;
  /** Counts the statements that may change a table's columns, so a statement's column names are read again after one. */
  let schemaChanges = 0;
  /** {@link NodeStorage.changes}. */
  let changes = 0;

  const toImage = (copy: SchemaImage) => {
    if (before) return;
    if (run("SELECT 1 FROM sqlite_master LIMIT 1", []).length > 0) return;
    const empty = { db, prepared, depth };
    db = open(copy.image);
    prepared = new Map();
    changes++;
    for (let level = 0; level < depth; level++) db.exec(`SAVEPOINT tx${level}`);
    if (depth > 0) before = empty;
    else free(empty);
  };

  const compile = (query: string): Compiled => {
    let compiled = prepared.get(query);
    if (!compiled) {
      // Several statements: split them (the iterator frees each as it moves on), then prepare each.
      const texts: string[] = [];
      if (query.includes(";")) for (const statement of db.iterateStatements(query)) texts.push(statement.getSQL());
      else texts.push(query);
      compiled = {
        list: texts.map((text) => ({
          statement: db.prepare(text),
          schema: SCHEMA_CHANGES.test(text),
          writes: WRITES.test(text) ? "rows" : UNCHANGING.test(text) ? "nothing" : "maybe",
          columns: null,
          columnsAt: 0,
        })),
        reads: READS.test(query),
      };
      prepared.set(query, compiled);
    }
    return compiled;
  };

  /** Memory bound to a statement's parameters, freed when the statement is run again. */
  const bound = new Map<number, number[]>();

  const bind = (statement: Statement, bindings: unknown[]) => {
    const ptr = pointer(statement);
    const held = bound.get(ptr);
    if (held) {
      for (const memory of held) C._free(memory);
      bound.delete(ptr);
    }
    C._sqlite3_clear_bindings(ptr);
    C._sqlite3_reset(ptr);
    for (let i = 0; i < bindings.length; i++) {
      const value = bindable(bindings[i]);
      const pos = i + 1;
      let rc: number;
      // As sql.js binds a number: INTEGER when it is a 32-bit integer, else REAL.
      if (typeof value === "number")
        rc = value === (value | 0) ? C._sqlite3_bind_int(ptr, pos, value) : C._sqlite3_bind_double(ptr, pos, value);
      else if (value === null) {
        C._sqlite3_bind_blob(ptr, pos, 0, 0, 0); // unchecked, as sql.js binds a null
        continue;
      } else {
        let memory: number;
        if (typeof value === "string") {
          memory = C.stringToNewUTF8(value);
          rc = C._sqlite3_bind_text(ptr, pos, memory, C.lengthBytesUTF8(value), 0);
        } else {
          memory = C._malloc(value.length);
          C.writeArrayToMemory(value, memory);
          rc = C._sqlite3_bind_blob(ptr, pos, memory, value.length, 0);
        }
        const list = bound.get(ptr);
        if (list) list.push(memory);
        else bound.set(ptr, [memory]);
      }
      statement.db.handleError(rc);
    }
  };

  /** The current row's values, as sql.js's `Statement.get` reads them (numbers as doubles, blobs as ArrayBuffer). */
  const row = (statement: Statement, ptr: number): SqlStorageValue[] => {
    const count = C._sqlite3_data_count(ptr);
    const values = new Array<SqlStorageValue>(count);
    for (let i = 0; i < count; i++) {
      switch (C._sqlite3_column_type(ptr, i)) {
        case SQLITE_INTEGER:
        case SQLITE_FLOAT:
          values[i] = C._sqlite3_column_double(ptr, i);
          break;
        case SQLITE_TEXT:
          values[i] = C.UTF8ToString(C._sqlite3_column_text(ptr, i), C._sqlite3_column_bytes(ptr, i), true);
          break;
        case SQLITE_BLOB:
          values[i] = statement.getBlob(i).buffer as ArrayBuffer;
          break;
        default:
          values[i] = null;
      }
    }
    return values;
  };

  /** Runs every statement of `query` to its end; the rows and columns are the last statement's. */
  function run(
    query: string,
    bindings: unknown[],
    result?: { columns: string[]; reads: boolean },
  ): SqlStorageValue[][] {
    if (schema && query === schema.first) toImage(schema);
    const compiled = compile(query);
    const { list } = compiled;
    let rows: SqlStorageValue[][] = [];
    for (let i = 0; i < list.length; i++) {
      const one = list[i] as Prepared;
      const last = i === list.length - 1;
      const { statement } = one;
      bind(statement, last ? bindings : []);
      rows = [];
      if (one.schema) schemaChanges++;
      if (one.writes === "maybe") changes++;
      const ptr = pointer(statement);
      for (;;) {
        const rc = C._sqlite3_step(ptr);
        if (rc === SQLITE_ROW) rows.push(row(statement, ptr));
        else if (rc === SQLITE_DONE) break;
        else {
          try {
            statement.db.handleError(rc); // throws SQLite's message
          } finally {
            C._sqlite3_reset(ptr); // a statement done needs none: the next bind resets it
          }
        }
      }
      // Rows it wrote itself (a trigger's, a cascade's or a REPLACE's deletes come only with one of those).
      if (one.writes === "rows" && C._sqlite3_changes(db.db) > 0) changes++;
      if (last && result) {
        // A statement's columns change only when a table's do (it is then prepared again).
        if (one.columns === null || one.columnsAt !== schemaChanges) {
          one.columns = statement.getColumnNames();
          one.columnsAt = schemaChanges;
        }
        result.columns = one.columns;
        result.reads = compiled.reads;
      }
    }
    return rows;
  }

  const free = (old: { db: Database; prepared: Map<string, Compiled> }) => {
    for (const { list } of old.prepared.values())
      for (const { statement } of list) {
        const ptr = pointer(statement);
        for (const memory of bound.get(ptr) ?? []) C._free(memory);
        bound.delete(ptr);
      }
    old.db.close();
  };

  const sql = {
    exec<T extends Row>(query: string, ...bindings: unknown[]): SqlStorageCursor<T> {
      const result = { columns: [] as string[], reads: true };
      const rows = run(query, bindings, result);
      // SQLite's count of the last INSERT, UPDATE or DELETE's rows (a read leaves it as it was).
      const written = result.reads ? 0 : C._sqlite3_changes(db.db);
      return new Cursor<T>(rows, result.columns, written) as unknown as SqlStorageCursor<T>;
    },
    get databaseSize(): number {
      const [pages] = run("SELECT page_count * page_size FROM pragma_page_count, pragma_page_size", []);
      return Number(pages?.[0] ?? 0);
    },
  } as unknown as SqlStorage;

  const reset = () => {
    if (before) free(before);
    before = null;
    free({ db, prepared });
    db = open(image);
    prepared = new Map();
    changes++;
  };

  return {
    sql,
    get changes() {
      return changes;
    },
    transactionSync<T>(fn: () => T): T {
      const level = depth++;
      const name = `tx${level}`;
      run(`SAVEPOINT ${name}`, []);
      try {
        const result = fn();
        run(`RELEASE ${name}`, []);
        if (level === 0 && before) {
          free(before); // committed: the copy is the database now
          before = null;
        }
        return result;
      } catch (error) {
        if (before && level < before.depth) {
          // Rolled back past the copy: the empty database, whose savepoints are still open, again.
          free({ db, prepared });
          ({ db, prepared } = before);
          before = null;
          changes++;
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
      if (before) free(before);
      free({ db, prepared });
    },
    export() {
      // sql.js frees the prepared statements and reopens the file without its pragmas: close it.
      const bytes = db.export();
      if (before) free(before);
      free({ db, prepared });
      return bytes;
    },
  };
}

/** A statement of a query, prepared once per database, and its column names once read. */
interface Prepared {
  statement: Statement;
  /** Whether running it may change a table's columns (DDL, or a rollback that may undo some). */
  schema: boolean;
  /** Whether it writes rows (counted by SQLite), never changes the content, or may (DDL, a rollback, a pragma). */
  writes: "rows" | "nothing" | "maybe";
  columns: string[] | null;
  /** The database's count of such statements when `columns` was read. */
  columnsAt: number;
}

/** A query's statements, prepared once per database, and whether the query writes no row. */
interface Compiled {
  list: Prepared[];
  reads: boolean;
}

const SCHEMA_CHANGES = /^\s*(CREATE|DROP|ALTER|ROLLBACK)\b/i;
/** Statements whose rows written SQLite counts (a WITH, read or write, counts as a change). */
const WRITES = /^\s*(INSERT|UPDATE|DELETE|REPLACE)\b/i;
/** Statements that leave the content as it was (a SELECT; a savepoint or its release, or a commit, which this connection alone sees). */
const UNCHANGING = /^\s*(SELECT|SAVEPOINT|RELEASE|BEGIN|COMMIT|END)\b/i;

/** The values workerd's `exec` takes: string, number, null, ArrayBuffer (anything else is a TypeError there too). */
function bindable(value: unknown): string | number | null | Uint8Array {
  if (value === null || typeof value === "string" || typeof value === "number") return value;
  if (value instanceof ArrayBuffer) return new Uint8Array(value);
  if (ArrayBuffer.isView(value)) return new Uint8Array(value.buffer, value.byteOffset, value.byteLength);
  throw new TypeError(`SQL binding of type ${typeof value} (workerd takes string, number, null, ArrayBuffer)`);
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
