import { createScheduledController } from "cloudflare:test";
import { env } from "cloudflare:workers";
import { describe, expect, it } from "vitest";
import { PRUNE_BATCH, PRUNE_ROUNDS, pruneHandoff } from "../../src/db/retention";
import { PARKED } from "../../src/db/schema";
import { cursorOf } from "../../src/handoff/change-feed";
import worker from "../../src/index";
import { ADMIN_TOKEN, call, uniqueSku } from "../support/client";

/**
 * Bounded storage of the order hand-off: 100,000 changes written over ten days, a retention of one
 * day (HANDOFF_RETENTION_DAYS "1"). The cron deletes the delivered deliveries and feed entries past
 * it in bounded steps, keeps every change a pending or failed delivery still carries, and a feed
 * cursor older than what is kept answers from the oldest entry kept.
 */

const CHANGES = 100_000;
const DAY = 24 * 3600 * 1000;

const countOf = async (sql: string, ...binds: unknown[]) =>
  (
    await env.DB.prepare(sql)
      .bind(...binds)
      .first<{ n: number }>()
  )?.n ?? 0;

/** One cron run with a one-day retention. */
const cron = () =>
  worker.scheduled(createScheduledController({ scheduledTime: Date.now(), cron: "* * * * *" }), {
    ...env,
    HANDOFF_RETENTION_DAYS: "1",
  } as unknown as Env);

/** A disabled endpoint (it takes nothing now): its rows are written by the test as the sender would leave them. */
const disabledEndpoint = (id: string, now: number) =>
  env.DB.prepare(
    `INSERT INTO webhook_endpoints (id, url, events, enabled, secret, created_at, updated_at)
     VALUES (?1, 'https://shop.example/hooks', '["order.held"]', 0, 'whsec_dGVzdA==', ?2, ?2)`,
  )
    .bind(id, now)
    .run();

describe("hand-off retention", () => {
  it("100,000 changes over ten days: the cron keeps one day, in bounded steps, and what is still owed", async () => {
    const now = Date.now();
    const sku = uniqueSku("retain");
    const hook = uniqueSku("retainhook");
    await disabledEndpoint(hook, now);
    const first = (await countOf("SELECT COALESCE(MAX(position), 0) AS n FROM order_changes")) + 1;
    // The changes of the tests before this one took their positions first: older than this history, as
    // positions follow time in a sale (the cut is the first change inside retention, by position).
    await env.DB.prepare("UPDATE order_changes SET changed_at = ?1 WHERE position < ?2")
      .bind(now - 11 * DAY, first)
      .run();
    // 1,000 orders; 100,000 changes, oldest first: 90,000 spread over ten to two days ago, 10,000 over
    // the last twelve hours (a gap around the cut, so that the minutes the test takes move nothing).
    await env.DB.batch([
      env.DB.prepare(
        `WITH RECURSIVE n(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM n WHERE i < 999)
         INSERT INTO orders (reservation_id, sku, user_id, quantity, status, expires_at, created_at, updated_at, last_seq, amount, currency)
         SELECT ?1 || '.0.' || i, ?1, 'u' || i, 1, 'held', NULL, ?2, ?2, 1, NULL, 'usd' FROM n`,
      ).bind(sku, now - 10 * DAY),
    ]);
    await env.DB.prepare(
      `WITH RECURSIVE n(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM n WHERE i < ?3 - 1)
       INSERT INTO order_changes (reservation_id, status, amount, currency, changed_at)
       SELECT ?1 || '.0.' || (i % 1000), 'held', NULL, 'usd',
              CASE WHEN i < 90000 THEN ?2 + i * 7680 ELSE ?4 + (i - 90000) * 4320 END FROM n`,
    )
      .bind(sku, now - 10 * DAY, CHANGES, now - DAY / 2)
      .run();
    // The 1,000 orders' own inserts wrote changes too (trigger): this test's are the last 100,000.
    const last = await countOf("SELECT MAX(position) AS n FROM order_changes");
    const ours = last - CHANGES + 1;
    // Every change owed to the endpoint: delivered, but two days' old ones still owed (3 failed, 3 pending).
    await env.DB.prepare(
      `INSERT INTO webhook_deliveries (endpoint_id, position, type, reservation_id, status, attempts, next_attempt_at, created_at, updated_at)
       SELECT ?1, position, 'order.held', reservation_id, 'delivered', 1, NULL, changed_at, changed_at
       FROM order_changes WHERE position >= ?2`,
    )
      .bind(hook, ours)
      .run();
    const owed = [ours + 10, ours + 20, ours + 30, ours + 40_000, ours + 40_010, ours + 40_020];
    await env.DB.prepare(
      `UPDATE webhook_deliveries SET status = CASE WHEN position < ?3 THEN 'failed' ELSE 'pending' END,
         next_attempt_at = CASE WHEN position < ?3 THEN NULL ELSE ?4 END
       WHERE endpoint_id = ?1 AND position IN (SELECT value FROM json_each(?2))`,
    )
      .bind(hook, JSON.stringify(owed), ours + 1000, now + DAY)
      .run();
    const young = await countOf(
      "SELECT COUNT(*) AS n FROM order_changes WHERE position >= ?1 AND changed_at >= ?2",
      ours,
      now - DAY,
    );
    expect(young).toBeGreaterThan(0);
    expect(young).toBeLessThan(CHANGES);
    expect(await countOf("SELECT COUNT(*) AS n FROM order_changes WHERE position >= ?1", ours)).toBe(CHANGES);

    // A poller's cursor from the very start of this test's changes.
    const oldCursor = await cursorOf(ADMIN_TOKEN, first - 1);

    // Cron runs until nothing more is deleted; none deletes more than its bound.
    const bound = PRUNE_BATCH * PRUNE_ROUNDS;
    const counts = async () => ({
      changes: await countOf("SELECT COUNT(*) AS n FROM order_changes WHERE position >= ?1", first),
      deliveries: await countOf("SELECT COUNT(*) AS n FROM webhook_deliveries WHERE endpoint_id = ?1", hook),
    });
    let before = await counts();
    const steps: { changes: number; deliveries: number }[] = [];
    const started = Date.now();
    for (let run = 0; run < 20; run++) {
      await cron();
      const after = await counts();
      steps.push({ changes: before.changes - after.changes, deliveries: before.deliveries - after.deliveries });
      if (after.changes === before.changes && after.deliveries === before.deliveries) break;
      before = after;
    }
    console.log(`pruned per cron run (changes, deliveries): ${JSON.stringify(steps)} in ${Date.now() - started} ms`);
    expect(steps.filter((s) => s.changes > bound || s.deliveries > bound)).toEqual([]);
    expect(steps.length).toBeGreaterThan(CHANGES / 2 / bound); // bounded: it took several runs

    // What is left: one day of changes and deliveries, and the six still owed with their changes.
    const left = await counts();
    expect(left).toEqual({ changes: young + owed.length, deliveries: young + owed.length });
    const kept = await env.DB.prepare(
      "SELECT position FROM order_changes WHERE position >= ?1 AND changed_at < ?2 ORDER BY position",
    )
      .bind(ours, now - DAY)
      .all<{ position: number }>();
    expect(kept.results.map((r) => r.position)).toEqual(owed);
    const owedRows = await env.DB.prepare(
      "SELECT position, status FROM webhook_deliveries WHERE endpoint_id = ?1 AND status <> 'delivered' ORDER BY position",
    )
      .bind(hook)
      .all<{ position: number; status: string }>();
    expect(owedRows.results.map((r) => r.position)).toEqual(owed);

    // The old cursor answers, from the oldest entry kept.
    const page = await call("GET", `/admin/orders?after=${encodeURIComponent(oldCursor)}&limit=3`, { admin: true });
    expect(page.status).toBe(200);
    const oldest = await env.DB.prepare(
      "SELECT reservation_id, changed_at FROM order_changes WHERE position > ?1 ORDER BY position LIMIT 3",
    )
      .bind(first - 1)
      .all<{ reservation_id: string; changed_at: number }>();
    expect(page.json.orders.map((o: { reservationId: string }) => o.reservationId)).toEqual(
      oldest.results.map((r) => r.reservation_id),
    );
    expect(oldest.results.map((r) => r.reservation_id)).toEqual(
      owed.slice(0, 3).map((p) => `${sku}.0.${(p - ours) % 1000}`),
    );
  }, 300_000);

  it("an old event applied late does not cut away the younger changes written before it", async () => {
    const now = Date.now();
    const sku = uniqueSku("latecut");
    const hook = uniqueSku("latecuthook");
    await disabledEndpoint(hook, now);
    const order = (n: number, at: number) =>
      env.DB.prepare(
        `INSERT INTO orders (reservation_id, sku, user_id, quantity, status, expires_at, created_at, updated_at, last_seq, amount, currency)
         VALUES (?1, ?2, 'u', 1, 'held', NULL, ?3, ?3, 1, NULL, 'usd')`,
      )
        .bind(`${sku}.0.${n}`, sku, at)
        .run();
    // A change of now, then one that happened two days ago, applied only now (a dead letter replayed).
    await order(1, now);
    await order(2, now - 2 * DAY);
    const ours = await env.DB.prepare("SELECT position, reservation_id FROM order_changes WHERE reservation_id LIKE ?1")
      .bind(`${sku}.%`)
      .all<{ position: number; reservation_id: string }>();
    expect(ours.results).toHaveLength(2);
    // Both delivered to the endpoint.
    await env.DB.prepare(
      `INSERT INTO webhook_deliveries (endpoint_id, position, type, reservation_id, status, attempts, next_attempt_at, created_at, updated_at)
       SELECT ?1, position, 'order.held', reservation_id, 'delivered', 1, NULL, ?2, ?2
       FROM order_changes WHERE reservation_id LIKE ?3`,
    )
      .bind(hook, now, `${sku}.%`)
      .run();
    const fresh = `${sku}.0.1`;
    const firstOurs = Math.min(...ours.results.map((r) => r.position));

    await cron();

    // A poller that had read up to just before them still gets the change of now, and so does the log.
    const page = await call(
      "GET",
      `/admin/orders?after=${encodeURIComponent(await cursorOf(ADMIN_TOKEN, firstOurs - 1))}&limit=1000`,
      { admin: true },
    );
    expect(page.status).toBe(200);
    expect(page.json.orders.map((o: { reservationId: string }) => o.reservationId)).toContain(fresh);
    const log = await call("GET", `/admin/webhooks/${hook}/deliveries`, { admin: true });
    expect(log.status).toBe(200);
    expect(log.json.deliveries.map((d: { reservationId: string }) => d.reservationId)).toContain(fresh);
    await call("DELETE", `/admin/webhooks/${hook}`, { admin: true });
  });

  it("a flagged payment's delivered deliveries go after retention; one still owed stays", async () => {
    const now = Date.now();
    const hook = uniqueSku("payhook");
    await disabledEndpoint(hook, now);
    // Deliveries of three payments owed back (negative keys), as the sender left them: two delivered,
    // two days ago and now, and one of two days ago still pending (its endpoint is down).
    const rows = [
      { position: -900_000_001, status: "delivered", at: now - 2 * DAY },
      { position: -900_000_002, status: "pending", at: now - 2 * DAY },
      { position: -900_000_003, status: "delivered", at: now },
    ];
    for (const row of rows) {
      await env.DB.prepare(
        `INSERT INTO webhook_deliveries (endpoint_id, position, type, reservation_id, status, attempts, next_attempt_at, created_at, updated_at)
         VALUES (?1, ?2, 'payment.refund_required', 'r', ?3, 1, ?4, ?5, ?5)`,
      )
        .bind(hook, row.position, row.status, row.status === "pending" ? now + DAY : null, row.at)
        .run();
    }
    const listed = async () =>
      (await call("GET", `/admin/webhooks/${hook}/deliveries`, { admin: true })).json.deliveries.map(
        (d: { id: string }) => d.id,
      );
    expect(await listed()).toHaveLength(3);

    await cron();

    expect((await listed()).sort()).toEqual([`msg_pay_900000002_${hook}`, `msg_pay_900000003_${hook}`]);
    await call("DELETE", `/admin/webhooks/${hook}`, { admin: true });
  });

  it("deliveries parked by an unticked type go once parked past retention, with the feed entries they held; within retention they stay", async () => {
    const now = Date.now();
    const sku = uniqueSku("parked");
    const hook = uniqueSku("parkhook");
    const url = "https://shop.example/hooks";
    const put = (events: string[]) =>
      call("PUT", `/admin/webhooks/${hook}`, { admin: true, body: { url, events, enabled: false } });
    expect((await put(["order.held", "order.paid"])).status).toBe(200);
    // Three orders held two days ago, owed to the endpoint while it is down (pending, retried later).
    for (let n = 1; n <= 3; n++) {
      await env.DB.prepare(
        `INSERT INTO orders (reservation_id, sku, user_id, quantity, status, expires_at, created_at, updated_at, last_seq, amount, currency)
         VALUES (?1, ?2, 'u', 1, 'held', NULL, ?3, ?3, 1, NULL, 'usd')`,
      )
        .bind(`${sku}.0.${n}`, sku, now - 2 * DAY)
        .run();
    }
    await env.DB.prepare(
      `INSERT INTO webhook_deliveries (endpoint_id, position, type, reservation_id, status, attempts, next_attempt_at, created_at, updated_at)
       SELECT ?1, position, 'order.held', reservation_id, 'pending', 3, ?2, changed_at, changed_at
       FROM order_changes WHERE reservation_id LIKE ?3`,
    )
      .bind(hook, now + DAY, `${sku}.%`)
      .run();
    const firstOurs = await countOf(
      "SELECT MIN(position) AS n FROM order_changes WHERE reservation_id LIKE ?1",
      `${sku}.%`,
    );
    const feed = async () => {
      const cursor = encodeURIComponent(await cursorOf(ADMIN_TOKEN, firstOurs - 1));
      const page = await call("GET", `/admin/orders?after=${cursor}&limit=1000`, { admin: true });
      return page.json.orders.filter((o: { sku: string }) => o.sku === sku).length;
    };
    const pending = async () =>
      (await call("GET", `/admin/webhooks/${hook}/deliveries?status=pending`, { admin: true })).json.deliveries.length;

    // The operator unticks order.held: the three are parked, still listed.
    expect((await put(["order.paid"])).status).toBe(200);
    expect(await pending()).toBe(3);
    // Half a day later (retention one day) nothing parked goes: the type may yet be ticked again.
    await pruneHandoff(env.DB, Date.now() + DAY / 2, DAY);
    expect([await pending(), await feed()]).toEqual([3, 3]);
    // Two days later, never ticked again: the parked deliveries go, and so do the feed entries they held.
    await pruneHandoff(env.DB, Date.now() + 2 * DAY, DAY);
    expect([await pending(), await feed()]).toEqual([0, 0]);
    // Ticked again now: nothing of that sale comes back.
    expect((await put(["order.held", "order.paid"])).status).toBe(200);
    expect(await pending()).toBe(0);
    await call("DELETE", `/admin/webhooks/${hook}`, { admin: true });
  });

  it("rows parked by the release before (no parked_at) get their clock in bounded steps, and go once parked past retention", async () => {
    const now = Date.now();
    const hook = uniqueSku("legacypark");
    await disabledEndpoint(hook, now);
    // More rows than one run's steps, parked as the release before left them: next_attempt_at PARKED,
    // no parked_at (e.g. an endpoint that unticked a type during a big sale).
    const rows = PRUNE_BATCH * PRUNE_ROUNDS + 1;
    await env.DB.prepare(
      `WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < ?2)
       INSERT INTO webhook_deliveries (endpoint_id, position, type, reservation_id, status, attempts, next_attempt_at, created_at, updated_at)
       SELECT ?1, 800000000 + i, 'order.paid', 'r' || i, 'pending', 0, ?3, ?4, ?4 FROM n`,
    )
      .bind(hook, rows, PARKED, now - 2 * DAY)
      .run();
    const unstamped = () =>
      countOf("SELECT COUNT(*) AS n FROM webhook_deliveries WHERE endpoint_id = ?1 AND parked_at IS NULL", hook);
    const parked = () => countOf("SELECT COUNT(*) AS n FROM webhook_deliveries WHERE endpoint_id = ?1", hook);

    // One run writes at most PRUNE_BATCH rows a statement, PRUNE_ROUNDS statements: the rest wait for the next.
    await pruneHandoff(env.DB, now, DAY);
    expect([await unstamped(), await parked()]).toEqual([1, rows]);
    await pruneHandoff(env.DB, now, DAY);
    expect([await unstamped(), await parked()]).toEqual([0, rows]);
    // Parked from `now` on: kept within retention, then deleted over the runs that follow.
    await pruneHandoff(env.DB, now + DAY / 2, DAY);
    expect(await parked()).toBe(rows);
    for (let run = 0; run < 3 && (await parked()) > 0; run++) await pruneHandoff(env.DB, now + 2 * DAY, DAY);
    expect(await parked()).toBe(0);
    await call("DELETE", `/admin/webhooks/${hook}`, { admin: true });
  });
});
