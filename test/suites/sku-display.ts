import { listDurableObjectIds } from "cloudflare:test";
import { env } from "cloudflare:workers";
import { describe, expect, it } from "vitest";
import { shardName } from "../../durable-objects/shared/shard-name";
import { call, createSku, reserve, stockCallsTo, uniqueSku } from "../support/client";

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
});
