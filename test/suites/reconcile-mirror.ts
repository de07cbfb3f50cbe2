import { env } from "cloudflare:workers";
import { Redis } from "@upstash/redis/cloudflare";
import { describe, expect, inject, it } from "vitest";
import { mirrorKey } from "../../durable-objects/mirror/redis-mirror";
import type { Difference, RunReport } from "../../src/reconcile/reconcile";
import { call, createSku, reserve, stockShard, uniqueSku } from "../support/client";
import { eventually } from "../support/eventually";
import { differencesOf, ordersOf, reconcileNow } from "../support/reconcile";

/**
 * Reconciliation against the Redis mirror (project "workers-mirror": the Worker's mirror is bound to this
 * project's redis-server behind the Upstash bridge). The mirror hash of a SKU shard is deleted or
 * corrupted behind the stock object's back, as a flushed or hand-edited Redis would be; a run must
 * report it, rewrite it from the stock object, and the next run must find nothing.
 */

const { bridgeUrl, token } = inject("redis");
const redis = new Redis({ url: bridgeUrl, token, retry: false, enableTelemetry: false, enableAutoPipelining: false });

interface Snapshot {
  seq: number;
  total: number;
  available: number;
  held: number;
  sold: number;
  status: string;
}

/** The stock object's shard 0 as reconciliation compares it with the mirror. */
async function objectSnapshot(sku: string): Promise<Snapshot> {
  const state = await stockShard(env, sku, 0).state();
  if (!state) throw new Error(`no stock object for ${sku}`);
  return { seq: state.seq, ...state.stock, status: state.status };
}

/** The mirror hash's own fields (what mirror.lua writes and stock displays read), as numbers and status. */
async function mirrorSnapshot(sku: string): Promise<Snapshot | null> {
  const hash = await redis.hgetall<Record<string, string | number>>(mirrorKey(sku, 0));
  if (!hash) return null;
  return {
    seq: Number(hash.version), // the hash's `version` field holds the seq
    total: Number(hash.total),
    available: Number(hash.available),
    held: Number(hash.held),
    sold: Number(hash.sold),
    status: String(hash.status),
  };
}

/** The admin view agrees: the mirror holds exactly the stock object's counts and seq. */
async function mirrorMatchesObject(sku: string): Promise<Snapshot> {
  const expected = await objectSnapshot(sku);
  expect(await mirrorSnapshot(sku)).toEqual(expected);
  const view = await call("GET", `/admin/skus/${sku}`, { admin: true });
  const { available, held, sold } = expected;
  expect(view.json.mirror).toEqual({ available, held, sold, version: expected.seq });
  return expected;
}

/** A SKU with three held reservations, their orders in D1 and its mirror caught up. */
async function recordedMirroredSku(prefix: string): Promise<string> {
  const sku = uniqueSku(prefix);
  await createSku(sku, { totalStock: 10, perUserLimit: 1 });
  const answers = await Promise.all([0, 1, 2].map((i) => reserve(`${sku}-u${i}`, sku, 1)));
  expect(answers.map((a) => a.status)).toEqual([202, 202, 202]);
  // Orders in D1 first: the tests' grace period is 0, so a row still in the queue would be a difference too.
  await eventually(async () => expect(await ordersOf(sku)).toHaveLength(3));
  await eventually(() => mirrorMatchesObject(sku), 20_000, 25);
  return sku;
}

const kinds = (found: Difference[]) => found.map((d) => [d.kind, d.repaired]);

/**
 * Injects the drift, runs reconciliation, and returns the run and what it found for the SKU. A run that
 * cannot reach the mirror reports nothing about it, so while Redis is away (mirror-sync stops and
 * freezes it; its file runs these tests before its own, but a run may still miss a Redis that answers
 * late) this injects and runs again, until a run has seen the mirror.
 */
async function driftAndReconcile(
  sku: string,
  drift: () => Promise<void>,
  run: () => Promise<RunReport>,
): Promise<{ report: RunReport; found: Difference[] }> {
  return eventually(
    async () => {
      await drift();
      const report = await run();
      const found = differencesOf(report, sku);
      expect(found).not.toEqual([]);
      return { report, found };
    },
    20_000,
    100,
  );
}

async function adminReconcile(): Promise<RunReport> {
  const answer = await call<RunReport>("POST", "/admin/reconcile", { admin: true });
  expect(answer.status).toBe(200);
  return answer.json;
}

describe("reconciliation of the Redis mirror", () => {
  it("rewrites a deleted mirror hash (mirror_missing), and a second run finds nothing", async () => {
    const sku = await recordedMirroredSku("rmirror-missing");
    const before = await objectSnapshot(sku);
    const { report, found } = await driftAndReconcile(
      sku,
      async () => {
        await redis.del(mirrorKey(sku, 0));
        expect(await mirrorSnapshot(sku)).toBeNull();
      },
      adminReconcile,
    );
    expect(kinds(found)).toEqual([["mirror_missing", true]]);
    expect(JSON.parse(found[0]?.expected ?? "null")).toEqual(before);
    expect(found[0]?.actual).toBe("null");

    // Repaired from the stock object, which did not change meanwhile.
    expect(await eventually(() => mirrorMatchesObject(sku))).toEqual(before);
    expect(differencesOf(await reconcileNow({ sku }), sku)).toEqual([]);

    // The run is in the history with its difference.
    const runs = await call("GET", "/admin/reconcile/runs?limit=10", { admin: true });
    const recorded = runs.json.runs.find((r: { runId: string }) => r.runId === report.runId);
    expect(recorded).toMatchObject({ trigger: "admin", errors: 0 });
    expect(recorded.differences.filter((d: Difference) => d.sku === sku)).toEqual(found);
  });

  it("rewrites a corrupted mirror hash (mirror_drift), and a second run finds nothing", async () => {
    const sku = await recordedMirroredSku("rmirror-drift");
    const before = await objectSnapshot(sku);
    expect(before).toMatchObject({ total: 10, available: 7, held: 3, sold: 0 });
    // Same seq, wrong count: mirror.lua's seq check would never overwrite this on its own.
    const { found } = await driftAndReconcile(
      sku,
      async () => {
        await redis.hset(mirrorKey(sku, 0), { available: 999 });
      },
      () => reconcileNow({ sku }),
    );
    expect(kinds(found)).toEqual([["mirror_drift", true]]);
    expect(JSON.parse(found[0]?.expected ?? "null")).toEqual(before);
    expect(JSON.parse(found[0]?.actual ?? "null")).toEqual({ ...before, available: 999 });

    expect(await eventually(() => mirrorMatchesObject(sku))).toEqual(before);
    expect(differencesOf(await reconcileNow({ sku }), sku)).toEqual([]);
  });

  it("rewrites a mirror whose sizes drifted (mirror_drift), and the public view shows each size again", async () => {
    const sku = uniqueSku("rmirror-sizes");
    await createSku(sku, {
      perUserLimit: 1,
      variants: [
        { id: "s", totalStock: 3 },
        { id: "m", totalStock: 3 },
      ],
    });
    const held = await call("POST", `/api/skus/${sku}/reservations`, {
      user: `${sku}-u`,
      body: {
        token: (await call("POST", `/api/skus/${sku}/tokens`, { user: `${sku}-u` })).json.token,
        quantity: 1,
        variants: ["m"],
      },
    });
    expect(held.status).toBe(202);
    await eventually(async () => expect(await ordersOf(sku)).toHaveLength(1));
    await eventually(() => mirrorMatchesObject(sku), 20_000, 25);
    // The counts agree; only a size's figures in the mirror's state are wrong (as a hand edit leaves them).
    const { found } = await driftAndReconcile(
      sku,
      async () => {
        // The client parses the JSON field itself.
        const state = (await redis.hget(mirrorKey(sku, 0), "state")) as { variants: { stock: unknown }[] };
        const m = state.variants[1] as { stock: unknown };
        m.stock = { total: 3, available: 3, held: 0, sold: 0 };
        await redis.hset(mirrorKey(sku, 0), { state: JSON.stringify(state) });
      },
      () => reconcileNow({ sku }),
    );
    expect(kinds(found)).toEqual([["mirror_drift", true]]);
    expect(JSON.parse(found[0]?.expected ?? "null").variants).toEqual([
      { id: "s", total: 3, available: 3, held: 0, sold: 0 },
      { id: "m", total: 3, available: 2, held: 1, sold: 0 },
    ]);
    expect(JSON.parse(found[0]?.actual ?? "null").variants[1]).toEqual({
      id: "m",
      total: 3,
      available: 3,
      held: 0,
      sold: 0,
    });
    const shown = await eventually(async () => {
      const view = await call("GET", `/api/skus/${sku}`);
      expect(view.headers.get("X-Stock-Source")).toBe("mirror");
      expect(view.json.variants[1]).toEqual({ id: "m", name: "m", available: 2, held: 1 });
      return view.json;
    });
    expect(shown.variants[0]).toEqual({ id: "s", name: "s", available: 3, held: 0 });
    expect(differencesOf(await reconcileNow({ sku }), sku)).toEqual([]);
  });

  it("rewrites a mirror that is ahead of its stock object (a newer seq with wrong counts)", async () => {
    const sku = await recordedMirroredSku("rmirror-ahead");
    const before = await objectSnapshot(sku);
    // What a mirror looks like after the object's storage was reset: a higher seq the object never had.
    const { found } = await driftAndReconcile(
      sku,
      async () => {
        await redis.hset(mirrorKey(sku, 0), { version: before.seq + 100, available: 10, held: 0 });
      },
      () => reconcileNow({ sku }),
    );
    expect(kinds(found)).toEqual([["mirror_drift", true]]);
    expect(JSON.parse(found[0]?.actual ?? "null")).toEqual({
      ...before,
      seq: before.seq + 100,
      available: 10,
      held: 0,
    });
    expect(await eventually(() => mirrorMatchesObject(sku))).toEqual(before);
    expect(differencesOf(await reconcileNow({ sku }), sku)).toEqual([]);

    // Later commits publish over the repaired mirror again (it is no longer ahead).
    expect((await reserve(`${sku}-late`, sku, 1)).status).toBe(202);
    const after = await eventually(() => mirrorMatchesObject(sku), 20_000, 25);
    expect(after).toMatchObject({ available: 6, held: 4, seq: before.seq + 1 });
  });
});
