import { createScheduledController } from "cloudflare:test";
import { env } from "cloudflare:workers";
import { describe, expect, it } from "vitest";
import {
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
});
