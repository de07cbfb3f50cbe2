import { runDurableObjectAlarm, runInDurableObject } from "cloudflare:test";
import { env } from "cloudflare:workers";
import { expect } from "vitest";
import { entryIdOf } from "../../durable-objects/engine/opening-draw";
import { saltSecret } from "../../durable-objects/shared/sale-entries";
import { stockShard } from "./client";
import { eventually } from "./eventually";

/** A draw's window, driven by the stock objects' clocks (tests move time instead of sleeping). */

/** Every shard's clock at `at`. */
export async function setClock(sku: string, shards: number, at: number): Promise<void> {
  for (let shard = 0; shard < shards; shard++) {
    await runInDurableObject(stockShard(env, sku, shard), (object) => {
      object.now = () => at;
    });
  }
}

/** Waits until the shards have recorded `tokens` tokens in draws (every request has entered). */
export async function untilEntered(sku: string, shards: number, tokens: number): Promise<void> {
  await eventually(async () => {
    let n = 0;
    for (let shard = 0; shard < shards; shard++) {
      n += await runInDurableObject(
        stockShard(env, sku, shard),
        (_object, state) => state.storage.sql.exec<{ n: number }>("SELECT COUNT(*) AS n FROM draw_tokens").one().n,
      );
    }
    expect(n).toBe(tokens);
  }, 30_000);
}

/** A user's entry in a draw made here (the tests keep a log): their salted `user` in the SKU's log. */
export function entryIdFor(sku: string, userId: string): string {
  return entryIdOf(sku, userId, saltSecret(env.LOG_SIGNING_KEY));
}

/** The window closes: every shard's clock at the close, and shard 0's alarm decides the draw. */
export async function closeWindow(sku: string, shards: number, closesAt: number): Promise<void> {
  await setClock(sku, shards, closesAt);
  expect(await runDurableObjectAlarm(stockShard(env, sku, 0))).toBe(true);
}
