import { describe, expect, it } from "vitest";
import { migrate, SCHEMA_VERSION } from "../durable-objects/engine/schema";
import { StockEngine } from "../durable-objects/engine/stock-engine";
import deployed from "./fixtures/stock-schema-3b25bd4.json?raw";
import type { TestStorage } from "./suites/stock-engine";
import { inMemory } from "./support/node-place";

/**
 * The stock object's schema is numbered steps (durable-objects/engine/schema.ts), applied once each:
 * from an empty object, and from an object of the schema deployed before steps were numbered (the
 * fixture is the sqlite_master of an object configured by that schema), which must end with the same
 * schema and keep its rows.
 */

const T0 = 1_900_000_000_000;

/** Every table and index with its SQL, as SQLite keeps it (the workerd's own tables left out). */
function schemaOf(sql: SqlStorage): Record<string, string | null> {
  const rows = sql
    .exec<{ name: string; sql: string | null }>(
      "SELECT name, sql FROM sqlite_master WHERE name NOT LIKE 'sqlite_%' AND name NOT LIKE '_cf_%' ORDER BY name",
    )
    .toArray();
  return Object.fromEntries(rows.map((r) => [r.name, r.sql]));
}

const versionOf = (sql: SqlStorage) =>
  sql.exec<{ version: number }>("SELECT version FROM schema_version").one().version;

async function inFreshObject<T>(name: string, fn: (storage: TestStorage) => T): Promise<T> {
  return inMemory(name, async (storage) => {
    return fn(storage);
  });
}

/** The schema an empty object ends with after its first configure. */
function emptyConfigured(storage: TestStorage): Record<string, string | null> {
  const engine = new StockEngine(storage, () => crypto.randomUUID());
  expect(engine.configuration.configure({ sku: "schema", shard: 0, shards: 1, totalStock: 5 }, T0).ok).toBe(true);
  return schemaOf(storage.sql);
}

describe("the stock object's schema steps", () => {
  it("make an empty object's tables at its first configure, once", async () => {
    await inFreshObject("schema-empty", (storage) => {
      const sql = storage.sql;
      const schema = emptyConfigured(storage);
      expect(versionOf(sql)).toBe(SCHEMA_VERSION);
      expect(Object.keys(schema)).toEqual(expect.arrayContaining(["sku", "reservations", "waitlist_state", "draw"]));
      expect(schema).not.toHaveProperty("line_state");
      // Applied once: a restart applies nothing, and the schema stays as it is.
      expect(storage.transactionSync(() => migrate(sql))).toBe(0);
      new StockEngine(storage, () => crypto.randomUUID());
      expect(schemaOf(sql)).toEqual(schema);
    });
  });

  it("bring an object of the deployed schema up to date, keeping its rows", async () => {
    const expected = await inFreshObject("schema-expected", emptyConfigured);
    await inFreshObject("schema-deployed", (storage) => {
      const sql = storage.sql;
      for (const { sql: statement } of JSON.parse(deployed) as { sql: string | null }[]) {
        if (statement) sql.exec(statement);
      }
      // A shard as the code of then left it: one hold, one buyer waiting, the waitlist's mode.
      sql.exec(
        `INSERT INTO sku (id, sku, shard, shards, name, status, per_user_limit, hold_seconds, total, held, seq, created)
         VALUES (1, 'schema', 0, 1, 'schema', 'on_sale', 2, 900, 5, 1, 1, 1)`,
      );
      sql.exec(
        `INSERT INTO reservations (id, user_id, quantity, status, nonce, created_at, expires_at, updated_at, seq)
         VALUES ('schema.0.r1', 'ann', 1, 'held', 'n-ann', ?, ?, ?, 1)`,
        T0,
        T0 + 900_000,
        T0,
      );
      sql.exec("INSERT INTO user_quota (user_id, active) VALUES ('ann', 1)");
      sql.exec("INSERT INTO waitlist (id, user_id, quantity, created_at) VALUES ('w.1', 'bob', 1, ?)", T0);
      sql.exec("INSERT INTO config (id, version) VALUES (1, 0)");
      sql.exec("INSERT INTO line_state (id, mode) VALUES (1, 2)");
      expect(() => versionOf(sql)).toThrow(); // no steps were numbered then

      const engine = new StockEngine(storage, () => crypto.randomUUID());
      expect(versionOf(sql)).toBe(SCHEMA_VERSION);
      expect(schemaOf(sql)).toEqual(expected);
      expect(engine.configuration.state()?.stock).toEqual({ total: 5, available: 4, held: 1, sold: 0 });
      expect([engine.waitlist.mode, engine.waitlist.length()]).toEqual([2, 1]);
      // Decisions go on from the rows: the token replays its hold, a new buyer holds.
      const [replay, fresh] = engine.holds.reserve(
        [
          { userId: "ann", nonce: "n-ann", quantity: 1 },
          { userId: "cat", nonce: "n-cat", quantity: 1 },
        ],
        T0 + 1,
      );
      expect(replay).toMatchObject({ ok: true, value: { replayed: true, reservation: { id: "schema.0.r1" } } });
      expect(fresh).toMatchObject({ ok: true, value: { replayed: false, available: 3 } });
    });
  });

  it("step 7 files a deployed draw's entries and tokens under its one opening", async () => {
    await inFreshObject("schema-draw", (storage) => {
      const sql = storage.sql;
      for (const { sql: statement } of JSON.parse(deployed) as { sql: string | null }[]) {
        if (statement) sql.exec(statement);
      }
      sql.exec(
        `INSERT INTO sku (id, sku, shard, shards, name, status, per_user_limit, hold_seconds, starts_at, total, seq, created)
         VALUES (1, 'schema', 0, 1, 'schema', 'on_sale', 1, 900, ?, 5, 0, 0)`,
        T0,
      );
      sql.exec("INSERT INTO config (id, version) VALUES (1, 0)");
      sql.exec("INSERT INTO line_state (id, mode) VALUES (1, 0)");
      sql.exec("INSERT INTO draw (id, window_ms, opens_at, seed, seed_hash) VALUES (1, 1000, ?, 'ab', 'cd')", T0);
      for (const user of ["ann", "bob"]) {
        sql.exec(
          "INSERT INTO draw_entrants (user_id, nonce, quantity, home, entered_at) VALUES (?, ?, 1, 0, ?)",
          user,
          `n-${user}`,
          T0 + 1,
        );
        sql.exec("INSERT INTO draw_tokens (nonce, user_id) VALUES (?, ?)", `n-${user}`, user);
      }

      const engine = new StockEngine(storage, () => crypto.randomUUID());
      expect(versionOf(sql)).toBe(SCHEMA_VERSION);
      const info = engine.draw.info();
      expect(info).toMatchObject({ opensAt: T0, closesAt: T0 + 1000, seedHash: "cd", seed: null, entrants: 2 });
      expect(info?.openings).toHaveLength(1);
      expect(engine.draw.entryOfToken("n-bob")).toMatchObject({ opening: T0, user_id: "bob", code: null });
      // Still undecided: a new token inside the window joins the draw, not the stock.
      const [answer] = engine.holds.reserve([{ userId: "cat", nonce: "n-cat", quantity: 1 }], T0 + 2);
      expect(answer).toMatchObject({ ok: false, code: "DRAW_PENDING" });
      expect(engine.draw.entrantCount(T0)).toBe(3);
    });
  });
});
