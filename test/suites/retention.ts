import { createScheduledController } from "cloudflare:test";
import { env } from "cloudflare:workers";
import { describe, expect, it } from "vitest";
import {
  CHECKOUT_RETENTION_MS,
  PAYMENT_EVENT_IDS_RETENTION_MS,
  PROCESSED_EVENTS_RETENTION_MS,
  RECONCILE_HISTORY_RETENTION_MS,
} from "../../src/db/retention";
import worker from "../../src/index";
import { Scrape } from "../../tools/prometheus";
import { call } from "../support/client";

/** D1 keeps idempotency keys and run history for a stated time; the cron prunes the rest. */

const DAY = 24 * 3600 * 1000;

async function differencesTotal(kind: string): Promise<number> {
  const answer = await call("GET", "/metrics", { admin: true });
  return new Scrape((answer.json as { text: string }).text).value("flashgate_reconcile_differences_total", { kind });
}

const countOf = async (sql: string, ...binds: unknown[]) =>
  (
    await env.DB.prepare(sql)
      .bind(...binds)
      .first<{ n: number }>()
  )?.n ?? 0;

describe("D1 retention", () => {
  it("the cron prunes processed_events, payment event ids and run history past retention; difference totals never go down", async () => {
    const now = Date.now();
    const tag = crypto.randomUUID().slice(0, 8);
    const retention = Math.max(
      PROCESSED_EVENTS_RETENTION_MS,
      RECONCILE_HISTORY_RETENTION_MS,
      PAYMENT_EVENT_IDS_RETENTION_MS,
    );
    const old = now - retention - DAY;
    const kind = `test_kind_${tag}`;
    const statements: D1PreparedStatement[] = [];
    for (let i = 0; i < 30; i++) {
      const at = i < 20 ? old : now;
      statements.push(
        env.DB.prepare("INSERT INTO processed_events (event_id, reservation_id, processed_at) VALUES (?, ?, ?)").bind(
          `${tag}-evt-${i}`,
          `${tag}-res-${i}`,
          at,
        ),
        env.DB.prepare(
          "INSERT INTO reconcile_runs (id, trigger, started_at, finished_at, differences) VALUES (?, 'cron', ?, ?, 1)",
        ).bind(`${tag}-run-${i}`, at, at),
        env.DB.prepare(
          "INSERT INTO reconcile_differences (run_id, sku, kind, expected, actual, repaired) VALUES (?, 's', ?, 'a', 'b', 1)",
        ).bind(`${tag}-run-${i}`, kind),
        env.DB.prepare(
          "INSERT INTO payment_event_ids (event_id, reservation_id, type, amount, currency, received_at) VALUES (?, ?, 'payment.succeeded', 100, NULL, ?)",
        ).bind(`${tag}-pay-${i}`, `${tag}-res-${i}`, at),
      );
    }
    await env.DB.batch(statements);
    expect(await differencesTotal(kind)).toBe(30);

    await worker.scheduled(createScheduledController({ scheduledTime: now, cron: "* * * * *" }), env);

    expect(await countOf("SELECT COUNT(*) AS n FROM processed_events WHERE event_id LIKE ?", `${tag}-%`)).toBe(10);
    expect(await countOf("SELECT COUNT(*) AS n FROM payment_event_ids WHERE event_id LIKE ?", `${tag}-%`)).toBe(10);
    expect(await countOf("SELECT COUNT(*) AS n FROM reconcile_runs WHERE id LIKE ?", `${tag}-%`)).toBe(10);
    expect(await countOf("SELECT COUNT(*) AS n FROM reconcile_differences WHERE kind = ?", kind)).toBe(10);
    // The counter is a counter: pruning old runs does not lower it.
    expect(await differencesTotal(kind)).toBe(30);
    const runs = await call("GET", "/admin/reconcile/runs?limit=50", { admin: true });
    expect(runs.json.runs.filter((r: { runId: string }) => r.runId.startsWith(tag))).toHaveLength(10);
  });

  it("the cron prunes checkout claims and sessions past retention after their session expired, and keeps the others", async () => {
    const now = Date.now();
    const tag = crypto.randomUUID().slice(0, 8);
    // 20 sessions expired past retention; 5 expired inside it; 5 still open.
    const expiryOf = (i: number) =>
      i < 20 ? now - CHECKOUT_RETENTION_MS - DAY : i < 25 ? now - CHECKOUT_RETENTION_MS + DAY : now + 3600_000;
    const statements: D1PreparedStatement[] = [];
    for (let i = 0; i < 30; i++) {
      const expires = expiryOf(i);
      const made = expires - 31 * 60_000;
      statements.push(
        env.DB.prepare(
          "INSERT INTO checkout_claims (reservation_id, attempt, params, expires_at, claimed_at) VALUES (?, 0, '{}', ?, ?)",
        ).bind(`${tag}-res-${i}`, expires, made),
        env.DB.prepare(
          "INSERT INTO checkout_sessions (session_id, reservation_id, url, expires_at, created_at) VALUES (?, ?, ?, ?, ?)",
        ).bind(`cs_${tag}_${i}`, `${tag}-res-${i}`, `https://checkout.stripe.test/c/pay/cs_${tag}_${i}`, expires, made),
      );
    }
    await env.DB.batch(statements);

    await worker.scheduled(createScheduledController({ scheduledTime: now, cron: "* * * * *" }), env);

    const kept = (table: string) =>
      countOf(`SELECT COUNT(*) AS n FROM ${table} WHERE reservation_id LIKE ?`, `${tag}-%`);
    expect([await kept("checkout_claims"), await kept("checkout_sessions")]).toEqual([10, 10]);
    const left = await env.DB.prepare("SELECT reservation_id FROM checkout_claims WHERE reservation_id LIKE ?")
      .bind(`${tag}-%`)
      .all<{ reservation_id: string }>();
    expect(left.results.map((r) => Number(r.reservation_id.split("-").at(-1))).sort((a, b) => a - b)).toEqual(
      Array.from({ length: 10 }, (_, i) => 20 + i),
    );
  });
});
