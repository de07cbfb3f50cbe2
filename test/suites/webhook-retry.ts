import { env } from "cloudflare:workers";
import { afterEach, describe, expect, it } from "vitest";
import { call, createSku, reserve, uniqueSku } from "../support/client";
import { eventually } from "../support/eventually";
import { configure, deliveries, endpoint, forgetEndpoints, logOf, receiver } from "../support/handoff";

/**
 * API.md v1.3 "Webhook deliveries": `POST /admin/webhooks/:id/retry` tries every failed and pending
 * delivery of an endpoint now; a delivery of a type the endpoint no longer takes is not retried.
 * Retries: WEBHOOK_RETRY_SCHEDULE "1,2" (vitest.config.ts), so three attempts, then failed.
 */

afterEach(forgetEndpoints);

/** Waits until the endpoint's deliveries of `reservationId` have failed (every attempt refused). */
async function failedFor(hookId: string, reservationId: string) {
  return eventually(async () => {
    const rows = (await deliveries(hookId, "?status=failed")).filter((d) => d.reservationId === reservationId);
    expect(rows).toHaveLength(1);
    return rows[0] as { id: string; attempts: number };
  }, 20_000);
}

/** Changes how the receiver answers from its next request on, keeping what it received. */
async function patchReceiver(id: string, behaviour: Record<string, unknown>) {
  const res = await fetch(`${receiver.url}/control/${id}`, { method: "PATCH", body: JSON.stringify(behaviour) });
  expect(res.status).toBe(200);
}

describe("POST /admin/webhooks/:id/deliveries/:deliveryId/retry", () => {
  it("a retry accepted while an attempt of the delivery is under way gets its own attempt after it", async () => {
    // Every attempt hangs 2.5 s, then fails; set before the first, not between the second and the third
    // (a 2 s gap a poll could miss, the third then answered by the old behaviour).
    const hook = await endpoint({ fail: 3, delayMs: 2500 });
    const sku = uniqueSku("inflight");
    await createSku(sku, { totalStock: 5 });
    expect((await reserve("f1", sku)).status).toBe(202);
    // The third and last attempt of the schedule is under way; the operator retries meanwhile.
    await eventually(async () => expect((await logOf(hook.id)).count).toBe(3), 20_000);
    const [row] = await deliveries(hook.id);
    const retry = await call("POST", `/admin/webhooks/${hook.id}/deliveries/${row?.id}/retry`, { admin: true });
    expect([retry.status, retry.json]).toEqual([202, { id: row?.id, status: "pending" }]);
    await patchReceiver(hook.id, { delayMs: 0 });

    await eventually(async () => expect((await logOf(hook.id)).count).toBe(4), 10_000);
    const delivered = await eventually(async () => {
      const rows = await deliveries(hook.id, "?status=delivered");
      expect(rows).toHaveLength(1);
      return rows[0];
    });
    expect(delivered).toMatchObject({ id: row?.id, attempts: 4, lastStatusCode: 204 });
    const log = await logOf(hook.id);
    expect(log.received.map((r) => [r.webhookId, r.answered])).toEqual([
      [row?.id, 500],
      [row?.id, 500],
      [row?.id, 500],
      [row?.id, 204],
    ]);
  });
});

describe("a PUT that unticks a type while a delivery of it is out", () => {
  it("keeps the delivery parked when that attempt fails: no due time, no lag, and it goes once ticked again", async () => {
    // Every attempt hangs 5 s (under the sender's 10 s timeout), then fails (three, then the receiver takes it).
    const hook = await endpoint({ fail: 3, delayMs: 5000 });
    const sku = uniqueSku("parkflight");
    await createSku(sku, { totalStock: 5 });
    expect((await reserve("pf1", sku)).status).toBe(202);
    // The first attempt is under way; the operator unticks order.held meanwhile.
    await eventually(async () => expect((await logOf(hook.id)).count).toBe(1), 20_000);
    const put = (events: string[]) =>
      call("PUT", `/admin/webhooks/${hook.id}`, { admin: true, body: { url: hook.url, events } });
    expect((await put(["order.paid"])).status).toBe(200);
    // The PUT came while the attempt was out: its outcome is not recorded yet (attempts count answers).
    const [during] = (await call("GET", `/admin/webhooks/${hook.id}/deliveries`, { admin: true })).json.deliveries;
    expect(during?.attempts).toBe(0);

    // Once its failure is recorded, it is parked as one unticked at rest is (API.md: nextAttemptAt null, no lag).
    const row = await eventually(async () => {
      const [first] = (await call("GET", `/admin/webhooks/${hook.id}/deliveries`, { admin: true })).json.deliveries;
      expect(first?.attempts).toBe(1);
      return first as { id: string; status: string; nextAttemptAt: string | null };
    }, 10_000);
    expect([row.status, row.nextAttemptAt]).toEqual(["pending", null]);
    expect((await call("GET", `/admin/webhooks/${hook.id}`, { admin: true })).json.lagSeconds).toBe(0);

    await patchReceiver(hook.id, { fail: 0, delayMs: 0 });
    expect((await put(["order.held", "order.paid"])).status).toBe(200);
    await eventually(async () =>
      expect((await deliveries(hook.id, "?status=delivered")).map((d) => d.id)).toEqual([row?.id]),
    );
  });
});

describe("POST /admin/webhooks/:id/retry", () => {
  it("tries every failed and pending delivery of the endpoint now, with the same webhook-ids", async () => {
    const hook = await endpoint({ fail: 1000 });
    const sku = uniqueSku("bulk");
    await createSku(sku, { totalStock: 5 });
    const held = (await reserve("b1", sku)).json;
    const failed = await failedFor(hook.id, held.reservationId);
    expect(failed.attempts).toBe(3);
    // A change owed but not due for a day (an attempt failed, its retry is far off).
    await env.DB.batch([
      env.DB.prepare(
        `INSERT INTO orders (reservation_id, sku, user_id, quantity, status, expires_at, created_at, updated_at, last_seq, amount, currency)
         VALUES (?1, ?2, 'b2', 1, 'held', NULL, ?3, ?3, 1, NULL, 'usd')`,
      ).bind(`${sku}.0.later`, sku, Date.now()),
      env.DB.prepare(
        "UPDATE webhook_deliveries SET next_attempt_at = next_attempt_at + 86400000 WHERE endpoint_id = ?1 AND status = 'pending'",
      ).bind(hook.id),
    ]);
    const [later] = await deliveries(hook.id, "?status=pending");
    expect(later).toMatchObject({ reservationId: `${sku}.0.later`, attempts: 0 });
    expect((await logOf(hook.id)).count).toBe(3);

    // The shop fixes its receiver; the operator retries everything owed.
    await configure(hook.id, { secret: hook.secret });
    const retry = await call("POST", `/admin/webhooks/${hook.id}/retry`, { admin: true });
    expect([retry.status, retry.json]).toEqual([202, { retried: 2 }]);
    const rows = await eventually(async () => {
      const rows = await deliveries(hook.id, "?status=delivered");
      expect(rows).toHaveLength(2);
      return rows;
    });
    const log = await logOf(hook.id);
    expect([log.count, log.unverified]).toEqual([2, 0]);
    expect(log.received.map((r) => r.webhookId).sort()).toEqual(rows.map((r) => r.id).sort());
    expect(rows.map((r) => r.id)).toContain(failed.id);
    // Nothing is owed any more: a second bulk retry has nothing to do.
    expect((await call("POST", `/admin/webhooks/${hook.id}/retry`, { admin: true })).json).toEqual({ retried: 0 });
  });

  it("counts a delivery an attempt is under way for as tried now, and sends it once", async () => {
    // Every answer waits 8 s (under the 10 s timeout): the delivery is in flight, its endpoint held, when
    // the operator retries, even after a poll gap of several seconds on a loaded machine.
    const hook = await endpoint({ delayMs: 8000 });
    const sku = uniqueSku("midrun");
    await createSku(sku, { totalStock: 5 });
    expect((await reserve("m1", sku)).status).toBe(202);
    await eventually(async () => expect((await logOf(hook.id)).count).toBe(1), 20_000);
    const retry = await call("POST", `/admin/webhooks/${hook.id}/retry`, { admin: true });
    expect([retry.status, retry.json]).toEqual([202, { retried: 1 }]);
    const [row] = await eventually(async () => {
      const rows = await deliveries(hook.id, "?status=delivered");
      expect(rows).toHaveLength(1);
      return rows;
    }, 20_000);
    const log = await logOf(hook.id);
    expect([log.count, log.received[0]?.webhookId, log.unverified]).toEqual([1, row?.id, 0]);
  });

  it("leaves out deliveries of a type the endpoint no longer takes; one retried alone is 409 INVALID_STATE", async () => {
    const hook = await endpoint({ fail: 1000 }, { events: ["order.held", "order.paid"] });
    const sku = uniqueSku("unsub");
    await createSku(sku, { totalStock: 5 });
    const held = (await reserve("u1", sku)).json;
    const failed = await failedFor(hook.id, held.reservationId);
    const narrowed = await call("PUT", `/admin/webhooks/${hook.id}`, {
      admin: true,
      body: { url: hook.url, events: ["order.paid"] },
    });
    expect(narrowed.status).toBe(200);
    await configure(hook.id, { secret: hook.secret });

    const one = await call("POST", `/admin/webhooks/${hook.id}/deliveries/${failed.id}/retry`, { admin: true });
    expect([one.status, one.json.error?.code]).toEqual([409, "INVALID_STATE"]);
    expect(one.json.error.message).toMatch(/no longer subscribes to this delivery's event type/);
    const all = await call("POST", `/admin/webhooks/${hook.id}/retry`, { admin: true });
    expect([all.status, all.json]).toEqual([202, { retried: 0 }]);
    expect(await deliveries(hook.id)).toMatchObject([{ id: failed.id, status: "failed", attempts: 3 }]);

    // Subscribed again, it is retried.
    await call("PUT", `/admin/webhooks/${hook.id}`, { admin: true, body: { url: hook.url, events: ["order.held"] } });
    expect((await call("POST", `/admin/webhooks/${hook.id}/retry`, { admin: true })).json).toEqual({ retried: 1 });
    await eventually(async () => expect(await deliveries(hook.id, "?status=delivered")).toHaveLength(1));
  });

  it("an unknown endpoint is 404; a disabled one is 409 INVALID_STATE", async () => {
    for (const id of ["nobody-here", "bad id!"]) {
      const answer = await call("POST", `/admin/webhooks/${encodeURIComponent(id)}/retry`, { admin: true });
      expect([answer.status, answer.json.error?.code], id).toEqual([404, "NOT_FOUND"]);
    }
    const hook = await endpoint();
    await call("PUT", `/admin/webhooks/${hook.id}`, { admin: true, body: { url: hook.url, enabled: false } });
    const disabled = await call("POST", `/admin/webhooks/${hook.id}/retry`, { admin: true });
    expect([disabled.status, disabled.json.error?.code]).toEqual([409, "INVALID_STATE"]);
    expect((await call("POST", `/admin/webhooks/${hook.id}/retry`)).status).toBe(401);
  });
});
