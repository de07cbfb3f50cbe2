/**
 * The Worker-only side of durable-objects/ for src/: the object classes the Worker entries export
 * (wrangler binds them by name), with the metric sample the totals object keeps, and the Redis
 * mirror client the stock displays read. They need the Workers runtime (`cloudflare:workers`, Text
 * modules), so they are kept out of ./stock-model.ts and ./support.ts, which Node loads too.
 */
export { MetricsTotals, type Sample } from "./metrics-totals";
export { MIRROR_READ_TIMEOUT_MS, mirrorFromEnv } from "./redis-mirror";
export { SkuStock } from "./sku-stock";
