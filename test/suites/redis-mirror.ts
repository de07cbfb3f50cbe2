import { runInDurableObject } from "cloudflare:test";
import { env } from "cloudflare:workers";
import { Redis } from "@upstash/redis/cloudflare";
import { describe, expect, inject, it } from "vitest";
import type { SkuState } from "../../durable-objects/engine/types";
import { isNoScript, LuaScript, runScript, type ScriptClient, sha1Hex } from "../../durable-objects/mirror/lua-script";
import { MIRROR_SCRIPT, mirrorKey, RedisMirror } from "../../durable-objects/mirror/redis-mirror";
import type { SkuStock } from "../../durable-objects/stock/sku-stock";
import mirrorLua from "../../lua/mirror.lua";
import { stockShard } from "../support/client";

/**
 * The Worker-side mirror client (src/mirror/) and lua/mirror.lua, inside workerd, against a real
 * redis-server through the Upstash bridge (test/support/redis-global-setup.ts).
 */

const { bridgeUrl, token, controlUrl } = inject("redis");

/** A plain client for looking at Redis directly. */
const redis = new Redis({ url: bridgeUrl, token, retry: false, enableTelemetry: false, enableAutoPipelining: false });

let counter = 0;

/** A real snapshot of a fresh stock object (10 units, limit 2), with the counts and seq asked for. */
async function snapshot(overrides: { seq: number; held?: number; sold?: number }): Promise<SkuState> {
  const sku = `mirror-unit-${++counter}`;
  const base = await runInDurableObject(stockShard(env, sku, 0), (object: SkuStock) =>
    object.engine.configuration.configure({
      sku,
      shard: 0,
      shards: 1,
      name: "Mirror unit",
      totalStock: 10,
      perUserLimit: 2,
    }),
  );
  if (!base.ok) throw new Error(`configure failed: ${base.code}`);
  const held = overrides.held ?? 0;
  const sold = overrides.sold ?? 0;
  return { ...base.value, stock: { total: 10, available: 10 - held - sold, held, sold }, seq: overrides.seq };
}

/** Records which script commands were sent. */
function spyOn(client: ScriptClient, calls: string[]): ScriptClient {
  return {
    evalsha: (sha1, keys, args) => {
      calls.push("EVALSHA");
      return client.evalsha(sha1, keys, args);
    },
    eval: (script, keys, args) => {
      calls.push("EVAL");
      return client.eval(script, keys, args);
    },
  };
}

describe("lua/mirror.lua", () => {
  it("pins its SHA1 (a change of lua/mirror.lua must update this pin), the name Redis gives it", async () => {
    const pinned = "9a8134c0ca1c9528f86bca73a012bcf1ace99531";
    expect(await sha1Hex(mirrorLua)).toBe(pinned);
    expect(await MIRROR_SCRIPT.sha1()).toBe(pinned);
    expect(await redis.scriptLoad(mirrorLua)).toBe(pinned);
  });

  it("runs with EVALSHA and falls back to EVAL only on NOSCRIPT", async () => {
    await redis.scriptFlush();
    const calls: string[] = [];
    const client = spyOn(redis, calls);
    const key = mirrorKey(`noscript-${++counter}`, 0);
    const args = [1, 3, 3, 0, 0, "on_sale", "newer"];
    expect(await runScript(client, MIRROR_SCRIPT, [key], args)).toEqual([1, 1]);
    expect(calls).toEqual(["EVALSHA", "EVAL"]);

    // EVAL cached it: EVALSHA alone from now on.
    calls.length = 0;
    expect(await runScript(client, MIRROR_SCRIPT, [key], [2, 3, 2, 1, 0, "on_sale", "newer"])).toEqual([1, 2]);
    expect(calls).toEqual(["EVALSHA"]);

    // Any other error is the caller's, with no EVAL behind it.
    calls.length = 0;
    const error = await runScript(client, MIRROR_SCRIPT, [key], [3, 3, 3, 3, 0, "on_sale", "newer"]).catch(
      (e: unknown) => e,
    );
    expect(String(error)).toMatch(/available \+ held \+ sold must equal total/);
    expect(isNoScript(error)).toBe(false);
    expect(calls).toEqual(["EVALSHA"]);

    // A script Redis has never seen, and a NOSCRIPT from a script that is not ours, are told apart.
    const fresh = new LuaScript(`return "fresh ${crypto.randomUUID()}"`);
    calls.length = 0;
    expect(String(await runScript(client, fresh, [], []))).toMatch(/^fresh /);
    expect(calls).toEqual(["EVALSHA", "EVAL"]);
  });

  it("keeps the newest snapshot: older or equal seqs change nothing", async () => {
    const mirror = new RedisMirror({ url: bridgeUrl, token, timeoutMs: 2_000 });
    const v5 = await snapshot({ seq: 5, held: 3, sold: 2 });
    expect(await mirror.publish(v5, 1)).toEqual({ applied: true, seq: 5 });
    expect(await mirror.readShard(v5.sku, 0)).toEqual(v5);

    const older = { ...v5, seq: 4, stock: { total: 10, available: 10, held: 0, sold: 0 } };
    expect(await mirror.publish(older, 2)).toEqual({ applied: false, seq: 5 });
    const same = { ...v5, stock: { total: 10, available: 9, held: 1, sold: 0 } };
    expect(await mirror.publish(same, 3)).toEqual({ applied: false, seq: 5 });
    expect(await mirror.readShard(v5.sku, 0)).toEqual(v5);
    expect(await redis.hget(mirrorKey(v5.sku, 0), "published_at")).toBe(1);

    const v6 = { ...v5, seq: 6, status: "paused" as const, startsAt: 1_900_000_000_000, stock: older.stock };
    expect(await mirror.publish(v6, 4)).toEqual({ applied: true, seq: 6 });
    expect(await mirror.readShard(v5.sku, 0)).toEqual(v6);
    expect(await mirror.read(v5.sku)).toEqual(v6);
    expect(await mirror.read(`never-published-${++counter}`)).toBeNull();
  });

  it("repairs over the seq it read only: lower seqs too, never over a snapshot published since", async () => {
    const mirror = new RedisMirror({ url: bridgeUrl, token, timeoutMs: 2_000 });
    const v5 = await snapshot({ seq: 5, held: 3 });
    const key = mirrorKey(v5.sku, 0);
    // Nothing there: a repair that read nothing writes; one that read a seq is refused.
    expect(await mirror.replace(v5, 1, 4)).toEqual({ applied: false, seq: -1 });
    expect(await mirror.replace(v5, 1, null)).toEqual({ applied: true, seq: 5 });
    // A mirror ahead of its object (a reset): the repair writes the lower seq over the one it read,
    // and leaves no field of the old hash behind.
    await redis.hset(key, { version: 105, stray: "x" });
    const v3 = { ...v5, seq: 3, stock: { total: 10, available: 10, held: 0, sold: 0 } };
    expect(await mirror.replace(v3, 2, 105)).toEqual({ applied: true, seq: 3 });
    expect(await mirror.readShard(v5.sku, 0)).toEqual(v3);
    expect(await redis.hget(key, "stray")).toBeNull();
    // The shard published seq 4 after the repair read seq 3: the repair's older state is refused.
    const v4 = { ...v5, seq: 4, stock: { total: 10, available: 9, held: 1, sold: 0 } };
    expect(await mirror.publish(v4, 3)).toEqual({ applied: true, seq: 4 });
    expect(await mirror.replace(v3, 4, 3)).toEqual({ applied: false, seq: 4 });
    expect(await mirror.replace(v3, 4, null)).toEqual({ applied: false, seq: 4 });
    expect(await mirror.inspect(v5.sku, 0)).toEqual({ snapshot: v4, seq: 4 });
  });

  it("refuses a snapshot that does not add up, writing nothing", async () => {
    const key = mirrorKey(`bad-${++counter}`, 0);
    const cases: Array<Array<string | number>> = [
      [1, 10, 5, 5, 1, "on_sale", "newer"],
      [1, 10, 10, 0, 0, "sold_out", "newer"],
      [-1, 10, 10, 0, 0, "on_sale", "newer"],
      [1.5, 10, 10, 0, 0, "on_sale", "newer"],
      [1, 10, 10, 0, 0, "on_sale"],
      [1, 10, 10, 0, 0, "on_sale", "=x"],
      [1, 10, 10, 0, 0, "on_sale", "newer", "name"],
      [1, 10, 10, 0, 0, "on_sale", "newer", "version", "9"],
    ];
    for (const args of cases) {
      await expect(runScript(redis, MIRROR_SCRIPT, [key], args)).rejects.toThrow(/mirror\.lua/);
    }
    expect(await redis.exists(key)).toBe(0);
  });

  it("gives up after its timeout when Redis does not answer, and never reports a success", async () => {
    // The control server's /hang accepts the request and never answers.
    const mirror = new RedisMirror({ url: `${controlUrl}/hang`, token, timeoutMs: 200 });
    const state = await snapshot({ seq: 1 });
    const started = Date.now();
    await expect(mirror.publish(state, 1)).rejects.toThrow();
    await expect(mirror.read("anything")).rejects.toThrow();
    expect(Date.now() - started).toBeLessThan(1_500);
  });
});
