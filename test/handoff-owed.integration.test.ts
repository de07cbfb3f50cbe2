import { createScheduledController } from "cloudflare:test";
import { env } from "cloudflare:workers";
import { afterEach, describe, expect, it } from "vitest";
import { keyOf, recordBatch, recordOutcomes, release, takeDuePage } from "../src/handoff/deliveries";
import { newSecret } from "../src/handoff/signature";
import worker from "../src/index";
import { call, uniqueSku } from "./support/client";
import { eventually } from "./support/eventually";
import { configure, deliveries, endpoints, forgetEndpoints, logOf, receiver } from "./support/handoff";

/**
 * Deliveries an endpoint is owed when the operator changes it, or when a sender dies holding them.
 * A file of its own (its own workerd), its tests in this order: no sender woken by another file's
 * deliveries runs here, and a sender lists the endpoints it serves when it starts. So the first
 * test's delivery is taken by no one but the senders it names; the second's only by the sender its
 * cron wakes; the third's is not due until the test makes it so.
 */

afterEach(forgetEndpoints);

describe("order hand-off: what an operator changes while deliveries are owed", () => {
  /**
   * An endpoint stored directly (no wake-up in flight), owed one pending delivery of `order.held`:
   * due now, or (`later`) not for a day, so that no sender still running from an earlier test takes it.
   */
  async function owing(events: string[], when: "now" | "later") {
    const hook = { id: uniqueSku("hook"), secret: newSecret() };
    const now = Date.now();
    await env.DB.batch([
      env.DB.prepare(
        "INSERT INTO webhook_endpoints (id, url, events, enabled, secret, created_at, updated_at) VALUES (?1, ?2, ?3, 1, ?4, ?5, ?5)",
      ).bind(hook.id, `${receiver.url}/hooks/${hook.id}`, JSON.stringify(events), hook.secret, now),
      env.DB.prepare(
        `INSERT INTO orders (reservation_id, sku, user_id, quantity, status, expires_at, created_at, updated_at, last_seq, amount, currency)
         VALUES (?1, 'owed', 'o1', 1, 'held', NULL, ?2, ?2, 1, NULL, 'usd')`,
      ).bind(`${hook.id}.0.r`, now),
      env.DB.prepare(
        "UPDATE webhook_deliveries SET next_attempt_at = next_attempt_at + ?2 WHERE endpoint_id = ?1",
      ).bind(hook.id, when === "later" ? 86_400_000 : 0),
    ]);
    endpoints.push(hook.id);
    await configure(hook.id, { secret: hook.secret });
    const [owed] = await deliveries(hook.id);
    expect(owed).toMatchObject({ status: "pending", type: "order.held" });
    return { ...hook, owed: owed as { id: string } };
  }

  it("a sender that took a delivery and died counts no attempt; the lease lapses and it is sent", async () => {
    // First in this file: no sender has been woken here yet, so only the three below take it.
    const hook = await owing(["order.held"], "now");
    // Three senders take it and die at once (their leases lapse immediately).
    for (let i = 0; i < 3; i++) {
      expect((await takeDuePage(env.DB, hook.id, 10, `dead-${i}`, 0)).taken).toHaveLength(1);
    }
    expect((await deliveries(hook.id))[0]).toMatchObject({ status: "pending", attempts: 0 });
    await worker.scheduled(createScheduledController({ scheduledTime: Date.now(), cron: "* * * * *" }), env);
    await eventually(async () => expect((await deliveries(hook.id, "?status=delivered"))[0]?.attempts).toBe(1));
    expect((await logOf(hook.id)).count).toBe(1);
  });

  it("a change whose wake-up was lost (the consumer died after its D1 write) is delivered by the cron's check-back", async () => {
    // Second: the one sender the first test woke listed its endpoints before this one existed.
    const hook = await owing(["order.held"], "now");
    expect((await logOf(hook.id)).count).toBe(0);
    await worker.scheduled(createScheduledController({ scheduledTime: Date.now(), cron: "* * * * *" }), env);
    const log = await eventually(async () => {
      const log = await logOf(hook.id);
      expect(log.count).toBe(1);
      return log;
    });
    expect(log.received[0]).toMatchObject({ webhookId: hook.owed.id, verified: true });
  });

  it("a PUT that disables stops its deliveries, and a retry says so; one that unsubscribes a type keeps them, unsent, until it is subscribed again", async () => {
    const hook = await owing(["order.held", "order.paid"], "later");
    const url = `${receiver.url}/hooks/${hook.id}`;
    const put = (body: Record<string, unknown>) => call("PUT", `/admin/webhooks/${hook.id}`, { admin: true, body });
    const retryOwed = () =>
      call("POST", `/admin/webhooks/${hook.id}/deliveries/${hook.owed.id}/retry`, { admin: true });
    expect((await put({ url, enabled: false })).status).toBe(200);
    // Due, and owed for ten minutes.
    await env.DB.prepare(
      "UPDATE webhook_deliveries SET next_attempt_at = 0, created_at = created_at - 600000 WHERE endpoint_id = ?1",
    )
      .bind(hook.id)
      .run();
    const retry = await retryOwed();
    expect([retry.status, retry.json.error.code]).toEqual([409, "INVALID_STATE"]);
    expect(await deliveries(hook.id, "?status=pending")).toHaveLength(1); // kept for when it is enabled

    // Enabled again, but order.held unticked (in a hurry): the owed delivery stays, due, sent by nobody,
    // out of the endpoint's lag; a retry of it is refused, as API.md says of a type no longer subscribed.
    const narrowed = await put({ url, enabled: true, events: ["order.paid"] });
    expect([narrowed.status, narrowed.json.lagSeconds]).toEqual([200, 0]);
    expect(await deliveries(hook.id, "?status=pending")).toMatchObject([
      { id: hook.owed.id, attempts: 0, nextAttemptAt: null },
    ]);
    const unsubscribed = await retryOwed();
    expect([unsubscribed.status, unsubscribed.json.error.code]).toEqual([409, "INVALID_STATE"]);
    const all = await call("POST", `/admin/webhooks/${hook.id}/retry`, { admin: true });
    expect([all.status, all.json]).toEqual([202, { retried: 0 }]);
    await worker.scheduled(createScheduledController({ scheduledTime: Date.now(), cron: "* * * * *" }), env);
    expect((await logOf(hook.id)).count).toBe(0);

    // Ticked again: the delivery goes, with its own webhook-id, nothing lost.
    expect((await put({ url, events: ["order.paid", "order.held"] })).status).toBe(200);
    const log = await eventually(async () => {
      const log = await logOf(hook.id);
      expect(log.count).toBe(1);
      return log;
    });
    expect(log.received[0]).toMatchObject({ webhookId: hook.owed.id, verified: true, answered: 204 });
    expect((await deliveries(hook.id))[0]).toMatchObject({ status: "delivered", attempts: 1 });
  });

  it("a take after the endpoint was disabled takes nothing; once enabled, it takes the row and where it goes", async () => {
    const hook = await owing(["order.held"], "later");
    const position = keyOf(hook.owed.id)?.position as number;
    // Disabled (directly: a PUT would wake a sender), its row due.
    await env.DB.batch([
      env.DB.prepare("UPDATE webhook_endpoints SET enabled = 0 WHERE id = ?1").bind(hook.id),
      env.DB.prepare("UPDATE webhook_deliveries SET next_attempt_at = 0 WHERE endpoint_id = ?1").bind(hook.id),
    ]);
    expect(await takeDuePage(env.DB, hook.id, 10, "late-take", 60_000)).toEqual({
      taken: [],
      target: null,
      batch: null,
      now: 0,
    });
    const row = env.DB.prepare(
      "SELECT status, attempts, next_attempt_at FROM webhook_deliveries WHERE endpoint_id = ?1",
    );
    expect(await row.bind(hook.id).first()).toEqual({ status: "pending", attempts: 0, next_attempt_at: 0 });
    await env.DB.prepare("UPDATE webhook_endpoints SET enabled = 1 WHERE id = ?1").bind(hook.id).run();
    const { taken, target } = await takeDuePage(env.DB, hook.id, 10, "late-take", 60_000);
    expect(taken.map((row) => row.position)).toEqual([position]);
    expect(target).toEqual({ url: `${receiver.url}/hooks/${hook.id}`, secret: hook.secret });
  });

  it("a take holds the endpoint, not its rows: the rows still out are left out, no other sender takes or records them", async () => {
    const hook = await owing(["order.held"], "later");
    const position = keyOf(hook.owed.id)?.position as number;
    const due = env.DB.prepare(
      "UPDATE webhook_deliveries SET status = 'pending', next_attempt_at = 0 WHERE endpoint_id = ?1",
    );
    await due.bind(hook.id).run();
    const row = env.DB.prepare(
      "SELECT status, attempts, batch_id, next_attempt_at, updated_at FROM webhook_deliveries WHERE endpoint_id = ?1",
    ).bind(hook.id);
    const lease = env.DB.prepare("SELECT lease FROM webhook_endpoints WHERE id = ?1").bind(hook.id);
    const before = await row.first();
    const take = (sender: string, leaseMs = 60_000, out: number[] = []) =>
      takeDuePage(env.DB, hook.id, 10, sender, leaseMs, out).then((page) => page.taken.map((t) => t.position));
    expect(await take("sender-a")).toEqual([position]);
    // The take wrote the endpoint's lease alone.
    expect(await row.first()).toEqual(before);
    expect(await lease.first()).toEqual({ lease: "sender-a" });
    // The holder's next page leaves out the row still out; without it (a reset object's next run), takes it again.
    expect(await take("sender-a", 60_000, [position])).toEqual([]);
    expect(await take("sender-a")).toEqual([position]);
    // No other sender takes it, nor records an attempt of it.
    expect(await take("sender-b")).toEqual([]);
    // seenAt past any updated_at: no manual retry since the take.
    const outcome = {
      position,
      seenAt: Number.MAX_SAFE_INTEGER,
      code: 204,
      response: "",
      error: null,
      delayMs: null,
      batchId: null,
    };
    await recordOutcomes(env.DB, hook.id, [{ ...outcome, status: "failed" }], "sender-b");
    await recordBatch(env.DB, hook.id, [{ ...outcome, status: "failed" }], "sender-b");
    expect(await row.first()).toEqual(before);
    // The holder records a page and keeps the endpoint (its next page may be out) until it lets go.
    await recordOutcomes(env.DB, hook.id, [{ ...outcome, status: "delivered" }], "sender-a");
    expect(await row.first()).toMatchObject({ status: "delivered", attempts: 1 });
    expect(await lease.first()).toEqual({ lease: "sender-a" });
    await release(env.DB, hook.id, "sender-a");
    expect(await lease.first()).toEqual({ lease: null });
    // A batch's record lets go in the same round trip.
    await due.bind(hook.id).run();
    expect(await take("sender-a")).toEqual([position]);
    await recordBatch(env.DB, hook.id, [{ ...outcome, status: "delivered", batchId: "b" }], "sender-a");
    expect(await row.first()).toMatchObject({ status: "delivered", attempts: 2, batch_id: "b" });
    expect(await lease.first()).toEqual({ lease: null });
    // A batched round's outcomes, recorded by the next take before it reads (only the holder's):
    // the row answered is not taken again.
    await due.bind(hook.id).run();
    expect(await take("sender-a")).toEqual([position]);
    const recording = (sender: string, batchId: string) =>
      takeDuePage(env.DB, hook.id, 10, sender, 60_000, [], [{ ...outcome, status: "delivered", batchId }]);
    expect((await recording("sender-b", "x")).taken).toEqual([]);
    expect(await row.first()).toMatchObject({ status: "pending", attempts: 2, batch_id: "b" });
    expect((await recording("sender-a", "c")).taken).toEqual([]);
    expect(await row.first()).toMatchObject({ status: "delivered", attempts: 3, batch_id: "c" });
    // A holder that dies: once its lease lapses, another sender takes the rows, its attempt not counted.
    await due.bind(hook.id).run();
    expect(await take("sender-a", 0)).toEqual([position]);
    expect(await take("sender-b")).toEqual([position]);
    expect(await row.first()).toMatchObject({ status: "pending", attempts: 3 });
  });

  it("stores the URL as it is fetched, and reads limit as digits only", async () => {
    const id = uniqueSku("norm");
    const put = await call("PUT", `/admin/webhooks/${id}`, {
      admin: true,
      body: { url: " HTTPS://Shop.Example/Hooks/../flashgate " },
    });
    expect(put.status).toBe(200);
    endpoints.push(id);
    expect(put.json.url).toBe("https://shop.example/flashgate");
    for (const limit of ["1e2", "0x10", "+5", "1.0", " 5", "0", "1001", ""]) {
      const answer = await call("GET", `/admin/webhooks/${id}/deliveries?limit=${encodeURIComponent(limit)}`, {
        admin: true,
      });
      expect(answer.status, limit).toBe(400);
      expect((await call("GET", `/admin/orders?limit=${encodeURIComponent(limit)}`, { admin: true })).status).toBe(400);
    }
  });
});
