import type { Hono } from "hono";
import { buildApp } from "../app";
import type { AppEnv } from "../http/context";
import { workerOf } from "../index";
import { consumeOrderEvents } from "../orders/order-consumer";
import { bench } from "./bench-routes";
import { chaos, chaosConsumer } from "./chaos-routes";
import { type Dispatch, devRoutes } from "./dev-routes";
import { harnessPages } from "./storefront";

/**
 * The harness entry: the production Worker plus what only local tooling may reach: the demo
 * storefront at `/` in place of production's redirect to the dashboard (./storefront.ts), its
 * `/dev/*` (npm run dev), `/bench/*` (npm run bench) and `/chaos/*` (npm run chaos).
 * `wrangler deploy` bundles src/index.ts (wrangler.toml's `main`), which imports nothing from
 * here, so a deployed Worker has none of these routes whatever its vars say. The tooling selects
 * this file instead: `wrangler dev src/harness/index.ts`, `wrangler deploy --dry-run
 * src/harness/index.ts` (the bench's bundle). Inside, each group keeps its own var gate too
 * (DEV_TOOLS, CHAOS), so one tool's switches stay off under another.
 */

export { MetricsTotals } from "../../durable-objects/metrics/metrics-totals";
export { WebhookSender } from "../handoff/endpoint-sender";
export { Gatherer } from "./harness-gatherer";
// The sale log with the bench's floor (SALE_LOG_FLOOR), under the class name wrangler.toml binds SALE_LOG to.
export { HarnessSaleLog as SaleLog } from "./harness-sale-log";
// The stock object with test hooks, under the class name wrangler.toml binds STOCK to.
export { HarnessStock as SkuStock } from "./harness-stock";

const harnessApp: Hono<AppEnv> = buildApp(harnessPages, (app) => {
  app.route("/", chaos); // chaos harness only: 404 unless the var CHAOS is "true" (scripts/chaos/)
  // The simulated payment goes through this app, so the real webhook route and middleware answer it.
  const dispatch: Dispatch = (request, env, ctx) => harnessApp.fetch(request, env, ctx);
  app.route("/", devRoutes(dispatch)); // demo storefront only: 404 unless DEV_TOOLS is "true"
  app.route("/", bench); // npm run bench only: 404 unless DEV_TOOLS is "true"
});

export default workerOf(harnessApp, chaosConsumer(consumeOrderEvents)); // no fault unless CHAOS
