import type { Hono } from "hono";
import { log } from "../durable-objects/shared/log";
import { app } from "./app";
import { handoffRetentionMs, pruneHandoff, pruneHistory } from "./db/retention";
import { checkBackDeliveries } from "./handoff/check-back";
import { consumeDeliveries } from "./handoff/delivery-consumer";
import type { AppEnv } from "./http/context";
import { flushMetrics } from "./observability/metrics";
import { consumeDeadLetters } from "./orders/dead-letter-consumer";
import { consumeOrderEvents } from "./orders/order-consumer";
import { reconcile } from "./reconcile/reconcile";

export { SaleLog } from "../durable-objects/log/sale-log";
export { MetricsTotals } from "../durable-objects/metrics/metrics-totals";
export { SkuStock } from "../durable-objects/stock/sku-stock";
export { Gatherer } from "./edge/gatherer";
export { WebhookSender } from "./handoff/endpoint-sender";

const DEAD_LETTER_QUEUE = "order-events-dlq";
const DELIVERY_QUEUE = "webhook-deliveries";

/** How a batch of `order-events` is consumed (the chaos harness wraps it: src/harness/consumer-fault.ts). */
export type ConsumeOrders = (batch: MessageBatch<unknown>, env: Env) => Promise<void>;

/**
 * The Worker's handlers around an app. Production (this file, `main` of wrangler.toml) passes the
 * contract's app and the plain consumer; the harness entry (src/harness/index.ts) passes its own.
 */
export function workerOf(routes: Hono<AppEnv>, consumeOrders: ConsumeOrders) {
  return {
    fetch: routes.fetch,
    async queue(batch, env, ctx) {
      if (batch.queue === DEAD_LETTER_QUEUE) await consumeDeadLetters(batch, env);
      else if (batch.queue === DELIVERY_QUEUE) await consumeDeliveries(batch, env);
      else await consumeOrders(batch, env);
      ctx.waitUntil(flushMetrics(env));
    },
    /**
     * The cron trigger (every minute, wrangler.toml) wakes the webhook sender if deliveries are due,
     * runs the same reconciliation as the admin route, then prunes D1's short-lived history and the
     * hand-off's delivered rows past HANDOFF_RETENTION_DAYS (src/db/retention.ts).
     */
    async scheduled(_controller, env) {
      // First and on its own: a reconciliation that throws must not keep owed deliveries asleep.
      await checkBackDeliveries(env).catch((err) => log("error", "webhook check-back failed", { error: String(err) }));
      await reconcile(env, { trigger: "cron" });
      await pruneHistory(env.DB, Date.now());
      await pruneHandoff(env.DB, Date.now(), handoffRetentionMs(env.HANDOFF_RETENTION_DAYS));
    },
  } satisfies ExportedHandler<Env>;
}

export default workerOf(app, consumeOrderEvents);
