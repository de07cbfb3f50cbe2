import { describe, expect, it } from "vitest";
import { migrate, SCHEMA_VERSION } from "../durable-objects/engine/schema";
import { StockEngine } from "../durable-objects/engine/stock-engine";
import type { TestStorage } from "./suites/stock-engine";
import { inMemory } from "./support/node-place";

/**
 * Early access in the stock engine (engine/access.ts), step by step with the time passed in: who a
 * code admits, what a tier's opening lets through on the reservation path, and that the tiers follow
 * the SKU's configure (kept when left out, rolled back with a refused one). The HTTP rules are in
 * test/suites/early-access.ts.
 */

const T0 = 1_900_000_000_000;
const START = T0 + 3_600_000;
const TIERS = [
  { name: "members", startsAt: T0 - 1000, claim: { name: "member", value: "gold" } },
  { name: "later", startsAt: T0 + 1_800_000 },
];

async function inFreshEngine<T>(name: string, fn: (engine: StockEngine, storage: TestStorage) => T): Promise<T> {
  return inMemory(name, async (storage) => {
    let ids = 0;
    const engine = new StockEngine(storage, () => `00000000-0000-7000-8000-${String(++ids).padStart(12, "0")}`);
    const configured = engine.configuration.configure(
      {
        sku: name,
        shard: 0,
        shards: 1,
        totalStock: 5,
        perUserLimit: 2,
        holdSeconds: 86_400,
        startsAt: START,
        access: TIERS,
      },
      T0,
    );
    expect(configured.ok).toBe(true);
    return fn(engine, storage);
  });
}

describe("early access in the stock engine", () => {
  it("a code admits its first user only, once its tier has opened; unknown codes admit nobody", async () => {
    await inFreshEngine("access-codes", (engine) => {
      expect(engine.access.addCodes("members", ["h1", "h2"])).toBe(true);
      expect(engine.access.addCodes("later", ["h3"])).toBe(true);
      expect(engine.access.addCodes("ghost", ["h4"])).toBe(false);
      expect(engine.access.redeem("h1", "ann", T0)).toBe("members");
      expect(engine.access.redeem("h1", "ann", T0 + 1)).toBe("members");
      expect(engine.access.redeem("h1", "bob", T0 + 2)).toBeNull();
      expect(engine.access.redeem("nope", "bob", T0)).toBeNull();
      // Not open yet: refused, and left free for whoever comes once it opens.
      expect(engine.access.redeem("h3", "bob", T0)).toBeNull();
      expect(engine.access.redeem("h3", "cat", T0 + 1_800_000)).toBe("later");
      expect(engine.access.codeCounts()).toEqual([
        { tier: "later", codes: 1, taken: 1 },
        { tier: "members", codes: 2, taken: 1 },
      ]);
    });
  });

  it("codes presented together are decided in arrival order in one transaction: the first user takes each", async () => {
    await inFreshEngine("access-batch", (engine) => {
      engine.access.addCodes("members", ["b1", "b2"]);
      const asks = [
        { hash: "b1", userId: "ann" },
        { hash: "b1", userId: "bob" },
        { hash: "b2", userId: "bob" },
        { hash: "b1", userId: "ann" },
        { hash: "b2", userId: "cat" },
      ];
      expect(engine.access.redeemMany(asks, T0)).toEqual(["members", null, "members", "members", null]);
      expect(engine.access.codeCounts()).toEqual([{ tier: "members", codes: 2, taken: 2 }]);
    });
  });

  it("takes a reservation before the start only for a tier open at `now`; limits and stock apply", async () => {
    await inFreshEngine("access-reserve", (engine) => {
      const ask = (userId: string, nonce: string, tier?: string, quantity = 1, at = T0) =>
        engine.holds.reserve([{ userId, nonce, quantity, tier }], at)[0];
      expect(ask("ann", "n1")).toMatchObject({ ok: false, code: "SALE_NOT_ACTIVE" });
      expect(ask("ann", "n2", "ghost")).toMatchObject({ ok: false, code: "SALE_NOT_ACTIVE" });
      expect(ask("ann", "n3", "later")).toMatchObject({ ok: false, code: "SALE_NOT_ACTIVE" });
      expect(ask("ann", "n4", "members")).toMatchObject({ ok: true });
      expect(ask("ann", "n5", "members", 2)).toMatchObject({ ok: false, code: "LIMIT_EXCEEDED" });
      expect(ask("bob", "n6", "later", 2, T0 + 1_800_000)).toMatchObject({ ok: true });
      expect(ask("cat", "n7", "members", 2)).toMatchObject({ ok: true, value: { available: 0 } });
      expect(ask("dan", "n8", "members")).toMatchObject({ ok: false, code: "SOLD_OUT" });
      expect(engine.configuration.state()?.stock).toEqual({ total: 5, available: 0, held: 5, sold: 0 });
    });
  });

  it("a paused or ended sale takes no early reservation", async () => {
    await inFreshEngine("access-paused", (engine) => {
      engine.configuration.configure({ sku: "access-paused", shard: 0, shards: 1, status: "paused" }, T0);
      expect(engine.holds.reserve([{ userId: "ann", nonce: "p1", quantity: 1, tier: "members" }], T0)[0]).toMatchObject(
        {
          ok: false,
          code: "SALE_NOT_ACTIVE",
        },
      );
      engine.configuration.configure(
        { sku: "access-paused", shard: 0, shards: 1, status: "on_sale", endsAt: T0 - 1 },
        T0,
      );
      expect(engine.holds.reserve([{ userId: "ann", nonce: "p2", quantity: 1, tier: "members" }], T0)[0]).toMatchObject(
        {
          ok: false,
          code: "SALE_NOT_ACTIVE",
        },
      );
    });
  });

  it("tiers are kept by a configure that leaves them out, replaced by one that gives them, and untouched by a refused one", async () => {
    await inFreshEngine("access-config", (engine) => {
      engine.configuration.configure({ sku: "access-config", shard: 0, shards: 1, name: "renamed" }, T0);
      expect(engine.configuration.state()?.access?.map((t) => t.name)).toEqual(["members", "later"]);
      // Refused (a total below what is held): nothing changes, the tiers included.
      engine.holds.reserve([{ userId: "ann", nonce: "c1", quantity: 1, tier: "members" }], T0);
      const refused = engine.configuration.configure(
        { sku: "access-config", shard: 0, shards: 1, totalStock: 0, access: [] },
        T0,
      );
      expect(refused).toMatchObject({ ok: false, code: "INVALID_STATE" });
      expect(engine.configuration.state()?.access).toHaveLength(2);
      engine.configuration.configure({ sku: "access-config", shard: 0, shards: 1, access: [] }, T0);
      expect(engine.configuration.state()?.access).toBeUndefined();
      // A removed tier's codes admit nobody, and its tokens hold nothing.
      expect(engine.access.addCodes("members", ["gone"])).toBe(false);
      expect(engine.holds.reserve([{ userId: "bob", nonce: "c2", quantity: 1, tier: "members" }], T0)[0]).toMatchObject(
        {
          ok: false,
          code: "SALE_NOT_ACTIVE",
        },
      );
    });
  });

  it("schema step 4 is idempotent: applied again, it keeps the tiers and codes", async () => {
    await inFreshEngine("access-schema", (engine, storage) => {
      engine.access.addCodes("members", ["kept"]);
      const sql = storage.sql;
      sql.exec("UPDATE schema_version SET version = 3");
      expect(storage.transactionSync(() => migrate(sql))).toBe(SCHEMA_VERSION - 3);
      const again = new StockEngine(storage, () => crypto.randomUUID());
      expect(again.configuration.state()?.access?.map((t) => t.name)).toEqual(["members", "later"]);
      expect(again.access.redeem("kept", "ann", T0)).toBe("members");
    });
  });
});
