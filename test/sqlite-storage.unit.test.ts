import { expect, test } from "vitest";
import { sqliteStorage } from "../tools/sqlite-storage";

// tools/sqlite-storage.ts calls SQLite's C functions directly (not through sql.js's Statement): the
// values, column names, errors and rowsWritten are what the engine read before, and `changes` tells
// a check (the simulator's) when what it read may be stale.

test("values come back as bound: text (any UTF-8, a NUL inside), numbers, null, blobs as ArrayBuffer", () => {
  const storage = sqliteStorage();
  storage.sql.exec("CREATE TABLE t (a, b, c, d, e)");
  const blob = new Uint8Array([0, 1, 254, 255]);
  storage.sql.exec("INSERT INTO t VALUES (?, ?, ?, ?, ?)", "é€😀 a\u0000b", 7, 2.5, null, blob.buffer);
  const row = storage.sql.exec("SELECT * FROM t").one();
  expect(row).toMatchObject({ a: "é€😀 a\u0000b", b: 7, c: 2.5, d: null });
  expect(row.e).toBeInstanceOf(ArrayBuffer);
  expect([...new Uint8Array(row.e as ArrayBuffer)]).toEqual([...blob]);
  storage.close();
});

test("a number binds as sql.js binds it: a 32-bit integer as INTEGER, any other as REAL", () => {
  const storage = sqliteStorage();
  const types = storage.sql.exec("SELECT typeof(?) AS a, typeof(?) AS b, typeof(?) AS c", 3, 2 ** 40, 0.5).one();
  expect(types).toEqual({ a: "integer", b: "real", c: "real" });
  storage.close();
});

test("a statement's columns follow its table's (SELECT * after ALTER TABLE)", () => {
  const storage = sqliteStorage();
  storage.sql.exec("CREATE TABLE t (a)");
  storage.sql.exec("INSERT INTO t VALUES (1)");
  expect(storage.sql.exec("SELECT * FROM t").one()).toEqual({ a: 1 });
  storage.sql.exec("ALTER TABLE t ADD COLUMN b");
  expect(storage.sql.exec("SELECT * FROM t").one()).toEqual({ a: 1, b: null });
  storage.close();
});

test("an error is SQLite's message, and the statement runs again after it", () => {
  const storage = sqliteStorage();
  storage.sql.exec("CREATE TABLE t (id INTEGER PRIMARY KEY)");
  storage.sql.exec("INSERT INTO t VALUES (?)", 1);
  expect(() => storage.sql.exec("INSERT INTO t VALUES (?)", 1)).toThrow("UNIQUE constraint failed: t.id");
  expect(storage.sql.exec("INSERT INTO t VALUES (?)", 2).rowsWritten).toBe(1);
  storage.close();
});

test("changes goes up with a row written, a rollback or a schema change, and not with a read or a write of no row", () => {
  const storage = sqliteStorage();
  storage.sql.exec("CREATE TABLE t (id INTEGER PRIMARY KEY, v)");
  let seen = storage.changes;
  const changed = () => {
    const now = storage.changes;
    const moved = now !== seen;
    seen = now;
    return moved;
  };
  storage.sql.exec("INSERT INTO t VALUES (1, 'a')");
  expect(changed()).toBe(true);
  storage.sql.exec("SELECT * FROM t").toArray();
  storage.sql.exec("UPDATE t SET v = 'b' WHERE id = 2");
  storage.sql.exec("INSERT INTO t VALUES (1, 'c') ON CONFLICT (id) DO NOTHING");
  expect(changed()).toBe(false);
  expect(() =>
    storage.transactionSync(() => {
      storage.sql.exec("UPDATE t SET v = 'd' WHERE id = 1");
      throw new Error("refused");
    }),
  ).toThrow("refused");
  expect(changed()).toBe(true);
  expect(storage.sql.exec("SELECT v FROM t").one()).toEqual({ v: "a" });
  storage.sql.exec("CREATE INDEX t_v ON t (v)");
  expect(changed()).toBe(true);
  storage.close();
});
