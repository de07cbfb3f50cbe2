import { runInDurableObject } from "cloudflare:test";
import { env } from "cloudflare:workers";
import { describe, expect, it } from "vitest";
import { call, createSku, stockOf, stockShard, tokenFor, uniqueSku } from "../support/client";

/**
 * A stock object reset while a shopper's call waits on it (`ctx.abort()`, as chaos's abort fault and a
 * crash or code update do): the shopper is told `503 BUSY` with `Retry-After`, never `500 INTERNAL`,
 * and the same request sent again is answered as if it came first.
 */

/**
 * Arms the shard to abort the object the next time a call reads its clock (a reservation) or its
 * state (a token request), then sends `request`: the Worker's RPC meets the reset while the object
 * answers it, however slow the machine. Returns the request's answer.
 */
async function withResetMidCall<T>(
  sku: string,
  shard: number,
  seam: "clock" | "state",
  request: () => Promise<T>,
): Promise<T> {
  await runInDurableObject(stockShard(env, sku, shard), (object, state) => {
    if (seam === "clock") abortOnNextCall(object, "now", state);
    else abortOnNextCall(object.engine.configuration, "state", state);
  });
  return request();
}

/** Replaces `holder[key]` for one call: that call aborts the object, then runs as before. */
function abortOnNextCall<K extends string>(holder: Record<K, () => unknown>, key: K, state: DurableObjectState) {
  const original = holder[key].bind(holder);
  holder[key] = () => {
    holder[key] = original;
    state.abort("test: stock object aborted");
    return original();
  };
}

describe("a stock object reset mid-call", () => {
  it("answers a token request 503 BUSY with Retry-After, and its retry gets a token", async () => {
    const sku = uniqueSku("reset-token");
    await createSku(sku, { totalStock: 5 });
    const answer = await withResetMidCall(sku, 0, "state", () =>
      call("POST", `/api/skus/${sku}/tokens`, { user: "ada" }),
    );
    expect([answer.status, answer.json.error?.code, answer.headers.get("Retry-After")]).toEqual([503, "BUSY", "1"]);
    const retry = await call("POST", `/api/skus/${sku}/tokens`, { user: "ada" });
    expect(retry.status).toBe(201);
  });

  it("answers a reservation 503 BUSY, and the same token sent again holds exactly once", async () => {
    const sku = uniqueSku("reset-reserve");
    await createSku(sku, { totalStock: 5, perUserLimit: 2 });
    const token = await tokenFor("bea", sku);
    const reserve = () => call("POST", `/api/skus/${sku}/reservations`, { user: "bea", body: { token, quantity: 2 } });
    const answer = await withResetMidCall(sku, 0, "clock", reserve);
    expect([answer.status, answer.json.error?.code]).toEqual([503, "BUSY"]);
    expect((await reserve()).status).toBe(202);
    expect((await reserve()).headers.get("Idempotent-Replayed")).toBe("true");
    expect(await stockOf(sku)).toEqual({ total: 5, available: 3, held: 2, sold: 0 });
  });
});
