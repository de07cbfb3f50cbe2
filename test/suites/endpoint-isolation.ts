import { runDurableObjectAlarm, runInDurableObject } from "cloudflare:test";
import { env } from "cloudflare:workers";
import { afterEach, describe, expect, it } from "vitest";
import { DELIVERY_TIMEOUT_MS } from "../../src/handoff/sender";
import { newSecret } from "../../src/handoff/signature";
import { call, createSku, reserve, uniqueSku } from "../support/client";
import { eventually } from "../support/eventually";
import {
  configure,
  deliveries,
  endpoint,
  endpoints,
  forgetEndpoints,
  type Log,
  logOf,
  receiver,
} from "../support/handoff";

/**
 * API.md v1.3 "Webhook deliveries": endpoints do not share fate. Each endpoint's deliveries run in
 * its own sender object (src/handoff/endpoint-sender.ts), so receivers that hang or answer 500 do
 * not slow a healthy one. Measured against a baseline run of the same test, against the real
 * receiver (tools/webhook-receiver.ts). Retries: WEBHOOK_RETRY_SCHEDULE "1,2" (vitest.config.ts).
 */

afterEach(forgetEndpoints);

const HOLDS = 8;
const HELD = { events: ["order.held"] };

/** Places {@link HOLDS} holds on a new SKU; returns their reservation ids. */
async function holds(prefix: string): Promise<string[]> {
  const sku = uniqueSku(prefix);
  await createSku(sku, { totalStock: HOLDS });
  const ids: string[] = [];
  for (let i = 0; i < HOLDS; i++) {
    const answer = await reserve(`${prefix}-u${i}`, sku);
    expect(answer.status).toBe(202);
    ids.push(answer.json.reservationId);
  }
  return ids;
}

/** The receiver's log of `id` once it holds every one of `reservations`, each verified. */
async function allReceived(id: string, reservations: string[], timeoutMs = 30_000): Promise<Log> {
  return eventually(async () => {
    const log = await logOf(id);
    const got = new Set(log.received.filter((r) => r.verified).map((r) => r.body?.data.reservationId));
    expect(reservations.filter((r) => !got.has(r))).toEqual([]);
    return log;
  }, timeoutMs);
}

describe("endpoints do not share fate", () => {
  it("8 hanging and 2 failing endpoints never hold up a healthy one; the failing ones keep their schedule", async () => {
    // Baseline: the healthy endpoint alone.
    const alone = await endpoint({}, HELD);
    const aloneLog = await allReceived(alone.id, await holds("alone"));
    const baselineLag = Math.max(...aloneLog.lagsMs);
    await forgetEndpoints();

    const hanging = [];
    for (let i = 0; i < 8; i++) hanging.push(await endpoint({ delayMs: 60_000 }, HELD));
    const failing = [await endpoint({ fail: 1000 }, HELD), await endpoint({ fail: 1000 }, HELD)];
    const healthy = await endpoint({}, HELD);
    const reservations = await holds("crowd");

    const healthyLog = await allReceived(healthy.id, reservations);
    const crowdLag = Math.max(...healthyLog.lagsMs);
    console.log(`healthy endpoint: slowest delivery ${baselineLag} ms alone, ${crowdLag} ms beside 10 failing`);
    expect(healthyLog.count).toBe(HOLDS);
    expect(healthyLog.unverified).toBe(0);
    // Waiting behind a hanging attempt would cost its timeout: no healthy delivery took that long.
    // (A bound set by the sender's timeout, not by this machine's speed.)
    expect(crowdLag).toBeLessThan(DELIVERY_TIMEOUT_MS);

    // Each failing endpoint: three attempts of every delivery, 1 s then 2 s apart, then failed.
    for (const hook of failing) {
      const rows = await eventually(async () => {
        const rows = await deliveries(hook.id, "?status=failed");
        expect(rows).toHaveLength(HOLDS);
        return rows;
      }, 30_000);
      expect(rows.map((r) => [r.attempts, r.lastStatusCode])).toEqual(rows.map(() => [3, 500]));
      const log = await logOf(hook.id);
      expect(log.count).toBe(3 * HOLDS);
      for (const row of rows) {
        const times = log.received.filter((r) => r.webhookId === row.id).map((r) => r.receivedAt);
        const gaps = times.slice(1).map((t, i) => t - (times[i] as number));
        // Due 1 s and 2 s after the attempt before (D1's clock; the receiver's may lag it a little).
        expect(gaps.map((g, i) => g >= (i === 0 ? 1000 : 2000) - 100)).toEqual([true, true]);
      }
    }
    // The hanging endpoints were tried in the meantime, each timing out on its own.
    for (const hook of hanging) {
      const [row] = await eventually(async () => {
        const rows = await deliveries(hook.id);
        expect(rows.every((r) => r.attempts >= 1)).toBe(true);
        return rows;
      }, 30_000);
      expect(row?.lastError).toBe("timed out after 10 s without an answer");
    }
  }, 180_000);

  it("a run starts no attempt past its budget, whatever its page: the rest stays due and goes in the next runs, once each", async () => {
    // Stored directly, owed 48 deliveries due now, no sender woken: the run below is the first.
    const hook = { id: uniqueSku("budget"), secret: newSecret() };
    const now = Date.now();
    await env.DB.batch([
      env.DB.prepare(
        `INSERT INTO webhook_endpoints (id, url, events, enabled, secret, created_at, updated_at)
         VALUES (?1, ?2, '["order.held"]', 1, ?3, ?4, ?4)`,
      ).bind(hook.id, `${receiver.url}/hooks/${hook.id}`, hook.secret, now),
      env.DB.prepare(
        `WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 48)
         INSERT INTO orders (reservation_id, sku, user_id, quantity, status, expires_at, created_at, updated_at, last_seq, amount, currency)
         SELECT ?1 || '.0.' || i, 'budget', 'u' || i, 1, 'held', NULL, ?2, ?2, 1, NULL, 'usd' FROM n`,
      ).bind(hook.id, now),
    ]);
    endpoints.push(hook.id);
    // Each answer takes 4 s: rounds of six start at 0, 4 and 8 s (pages of 6 and 12, the next of 24
    // taken at 8 s); the 10 s budget ends before the page of 24 starts.
    await configure(hook.id, { secret: hook.secret, delayMs: 4_000 });
    const sender = env.WEBHOOK_SENDERS.get(env.WEBHOOK_SENDERS.idFromName(hook.id));
    await runInDurableObject(sender, async (_object, state) => {
      await state.storage.put("endpoint", hook.id);
      await state.storage.setAlarm(Date.now() + 3_600_000);
    });
    const started = Date.now();
    await runDurableObjectAlarm(sender);
    // Its budget (10 s) and one timeout (10 s) at most; one that finished its pages would take seven rounds of 4 s.
    expect(Date.now() - started).toBeLessThan(20_000);
    const attempted = await env.DB.prepare(
      "SELECT COUNT(*) AS n FROM webhook_deliveries WHERE endpoint_id = ?1 AND attempts > 0",
    )
      .bind(hook.id)
      .first<{ n: number }>();
    expect(attempted?.n).toBeGreaterThanOrEqual(6);
    expect(attempted?.n).toBeLessThanOrEqual(18);
    // The run left its alarm for now (more is due): the next runs send the rest.
    const res = await fetch(`${receiver.url}/control/${hook.id}`, { method: "PATCH", body: '{"delayMs":0}' });
    expect(res.status).toBe(200);
    const log = await eventually(async () => {
      const rows = await deliveries(hook.id, "?status=delivered&limit=100");
      expect(rows).toHaveLength(48);
      return rows;
    }, 30_000);
    expect(log.every((row) => row.attempts === 1)).toBe(true);
    expect((await logOf(hook.id)).count).toBe(48);
  }, 60_000);

  it("a disabled endpoint's sender object runs once and sets no alarm for rows it would not take", async () => {
    const hook = await endpoint({ fail: 1000 }, HELD);
    const reservations = await holds("paused");
    await eventually(async () => {
      const rows = await deliveries(hook.id);
      expect(rows.filter((r) => r.attempts >= 1)).toHaveLength(reservations.length);
    });
    const disabled = await call("PUT", `/admin/webhooks/${hook.id}`, {
      admin: true,
      body: { url: hook.url, enabled: false },
    });
    expect(disabled.status).toBe(200);
    // Its deliveries pending and due now: a sender woken for them takes nothing while it is disabled.
    await env.DB.prepare("UPDATE webhook_deliveries SET status = 'pending', next_attempt_at = 0 WHERE endpoint_id = ?1")
      .bind(hook.id)
      .run();
    const attempts = (await logOf(hook.id)).count;
    const sender = env.WEBHOOK_SENDERS.get(env.WEBHOOK_SENDERS.idFromName(hook.id));
    await sender.wake(hook.id);
    await runDurableObjectAlarm(sender);
    expect(await runInDurableObject(sender, (_object, state) => state.storage.getAlarm())).toBeNull();
    expect((await logOf(hook.id)).count).toBe(attempts);
    expect((await deliveries(hook.id, "?status=pending")).map((r) => r.reservationId).sort()).toEqual(
      [...reservations].sort(),
    );
  });
});
