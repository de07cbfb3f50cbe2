import { runInDurableObject } from "cloudflare:test";
import { env } from "cloudflare:workers";
import { afterEach, describe, expect, it, vi } from "vitest";
import { homeShard } from "../../durable-objects/stock/stock-model";
import { mintPurchaseToken, newNonce } from "../../src/edge/purchase-token";
import { forgetSoldOut } from "../../src/edge/sold-out-cache";
import { forgetDisplay } from "../../src/mirror/stock-display";
import { call, createSku, reserve, stockOf, stockShard, tokenFor, uniqueSku } from "../support/client";

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
    // The buyer's allowance spent on another route.
    await Promise.all(Array.from({ length: 25 }, () => call("GET", "/api/me/reservations", { user: "eh-1" })));
    const seen: string[] = [];
    for (const isolate of ["warm", "fresh"]) {
      if (isolate === "fresh") {
        forgetSoldOut(sku);
        forgetDisplay(sku);
      }
      const replay = await post("eh-1", token);
      seen.push(`${isolate} ${replay.status} ${replay.json.error?.code ?? replay.headers.get("Idempotent-Replayed")}`);
    }
    expect(seen).toEqual(["warm 429 RATE_LIMITED", "fresh 429 RATE_LIMITED"]);
  });
});
