import { runDurableObjectAlarm, runInDurableObject } from "cloudflare:test";
import { env } from "cloudflare:workers";
import { afterEach, describe, expect, it } from "vitest";
import { call, createSku, reserve, uniqueSku } from "./support/client";
import { eventually } from "./support/eventually";
import { deliveries, endpoint, forgetEndpoints, type Log, logOf } from "./support/handoff";

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
  it("8 hanging and 2 failing endpoints leave a healthy one as fast as alone; the failing ones keep their schedule", async () => {
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
    expect(crowdLag).toBeLessThanOrEqual(baselineLag + 1000);

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
