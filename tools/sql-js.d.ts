// The part of sql.js (SQLite compiled to WebAssembly) that tools/sqlite-storage.ts uses.
declare module "sql.js" {
  type Value = number | string | Uint8Array | null;
  interface Statement {
    /** The statement's pointer in the WebAssembly heap. */
    stmt: number;
    db: { handleError(code: number): void };
    bind(values?: unknown[]): boolean;
    bindNumber(num: number, pos: number): boolean;
    step(): boolean;
    get(): Value[];
    getColumnNames(): string[];
    getSQL(): string;
    reset(): boolean;
    free(): boolean;
  }
  interface Database {
    prepare(sql: string): Statement;
    iterateStatements(sql: string): Iterable<Statement>;
    exec(sql: string): unknown;
    getRowsModified(): number;
    /** The database file's bytes (frees every statement and reopens the file). */
    export(): Uint8Array;
    close(): void;
  }
  interface SqlJsStatic {
    Database: new (data?: Uint8Array) => Database;
    cwrap(name: string, returns: string | null, args: string[]): (...args: number[]) => number;
  }
  export default function initSqlJs(config?: { useOldExtensionFunctions?: boolean }): Promise<SqlJsStatic>;
}
