import { env } from "cloudflare:workers";
import { afterEach, describe, expect, it } from "vitest";
import { senderOf } from "../../src/handoff/endpoint-sender";
import type { Received } from "../../tools/webhook-receiver";
import { call, createSku, reserve, uniqueSku } from "../support/client";
import { eventually } from "../support/eventually";
import { conforms, deliveries, endpoint, forgetEndpoints, logOf, receiver } from "../support/handoff";
// Short suites of webhook deliveries that share this file's workerd (one start-up, issue #56): what a
// failed attempt says, an endpoint's lag, and the retry route. Each registers afterEach(forgetEndpoints).
import "./delivery-errors";
import "./webhook-lag";
import "./webhook-retry";

/**
 * API.md v1.4 "Webhook batches", through the real queues and sender objects to the test receiver
 * (tools/webhook-receiver.ts), which verifies every message with `standardwebhooks`. Retries:
 * WEBHOOK_RETRY_SCHEDULE "1,2" (vitest.config.ts), so three attempts, then failed.
 */

afterEach(forgetEndpoints);

type Event = NonNullable<NonNullable<Received["body"]>["data"]["events"]>[number];

/** Every verified batch message the endpoint got, with its events. */
function batchesOf(received: Received[]) {
  return received
    .filter((r) => r.verified && r.body?.type === "batch")
    .map((r) => ({ ...r, events: r.body?.data.events as Event[] }));
}

/** The feed position an event's id names (`msg_<position>_<endpoint>`). */
const positionOf = (id: string) => Number(/^msg_(\d+)_/.exec(id)?.[1]);

async function settings(id: string, url: string, batch: unknown) {
  const answer = await call("PUT", `/admin/webhooks/${id}`, { admin: true, body: { url, batch } });
  expect(answer.status, JSON.stringify(answer.json)).toBe(200);
  expect(answer.json.batch).toEqual(batch);
}

async function patchReceiver(id: string, behaviour: Record<string, unknown>) {
  const res = await fetch(`${receiver.url}/control/${id}`, { method: "PATCH", body: JSON.stringify(behaviour) });
  expect(res.status).toBe(200);
}

/** Waits until `n` deliveries of the endpoint are delivered, and returns its deliveries. */
async function deliveredAll(id: string, n: number, timeoutMs = 20_000) {
  return eventually(async () => {
    const rows = await deliveries(id);
    expect(rows.filter((d) => d.status === "delivered")).toHaveLength(n);
    return rows;
  }, timeoutMs);
}

describe("webhook batches", () => {
  it("sends maxEvents events a message once that many are due, each with the id it would have had alone", async () => {
    const hook = await endpoint({}, { batch: { maxEvents: 3, maxWaitMs: 10_000 } });
    const view = await call("GET", `/admin/webhooks/${hook.id}`, { admin: true });
    expect(view.json.batch).toEqual({ maxEvents: 3, maxWaitMs: 10_000 });
    conforms("WebhookEndpoint", view.json);
    const sku = uniqueSku("count");
    await createSku(sku, { totalStock: 10, perUserLimit: 10, price: 500 });
    const started = Date.now();
    for (let i = 0; i < 6; i++) expect((await reserve(`c${i}`, sku)).status).toBe(202);

    const rows = await deliveredAll(hook.id, 6);
    const log = await logOf(hook.id);
    expect([log.count, log.unverified, log.events]).toEqual([2, 0, 6]);
    // Full batches went without waiting for maxWaitMs.
    for (const message of log.received) expect(message.receivedAt - started).toBeLessThan(9_000);
    const batches = batchesOf(log.received);
    expect(batches.map((b) => b.events.length)).toEqual([3, 3]);
    for (const message of log.received) conforms("WebhookBatchMessage", message.body);
    for (const batch of batches) {
      expect(batch.webhookId).toMatch(/^msg_batch_/);
      // The message's time: its newest event's.
      expect(batch.body?.timestamp).toBe(
        batch.events
          .map((e) => e.timestamp)
          .sort()
          .at(-1),
      );
      for (const event of batch.events) {
        const row = rows.find((d) => d.id === event.id);
        expect(row).toMatchObject({ status: "delivered", attempts: 1, batchId: batch.webhookId, type: event.type });
        expect(event.data.reservationId).toBe(row?.reservationId);
      }
    }
    expect(new Set(batches.flatMap((b) => b.events.map((e) => e.id))).size).toBe(6);
  });

  it("sends fewer once the oldest has waited maxWaitMs", async () => {
    const hook = await endpoint({}, { batch: { maxEvents: 100, maxWaitMs: 800 } });
    const sku = uniqueSku("time");
    await createSku(sku, { totalStock: 10, perUserLimit: 10 });
    for (let i = 0; i < 2; i++) expect((await reserve(`t${i}`, sku)).status).toBe(202);

    const rows = await deliveredAll(hook.id, 2);
    const log = await logOf(hook.id);
    expect(log.events).toBe(2);
    const batches = batchesOf(log.received);
    expect(batches.flatMap((b) => b.events.map((e) => e.id)).sort()).toEqual(rows.map((d) => d.id).sort());
    for (const batch of batches) {
      // Not before the oldest event it carries had waited maxWaitMs (D1's clock and the receiver's are this machine's).
      const oldest = Math.min(...batch.events.map((e) => Date.parse(rows.find((d) => d.id === e.id)?.createdAt ?? "")));
      expect(batch.receivedAt - oldest).toBeGreaterThanOrEqual(800 - 50);
    }
  });

  it("retries a batch whole with the same webhook-id: a receiver answering 500, then 204", async () => {
    const hook = await endpoint({ fail: 1 }, { batch: { maxEvents: 3, maxWaitMs: 10_000 } });
    const sku = uniqueSku("whole");
    await createSku(sku, { totalStock: 10, perUserLimit: 10 });
    for (let i = 0; i < 3; i++) expect((await reserve(`w${i}`, sku)).status).toBe(202);

    const rows = await deliveredAll(hook.id, 3);
    const log = await logOf(hook.id);
    expect(log.received.map((r) => [r.answered, r.verified])).toEqual([
      [500, true],
      [204, true],
    ]);
    const [failed, retried] = batchesOf(log.received);
    expect(retried?.webhookId).toBe(failed?.webhookId);
    expect(retried?.body).toEqual(failed?.body);
    expect(retried?.events).toHaveLength(3);
    expect(rows.map((d) => [d.status, d.attempts, d.lastStatusCode, d.batchId])).toEqual(
      Array(3).fill(["delivered", 2, 204, failed?.webhookId]),
    );
    // /metrics counts messages and events apart.
    await eventually(async () => {
      const metrics = (await call("GET", "/metrics", { admin: true })).json.text as string;
      expect(metrics).toMatch(/flashgate_webhook_messages_total\{kind="batch",result="retried"\} [1-9]/);
      expect(metrics).toMatch(/flashgate_webhook_messages_total\{kind="batch",result="delivered"\} [1-9]/);
      expect(metrics).toMatch(/flashgate_webhook_deliveries_total\{result="delivered"\} [1-9]/);
    });
  });

  it("a manual retry of one event of a failed batch sends that batch whole again, with its webhook-id", async () => {
    const hook = await endpoint({ fail: 1000 }, { batch: { maxEvents: 3, maxWaitMs: 10_000 } });
    const sku = uniqueSku("retryone");
    await createSku(sku, { totalStock: 10, perUserLimit: 10 });
    for (let i = 0; i < 3; i++) expect((await reserve(`o${i}`, sku)).status).toBe(202);
    const failed = await eventually(async () => {
      const rows = await deliveries(hook.id, "?status=failed");
      expect(rows).toHaveLength(3);
      return rows;
    }, 20_000);
    const batchId = failed[0]?.batchId;
    expect(batchId).toMatch(/^msg_batch_/);
    expect(failed.map((d) => d.batchId)).toEqual(Array(3).fill(batchId));
    expect((await logOf(hook.id)).count).toBe(3);

    await patchReceiver(hook.id, { fail: 0 });
    const one = failed[1]?.id;
    const retry = await call("POST", `/admin/webhooks/${hook.id}/deliveries/${one}/retry`, { admin: true });
    expect([retry.status, retry.json]).toEqual([202, { id: one, status: "pending" }]);

    await eventually(async () => expect((await logOf(hook.id)).count).toBe(4), 10_000);
    const last = batchesOf((await logOf(hook.id)).received).at(-1);
    expect([last?.webhookId, last?.answered]).toEqual([batchId, 204]);
    expect(last?.events.map((e) => e.id).sort()).toEqual(failed.map((d) => d.id).sort());
    const rows = await deliveredAll(hook.id, 3);
    expect(rows.map((d) => [d.status, d.attempts, d.batchId])).toEqual(Array(3).fill(["delivered", 4, batchId]));
  });

  it("a manual retry of one event while its batch's first attempt is out sends that batch whole again, with its webhook-id (found in an audit)", async () => {
    // The first message hangs 3 s, then is refused: the operator retries one of its events meanwhile.
    const hook = await endpoint({ fail: 1, delayMs: 3000 }, { batch: { maxEvents: 3, maxWaitMs: 10_000 } });
    const sku = uniqueSku("retryout");
    const order = (i: number) =>
      env.DB.prepare(
        `INSERT INTO orders (reservation_id, sku, user_id, quantity, status, expires_at, created_at, updated_at, last_seq, amount, currency)
         VALUES (?1, ?2, ?3, 1, 'held', NULL, ?4, ?4, 1, NULL, 'usd')`,
      ).bind(`${sku}.0.${i}`, sku, `ro${i}`, Date.now());
    await env.DB.batch([0, 1, 2].map(order));
    await senderOf(env, hook.id).wake(hook.id);
    await eventually(async () => expect((await logOf(hook.id)).count).toBe(1), 20_000);
    const owed = await deliveries(hook.id);
    expect(owed.map((d) => [d.status, d.attempts, d.batchId])).toEqual(Array(3).fill(["pending", 0, null]));
    const one = owed[1]?.id;
    const retry = await call("POST", `/admin/webhooks/${hook.id}/deliveries/${one}/retry`, { admin: true });
    expect([retry.status, retry.json]).toEqual([202, { id: one, status: "pending" }]);
    await patchReceiver(hook.id, { delayMs: 0 });

    const rows = await deliveredAll(hook.id, 3);
    const batches = batchesOf((await logOf(hook.id)).received);
    const first = batches[0];
    expect(first?.events).toHaveLength(3);
    // Retried whole (API.md v1.4: "anything else retries the batch whole"), under the batch's own id.
    expect(batches.map((b) => [b.webhookId, b.events.length])).toEqual(batches.map(() => [first?.webhookId, 3]));
    expect(batches.at(-1)?.answered).toBe(204);
    expect(rows.map((d) => d.batchId)).toEqual(Array(3).fill(first?.webhookId));
  }, 40_000);

  it("a part held for more goes once its oldest event has waited maxWaitMs, however long the run before took", async () => {
    // Every answer takes 4 s: the full batch's run ends 4 s after it went, the held part's wait long over.
    const hook = await endpoint({ delayMs: 4000 }, { batch: { maxEvents: 3, maxWaitMs: 2000 } });
    const sku = uniqueSku("heldpart");
    const order = (i: number) =>
      env.DB.prepare(
        `INSERT INTO orders (reservation_id, sku, user_id, quantity, status, expires_at, created_at, updated_at, last_seq, amount, currency)
         VALUES (?1, ?2, ?3, 1, 'held', NULL, ?4, ?4, 1, NULL, 'usd')`,
      ).bind(`${sku}.0.${i}`, sku, `h${i}`, Date.now());
    // Four changes in one transaction, one take: three go at once, the fourth is held for more.
    await env.DB.batch([0, 1, 2, 3].map(order));
    await senderOf(env, hook.id).wake(hook.id);

    await eventually(async () => expect((await logOf(hook.id)).count).toBe(2), 20_000);
    const rows = await deliveries(hook.id);
    const [full, part] = batchesOf((await logOf(hook.id)).received);
    expect([full?.events.length, part?.events.length]).toEqual([3, 1]);
    const written = Date.parse(rows.find((d) => d.id === part?.events[0]?.id)?.createdAt ?? "");
    // Right after the first run (4 s), not maxWaitMs after it (6 s).
    expect((part?.receivedAt ?? 0) - written).toBeLessThan(4000 + 1000);
  }, 40_000);

  it("keeps the feed's order within a batch: events of two SKUs interleaved", async () => {
    const hook = await endpoint({}, { batch: { maxEvents: 8, maxWaitMs: 10_000 } });
    const a = uniqueSku("inta");
    const b = uniqueSku("intb");
    await createSku(a, { totalStock: 10, perUserLimit: 10 });
    await createSku(b, { totalStock: 10, perUserLimit: 10 });
    for (let i = 0; i < 4; i++) {
      expect((await reserve(`ia${i}`, a)).status).toBe(202);
      expect((await reserve(`ib${i}`, b)).status).toBe(202);
    }
    await deliveredAll(hook.id, 8);
    const [batch, ...others] = batchesOf((await logOf(hook.id)).received);
    expect(others).toEqual([]);
    const positions = batch?.events.map((e) => positionOf(e.id)) ?? [];
    expect(positions).toEqual([...positions].sort((x, y) => x - y));
    // The same order as the order feed's.
    const { results } = await env.DB.prepare(
      `SELECT c.reservation_id FROM order_changes c JOIN orders o ON o.reservation_id = c.reservation_id
       WHERE o.sku IN (?1, ?2) ORDER BY c.position`,
    )
      .bind(a, b)
      .all<{ reservation_id: string }>();
    expect(batch?.events.map((e) => e.data.reservationId)).toEqual(results.map((r) => r.reservation_id));
    expect(new Set(batch?.events.map((e) => e.data.reservationId.split(".")[0]))).toEqual(new Set([a, b]));
  });

  it("loses and doubles nothing when an endpoint switches between batched and single while deliveries are owed", async () => {
    const hook = await endpoint({ fail: 1000 }, { batch: { maxEvents: 3, maxWaitMs: 0 } });
    const sku = uniqueSku("switch");
    await createSku(sku, { totalStock: 20, perUserLimit: 20 });
    for (let i = 0; i < 3; i++) expect((await reserve(`s${i}`, sku)).status).toBe(202);
    // A batch was refused: its events are owed, due again on the schedule.
    await eventually(async () => {
      const rows = await deliveries(hook.id);
      expect(rows.filter((d) => d.attempts > 0 && d.batchId)).not.toHaveLength(0);
    }, 30_000);
    // Single from now on; the receiver recovers.
    await settings(hook.id, hook.url, null);
    await patchReceiver(hook.id, { fail: 0 });
    for (let i = 3; i < 5; i++) expect((await reserve(`s${i}`, sku)).status).toBe(202);
    expect((await call("POST", `/admin/webhooks/${hook.id}/retry`, { admin: true })).status).toBe(202);
    await deliveredAll(hook.id, 5);

    // Failing singly, then batched again while owed.
    await patchReceiver(hook.id, { fail: 1000 });
    for (let i = 5; i < 8; i++) expect((await reserve(`s${i}`, sku)).status).toBe(202);
    // Owed: tried and refused, pending or (its 3 s schedule spent before a poll sees it) failed; the
    // retry below brings failed rows back.
    // Each wait here is the order's way through the queue and D1 to the sender: on a loaded 2-core
    // machine (three test files at once) the 15 s of eventually's default was once not enough.
    await eventually(async () => {
      const rows = await deliveries(hook.id);
      expect(rows.filter((d) => d.status !== "delivered" && d.attempts > 0)).not.toHaveLength(0);
    }, 30_000);
    await settings(hook.id, hook.url, { maxEvents: 10, maxWaitMs: 0 });
    await patchReceiver(hook.id, { fail: 0 });
    expect((await call("POST", `/admin/webhooks/${hook.id}/retry`, { admin: true })).status).toBe(202);
    const rows = await deliveredAll(hook.id, 8);

    const log = await logOf(hook.id);
    expect(log.unverified).toBe(0);
    // Each event's deliveries that were answered 2xx: exactly one, whether alone or in a batch.
    const accepted = new Map<string, number>();
    for (const r of log.received.filter((r) => r.answered === 204)) {
      const ids = r.body?.type === "batch" ? (r.body.data.events ?? []).map((e) => e.id) : [r.webhookId];
      for (const id of ids) accepted.set(id, (accepted.get(id) ?? 0) + 1);
    }
    expect([...accepted.keys()].sort()).toEqual(rows.map((d) => d.id).sort());
    expect([...accepted.values()]).toEqual(Array(8).fill(1));
    // It went both ways: events went alone after the first switch, in a batch after the second.
    expect(log.received.some((r) => r.answered === 204 && r.body?.type !== "batch")).toBe(true);
    expect(log.received.some((r) => r.answered === 204 && r.body?.type === "batch")).toBe(true);
    for (const d of rows) {
      const alone = log.received.some((r) => r.answered === 204 && r.webhookId === d.id);
      expect(d.batchId === null).toBe(alone);
    }
  }, 120_000);

  it("an event new to a batch gets the whole schedule, though an event tried alone before shares its batch (found in an audit)", async () => {
    // Single at first, and every attempt refused: the first event is tried twice alone, one attempt left.
    const hook = await endpoint({ fail: 1000 });
    const sku = uniqueSku("mixedtries");
    await createSku(sku, { totalStock: 10, perUserLimit: 10 });
    expect((await reserve("mt-0", sku)).status).toBe(202);
    const [old] = await eventually(async () => {
      const rows = await deliveries(hook.id);
      expect(rows.map((d) => d.attempts >= 2 && d.status !== "delivered")).toEqual([true]);
      return rows;
    }, 20_000);
    // Batched from now on, while it is owed; two new events join it in one batch, refused. Its third
    // attempt may have come before a poll saw the second (the tests' schedule is 3 s) or before the
    // switch: then it is failed, and retried by hand to be owed again, with 3 attempts made.
    await settings(hook.id, hook.url, { maxEvents: 3, maxWaitMs: 10_000 });
    const [now] = await deliveries(hook.id);
    if (now?.status === "failed") {
      const retry = await call("POST", `/admin/webhooks/${hook.id}/deliveries/${now.id}/retry`, { admin: true });
      expect(retry.status).toBe(202);
    }
    for (const user of ["mt-1", "mt-2"]) expect((await reserve(user, sku)).status).toBe(202);
    await eventually(
      async () => expect(batchesOf((await logOf(hook.id)).received).map((b) => b.events.length)).toContain(3),
      20_000,
    );
    // Waited for once every attempt is spent, not for the 1 s between its first refusal and the next
    // attempt (a poll gap would miss it): each new event gets the whole schedule, three attempts, then
    // failed (the batch used to take its oldest event's count, and all three failed after one).
    const fresh = await eventually(async () => {
      const rows = (await deliveries(hook.id)).filter((d) => d.id !== old?.id);
      expect(rows.map((d) => d.status)).toEqual(["failed", "failed"]);
      return rows;
    }, 20_000);
    expect(fresh.map((d) => [d.attempts, d.batchId !== null])).toEqual([
      [3, true],
      [3, true],
    ]);
  }, 60_000);

  it("retries a refused batch on the schedule while a newer event is held for maxWaitMs (found in an audit)", async () => {
    const hook = await endpoint({ fail: 1 }, { batch: { maxEvents: 3, maxWaitMs: 10_000 } });
    const sku = uniqueSku("heldretry");
    await createSku(sku, { totalStock: 10, perUserLimit: 10 });
    for (const user of ["hr-0", "hr-1", "hr-2"]) expect((await reserve(user, sku)).status).toBe(202);
    const first = await eventually(async () => {
      const [message] = (await logOf(hook.id)).received;
      expect(message?.answered).toBe(500);
      return message;
    }, 20_000);
    // One event more right away: too few for a batch, held for up to 10 s.
    expect((await reserve("hr-3", sku)).status).toBe(202);
    await senderOf(env, hook.id).wake(hook.id);
    const retried = await eventually(async () => {
      const again = (await logOf(hook.id)).received.slice(1).find((r) => r.webhookId === first?.webhookId);
      expect(again?.answered).toBe(204);
      return again;
    }, 20_000);
    // Due 1 s after the refusal (WEBHOOK_RETRY_SCHEDULE "1,2"): it went with the held event's 10 s
    // wait before, so anything under that is the schedule's.
    expect((retried?.receivedAt ?? 0) - (first?.receivedAt ?? 0)).toBeLessThan(8_000);
  }, 60_000);

  it("refuses a bad batch setting with 400 INVALID_REQUEST naming the field, and nothing stored", async () => {
    const id = uniqueSku("badbatch");
    const url = `${receiver.url}/hooks/${id}`;
    const cases: [unknown, string][] = [
      [{ maxEvents: 0, maxWaitMs: 0 }, "batch.maxEvents"],
      [{ maxEvents: 101, maxWaitMs: 0 }, "batch.maxEvents"],
      [{ maxEvents: 2.5, maxWaitMs: 0 }, "batch.maxEvents"],
      [{ maxEvents: "10", maxWaitMs: 0 }, "batch.maxEvents"],
      [{ maxWaitMs: 0 }, "batch.maxEvents"],
      [{ maxEvents: 10, maxWaitMs: -1 }, "batch.maxWaitMs"],
      [{ maxEvents: 10, maxWaitMs: 10_001 }, "batch.maxWaitMs"],
      [{ maxEvents: 10 }, "batch.maxWaitMs"],
      [{ maxEvents: 10, maxWaitMs: 0, maxBytes: 1 }, "batch.maxBytes"],
      [10, "batch"],
      [true, "batch"],
    ];
    for (const [batch, field] of cases) {
      const answer = await call("PUT", `/admin/webhooks/${id}`, { admin: true, body: { url, batch } });
      expect(answer.status, JSON.stringify(batch)).toBe(400);
      expect(answer.json.error.code).toBe("INVALID_REQUEST");
      expect(answer.json.error.details.fields.map((f: { path: string }) => f.path)).toEqual([field]);
      expect(answer.json.error.message).toContain(field);
    }
    expect((await call("GET", `/admin/webhooks/${id}`, { admin: true })).status).toBe(404);
    // Null is one event a message, as before; left out, the setting is kept.
    const made = await call("PUT", `/admin/webhooks/${id}`, { admin: true, body: { url, batch: null } });
    expect([made.status, made.json.batch]).toEqual([200, null]);
    const set = await call("PUT", `/admin/webhooks/${id}`, {
      admin: true,
      body: { url, batch: { maxEvents: 100, maxWaitMs: 10_000 } },
    });
    expect(set.json.batch).toEqual({ maxEvents: 100, maxWaitMs: 10_000 });
    const kept = await call("PUT", `/admin/webhooks/${id}`, { admin: true, body: { url, enabled: false } });
    expect(kept.json.batch).toEqual({ maxEvents: 100, maxWaitMs: 10_000 });
    expect((await call("DELETE", `/admin/webhooks/${id}`, { admin: true })).status).toBe(200);
  });
});
