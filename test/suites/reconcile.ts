import {
  createExecutionContext,
  createScheduledController,
  runInDurableObject,
  waitOnExecutionContext,
} from "cloudflare:test";
import { env } from "cloudflare:workers";
import { describe, expect, it } from "vitest";
import { homeShard } from "../../durable-objects/shared/shard-name";
import worker from "../../src/index";
import type { Difference, RunReport } from "../../src/reconcile/reconcile";
import { type Answer, call, createSku, reserve, stockOf, stockShard, uniqueSku } from "../support/client";
import { eventually } from "../support/eventually";
import { pay } from "../support/payments";
import { differencesOf, ordersOf, reconcileNow } from "../support/reconcile";

/** A SKU with `n` held reservations whose orders are all in D1. */
async function recordedSku(n: number, prefix: string): Promise<{ sku: string; ids: string[] }> {
  const sku = uniqueSku(prefix);
  await createSku(sku, { totalStock: 100, perUserLimit: 1 });
  const answers = await Promise.all(Array.from({ length: n }, (_, i) => reserve(`${prefix}-${i}`, sku, 1)));
  const ids = answers.map((a) => a.json.reservationId as string);
  await eventually(async () => expect(await ordersOf(sku)).toHaveLength(n));
  return { sku, ids };
}

describe("reconciliation", () => {
  it("finds nothing on a quiet, consistent system and writes no orders", async () => {
    const { sku } = await recordedSku(5, "quiet");
    await reconcileNow({ sku }); // first pass over whatever is there
    const before = await ordersOf(sku);
    const report = await reconcileNow({ sku });
    expect(differencesOf(report, sku)).toEqual([]);
    expect(await ordersOf(sku)).toEqual(before);
  });

  it("re-emits orders deleted from D1, and a second run finds nothing", async () => {
    const { sku, ids } = await recordedSku(6, "deleted");
    const createdAt = () =>
      env.DB.prepare("SELECT created_at AS t FROM orders WHERE reservation_id = ?").bind(ids[0]).first<{ t: number }>();
    const made = await createdAt();
    await env.DB.prepare("DELETE FROM orders WHERE reservation_id IN (?, ?)").bind(ids[0], ids[1]).run();
    const report = await reconcileNow({ full: true, sku });
    const found = differencesOf(report, sku);
    expect(found.map((d) => [d.kind, d.repaired])).toEqual([
      ["order_missing", true],
      ["order_missing", true],
    ]);
    await eventually(async () => expect(await ordersOf(sku)).toHaveLength(6));
    // Re-emitted live holds keep the time they were made (heldAt), not the repair's.
    expect(await createdAt()).toEqual(made);
    expect(differencesOf(await reconcileNow({ sku }), sku)).toEqual([]);
  });

  it("finds an order row deleted below the watermark on the next ordinary run, and restores it", async () => {
    const { sku, ids } = await recordedSku(4, "belowmark");
    await reconcileNow({ sku }); // the watermark moves past all four
    expect(differencesOf(await reconcileNow({ sku }), sku)).toEqual([]);
    await env.DB.prepare("DELETE FROM orders WHERE reservation_id = ?").bind(ids[2]).run();
    const found = differencesOf(await reconcileNow({ sku }), sku); // not ?full=true: what the cron runs
    expect(found.map((d) => [d.kind, d.repaired])).toEqual([
      ["order_missing", true],
      ["order_count", true],
    ]);
    expect(found[1]).toMatchObject({ expected: '{"orders":4}', actual: '{"orders":3}' });
    await eventually(async () => expect(await ordersOf(sku)).toHaveLength(4));
    expect(differencesOf(await reconcileNow({ sku }), sku)).toEqual([]);
  });

  it("lists a difference once when the order count also differs and the SKU is rechecked (found in an audit)", async () => {
    const sku = uniqueSku("twice");
    await createSku(sku, { totalStock: 20, perUserLimit: 1, shards: 2 });
    const answers = await Promise.all(Array.from({ length: 4 }, (_, i) => reserve(`tw-${i}`, sku, 1)));
    await eventually(async () => expect(await ordersOf(sku)).toHaveLength(4));
    await reconcileNow({ sku });
    expect(differencesOf(await reconcileNow({ sku }), sku)).toEqual([]);
    // Two drifts at once: shard 0's SKU total disagrees with its shards', and an order row is gone.
    await runInDurableObject(stockShard(env, sku, 0), (_object, state) => {
      state.storage.sql.exec("UPDATE sku_target SET total = total + 1 WHERE id = 1");
    });
    await env.DB.prepare("DELETE FROM orders WHERE reservation_id = ?").bind(answers[1]?.json.reservationId).run();
    const kinds = differencesOf(await reconcileNow({ sku }), sku).map((d) => d.kind);
    expect(kinds.filter((k) => k === "shard_totals")).toHaveLength(1);
    expect(kinds.filter((k) => k === "order_count")).toHaveLength(1);
    expect(kinds).toContain("order_missing");
  });

  it("after a cut in shards, still counts the orders of the shards left out, and finds nothing", async () => {
    const sku = uniqueSku("cut");
    await createSku(sku, { totalStock: 9, shards: 3 });
    // One buyer on each shard; each cancels, so the SKU may be resized (nothing held or sold).
    const buyers = [0, 1, 2].map((shard) => {
      for (let i = 0; ; i++) if (homeShard(`cut-${i}`, 3) === shard) return `cut-${i}`;
    });
    const held = await Promise.all(buyers.map((user) => reserve(user, sku, 1)));
    for (const [i, answer] of held.entries()) {
      expect(
        (await call("POST", `/api/reservations/${answer.json.reservationId}/cancel`, { user: buyers[i] })).status,
      ).toBe(200);
    }
    await eventually(async () =>
      expect((await ordersOf(sku)).map((o) => o.status)).toEqual(["cancelled", "cancelled", "cancelled"]),
    );
    // Cut before any run has seen shard 2.
    expect((await call("PUT", `/admin/skus/${sku}`, { admin: true, body: { shards: 2 } })).status).toBe(200);
    expect(differencesOf(await reconcileNow({ sku }), sku)).toEqual([]);
    expect(differencesOf(await reconcileNow({ sku }), sku)).toEqual([]);
  });

  it("moves an order left at held forward to the object's paid", async () => {
    const { sku, ids } = await recordedSku(2, "stale");
    expect((await pay(ids[0] as string)).json.reservationStatus).toBe("paid");
    await eventually(async () => expect((await ordersOf(sku)).map((o) => o.status)).toContain("paid"));
    await env.DB.prepare("UPDATE orders SET status = 'held', last_seq = last_seq - 1 WHERE reservation_id = ?")
      .bind(ids[0])
      .run();
    const found = differencesOf(await reconcileNow({ full: true, sku }), sku);
    expect(found.map((d) => [d.kind, d.repaired])).toEqual([["order_stale", true]]);
    expect(JSON.parse(found[0]?.expected ?? "{}")).toMatchObject({ id: ids[0], status: "paid" });
    await eventually(async () =>
      expect((await ordersOf(sku)).find((o) => o.reservation_id === ids[0])?.status).toBe("paid"),
    );
    expect(differencesOf(await reconcileNow({ sku }), sku)).toEqual([]);
  });

  it("releases a hold past expiry whose alarm was deleted", async () => {
    const sku = uniqueSku("noalarm");
    await createSku(sku, { totalStock: 3, perUserLimit: 3, holdSeconds: 60 });
    const held = await reserve("lost", sku, 3);
    const stub = stockShard(env, sku, 0);
    await runInDurableObject(stub, async (object, state) => {
      await state.storage.deleteAlarm();
      object.now = () => Date.parse(held.json.expiresAt) + 1_000;
    });
    const found = differencesOf(await reconcileNow({ sku }), sku);
    expect(found.map((d) => [d.kind, d.repaired])).toContainEqual(["hold_overdue", true]);
    expect(await stockOf(sku)).toEqual({ total: 3, available: 3, held: 0, sold: 0 });
    await eventually(async () => expect((await ordersOf(sku)).map((o) => o.status)).toEqual(["expired"]));
    expect(differencesOf(await reconcileNow({ sku }), sku)).toEqual([]);
  });

  it("answers repaired: false for re-emits the queue did not take, and the next run sends them", async () => {
    const { sku, ids } = await recordedSku(3, "unsent");
    await env.DB.prepare("DELETE FROM orders WHERE reservation_id IN (?, ?)").bind(ids[0], ids[1]).run();
    const stub = stockShard(env, sku, 0);
    // Queues refuses the shard's sends: its repair re-emits, but the events stay in its outbox.
    type Sends = { sendBatch: Queue["sendBatch"] };
    const queueOf = (object: unknown) => (object as { env: Env }).env.ORDER_EVENTS as unknown as Sends;
    await runInDurableObject(stub, (object) => {
      queueOf(object).sendBatch = async () => {
        throw new Error("queue unavailable");
      };
    });
    let answer: Answer<RunReport>;
    try {
      answer = await call<RunReport>("POST", `/admin/reconcile?sku=${sku}`, { admin: true });
    } finally {
      await runInDurableObject(stub, async (object, state) => {
        delete (queueOf(object) as Partial<Sends>).sendBatch; // the binding's own method again
        await state.storage.deleteAlarm(); // no retry behind the next run's back
      });
    }
    expect(answer.status).toBe(200);
    const found = differencesOf(answer.json, sku);
    expect(found.filter((d) => d.kind === "order_missing").map((d) => d.repaired)).toEqual([false, false]);
    expect(found.find((d) => d.kind === "order_count")).toMatchObject({ actual: '{"orders":1}', repaired: false });
    expect(found.filter((d) => d.repaired)).toEqual([]);
    // The run's history says the same.
    const runs = await call("GET", "/admin/reconcile/runs?limit=10", { admin: true });
    const recorded = runs.json.runs.find((r: { runId: string }) => r.runId === answer.json.runId);
    expect(recorded.differences.filter((d: Difference) => d.sku === sku)).toEqual(found);

    // The queue is back: the next run finds the re-emits waiting, sends them, and the rows land.
    const next = differencesOf(await reconcileNow({ sku }), sku);
    expect(next.map((d) => [d.kind, d.repaired])).toEqual([["outbox_stuck", true]]);
    await eventually(async () => expect(await ordersOf(sku)).toHaveLength(3));
    expect(differencesOf(await reconcileNow({ sku }), sku)).toEqual([]);
  });

  it("answers repaired: false while one of two pending transfers stays pending, and the next run finishes it", async () => {
    const sku = uniqueSku("halfxfer");
    await createSku(sku, { totalStock: 9, shards: 3 });
    const receiver = stockShard(env, sku, 0);
    // Shard 0 asked shards 1 and 2 for a unit each and never recorded either answer.
    await runInDurableObject(receiver, (object) => {
      object.engine.transfers.begin("hx-1", 1, 1, Date.now());
      object.engine.transfers.begin("hx-2", 2, 1, Date.now());
    });
    // Shard 2 is fenced (a resize under way): it gives nothing until the fence is lifted.
    const fenced = stockShard(env, sku, 2);
    expect((await fenced.fence("hx-resize")).ok).toBe(true);
    await runInDurableObject(fenced, (_object, state) => state.storage.deleteAlarm()); // the fence stays
    const answer = await call<RunReport>("POST", `/admin/reconcile?sku=${sku}`, { admin: true });
    expect(answer.status).toBe(200);
    expect(differencesOf(answer.json, sku).map((d) => [d.kind, d.actual, d.repaired])).toEqual([
      ["transfer_pending", '{"pending":2}', false],
    ]);
    const pending = async () => (await receiver.audit(0, 1))?.pendingTransfers ?? Number.NaN;
    expect(await pending()).toBe(1);

    // The fence is lifted; with no alarm to finish it first, the next run does.
    await fenced.unfence("hx-resize");
    await runInDurableObject(receiver, (_object, state) => state.storage.deleteAlarm());
    expect(differencesOf(await reconcileNow({ sku }), sku).map((d) => [d.kind, d.actual, d.repaired])).toEqual([
      ["transfer_pending", '{"pending":1}', true],
    ]);
    expect(await pending()).toBe(0);
    expect(differencesOf(await reconcileNow({ sku }), sku)).toEqual([]);
  });

  it("reads the repair answer of a stock object of the release before (counts, not lists) without failing the check", async () => {
    // A mixed-version rollout: this Worker asks an object still running the previous code, whose
    // repair answered {reemitted: n, released, transfersCompleted, flushed}.
    const { sku, ids } = await recordedSku(2, "oldrepair");
    await env.DB.prepare("DELETE FROM orders WHERE reservation_id = ?").bind(ids[0]).run();
    const stub = stockShard(env, sku, 0);
    // And an event committed but never sent (the after-commit flush never ran): its outbox is stuck.
    await runInDurableObject(stub, (object) => {
      object.engine.holds.reserve([{ userId: "oldrepair-ghost", nonce: "oldrepair-ghost", quantity: 1 }], Date.now());
    });
    type Repair = (actions: { reemit: string[] }) => Promise<unknown>;
    const proto = await runInDurableObject(stub, (object) => Object.getPrototypeOf(object) as { repair: Repair });
    const current = proto.repair;
    proto.repair = async function (this: unknown, actions) {
      await current.call(this, actions);
      return { reemitted: actions.reemit.length, released: 0, transfersCompleted: 0, flushed: true };
    };
    let report: RunReport;
    try {
      report = await reconcileNow({ full: true, sku });
    } finally {
      proto.repair = current;
    }
    const found = differencesOf(report, sku);
    expect(found.filter((d) => d.kind === "check_failed")).toEqual([]);
    // What the old answer cannot show is not claimed repaired; the next run sees it done.
    expect(found.map((d) => [d.kind, d.repaired])).toEqual([
      ["order_missing", false],
      ["outbox_stuck", false],
    ]);
    await eventually(async () => expect(await ordersOf(sku)).toHaveLength(3));
    expect(differencesOf(await reconcileNow({ sku }), sku)).toEqual([]);
  });

  it("sends an outbox event that was committed but never sent", async () => {
    const sku = uniqueSku("stuck");
    await createSku(sku, { totalStock: 3 });
    const stub = stockShard(env, sku, 0);
    // Straight into the engine: the shell's after-commit flush never runs (as if it crashed there).
    const id = await runInDurableObject(stub, (object) => {
      const engine = object.engine; // the object's own (it keeps the SKU row in memory)
      const [answer] = engine.holds.reserve([{ userId: "ghost", nonce: "stuck-1", quantity: 1 }], Date.now());
      return answer?.ok ? answer.value.reservation.id : null;
    });
    expect(id).not.toBeNull();
    const found = differencesOf(await reconcileNow({ sku }), sku);
    expect(found.map((d) => [d.kind, d.repaired])).toEqual([["outbox_stuck", true]]);
    await eventually(async () => expect((await ordersOf(sku)).map((o) => o.reservation_id)).toEqual([id]));
    expect(differencesOf(await reconcileNow({ sku }), sku)).toEqual([]);
  });

  it("reads a bounded number of rows after 10,000 old, finished orders", async () => {
    const sku = uniqueSku("history");
    await createSku(sku, { totalStock: 10_000, perUserLimit: 1 });
    // What a run of this SKU reads while it has nothing: the 10,000 rows add to it.
    const before = (await reconcileNow({ sku })).rowsRead;
    const stub = stockShard(env, sku, 0);
    // 10,000 reservations bought and paid straight through the engine, their events sent, and their
    // rows put into D1 as the consumer would have written them.
    const rows = await runInDurableObject(stub, (object) => {
      const engine = object.engine; // the object's own (it keeps the SKU row in memory)
      const at = Date.now() - 3_600_000;
      const answers = engine.holds.reserve(
        Array.from({ length: 10_000 }, (_, i) => ({ userId: `h${i}`, nonce: `h${i}`, quantity: 1 })),
        at,
      );
      for (const answer of answers) {
        if (answer.ok)
          engine.payments.apply(
            {
              eventId: `evt-${answer.value.reservation.id}`,
              type: "payment.succeeded",
              reservationId: answer.value.reservation.id,
            },
            at,
          );
      }
      const events = engine.outbox.pendingEvents(30_000);
      engine.outbox.markSent(events.at(-1)?.seq ?? 0);
      return events
        .filter((e) => e.event.type === "reservation.paid")
        .map((e) => [e.event.reservationId, e.event.userId, e.event.seq, at] as const);
    });
    expect(rows).toHaveLength(10_000);
    const insert = env.DB.prepare(
      "INSERT INTO orders (reservation_id, sku, user_id, quantity, status, expires_at, created_at, updated_at, last_seq) VALUES (?, ?, ?, 1, 'paid', NULL, ?, ?, ?)",
    );
    for (let i = 0; i < rows.length; i += 500) {
      await env.DB.batch(rows.slice(i, i + 500).map(([id, user, seq, at]) => insert.bind(id, sku, user, at, at, seq)));
    }
    // Catch up: each run reads the pages since its watermark (up to PAGES_PER_RUN), and finds every
    // row in agreement.
    let runs = 0;
    let last = await reconcileNow({ sku });
    while (runs++ < 100) {
      expect(differencesOf(last, sku)).toEqual([]);
      const next = await reconcileNow({ sku });
      if (next.rowsRead <= last.rowsRead && next.rowsRead < before + 100) {
        last = next;
        break;
      }
      last = next;
    }
    // Caught up: a run reads a few rows more than before, not 10,000.
    const quiet = await reconcileNow({ sku });
    expect(differencesOf(quiet, sku)).toEqual([]);
    expect(quiet.rowsRead).toBeLessThan(before + 200);
  }, 120_000);

  it("runs from the cron trigger and from the admin route, and keeps a history", { timeout: 30_000 }, async () => {
    const { sku, ids } = await recordedSku(2, "cron");
    await env.DB.prepare("DELETE FROM orders WHERE reservation_id = ?").bind(ids[0]).run();
    await env.DB.prepare("DELETE FROM reconcile_watermarks WHERE sku = ?").bind(sku).run();
    const ctx = createExecutionContext();
    const controller = createScheduledController({ scheduledTime: new Date(), cron: "* * * * *" });
    await worker.scheduled(controller, env);
    await waitOnExecutionContext(ctx);
    const runs = await call("GET", "/admin/reconcile/runs?limit=5", { admin: true });
    expect(runs.status).toBe(200);
    expect(runs.json.runs[0].trigger).toBe("cron");
    await eventually(async () => expect(await ordersOf(sku)).toHaveLength(2));
    const viaAdmin = await call("POST", "/admin/reconcile", { admin: true });
    expect(viaAdmin.status).toBe(200);
    expect(viaAdmin.json).toMatchObject({ runId: expect.any(String), skusChecked: expect.any(Number) });
    expect((await call("GET", "/admin/reconcile/runs?limit=0", { admin: true })).status).toBe(400);
  });
});
