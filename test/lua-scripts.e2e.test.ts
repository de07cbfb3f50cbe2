import { describe, expect, it } from "vitest";
import type { SkuSettings } from "../durable-objects/engine/configuration";
import type { PaymentAnswer, PaymentType } from "../durable-objects/engine/payments";
import type { Outcome, Reservation, ReserveAnswer, SkuState, StockCounts } from "../durable-objects/engine/types";
import { sha1Hex } from "../durable-objects/mirror/lua-script";
import {
  LUA_SCRIPT_NAMES,
  LUA_SHA1,
  LUA_SOURCES,
  type LuaScriptName,
  loadScripts,
  reservationKey,
  runScript,
  type ScriptClient,
  shardKeys,
} from "../tools/lua";
import { scriptedRedis } from "./support/scripted-redis";

/**
 * The reference Lua scripts (lua/*.lua) against a real redis-server: the same scenarios the stock
 * engine (durable-objects/engine/stock-engine.ts) answers, with answers shaped like its Outcome objects.
 */

const db = scriptedRedis();

/** 2030-01-01T00:00:00Z in epoch ms: every time in these tests is T0 + something. */
const T0 = Date.UTC(2030, 0, 1);

let skuCounter = 0;
function uniqueSku(prefix: string): string {
  skuCounter++;
  return `${prefix}-${skuCounter}`;
}

function okValue<T>(outcome: Outcome<T>): T {
  if (!outcome.ok) throw new Error(`expected ok, got ${outcome.code}`);
  return outcome.value;
}

/** A shard of a fresh SKU and typed calls of the scripts on it. */
function shardOf(sku: string, shard = 0) {
  const keys = shardKeys(sku, shard);
  const [skuKey = "", holdsKey = "", quotaKey = ""] = keys;
  const run = async <T>(name: LuaScriptName, args: ReadonlyArray<string | number>): Promise<T> =>
    JSON.parse(String(await runScript(db(), name, keys, args))) as T;
  const id = (n: number | string) => `${sku}.${shard}.${n}`;

  return {
    sku,
    keys,
    id,
    configure: (settings: Partial<Omit<SkuSettings, "sku" | "shard">>) =>
      run<Outcome<SkuState>>("configure", [JSON.stringify({ sku, shard, shards: 1, totalStock: 0, ...settings })]),
    reserve: (now: number, reservationId: string, userId: string, nonce: string, quantity = 1) =>
      run<Outcome<ReserveAnswer>>("reserve", [now, reservationId, userId, nonce, quantity]),
    cancel: (now: number, reservationId: string, userId: string) =>
      run<Outcome<Reservation>>("release", ["cancel", now, reservationId, userId]),
    expire: (now: number, limit?: number) =>
      run<Outcome<number>>("release", limit === undefined ? ["expire", now] : ["expire", now, limit]),
    pay: (now: number, eventId: string, type: PaymentType, reservationId: string) =>
      run<Outcome<PaymentAnswer>>("confirm", [now, eventId, type, reservationId]),
    async stock(): Promise<StockCounts> {
      const [total, held, sold] = (await db().hmGet(skuKey, ["total", "held", "sold"])).map(Number);
      return {
        total: total ?? 0,
        available: (total ?? 0) - (held ?? 0) - (sold ?? 0),
        held: held ?? 0,
        sold: sold ?? 0,
      };
    },
    async quota(userId: string): Promise<number> {
      return Number((await db().hGet(quotaKey, userId)) ?? 0);
    },
    async status(reservationId: string): Promise<string | null> {
      const value = await db().hGet(reservationKey(sku, shard, reservationId), "status");
      return value === null ? null : String(value);
    },
    async holds(): Promise<string[]> {
      return (await db().zRange(holdsKey, 0, -1)).map(String);
    },
    /** Invariants 1, 2 and 5 of docs/ARCHITECTURE.md, on this shard. */
    async checkInvariants(): Promise<void> {
      const stock = await this.stock();
      expect(stock.held).toBeGreaterThanOrEqual(0);
      expect(stock.sold).toBeGreaterThanOrEqual(0);
      expect(stock.available).toBeGreaterThanOrEqual(0);
      const quotas = Object.values(await db().hGetAll(quotaKey)).map(Number);
      expect(quotas.reduce((a, b) => a + b, 0)).toBe(stock.held + stock.sold);
      for (const q of quotas) expect(q).toBeGreaterThan(0);
      let heldInZset = 0;
      for (const member of await this.holds()) {
        const [status, quantity] = await db().hmGet(reservationKey(sku, shard, member), ["status", "quantity"]);
        expect(status).toBe("held");
        heldInZset += Number(quantity);
      }
      expect(heldInZset).toBe(stock.held);
    },
  };
}

describe("lua scripts: loading", () => {
  it("pins the SHA1 of every script (a change of a lua/ file must update this pin)", async () => {
    const pinned: Record<LuaScriptName, string> = {
      reserve: "1500a4569f3bc4376ff646f54ab78a9bb658f358",
      release: "48e34c6c49192b180f170ac31a5f387db665cc92",
      confirm: "f51c5e988de805e7b9f203d9123919bbe8349ba6",
      configure: "e52b436425714d2bb40db3919ad9b4f64b7c6e3f",
    };
    expect(LUA_SHA1).toEqual(pinned);
    for (const name of LUA_SCRIPT_NAMES) {
      expect(await sha1Hex(LUA_SOURCES[name])).toBe(pinned[name]);
      expect(await db().scriptLoad(LUA_SOURCES[name])).toBe(pinned[name]);
    }
  });

  it("EVALSHA of a never-loaded script falls back to EVAL, and only on NOSCRIPT", async () => {
    const calls: string[] = [];
    const spy: ScriptClient = {
      evalSha: (sha, options) => {
        calls.push("EVALSHA");
        return db().evalSha(sha, options);
      },
      eval: (script, options) => {
        calls.push("EVAL");
        return db().eval(script, options);
      },
      scriptLoad: (script) => db().scriptLoad(script),
    };
    const shop = shardOf(uniqueSku("noscript"));
    const configure = [JSON.stringify({ sku: shop.sku, shard: 0, shards: 1, totalStock: 3 })];
    try {
      await db().scriptFlush();
      const shas = LUA_SCRIPT_NAMES.map((name) => LUA_SHA1[name]);
      expect(await db().scriptExists(shas)).toEqual([0, 0, 0, 0]);
      await expect(db().evalSha(LUA_SHA1.configure, { keys: shop.keys, arguments: configure })).rejects.toThrow(
        /^NOSCRIPT/,
      );

      const first = JSON.parse(String(await runScript(spy, "configure", shop.keys, configure))) as Outcome<SkuState>;
      expect(okValue(first).stock).toEqual({ total: 3, available: 3, held: 0, sold: 0 });
      expect(calls).toEqual(["EVALSHA", "EVAL"]);

      // EVAL cached the script: the next call needs EVALSHA only.
      calls.length = 0;
      expect(await db().scriptExists([LUA_SHA1.configure])).toEqual([1]);
      await runScript(spy, "configure", shop.keys, configure);
      expect(calls).toEqual(["EVALSHA"]);

      // Any other error is the script's answer, not a reason to send the source again.
      calls.length = 0;
      await loadScripts(db());
      await expect(runScript(spy, "reserve", shop.keys, [T0, shop.id(1), "u1", "n1", 0])).rejects.toThrow(/quantity/);
      expect(calls).toEqual(["EVALSHA"]);
      expect(await shop.stock()).toEqual({ total: 3, available: 3, held: 0, sold: 0 });
    } finally {
      await loadScripts(db());
    }
  });
});

describe("lua scripts: configure", () => {
  it("creates with the engine's defaults, keeps absent settings, clears null bounds, bumps the seq on each change", async () => {
    const shop = shardOf(uniqueSku("configure"));
    expect(await shop.configure({ totalStock: 10 })).toEqual({
      ok: true,
      value: {
        sku: shop.sku,
        shard: 0,
        shards: 1,
        name: shop.sku,
        status: "on_sale",
        perUserLimit: 1,
        holdSeconds: 900,
        startsAt: null,
        endsAt: null,
        stock: { total: 10, available: 10, held: 0, sold: 0 },
        seq: 1,
        price: null,
        currency: "usd",
      },
    });

    const updated = okValue(
      await shop.configure({
        totalStock: 10,
        name: "Phone",
        perUserLimit: 3,
        holdSeconds: 60,
        startsAt: T0,
        endsAt: T0 + 10_000,
        status: "paused",
      }),
    );
    expect(updated).toMatchObject({
      name: "Phone",
      status: "paused",
      perUserLimit: 3,
      holdSeconds: 60,
      startsAt: T0,
      endsAt: T0 + 10_000,
      seq: 2,
    });

    const kept = okValue(await shop.configure({ totalStock: 12 }));
    expect(kept).toMatchObject({ name: "Phone", status: "paused", perUserLimit: 3, holdSeconds: 60, seq: 3 });
    expect(kept).toMatchObject({ startsAt: T0, endsAt: T0 + 10_000, stock: { total: 12, available: 12 } });

    const cleared = okValue(await shop.configure({ totalStock: 12, startsAt: null, status: "on_sale" }));
    expect(cleared).toMatchObject({ startsAt: null, endsAt: T0 + 10_000, status: "on_sale", seq: 4 });
    expect(await db().hExists(shop.keys[0] ?? "", "starts_at")).toBe(0);
  });

  it("refuses total < held + sold with INVALID_STATE and changes nothing", async () => {
    const shop = shardOf(uniqueSku("shrink"));
    okValue(await shop.configure({ totalStock: 10, perUserLimit: 5 }));
    const held = okValue(await shop.reserve(T0, shop.id(1), "u1", "n1", 3)).reservation;
    okValue(await shop.pay(T0 + 1, "ev1", "payment.succeeded", held.id));
    okValue(await shop.reserve(T0 + 2, shop.id(2), "u2", "n2", 2));
    // seq: configure 1, hold 2, paid 3, hold 4
    expect(await shop.configure({ totalStock: 4 })).toEqual({ ok: false, code: "INVALID_STATE" });
    expect(await shop.stock()).toEqual({ total: 10, available: 5, held: 2, sold: 3 });
    expect(await db().hGet(shop.keys[0] ?? "", "seq")).toBe("4");

    const exact = okValue(await shop.configure({ totalStock: 5 }));
    expect(exact.stock).toEqual({ total: 5, available: 0, held: 2, sold: 3 });
    expect(exact.seq).toBe(5);
    await shop.checkInvariants();
  });
});

describe("lua scripts: reserve", () => {
  it("answers SKU_NOT_FOUND for a shard never configured, writing nothing", async () => {
    const shop = shardOf(uniqueSku("ghost"));
    expect(await shop.reserve(T0, shop.id(1), "u1", "n1")).toEqual({ ok: false, code: "SKU_NOT_FOUND" });
    expect(await db().exists(shop.keys.slice(0, 5))).toBe(0);
  });

  it("holds until sold out: INSUFFICIENT_STOCK while some is left, SOLD_OUT at zero", async () => {
    const shop = shardOf(uniqueSku("sellout"));
    okValue(await shop.configure({ totalStock: 5, perUserLimit: 10, holdSeconds: 60 }));

    expect(await shop.reserve(T0, shop.id(1), "u1", "n1", 2)).toEqual({
      ok: true,
      value: {
        reservation: {
          id: shop.id(1),
          sku: shop.sku,
          userId: "u1",
          quantity: 2,
          status: "held",
          createdAt: T0,
          expiresAt: T0 + 60_000,
          updatedAt: T0,
        },
        replayed: false,
        available: 3,
      },
    });
    expect(okValue(await shop.reserve(T0 + 1, shop.id(2), "u2", "n2", 2)).available).toBe(1);
    expect(await shop.reserve(T0 + 2, shop.id(3), "u3", "n3", 2)).toEqual({
      ok: false,
      code: "INSUFFICIENT_STOCK",
      available: 1,
    });
    expect(okValue(await shop.reserve(T0 + 3, shop.id(4), "u3", "n4", 1)).available).toBe(0);
    expect(await shop.reserve(T0 + 4, shop.id(5), "u4", "n5", 1)).toEqual({
      ok: false,
      code: "SOLD_OUT",
      available: 0,
    });

    expect(await shop.stock()).toEqual({ total: 5, available: 0, held: 5, sold: 0 });
    expect(await shop.status(shop.id(3))).toBeNull();
    expect(await shop.status(shop.id(5))).toBeNull();
    expect(await shop.holds()).toEqual([shop.id(1), shop.id(2), shop.id(4)]);
    expect(await shop.quota("u3")).toBe(1);
    expect(await shop.quota("u4")).toBe(0);
    await shop.checkInvariants();
  });

  it("limits a user's held + sold, and checks the limit before the stock", async () => {
    const shop = shardOf(uniqueSku("limit"));
    okValue(await shop.configure({ totalStock: 4, perUserLimit: 2 }));
    const first = okValue(await shop.reserve(T0, shop.id(1), "u1", "n1")).reservation;
    okValue(await shop.pay(T0 + 1, "ev1", "payment.succeeded", first.id));
    okValue(await shop.reserve(T0 + 2, shop.id(2), "u1", "n2"));
    expect(await shop.quota("u1")).toBe(2);

    // one sold + one held = the limit of 2
    expect(await shop.reserve(T0 + 3, shop.id(3), "u1", "n3")).toEqual({
      ok: false,
      code: "LIMIT_EXCEEDED",
      available: 2,
      limit: { perUserLimit: 2, held: 2 },
    });
    expect(await shop.reserve(T0 + 3, shop.id(3), "u2", "n3", 3)).toEqual({
      ok: false,
      code: "LIMIT_EXCEEDED",
      available: 2,
      limit: { perUserLimit: 2, held: 0 },
    });

    // cancelling the hold frees one unit of the user's limit; the sold one still counts
    okValue(await shop.cancel(T0 + 4, shop.id(2), "u1"));
    expect(await shop.quota("u1")).toBe(1);
    okValue(await shop.reserve(T0 + 5, shop.id(4), "u1", "n4"));
    expect((await shop.reserve(T0 + 6, shop.id(5), "u1", "n5")).ok).toBe(false);

    // sold out and over the limit: the limit is answered first
    okValue(await shop.reserve(T0 + 7, shop.id(6), "u2", "n6", 2));
    expect(await shop.reserve(T0 + 8, shop.id(7), "u2", "n7")).toEqual({
      ok: false,
      code: "LIMIT_EXCEEDED",
      available: 0,
      limit: { perUserLimit: 2, held: 2 },
    });
    expect(await shop.reserve(T0 + 8, shop.id(7), "u3", "n7")).toEqual({ ok: false, code: "SOLD_OUT", available: 0 });
    await shop.checkInvariants();
  });

  it("replays a used nonce with the original reservation, and refuses another user or quantity", async () => {
    const shop = shardOf(uniqueSku("nonce"));
    okValue(await shop.configure({ totalStock: 10, perUserLimit: 3, holdSeconds: 60 }));
    const original = okValue(await shop.reserve(T0, shop.id(1), "u1", "n1", 2));

    const replay = okValue(await shop.reserve(T0 + 1, shop.id(2), "u1", "n1", 2));
    expect(replay).toEqual({ reservation: original.reservation, replayed: true, available: 8 });
    expect(await shop.status(shop.id(2))).toBeNull();
    expect(await shop.stock()).toEqual({ total: 10, available: 8, held: 2, sold: 0 });
    expect(await shop.quota("u1")).toBe(2);

    expect(await shop.reserve(T0 + 2, shop.id(3), "u1", "n1", 1)).toEqual({
      ok: false,
      code: "IDEMPOTENCY_MISMATCH",
      available: 8,
    });
    expect(await shop.reserve(T0 + 2, shop.id(3), "u2", "n1", 2)).toEqual({
      ok: false,
      code: "IDEMPOTENCY_MISMATCH",
      available: 8,
    });

    // the nonce is checked before the sale window: a replay answers even when the sale is paused
    okValue(await shop.configure({ totalStock: 10, status: "paused" }));
    expect(okValue(await shop.reserve(T0 + 3, shop.id(4), "u1", "n1", 2)).replayed).toBe(true);

    // after the hold expired, a replay shows it as it is now (released by the lazy expiry first)
    const late = okValue(await shop.reserve(T0 + 60_000, shop.id(5), "u1", "n1", 2));
    expect(late.replayed).toBe(true);
    expect(late.reservation).toEqual({ ...original.reservation, status: "expired", updatedAt: T0 + 60_000 });
    expect(late.available).toBe(10);
    await shop.checkInvariants();
  });

  it("takes reservations only on sale and inside [startsAt, endsAt)", async () => {
    const shop = shardOf(uniqueSku("window"));
    okValue(await shop.configure({ totalStock: 10, perUserLimit: 10, startsAt: T0 + 1_000, endsAt: T0 + 2_000 }));
    const sale = { status: "on_sale", startsAt: T0 + 1_000, endsAt: T0 + 2_000 };
    const notActive = { ok: false, code: "SALE_NOT_ACTIVE", available: 10, sale };
    expect(await shop.reserve(T0 + 999, shop.id(1), "u1", "n1")).toEqual(notActive);
    expect(okValue(await shop.reserve(T0 + 1_000, shop.id(2), "u1", "n2")).available).toBe(9);
    expect(okValue(await shop.reserve(T0 + 1_999, shop.id(3), "u1", "n3")).available).toBe(8);
    expect(await shop.reserve(T0 + 2_000, shop.id(4), "u1", "n4")).toEqual({ ...notActive, available: 8 });

    okValue(await shop.configure({ totalStock: 10, endsAt: null, status: "paused" }));
    expect(await shop.reserve(T0 + 1_500, shop.id(5), "u1", "n5")).toEqual({
      ...notActive,
      available: 8,
      sale: { status: "paused", startsAt: T0 + 1_000, endsAt: null },
    });
    okValue(await shop.configure({ totalStock: 10, status: "on_sale" }));
    expect(okValue(await shop.reserve(T0 + 5_000, shop.id(6), "u1", "n6")).available).toBe(7);
    okValue(await shop.configure({ totalStock: 10, startsAt: null }));
    expect(okValue(await shop.reserve(T0, shop.id(7), "u1", "n7")).available).toBe(6);

    // a refused nonce is not consumed
    expect(okValue(await shop.reserve(T0 + 5_000, shop.id(8), "u1", "n1")).replayed).toBe(false);
    await shop.checkInvariants();
  });

  it("refuses bad arguments with an error reply before writing anything", async () => {
    const shop = shardOf(uniqueSku("args"));
    okValue(await shop.configure({ totalStock: 2, holdSeconds: 60 }));
    okValue(await shop.reserve(T0, shop.id(1), "u1", "n1"));
    await expect(shop.reserve(T0 + 60_000, shop.id(2), "u2", "n2", 0)).rejects.toThrow(/quantity/);
    await expect(shop.reserve(T0 + 60_000, shop.id(1), "u2", "n2")).rejects.toThrow(/already exists/);
    await expect(shop.reserve(Number.NaN, shop.id(2), "u2", "n2")).rejects.toThrow(/now/);
    // the overdue hold was not released by the refused calls
    expect(await shop.status(shop.id(1))).toBe("held");
    await expect(shop.pay(T0, "ev", "payment.refunded" as PaymentType, shop.id(1))).rejects.toThrow(/type/);
    await expect(shop.configure({ totalStock: -1 })).rejects.toThrow(/totalStock/);
    expect(await shop.stock()).toEqual({ total: 2, available: 1, held: 1, sold: 0 });
  });
});

describe("lua scripts: release", () => {
  it("cancel releases a hold once; again is a no-op; not yours is not found; not held is INVALID_STATE", async () => {
    const shop = shardOf(uniqueSku("cancel"));
    okValue(await shop.configure({ totalStock: 5, perUserLimit: 5, holdSeconds: 60 }));
    const held = okValue(await shop.reserve(T0, shop.id(1), "u1", "n1", 2)).reservation;

    expect(await shop.cancel(T0 + 1, held.id, "u2")).toEqual({ ok: false, code: "RESERVATION_NOT_FOUND" });
    expect(await shop.cancel(T0 + 1, shop.id("nope"), "u1")).toEqual({ ok: false, code: "RESERVATION_NOT_FOUND" });

    const cancelled = { ...held, status: "cancelled", updatedAt: T0 + 10 };
    expect(await shop.cancel(T0 + 10, held.id, "u1")).toEqual({ ok: true, value: cancelled });
    expect(await shop.stock()).toEqual({ total: 5, available: 5, held: 0, sold: 0 });
    expect(await shop.quota("u1")).toBe(0);
    expect(await shop.holds()).toEqual([]);

    expect(await shop.cancel(T0 + 20, held.id, "u1")).toEqual({ ok: true, value: cancelled });
    expect(await shop.stock()).toEqual({ total: 5, available: 5, held: 0, sold: 0 });

    const paid = okValue(await shop.reserve(T0 + 30, shop.id(2), "u1", "n2")).reservation;
    okValue(await shop.pay(T0 + 31, "ev2", "payment.succeeded", paid.id));
    expect(await shop.cancel(T0 + 32, paid.id, "u1")).toEqual({ ok: false, code: "INVALID_STATE" });

    const expiring = okValue(await shop.reserve(T0 + 40, shop.id(3), "u1", "n3")).reservation;
    expect(await shop.cancel(expiring.expiresAt, expiring.id, "u1")).toEqual({ ok: false, code: "INVALID_STATE" });
    expect(await shop.status(expiring.id)).toBe("expired");
    expect(await shop.stock()).toEqual({ total: 5, available: 4, held: 0, sold: 1 });
    await shop.checkInvariants();
  });

  it("expiry releases each hold exactly once, at expiresAt <= now, oldest first", async () => {
    const shop = shardOf(uniqueSku("expire"));
    okValue(await shop.configure({ totalStock: 5, perUserLimit: 5, holdSeconds: 60 }));
    okValue(await shop.reserve(T0, shop.id(1), "u1", "n1", 2));
    okValue(await shop.reserve(T0 + 10, shop.id(2), "u2", "n2", 1));
    okValue(await shop.reserve(T0 + 20, shop.id(3), "u3", "n3", 1));

    expect(await shop.expire(T0 + 59_999)).toEqual({ ok: true, value: 0 });
    expect(await shop.expire(T0 + 60_000)).toEqual({ ok: true, value: 1 });
    expect(await shop.expire(T0 + 60_000)).toEqual({ ok: true, value: 0 });
    expect(await shop.status(shop.id(1))).toBe("expired");
    expect(await shop.stock()).toEqual({ total: 5, available: 3, held: 2, sold: 0 });
    expect(await shop.quota("u1")).toBe(0);

    // a limit takes the oldest first
    expect(await shop.expire(T0 + 100_000, 1)).toEqual({ ok: true, value: 1 });
    expect(await shop.holds()).toEqual([shop.id(3)]);
    expect(await shop.expire(T0 + 100_000)).toEqual({ ok: true, value: 1 });
    expect(await shop.expire(T0 + 100_000)).toEqual({ ok: true, value: 0 });
    expect(await shop.stock()).toEqual({ total: 5, available: 5, held: 0, sold: 0 });

    const seq = await db().hGet(shop.keys[0] ?? "", "seq");
    expect(await shop.expire(T0 + 200_000)).toEqual({ ok: true, value: 0 });
    expect(await db().hGet(shop.keys[0] ?? "", "seq")).toBe(seq);
    for (const n of [1, 2, 3]) expect(await shop.status(shop.id(n))).toBe("expired");
    await shop.checkInvariants();
  });

  it("every mutating script first releases up to 64 overdue holds, oldest first; the sweep takes the rest", async () => {
    const shop = shardOf(uniqueSku("lazy"));
    okValue(await shop.configure({ totalStock: 71, perUserLimit: 1, holdSeconds: 60 }));
    for (let i = 0; i < 70; i++) okValue(await shop.reserve(T0 + i, shop.id(i), `u${i}`, `n${i}`));
    expect(await shop.stock()).toEqual({ total: 71, available: 1, held: 70, sold: 0 });

    // a reserve well past every expiry releases the 64 oldest, then decides with that stock
    const answer = okValue(await shop.reserve(T0 + 200_000, shop.id("late"), "late", "n-late"));
    expect(answer.available).toBe(65 - 1);
    expect(await shop.holds()).toEqual([64, 65, 66, 67, 68, 69].map(shop.id).concat(shop.id("late")));
    expect(await shop.status(shop.id(63))).toBe("expired");
    expect(await shop.status(shop.id(64))).toBe("held");

    // a payment on its way in releases the rest, even one for an unknown reservation
    expect(await shop.pay(T0 + 200_000, "ev-none", "payment.succeeded", shop.id("nope"))).toEqual({
      ok: false,
      code: "RESERVATION_NOT_FOUND",
    });
    expect(await shop.holds()).toEqual([shop.id("late")]);
    expect(await shop.expire(T0 + 200_000)).toEqual({ ok: true, value: 0 });
    expect(await shop.stock()).toEqual({ total: 71, available: 70, held: 1, sold: 0 });
    await shop.checkInvariants();
  });
});

describe("lua scripts: confirm", () => {
  it("payment.succeeded turns a hold into sold; payment.failed releases a hold as cancelled", async () => {
    const shop = shardOf(uniqueSku("pay"));
    okValue(await shop.configure({ totalStock: 5, perUserLimit: 5, holdSeconds: 60 }));
    const a = okValue(await shop.reserve(T0, shop.id(1), "u1", "n1", 2)).reservation;
    const b = okValue(await shop.reserve(T0, shop.id(2), "u2", "n2", 1)).reservation;

    expect(await shop.pay(T0 + 5, "ev-a", "payment.succeeded", a.id)).toEqual({
      ok: true,
      value: {
        reservation: { ...a, status: "paid", updatedAt: T0 + 5 },
        status: "paid",
        outcome: "applied",
        reason: null,
        replayed: false,
      },
    });
    expect(await shop.stock()).toEqual({ total: 5, available: 2, held: 1, sold: 2 });
    expect(await shop.quota("u1")).toBe(2);

    expect(await shop.pay(T0 + 6, "ev-b", "payment.failed", b.id)).toEqual({
      ok: true,
      value: {
        reservation: { ...b, status: "cancelled", updatedAt: T0 + 6 },
        status: "cancelled",
        outcome: "applied",
        reason: null,
        replayed: false,
      },
    });
    expect(await shop.stock()).toEqual({ total: 5, available: 3, held: 0, sold: 2 });
    expect(await shop.quota("u2")).toBe(0);

    // a failure after the money arrived, or a second success, leaves a paid reservation as it is;
    // the second success is a refund (a reservation is never paid twice)
    const paid = { ...a, status: "paid", updatedAt: T0 + 5 };
    expect(await shop.pay(T0 + 7, "ev-a-fail", "payment.failed", a.id)).toEqual({
      ok: true,
      value: { reservation: paid, status: "paid", outcome: "applied", reason: null, replayed: false },
    });
    expect(await shop.pay(T0 + 8, "ev-a-again", "payment.succeeded", a.id)).toEqual({
      ok: true,
      value: { reservation: paid, status: "paid", outcome: "refund_required", reason: "already_paid", replayed: false },
    });
    expect(await db().hGet(shop.keys[0] ?? "", "payments_refund_required")).toBe("1");
    expect(await shop.stock()).toEqual({ total: 5, available: 3, held: 0, sold: 2 });
    expect(await shop.pay(T0 + 9, "ev-x", "payment.succeeded", shop.id("nope"))).toEqual({
      ok: false,
      code: "RESERVATION_NOT_FOUND",
    });

    const outcomes = await db().hGetAll(shop.keys[4] ?? "");
    expect(Object.fromEntries(Object.entries(outcomes).map(([k, v]) => [k, JSON.parse(String(v))]))).toEqual({
      "ev-a": { reservationId: a.id, type: "payment.succeeded", status: "paid", outcome: "applied", reason: null },
      "ev-b": { reservationId: b.id, type: "payment.failed", status: "cancelled", outcome: "applied", reason: null },
      "ev-a-fail": { reservationId: a.id, type: "payment.failed", status: "paid", outcome: "applied", reason: null },
      "ev-a-again": {
        reservationId: a.id,
        type: "payment.succeeded",
        status: "paid",
        outcome: "refund_required",
        reason: "already_paid",
      },
    });
    await shop.checkInvariants();
  });

  it("late payment re-takes stock when it can, else refund_required", async () => {
    const shop = shardOf(uniqueSku("late"));
    okValue(await shop.configure({ totalStock: 3, perUserLimit: 2, holdSeconds: 60 }));

    // expired, stock still there, within the limit -> paid (payment at expiresAt is already late)
    const a = okValue(await shop.reserve(T0, shop.id(1), "u1", "n1", 2)).reservation;
    expect(await shop.pay(a.expiresAt, "ev-a", "payment.succeeded", a.id)).toEqual({
      ok: true,
      value: {
        reservation: { ...a, status: "paid", updatedAt: a.expiresAt },
        status: "paid",
        outcome: "applied",
        reason: null,
        replayed: false,
      },
    });
    expect(await shop.stock()).toEqual({ total: 3, available: 1, held: 0, sold: 2 });
    expect(await shop.quota("u1")).toBe(2);

    // expired, then the stock went to someone else -> refund_required, nothing taken
    const b = okValue(await shop.reserve(T0 + 100_000, shop.id(2), "u2", "n2")).reservation;
    okValue(await shop.expire(b.expiresAt));
    okValue(await shop.reserve(b.expiresAt + 1, shop.id(3), "u3", "n3"));
    expect(await shop.pay(b.expiresAt + 2, "ev-b", "payment.succeeded", b.id)).toEqual({
      ok: true,
      value: {
        reservation: { ...b, status: "refund_required", updatedAt: b.expiresAt + 2 },
        status: "refund_required",
        outcome: "refund_required",
        reason: "too_late",
        replayed: false,
      },
    });
    expect(await shop.stock()).toEqual({ total: 3, available: 0, held: 1, sold: 2 });

    // cancelled, stock there, but the user is at the limit again -> refund_required
    okValue(await shop.configure({ totalStock: 6 }));
    const c = okValue(await shop.reserve(T0 + 300_000, shop.id(4), "u4", "n4", 2)).reservation;
    okValue(await shop.cancel(T0 + 300_001, c.id, "u4"));
    okValue(await shop.reserve(T0 + 300_002, shop.id(5), "u4", "n5", 1));
    expect(okValue(await shop.pay(T0 + 300_003, "ev-c", "payment.succeeded", c.id))).toMatchObject({
      status: "refund_required",
      reason: "limit_exceeded",
    });
    expect(await shop.quota("u4")).toBe(1);

    // cancelled, stock there, within the limit -> paid
    const d = okValue(await shop.reserve(T0 + 400_000, shop.id(6), "u5", "n6")).reservation;
    okValue(await shop.cancel(T0 + 400_001, d.id, "u5"));
    expect(okValue(await shop.pay(T0 + 400_002, "ev-d", "payment.succeeded", d.id)).reservation.status).toBe("paid");
    expect(await shop.quota("u5")).toBe(1);

    // refund_required stays refund_required; a failure on an expired one changes nothing
    expect(okValue(await shop.pay(T0 + 500_000, "ev-b2", "payment.succeeded", b.id)).reservation.status).toBe(
      "refund_required",
    );
    const e = okValue(await shop.reserve(T0 + 600_000, shop.id(7), "u6", "n7")).reservation;
    expect(okValue(await shop.pay(e.expiresAt, "ev-e", "payment.failed", e.id)).reservation.status).toBe("expired");

    expect(await shop.stock()).toEqual({ total: 6, available: 3, held: 0, sold: 3 });
    await shop.checkInvariants();
  });

  it("applies each payment event id once", async () => {
    const shop = shardOf(uniqueSku("once"));
    okValue(await shop.configure({ totalStock: 3, perUserLimit: 3, holdSeconds: 60 }));
    const a = okValue(await shop.reserve(T0, shop.id(1), "u1", "n1")).reservation;
    const paid = { ...a, status: "paid", updatedAt: T0 + 1 };
    expect(await shop.pay(T0 + 1, "ev1", "payment.succeeded", a.id)).toEqual({
      ok: true,
      value: { reservation: paid, status: "paid", outcome: "applied", reason: null, replayed: false },
    });
    const seq = await db().hGet(shop.keys[0] ?? "", "seq");

    expect(await shop.pay(T0 + 2, "ev1", "payment.succeeded", a.id)).toEqual({
      ok: true,
      value: { reservation: paid, status: "paid", outcome: "applied", reason: null, replayed: true },
    });
    // one event id is one event: the same id claiming another type changes nothing
    expect(await shop.pay(T0 + 3, "ev1", "payment.failed", a.id)).toEqual({ ok: false, code: "IDEMPOTENCY_MISMATCH" });
    expect(await db().hGet(shop.keys[0] ?? "", "seq")).toBe(seq);
    expect(await shop.stock()).toEqual({ total: 3, available: 2, held: 0, sold: 1 });

    // a new event id for an unknown reservation is not found
    expect(await shop.pay(T0 + 4, "ev2", "payment.succeeded", shop.id("nope"))).toEqual({
      ok: false,
      code: "RESERVATION_NOT_FOUND",
    });
    // a known event id naming another reservation is refused, and that reservation stays held
    const b = okValue(await shop.reserve(T0 + 5, shop.id(2), "u2", "n2")).reservation;
    expect(await shop.pay(T0 + 6, "ev1", "payment.succeeded", b.id)).toEqual({
      ok: false,
      code: "IDEMPOTENCY_MISMATCH",
    });
    expect(await shop.status(b.id)).toBe("held");
    await shop.checkInvariants();
  });
});
