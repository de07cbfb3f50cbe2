import { app } from "./app";
import { flushMetrics } from "./observability/metrics";
import { consumeDeadLetters } from "./orders/dead-letter-consumer";
import { consumeOrderEvents } from "./orders/order-consumer";
import { reconcile } from "./reconcile/reconcile";
import { withChaosFault } from "./routes/chaos";

export { SkuStock } from "../durable-objects/sku-stock";
export { Telemetry } from "../durable-objects/telemetry";

const DEAD_LETTER_QUEUE = "order-events-dlq";

export default {
  fetch: app.fetch,
  async queue(batch, env, ctx) {
    if (batch.queue === DEAD_LETTER_QUEUE) await consumeDeadLetters(batch, env);
    else await withChaosFault(env, (fault) => consumeOrderEvents(batch, env, fault)); // no fault unless CHAOS
    ctx.waitUntil(flushMetrics(env));
  },
  /** The cron trigger (every minute, wrangler.toml) runs the same reconciliation as the admin route. */
  async scheduled(_controller, env) {
    await reconcile(env, { trigger: "cron" });
  },
} satisfies ExportedHandler<Env>;
