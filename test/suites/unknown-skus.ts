import { runInDurableObject } from "cloudflare:test";
import { env } from "cloudflare:workers";
import { describe, expect, it } from "vitest";
import { call, createSku, stockCallsTo, stockShard, uniqueSku } from "../support/client";
import { pay } from "../support/payments";

/** API.md: requests about SKUs that were never configured store nothing, whoever sends them. */

/** The tables a stock object's SQLite database has (an object nobody configured has none). */
function tablesOf(sku: string, shard: number): Promise<string[]> {
  return runInDurableObject(stockShard(env, sku, shard), (_object, state) =>
    state.storage.sql
      .exec<{ name: string }>("SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE '_cf_%'")
      .toArray()
      .map((r) => r.name),
  );
}

const hex = () => crypto.randomUUID().replaceAll("-", "");

/** What a stranger (or a shopper poking) asks about a SKU id, across the routes that take one. */
async function poke(sku: string): Promise<number[]> {
  const user = `stranger-${sku}`;
  const id = `${sku}.0.${hex()}`;
  const answers = await Promise.all([
    call("GET", `/api/skus/${sku}`),
    call("GET", `/api/skus/${sku}/draw`),
    call("GET", `/api/skus/${sku}/draw/entries?offset=5`),
    call("POST", `/api/skus/${sku}/tokens`, { user }),
    call("POST", `/api/skus/${sku}/waitlist`, { user, body: { quantity: 1 } }),
    call("GET", `/api/skus/${sku}/waitlist`, { user }),
    call("DELETE", `/api/skus/${sku}/waitlist`, { user }),
    call("GET", `/api/reservations/${id}`, { user }),
    call("GET", `/api/reservations/${sku}.3.${hex()}`, { user }),
    call("POST", `/api/reservations/${id}/cancel`, { user }),
    call("GET", `/admin/skus/${sku}`, { admin: true }),
    pay(id),
  ]);
  return answers.map((a) => a.status);
}

describe("requests about a SKU nobody configured", () => {
  it("are answered not found, reach no stock object and leave no state anywhere", async () => {
    const ids = Array.from({ length: 5 }, () => uniqueSku("ghost"));
    for (const sku of ids) {
      expect(await poke(sku)).toEqual(Array(12).fill(404));
      for (const shard of [0, 3]) expect(stockCallsTo(sku, shard)).toBe(0);
    }
    const rows = await env.DB.prepare(
      `SELECT (SELECT COUNT(*) FROM skus WHERE sku LIKE 'ghost-%') AS skus,
              (SELECT COUNT(*) FROM orders WHERE sku LIKE 'ghost-%') AS orders`,
    ).first<{ skus: number; orders: number }>();
    expect(rows).toEqual({ skus: 0, orders: 0 });
  });

  it("a stock object that is reached anyway writes nothing until its SKU is configured", async () => {
    const sku = uniqueSku("blank");
    const object = stockShard(env, sku, 0);
    expect(await object.state()).toBeNull();
    expect(await object.reservation(`${sku}.0.${hex()}`)).toBeNull();
    expect(await object.cancel(`${sku}.0.${hex()}`, "u")).toEqual({ ok: false, code: "RESERVATION_NOT_FOUND" });
    expect(await object.reserve([{ userId: "u", nonce: hex(), quantity: 1 }])).toEqual([
      { ok: false, code: "SKU_NOT_FOUND" },
    ]);
    expect(await object.drawInfo()).toBeNull();
    expect(await object.drawEntries(0, 10)).toEqual([]);
    expect(await object.waitlistLength()).toBe(0);
    expect(await object.waitlistPlace("u")).toBeNull();
    expect(await object.leaveWaitlist("u")).toBeNull();
    expect(await tablesOf(sku, 0)).toEqual([]);

    // A configure the object refuses leaves it as blank as it was.
    const refused = await object.configure({
      sku,
      shard: 0,
      shards: 1,
      totalStock: 1,
      startsAt: Date.now() - 60_000,
      openingWindowMs: 1_000,
    });
    expect(refused).toEqual({ ok: false, code: "INVALID_STATE" });
    expect(await tablesOf(sku, 0)).toEqual([]);

    // Its first configure makes the tables.
    await createSku(sku, { totalStock: 1 });
    expect(await tablesOf(sku, 0)).toContain("sku");
  });

  it("a reservation id naming a shard beyond a configured SKU's count reaches no object", async () => {
    const sku = uniqueSku("fewshards");
    await createSku(sku, { totalStock: 2, shards: 2 });
    const answer = await call("GET", `/api/reservations/${sku}.7.${hex()}`, { user: "poker" });
    expect(answer.status).toBe(404);
    expect(stockCallsTo(sku, 7)).toBe(0);
  });
});
