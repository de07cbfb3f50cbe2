import { env } from "cloudflare:workers";
import { afterEach, describe, expect, it } from "vitest";
import { Scrape } from "../../tools/prometheus";
import { call, createSku, reserve, uniqueSku } from "../support/client";
import { eventually } from "../support/eventually";
import { configure, conforms, deliveries, endpoint, forgetEndpoints, logOf } from "../support/handoff";

/**
 * Each endpoint's lag (the age of its oldest pending delivery) in the admin endpoint view
 * (`lagSeconds`) and in /metrics (`flashgate_webhook_lag_seconds{endpoint}`), against the real
 * receiver: one that keeps failing falls behind, one that answers does not.
 */

afterEach(forgetEndpoints);

async function lagMetric(id: string): Promise<number> {
  const answer = await call("GET", "/metrics", { admin: true });
  expect(answer.status).toBe(200);
  const scrape = new Scrape((answer.json as { text: string }).text);
  expect(scrape.find("flashgate_webhook_lag_seconds", { endpoint: id })).toHaveLength(1);
  return scrape.value("flashgate_webhook_lag_seconds", { endpoint: id });
}

describe("webhook endpoint lag", () => {
  it("a failing endpoint shows its oldest pending delivery's age; a healthy one shows 0", async () => {
    const failing = await endpoint({ fail: 1000 }, { events: ["order.held"] });
    const healthy = await endpoint({}, { events: ["order.held"] });
    const sku = uniqueSku("lag");
    await createSku(sku, { totalStock: 2 });
    expect((await reserve("lag1", sku)).status).toBe(202);
    await eventually(async () => expect((await logOf(healthy.id)).verified).toBe(1));
    // Its schedule spent ("1,2": failed some 3 s after the first attempt), no attempt in flight: a wait for
    // it still pending would be for a 3 s window, and an update of a row then failed would change nothing.
    await eventually(async () => expect(await deliveries(failing.id, "?status=failed")).toHaveLength(1), 20_000);

    // Pending again, written ten minutes ago and not due for an hour (as if the receiver had failed that long).
    const before = Date.now();
    await env.DB.prepare(
      "UPDATE webhook_deliveries SET status = 'pending', created_at = ?2, next_attempt_at = ?3 WHERE endpoint_id = ?1",
    )
      .bind(failing.id, before - 600_000, before + 3_600_000)
      .run();
    const view = await call("GET", `/admin/webhooks/${failing.id}`, { admin: true });
    expect(view.status).toBe(200);
    conforms("WebhookEndpoint", view.json);
    const elapsed = Math.ceil((Date.now() - before) / 1000) + 2;
    expect(view.json.lagSeconds).toBeGreaterThanOrEqual(600);
    expect(view.json.lagSeconds).toBeLessThanOrEqual(600 + elapsed);

    const list = await call("GET", "/admin/webhooks", { admin: true });
    conforms("WebhookEndpointList", list.json);
    const lags = Object.fromEntries(
      (list.json.webhooks as { id: string; lagSeconds: number }[]).map((w) => [w.id, w.lagSeconds]),
    );
    expect(lags[healthy.id]).toBe(0);
    expect(lags[failing.id]).toBeGreaterThanOrEqual(600);

    expect(await lagMetric(failing.id)).toBeGreaterThanOrEqual(600);
    expect(await lagMetric(healthy.id)).toBe(0);

    // Once nothing is pending (the shop fixed its receiver, the operator retried), the lag is 0 again.
    await configure(failing.id, { secret: failing.secret });
    expect((await call("POST", `/admin/webhooks/${failing.id}/retry`, { admin: true })).json).toEqual({ retried: 1 });
    await eventually(async () => {
      const answer = await call("GET", `/admin/webhooks/${failing.id}`, { admin: true });
      expect(answer.json.lagSeconds).toBe(0);
    });
    expect(await lagMetric(failing.id)).toBe(0);
  }, 60_000);
});
