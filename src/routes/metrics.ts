import { count, desc, isNotNull, isNull, sql } from "drizzle-orm";
import { drizzle } from "drizzle-orm/d1";
import { Hono } from "hono";
import type { Sample } from "../../durable-objects/metrics/metrics-totals";
import { MIRROR_READ_TIMEOUT_MS, mirrorFromEnv } from "../../durable-objects/mirror/redis-mirror";
import { log } from "../../durable-objects/shared/log";
import { readSkuState, readWaitlist } from "../catalog/sku-state";
import { deadLetters, orderCounts, reconcileDifferenceCounts, reconcileRuns, skus } from "../db/schema";
import { endpointLags } from "../handoff/deliveries";
import type { AppEnv } from "../http/context";
import { mirrorCounts } from "../mirror/admin-view";
import { flushMetrics, renderLabels, renderMetrics } from "../observability/metrics";
import { ROUTES } from "./contract";
import { register } from "./register";

export const metrics = new Hono<AppEnv>();

/**
 * `GET /metrics` (admin token), Prometheus text format. What it reads per scrape is bounded by
 * the catalog, never by the orders: the counters of every isolate from the MetricsTotals object,
 * one D1 batch (the catalog, order counts kept by triggers, two small aggregates, the last run),
 * each webhook endpoint's lag (its pending rows), and one state and one waitlist call per stock shard.
 */
register(metrics, ROUTES.metrics, async (c) => {
  await flushMetrics(c.env); // this isolate's own latest counts are in the answer
  const [counters, gauges, lags] = await Promise.all([
    c.env.METRICS_TOTALS.getByName("global").samples(),
    readGauges(c.env),
    endpointLags(c.env.DB),
  ]);
  for (const [endpoint, lag] of lags)
    gauges.push({ name: "flashgate_webhook_lag_seconds", labels: renderLabels({ endpoint }), value: lag });
  return c.text(renderMetrics([...counters, ...gauges]), 200, {
    "Content-Type": "text/plain; version=0.0.4; charset=utf-8",
    "Cache-Control": "no-store",
  });
});

async function readGauges(env: Env): Promise<Sample[]> {
  const d1 = drizzle(env.DB);
  const [catalog, orders, pendingLetters, differences, lastRun] = await d1.batch([
    d1.select({ sku: skus.sku }).from(skus),
    d1.select().from(orderCounts),
    d1.select({ n: count() }).from(deadLetters).where(isNull(deadLetters.replayedAt)),
    // Counted by a trigger as differences are recorded: one row per kind, whatever the history.
    d1
      .select({ kind: reconcileDifferenceCounts.kind, n: reconcileDifferenceCounts.count })
      .from(reconcileDifferenceCounts),
    // The newest finished run (rowid follows insertion: no scan of the run history).
    d1
      .select({ finishedAt: reconcileRuns.finishedAt })
      .from(reconcileRuns)
      .where(isNotNull(reconcileRuns.finishedAt))
      .orderBy(desc(sql`rowid`))
      .limit(1),
  ]);
  const samples: Sample[] = [];
  const sample = (name: string, labels: Record<string, string>, value: number) =>
    samples.push({ name, labels: renderLabels(labels), value });

  // A stock object that cannot answer now (busy in a sale, restarting) costs its SKU's gauges in
  // this scrape, not the scrape: Prometheus keeps the last values, and flashgate_scrape_errors says so.
  const stocks = await Promise.allSettled(catalog.map(({ sku }) => readStock(env, sku)));
  const failed = stocks.flatMap((s, i) =>
    s.status === "rejected" ? [{ sku: catalog[i]?.sku, error: String(s.reason) }] : [],
  );
  if (failed.length > 0) log("warn", "metrics: stock objects did not answer", { failed });
  sample("flashgate_scrape_errors", {}, failed.length);
  let mirrorUnreadable = 0;
  for (const result of stocks) {
    const stock = result.status === "fulfilled" ? result.value : null;
    if (!stock) continue;
    // Sizes: a SKU with variants is sampled per variant (its sum is `sum by (sku, state)`).
    const parts = stock.variants?.map((v) => ({ labels: { variant: v.id }, counts: v.stock })) ?? [
      { labels: {}, counts: stock.counts },
    ];
    for (const part of parts) {
      for (const [state, value] of Object.entries(part.counts))
        sample("flashgate_stock", { sku: stock.sku, state, ...part.labels }, value);
    }
    sample("flashgate_waitlist", { sku: stock.sku }, stock.waitlist);
    if (stock.mirrorLag === null) mirrorUnreadable++;
    else if (stock.mirrorLag !== undefined) sample("flashgate_mirror_lag_changes", { sku: stock.sku }, stock.mirrorLag);
  }
  if (mirrorFromEnv(env, MIRROR_READ_TIMEOUT_MS)) sample("flashgate_mirror_unreadable", {}, mirrorUnreadable);
  for (const row of orders) sample("flashgate_orders", { sku: row.sku, status: row.status }, row.count);
  sample("flashgate_dead_letters", {}, pendingLetters[0]?.n ?? 0);
  for (const row of differences) sample("flashgate_reconcile_differences_total", { kind: row.kind }, row.n);
  const finishedAt = lastRun[0]?.finishedAt;
  if (finishedAt != null) sample("flashgate_reconcile_last_run_timestamp_seconds", {}, finishedAt / 1000);
  return samples;
}

async function readStock(env: Env, sku: string) {
  const state = await readSkuState(env, sku);
  if (!state) return null;
  const [waitlist, mirror] = await Promise.all([
    readWaitlist(env, sku, state.shards),
    // The mirror's lag in changes (undefined: the mirror is off; null: its snapshot is not readable).
    mirrorFromEnv(env, MIRROR_READ_TIMEOUT_MS) ? mirrorCounts(env, sku) : undefined,
  ]);
  const mirrorLag = mirror === undefined ? undefined : mirror === null ? null : Math.max(0, state.seq - mirror.version);
  return { sku, counts: state.stock, variants: state.variants, waitlist, mirrorLag };
}
