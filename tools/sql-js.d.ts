// The part of sql.js (SQLite compiled to WebAssembly) that tools/sqlite-storage.ts uses.
declare module "sql.js" {
  interface Statement {
    db: { handleError(code: number): void };
    /** Column `pos` of the current row, a BLOB. */
    getBlob(pos: number): Uint8Array;
    getColumnNames(): string[];
    getSQL(): string;
  }
  interface Database {
    /** The connection's pointer in the WebAssembly heap. */
    db: number;
    prepare(sql: string): Statement;
    iterateStatements(sql: string): Iterable<Statement>;
    exec(sql: string): unknown;
    /** The database file's bytes (frees every statement and reopens the file). */
    export(): Uint8Array;
    close(): void;
  }
  /** SQLite's C functions as the WebAssembly module exports them (no `cwrap` conversions), and Emscripten's helpers. */
  interface SqliteC {
    _sqlite3_step(stmt: number): number;
    _sqlite3_reset(stmt: number): number;
    _sqlite3_clear_bindings(stmt: number): number;
    _sqlite3_bind_int(stmt: number, pos: number, value: number): number;
    _sqlite3_bind_double(stmt: number, pos: number, value: number): number;
    _sqlite3_bind_text(stmt: number, pos: number, text: number, bytes: number, destructor: number): number;
    _sqlite3_bind_blob(stmt: number, pos: number, blob: number, bytes: number, destructor: number): number;
    _sqlite3_data_count(stmt: number): number;
    _sqlite3_column_type(stmt: number, i: number): number;
    _sqlite3_column_double(stmt: number, i: number): number;
    _sqlite3_column_text(stmt: number, i: number): number;
    _sqlite3_column_bytes(stmt: number, i: number): number;
    _sqlite3_changes(db: number): number;
    _malloc(bytes: number): number;
    _free(pointer: number): void;
    UTF8ToString(pointer: number, bytes: number, ignoreNul: boolean): string;
    stringToNewUTF8(text: string): number;
    lengthBytesUTF8(text: string): number;
    writeArrayToMemory(array: Uint8Array, pointer: number): void;
  }
  interface SqlJsStatic extends SqliteC {
    Database: new (data?: Uint8Array) => Database;
  }
  export default function initSqlJs(config?: { useOldExtensionFunctions?: boolean }): Promise<SqlJsStatic>;
}
