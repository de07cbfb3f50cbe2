import { runDurableObjectAlarm, runInDurableObject } from "cloudflare:test";
import { env } from "cloudflare:workers";
import { describe, expect, it } from "vitest";
import { homeShard } from "../../durable-objects/shared/shard-name";
import { type ResizePlan, resizeSettings, share } from "../../durable-objects/stock/sku-change";
import { call, createSku, reserve, stockShard, uniqueSku } from "../support/client";

/**
 * A resize stopped by a restart (durable-objects/stock/sku-change-runner.ts): shard 0 recorded its plan,
 * then died. Its alarm undoes a plan stopped while `preparing` (fences set, nothing committed) and
 * finishes one stopped while `committing` (shard 0 committed, siblings not). Each state is built
 * with the objects' own steps, as the runner takes them, up to the point where it stops.
 */

const TOTAL = 10;

function planOf(sku: string, from: number, to: number): ResizePlan {
  return {
    changeId: crypto.randomUUID(),
    from,
    to,
    change: { sku, shards: to, totalStock: TOTAL, assumedTotal: TOTAL },
  };
}

/**
 * Shard 0 fences itself with the plan recorded (phase `preparing`) and arms its alarm, as the runner
 * does first; the alarm is set an hour ahead so that only the test runs it (the restart never comes).
 */
async function fenceLead(sku: string, plan: ResizePlan) {
  await runInDurableObject(stockShard(env, sku, 0), async (object) => {
    expect(object.engine.configuration.fence(plan.changeId, object.now(), JSON.stringify(plan)).ok).toBe(true);
    await object.due.retry("config", object.now() + 3_600_000);
  });
}

async function fenceSiblings(sku: string, plan: ResizePlan) {
  for (let shard = 1; shard < Math.max(plan.from, plan.to); shard++) {
    expect((await stockShard(env, sku, shard).fence(plan.changeId)).ok).toBe(true);
  }
}

/** Each shard's count, total and fence as its object holds them. */
function shards(sku: string, count: number) {
  return Promise.all(
    Array.from({ length: count }, (_, shard) =>
      runInDurableObject(stockShard(env, sku, shard), (object) => {
        const state = object.engine.configuration.state();
        return state ? { shards: state.shards, total: state.stock.total } : null;
      }),
    ),
  );
}

const planLeft = (sku: string) =>
  runInDurableObject(stockShard(env, sku, 0), (object) => object.engine.configuration.resizePlan());

/** A buyer whose home shard (under `count` shards) is `shard`. */
function buyerOn(shard: number, count: number, prefix: string): string {
  for (let i = 0; ; i++) if (homeShard(`${prefix}-${i}`, count) === shard) return `${prefix}-${i}`;
}

describe("a resize stopped mid-plan", () => {
  it("stopped while preparing: shard 0's alarm lifts every fence, and the SKU stays as it was", async () => {
    const sku = uniqueSku("rz-prep");
    await createSku(sku, { totalStock: TOTAL, shards: 2, perUserLimit: 5 });
    const plan = planOf(sku, 2, 3);
    await fenceLead(sku, plan);
    await fenceSiblings(sku, plan);
    // Fenced: no shard takes a hold until the change commits or is lifted.
    const token = await call("POST", `/api/skus/${sku}/tokens`, { user: buyerOn(1, 2, "prep-a") });
    expect([token.status, token.json.error?.code]).toEqual([503, "BUSY"]);

    expect(await runDurableObjectAlarm(stockShard(env, sku, 0))).toBe(true);

    expect(await planLeft(sku)).toBeNull();
    expect(await shards(sku, 3)).toEqual([
      { shards: 2, total: share(TOTAL, 2, 0) },
      { shards: 2, total: share(TOTAL, 2, 1) },
      null,
    ]);
    for (const shard of [0, 1]) expect((await reserve(buyerOn(shard, 2, "prep-b"), sku)).status).toBe(202);
    const view = await call("GET", `/admin/skus/${sku}`, { admin: true });
    expect([view.json.shards, view.json.stock]).toEqual([2, { total: TOTAL, available: TOTAL - 2, held: 2, sold: 0 }]);
  });

  it("stopped while committing: shard 0's alarm has every sibling commit, and the SKU is whole on the new count", async () => {
    const sku = uniqueSku("rz-commit");
    await createSku(sku, { totalStock: TOTAL, shards: 2, perUserLimit: 5 });
    const plan = planOf(sku, 2, 3);
    await fenceLead(sku, plan);
    await fenceSiblings(sku, plan);
    // Shard 0 commits with the plan recorded (phase `committing`); the restart comes before its siblings do.
    await runInDurableObject(stockShard(env, sku, 0), (object) => {
      expect(object.engine.configuration.configure(resizeSettings(plan, 0), object.now()).ok).toBe(true);
    });
    expect((await planLeft(sku))?.phase).toBe("committing");
    expect((await shards(sku, 3))[1]).toEqual({ shards: 2, total: share(TOTAL, 2, 1) });

    expect(await runDurableObjectAlarm(stockShard(env, sku, 0))).toBe(true);

    expect(await planLeft(sku)).toBeNull();
    expect(await shards(sku, 3)).toEqual([0, 1, 2].map((i) => ({ shards: 3, total: share(TOTAL, 3, i) })));
    for (const shard of [0, 1, 2]) expect((await reserve(buyerOn(shard, 3, "commit-b"), sku)).status).toBe(202);
    const view = await call("GET", `/admin/skus/${sku}`, { admin: true });
    expect([view.json.shards, view.json.stock]).toEqual([3, { total: TOTAL, available: TOTAL - 3, held: 3, sold: 0 }]);
    // The next change is not held up by the one recovered.
    expect((await call("PUT", `/admin/skus/${sku}`, { admin: true, body: { totalStock: 12 } })).status).toBe(200);
  });
});
