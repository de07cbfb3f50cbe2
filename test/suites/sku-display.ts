import { listDurableObjectIds } from "cloudflare:test";
import { env } from "cloudflare:workers";
import { describe, expect, it } from "vitest";
import { shardName } from "../../durable-objects/shared/shard-name";
import { rememberSku } from "../../src/catalog/sku-catalog";
import { call, createSku, reserve, stockCallsTo, stockShard, uniqueSku } from "../support/client";

/** The public `GET /api/skus/:sku` (mirror off here): catalog first, and a storm shares one read. */

describe("public SKU display", () => {
  it("answers unknown ids 404 from the catalog without creating a stock object", async () => {
    const ids = Array.from({ length: 20 }, () => uniqueSku("ghost"));
    const answers = await Promise.all(ids.map((sku) => call("GET", `/api/skus/${sku}`)));
    for (const answer of answers) expect([answer.status, answer.json.error?.code]).toEqual([404, "SKU_NOT_FOUND"]);
    const created = new Set((await listDurableObjectIds(env.SKU_STOCK)).map((id) => id.toString()));
    for (const sku of ids) expect(created.has(env.SKU_STOCK.idFromName(shardName(sku, 0)).toString())).toBe(false);
  });

  it("a GET storm on a hot SKU reaches its stock object about once a second per isolate", async () => {
    const sku = uniqueSku("storm");
    await createSku(sku, { name: "Hot", totalStock: 50, perUserLimit: 1 });
    await reserve("hot-1", sku, 1);
    const before = stockCallsTo(sku);
    const started = Date.now();
    const answers = await Promise.all(Array.from({ length: 300 }, () => call("GET", `/api/skus/${sku}`)));
    const elapsedSeconds = Math.max(1, Math.ceil((Date.now() - started) / 1000));
    for (const answer of answers) {
      expect(answer.status).toBe(200);
      expect(answer.json).toMatchObject({ sku, name: "Hot", available: 49 });
    }
    const reached = stockCallsTo(sku) - before;
    expect(reached).toBeGreaterThanOrEqual(1);
    expect(reached).toBeLessThanOrEqual(elapsedSeconds + 1);
    // An admin change is seen at once by the isolate that made it.
    await createSku(sku, { name: "Hot", totalStock: 60 });
    expect((await call("GET", `/api/skus/${sku}`)).json.available).toBe(59);
  });

  it("a SKU created on another isolate shows as soon as this isolate's catalog knows it (a 404 is not remembered)", async () => {
    const sku = uniqueSku("elsewhere");
    expect((await call("GET", `/api/skus/${sku}`)).status).toBe(404);
    // Created as another isolate creates it: shard 0's configuration and the D1 catalog row.
    expect((await stockShard(env, sku, 0).putSku({ sku, totalStock: 5, assumedTotal: 0 })).ok).toBe(true);
    const now = Date.now();
    await env.DB.prepare(
      "INSERT INTO skus (sku, name, shards, total_stock, created_at, updated_at) VALUES (?1, ?1, 1, 5, ?2, ?2)",
    )
      .bind(sku, now)
      .run();
    // This isolate's catalog learns of it, as its next read of D1 (at most a second later) does.
    rememberSku(sku, 1);
    const shown = await call("GET", `/api/skus/${sku}`);
    expect([shown.status, shown.json.available]).toEqual([200, 5]);
  });
});
