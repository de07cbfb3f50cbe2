import { runInDurableObject } from "cloudflare:test";
import { env } from "cloudflare:workers";
import { describe, expect, it } from "vitest";
import { call, createSku, stockCallsTo, stockOf, stockShard, tokenFor, uniqueSku } from "./support/client";

/**
 * A stock object reset while a shopper's call waits on it (`ctx.abort()`, as chaos's abort fault and a
 * crash or code update do): the shopper is told `503 BUSY` with `Retry-After`, never `500 INTERNAL`,
 * and the same request sent again is answered as if it came first.
 */

/**
 * Holds the shard's input gate until the Worker's next RPC to it is queued, then aborts the object,
 * while `request` runs: the RPC meets the reset. Returns the request's answer.
 */
async function withResetMidCall<T>(sku: string, shard: number, request: () => Promise<T>): Promise<T> {
  const before = stockCallsTo(sku, shard);
  const aborting = runInDurableObject(stockShard(env, sku, shard), (_object, state) =>
    state.blockConcurrencyWhile(async () => {
      while (stockCallsTo(sku, shard) === before) await scheduler.wait(5);
      await scheduler.wait(20); // the RPC is on its way into the object's queue
      state.abort("test: stock object aborted");
    }),
  ).catch((err: unknown) => err); // the abort rejects the call that made it
  const answer = await request();
  expect(String(await aborting)).toContain("test: stock object aborted");
  return answer;
}

describe("a stock object reset mid-call", () => {
  it("answers a token request 503 BUSY with Retry-After, and its retry gets a token", async () => {
    const sku = uniqueSku("reset-token");
    await createSku(sku, { totalStock: 5 });
    const answer = await withResetMidCall(sku, 0, () => call("POST", `/api/skus/${sku}/tokens`, { user: "ada" }));
    expect([answer.status, answer.json.error?.code, answer.headers.get("Retry-After")]).toEqual([503, "BUSY", "1"]);
    const retry = await call("POST", `/api/skus/${sku}/tokens`, { user: "ada" });
    expect(retry.status).toBe(201);
  });

  it("answers a reservation 503 BUSY, and the same token sent again holds exactly once", async () => {
    const sku = uniqueSku("reset-reserve");
    await createSku(sku, { totalStock: 5, perUserLimit: 2 });
    const token = await tokenFor("bea", sku);
    const reserve = () => call("POST", `/api/skus/${sku}/reservations`, { user: "bea", body: { token, quantity: 2 } });
    const answer = await withResetMidCall(sku, 0, reserve);
    expect([answer.status, answer.json.error?.code]).toEqual([503, "BUSY"]);
    expect((await reserve()).status).toBe(202);
    expect((await reserve()).headers.get("Idempotent-Replayed")).toBe("true");
    expect(await stockOf(sku)).toEqual({ total: 5, available: 3, held: 2, sold: 0 });
  });
});
