import { configureSku } from "../catalog/configure-sku";
import { readShardStates } from "../edge/sku-state";
import { ApiError } from "../http/errors";
import type { SkuSettingsRequest } from "../http/schemas";
import { adminShard, callStock, unwrap } from "../stock/stock-client";

/**
 * `PUT /admin/skus/:sku` with the v1.4 field `test` (API.md "Test sales"): a test SKU's order events,
 * orders and payments say `test: true`, so the shop's systems can skip them.
 *
 * The flag is set only when the SKU is created: on an existing SKU, `test` may be sent with the value
 * it has (a PUT of the whole body again) and any other value is `409 INVALID_STATE` naming the
 * field, changing nothing. A new test SKU is created paused, then shard 0 marks it a test sale on
 * every shard together with the status the body asked for, in one change (durable-objects/stock/sku-change.ts):
 * no hold can be taken before the mark, so no order of a test SKU ever lacks it.
 */
export async function configureSkuWithTest(
  env: Env,
  sku: string,
  body: SkuSettingsRequest,
  now: number,
  requestId?: string,
): Promise<void> {
  const { test, ...settings } = body;
  if (test === undefined) {
    await configureSku(env, sku, settings, now, requestId);
    return;
  }
  const current = await readShardStates(env, sku, { anyId: true });
  const first = current?.[0];
  if (first) {
    const was = first.test === true;
    // An archived SKU answers its own 409 (configureSku), whatever `test` says.
    if (first.status !== "archived" && test !== was) throw testIsFixed(sku, was);
    await configureSku(env, sku, settings, now, requestId);
    return;
  }
  if (!test) {
    await configureSku(env, sku, settings, now, requestId);
    return;
  }
  const created = await configureSku(env, sku, { ...settings, status: "paused" }, now, requestId);
  unwrap(
    await callStock(() =>
      adminShard(env, sku, 0).putSku(
        {
          sku,
          shards: created.shards,
          assumedTotal: created.stock.total,
          status: settings.status ?? "on_sale",
          test: true,
        },
        requestId,
      ),
    ),
  );
}

function testIsFixed(sku: string, was: boolean): ApiError {
  return new ApiError(
    "INVALID_STATE",
    `SKU ${sku} is ${was ? "a test sale" : "a real sale"}: test is set only when a SKU is created (configure a new SKU id for a ${was ? "real" : "test"} sale).`,
    {},
    { fields: [{ path: "test", message: `set only when the SKU is created; this SKU has test: ${was}` }] },
  );
}
