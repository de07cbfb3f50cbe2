import { runInDurableObject } from "cloudflare:test";
import { env } from "cloudflare:workers";
import { afterEach, describe, expect, it, vi } from "vitest";
import { homeShard } from "../../durable-objects/stock/stock-model";
import { mintPurchaseToken, newNonce } from "../../src/edge/purchase-token";
import { forgetSoldOut } from "../../src/edge/sold-out-cache";
import { forgetDisplay } from "../../src/mirror/stock-display";
import { call, createSku, overTheLimit, reserve, stockOf, stockShard, tokenFor, uniqueSku } from "../support/client";

const TOKEN_SECRET = "test-token-secret";

// Found in an audit of the reservation path: what an isolate remembers, or a shard a resize left out,
// must not turn a token that holds a reservation, or a SKU with units, into SOLD_OUT.

describe("sold out comes first, for sizes", () => {
  it("a token that holds a size sold out is answered its own refusal, never SOLD_OUT, from a warm isolate and a fresh one", async () => {
    const sku = uniqueSku("eh-size");
    await createSku(sku, {
      totalStock: 6,
      perUserLimit: 2,
      variants: [
        { id: "S", totalStock: 1 },
        { id: "M", totalStock: 5 },
      ],
    });
    const post = (user: string, token: string) =>
      call("POST", `/api/skus/${sku}/reservations`, { user, body: { token, quantity: 1, variants: ["S"] } });
    const token = await tokenFor("eh-1", sku);
    const held = await post("eh-1", token);
    expect([held.status, held.json.variant]).toEqual([202, "S"]);
    // Someone else is told S is sold out (this isolate learns it, with the shard's spent nonces).
    const other = await post("eh-2", await tokenFor("eh-2", sku));
    expect([other.status, other.json.error?.code]).toEqual([409, "SOLD_OUT"]);
    const seen: string[] = [];
    for (const isolate of ["warm", "fresh"]) {
      if (isolate === "fresh") {
        forgetSoldOut(sku);
        forgetDisplay(sku);
      }
      // The buyer's allowance spent on another route.
      const replay = await overTheLimit("eh-1", () => post("eh-1", token));
      seen.push(`${isolate} ${replay.status} ${replay.json.error?.code ?? replay.headers.get("Idempotent-Replayed")}`);
    }
    expect(seen).toEqual(["warm 429 RATE_LIMITED", "fresh 429 RATE_LIMITED"]);
  });
});

describe("a replay on a shard a resize left out", () => {
  it("does not tell the isolate the SKU is sold out: the next buyer still gets a token and a hold", async () => {
    const sku = uniqueSku("eh-rs");
    await createSku(sku, { totalStock: 8, perUserLimit: 2, shards: 4 });
    let n = 0;
    while (homeShard(`eh-rs${n}`, 4) !== 3) n++;
    const user = `eh-rs${n}`;
    const token = await tokenFor(user, sku);
    const held = await reserve(user, sku, 1, token);
    expect(held.status).toBe(202);
    expect((await call("POST", `/api/reservations/${held.json.reservationId}/cancel`, { user })).status).toBe(200);
    expect((await call("PUT", `/admin/skus/${sku}`, { admin: true, body: { shards: 1 } })).status).toBe(200);
    // The token's replay is answered from shard 3, which the resize left with no units.
    const replay = await reserve(user, sku, 1, token);
    expect([replay.status, replay.json.reservationId, replay.headers.get("Idempotent-Replayed")]).toEqual([
      202,
      held.json.reservationId,
      "true",
    ]);
    expect(await stockOf(sku)).toEqual({ total: 8, available: 8, held: 0, sold: 0 });
    // 8 units are on sale: another shopper is sold one, by this isolate too.
    const next = await call("POST", `/api/skus/${sku}/tokens`, { user: "eh-rs-next" });
    expect([next.status, next.json.error?.code]).toEqual([201, undefined]);
    const bought = await reserve("eh-rs-next", sku, 1, next.json.token);
    expect(bought.status).toBe(202);
  });
});

describe("a token whose hold outlives it", () => {
  afterEach(() => vi.useRealTimers());
  it("is answered TOKEN_EXPIRED, never SOLD_OUT, while its hold stands, from a warm isolate and a fresh one", async () => {
    const sku = uniqueSku("eh-exp");
    await createSku(sku, { totalStock: 2, perUserLimit: 1, holdSeconds: 900 });
    const claims = { sku, userId: "eh-exp-1", shard: 0, shards: 1, nonce: newNonce(), expiresAt: Date.now() + 1_000 };
    const token = await mintPurchaseToken(claims, TOKEN_SECRET);
    const held = await reserve("eh-exp-1", sku, 1, token);
    expect(held.status).toBe(202);
    // The token expires (by the edge's clock and, past its skew margin, by the object's); the hold stays.
    await runInDurableObject(stockShard(env, sku, 0), (object) => {
      object.now = () => Date.now() + 120_000;
    });
    vi.useFakeTimers({ toFake: ["Date"], now: Date.now() + 2_000 });
    // The last unit sells to another shopper.
    const last = { ...claims, userId: "eh-exp-3", nonce: newNonce(), expiresAt: Date.now() + 60_000 };
    expect((await reserve("eh-exp-3", sku, 1, await mintPurchaseToken(last, TOKEN_SECRET))).status).toBe(202);
    const seen: string[] = [];
    for (const isolate of ["warm", "fresh"]) {
      if (isolate === "fresh") {
        forgetSoldOut(sku);
        forgetDisplay(sku);
      } else {
        // Another shopper's refusal teaches this isolate that the SKU is sold out.
        const other = { ...claims, userId: "eh-exp-2", nonce: newNonce(), expiresAt: Date.now() + 60_000 };
        const refused = await reserve("eh-exp-2", sku, 1, await mintPurchaseToken(other, TOKEN_SECRET));
        expect(refused.json.error?.code).toBe("SOLD_OUT");
      }
      const replay = await reserve("eh-exp-1", sku, 1, token);
      seen.push(`${isolate} ${replay.status} ${replay.json.error?.code}`);
    }
    const mine = await call("GET", `/api/reservations/${held.json.reservationId}`, { user: "eh-exp-1" });
    expect(mine.json.status).toBe("held");
    expect(seen).toEqual(["warm 401 TOKEN_EXPIRED", "fresh 401 TOKEN_EXPIRED"]);
  });
});
