import { expect, test } from "vitest";
import { sqliteStorage } from "../tools/sqlite-storage";

// tools/sqlite-storage.ts's schema image (the simulator's stock objects, docs/SIMULATOR.md): an empty
// database becomes a copy of the image when the schema code's first statement comes, and is empty
// again if the transaction it came in rolls back, as SQLite would have undone the statements.

const FIRST = "CREATE TABLE IF NOT EXISTS a (x INTEGER)";

function image(): Uint8Array {
  const storage = sqliteStorage();
  storage.sql.exec(FIRST);
  storage.sql.exec("CREATE TABLE IF NOT EXISTS b (y INTEGER)");
  return storage.export();
}

const tables = (storage: ReturnType<typeof sqliteStorage>) =>
  storage.sql
    .exec<{ name: string }>("SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name")
    .toArray()
    .map((r) => r.name);

test("the first statement of the schema code makes the copy, and the code runs on over it", () => {
  const storage = sqliteStorage(undefined, { first: FIRST, image: image() });
  expect(tables(storage)).toEqual([]);
  storage.transactionSync(() => {
    storage.sql.exec(FIRST);
    storage.sql.exec("CREATE TABLE IF NOT EXISTS b (y INTEGER)");
    storage.sql.exec("INSERT INTO b (y) VALUES (1)");
  });
  expect(tables(storage)).toEqual(["a", "b"]);
  expect(storage.sql.exec("SELECT y FROM b").toArray()).toEqual([{ y: 1 }]);
  storage.close();
});

test("a transaction rolled back past the copy leaves the database empty, and a later one copies again", () => {
  const storage = sqliteStorage(undefined, { first: FIRST, image: image() });
  expect(() =>
    storage.transactionSync(() =>
      storage.transactionSync(() => {
        storage.sql.exec(FIRST);
        throw new Error("refused");
      }),
    ),
  ).toThrow("refused");
  expect(tables(storage)).toEqual([]);
  storage.transactionSync(() => {
    storage.sql.exec(FIRST);
    storage.transactionSync(() => {
      storage.sql.exec("INSERT INTO a (x) VALUES (1)");
    });
    // Rolled back to a savepoint made after the copy: the copy stays, without that write.
    expect(() =>
      storage.transactionSync(() => {
        storage.sql.exec("INSERT INTO a (x) VALUES (2)");
        throw new Error("inner");
      }),
    ).toThrow("inner");
  });
  expect(tables(storage)).toEqual(["a", "b"]);
  expect(storage.sql.exec("SELECT x FROM a").toArray()).toEqual([{ x: 1 }]);
  storage.close();
});
