import type { Sample } from "../../durable-objects/metrics/metrics-totals";
import { CoalescedRunner } from "../../durable-objects/shared/coalesced-runner";
import { log } from "../../durable-objects/shared/log";

/**
 * Counters and histograms of the Worker, in the Prometheus text format.
 *
 * An isolate only adds to its own pending deltas (a map update, no I/O). At most once per
 * `METRICS_FLUSH_INTERVAL_MS` (a second) it sends them, in the background, to the one
 * `MetricsTotals` object, which keeps the totals of every isolate, so a scrape sees one coherent
 * set of counters whichever isolate serves it. An isolate evicted before its flush loses at most
 * that second.
 */

type MetricType = "counter" | "gauge" | "histogram";

/** Every metric `/metrics` exposes, with its help text; the order is the order of the output. */
const METRICS = {
  flashgate_reservations_total: {
    type: "counter",
    help: "Answers to POST /api/skus/:sku/reservations by result: held, replayed, or the error code in lower case. sku is empty for answers about no known SKU.",
  },
  flashgate_sold_out_cache_hits_total: {
    type: "counter",
    help: "SOLD_OUT answers the edge gave from its isolate-local cache, without calling a stock object.",
  },
  flashgate_challenges_total: {
    type: "counter",
    help: "Bot challenges checked at POST /api/skus/:sku/tokens, by kind (turnstile, pow) and result: passed, failed, missing (no answer sent), unavailable (siteverify gave no verdict).",
  },
  flashgate_stock: {
    type: "gauge",
    help: "Units of a SKU by state (total, available, held, sold), summed over its shards; per variant (label variant) for a SKU with sizes.",
  },
  flashgate_waitlist: { type: "gauge", help: "Buyers waiting for released units of a SKU." },
  flashgate_orders: { type: "gauge", help: "Order rows in D1 by SKU and status." },
  flashgate_queue_events_total: {
    type: "counter",
    help: "Deliveries of order-events messages by what the consumer did: applied, duplicate (changed nothing), retried, invalid; dead_lettered (stored from the DLQ), replayed (by an operator).",
  },
  flashgate_dead_letters: { type: "gauge", help: "Dead letters stored in D1 and not replayed yet." },
  flashgate_reconcile_differences_total: {
    type: "counter",
    help: "Differences reconciliation found (and repaired), by kind.",
  },
  flashgate_payments_total: {
    type: "counter",
    help: "Payment webhook events by outcome: applied, refund_required (money kept by the provider, nothing bought: refund it), ignored (a Stripe event naming no known reservation).",
  },
  flashgate_webhook_deliveries_total: {
    type: "counter",
    help: "Webhook delivery attempts, one per event sent (alone or in a batch), by result: delivered (answered 2xx), retried (not delivered, due again later), failed (not delivered and no attempt left; the delivery log keeps it for a manual retry).",
  },
  flashgate_webhook_messages_total: {
    type: "counter",
    help: "Webhook messages POSTed, by kind (single: one event; batch: up to an endpoint's maxEvents) and result: delivered, retried, failed, as for the events they carry.",
  },
  flashgate_webhook_lag_seconds: {
    type: "gauge",
    help: "Age of each webhook endpoint's oldest pending delivery, in seconds (0: nothing pending).",
  },
  flashgate_reconcile_last_run_timestamp_seconds: { type: "gauge", help: "When the last reconciliation run finished." },
  flashgate_http_responses_total: { type: "counter", help: "HTTP responses by route and status." },
  flashgate_mirror_lag_changes: {
    type: "gauge",
    help: "Redis mirror only: how many changes of a SKU its mirror snapshot is behind the stock object (0: in step).",
  },
  flashgate_mirror_unreadable: {
    type: "gauge",
    help: "Redis mirror only: SKUs whose mirror snapshot could not be read this scrape (missing, or Redis not answering in time).",
  },
  flashgate_scrape_errors: {
    type: "gauge",
    help: "SKUs whose stock objects did not answer this scrape (their stock and waitlist are missing from it).",
  },
  flashgate_request_duration_seconds: {
    type: "histogram",
    help: "Time from request to response by route (wall time across I/O: the Workers clock moves only on I/O).",
  },
} as const satisfies Record<string, { type: MetricType; help: string }>;

type MetricName = keyof typeof METRICS;

/** Upper bounds of the request duration buckets, in seconds. */
const DURATION_BUCKETS = [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10] as const;

/** `{a="x",b="y"}` with the format's escaping, or "" without labels. */
export function renderLabels(labels: Record<string, string | number>): string {
  const parts = Object.entries(labels).map(
    ([key, value]) => `${key}="${String(value).replace(/\\/g, "\\\\").replace(/"/g, '\\"').replace(/\n/g, "\\n")}"`,
  );
  return parts.length === 0 ? "" : `{${parts.join(",")}}`;
}

/**
 * This isolate's deltas not sent yet. Counting is on every request's path, so it costs one map
 * lookup by a key made of the label values; label names are escaped and rendered only when a
 * batch is taken for sending (once a second), not per request.
 */
interface Counter {
  name: string;
  labels: Record<string, string | number>;
  value: number;
}
interface Histogram {
  labels: Record<string, string>;
  /** Observations per bucket (not cumulative): index i counts `DURATION_BUCKETS[i-1] < s <= DURATION_BUCKETS[i]`; the last is +Inf. */
  buckets: number[];
  sum: number;
  count: number;
}
const counters = new Map<string, Counter>();
const histograms = new Map<string, Histogram>();
/** A batch taken from the pending deltas whose send has not been confirmed; sent again, under the same id. */
let unsent: { id: string; samples: Sample[] } | null = null;
let lastFlushAt = 0;

function seriesKey(name: string, labels: Record<string, string | number>): string {
  let key = name;
  for (const label in labels) key += `\u0001${labels[label]}`;
  return key;
}

export function increment(metric: MetricName, labels: Record<string, string | number> = {}, by = 1): void {
  const key = seriesKey(metric, labels);
  const counter = counters.get(key);
  if (counter) counter.value += by;
  else counters.set(key, { name: metric, labels, value: by });
}

function newHistogram(key: string, labels: Record<string, string>): Histogram {
  const histogram = { labels, buckets: new Array(DURATION_BUCKETS.length + 1).fill(0), sum: 0, count: 0 };
  histograms.set(key, histogram);
  return histogram;
}

/** Adds one observation of `seconds` to a histogram. */
function observe(histogram: Histogram, seconds: number): void {
  let i = 0;
  while (i < DURATION_BUCKETS.length && seconds > (DURATION_BUCKETS[i] as number)) i++;
  histogram.buckets[i] = (histogram.buckets[i] ?? 0) + 1;
  histogram.sum += seconds;
  histogram.count++;
}

const RESPONSES = "flashgate_http_responses_total";

/**
 * Counts one answer in `flashgate_http_responses_total{route,method,status}` and its duration in
 * `flashgate_request_duration_seconds{route,method}`. Every request comes through here: the keys
 * are made of the values themselves, and label objects only for a new series.
 */
export function countResponse(route: string, method: string, status: number, seconds: number): void {
  const labelled = `\u0001${route}\u0001${method}`;
  const key = `${RESPONSES}${labelled}\u0001${status}`;
  const counter = counters.get(key);
  if (counter) counter.value += 1;
  else counters.set(key, { name: RESPONSES, labels: { route, method, status }, value: 1 });
  observe(histograms.get(labelled) ?? newHistogram(labelled, { route, method }), seconds);
}

function hasPending(): boolean {
  return counters.size > 0 || histograms.size > 0;
}

/** Takes the pending deltas as samples (the histogram's buckets cumulative, as the format wants). */
function takePending(): Sample[] {
  const samples: Sample[] = [];
  for (const c of counters.values()) samples.push({ name: c.name, labels: renderLabels(c.labels), value: c.value });
  const name = "flashgate_request_duration_seconds";
  for (const h of histograms.values()) {
    let cumulative = 0;
    // Every bucket gets a sample (0 included), so each series has the full set of buckets from the start.
    DURATION_BUCKETS.forEach((le, i) => {
      cumulative += h.buckets[i] ?? 0;
      samples.push({ name: `${name}_bucket`, labels: renderLabels({ ...h.labels, le }), value: cumulative });
    });
    samples.push({ name: `${name}_bucket`, labels: renderLabels({ ...h.labels, le: "+Inf" }), value: h.count });
    samples.push({ name: `${name}_sum`, labels: renderLabels(h.labels), value: h.sum });
    samples.push({ name: `${name}_count`, labels: renderLabels(h.labels), value: h.count });
  }
  counters.clear();
  histograms.clear();
  return samples;
}

/**
 * Sends this isolate's deltas to the MetricsTotals object. A batch is sent under an id the object
 * remembers, and kept until the object confirmed it: a send that failed after the object applied
 * it is applied once when it is sent again. A batch still unconfirmed (another flush may have it in
 * flight) goes first, then whatever was counted since, so a scrape always carries this isolate's
 * latest counts.
 */
export async function flushMetrics(env: Env): Promise<void> {
  for (let round = 0; round < 2; round++) {
    if (!unsent) {
      if (!hasPending()) return;
      unsent = { id: crypto.randomUUID(), samples: takePending() };
    }
    const batch = unsent;
    lastFlushAt = Date.now();
    try {
      await env.METRICS_TOTALS.getByName("global").add(batch.id, batch.samples);
      if (unsent === batch) unsent = null;
    } catch (err) {
      log("warn", "metrics flush failed", { series: batch.samples.length, error: String(err) });
      return;
    }
  }
}

/** The environment the background flush sends with (the METRICS_TOTALS binding is the same for every request). */
let flushEnv: Env | null = null;
/** The background flush: one at a time, and one more after it when counts came in meanwhile. */
const background = new CoalescedRunner(async () => {
  const env = flushEnv;
  if (!env || (!hasPending() && !unsent)) return;
  const wait = Math.max(0, lastFlushAt + Number(env.METRICS_FLUSH_INTERVAL_MS) - Date.now());
  await new Promise((resolve) => setTimeout(resolve, wait));
  await flushMetrics(env);
});

/**
 * Schedules a background flush that sends what this isolate counted, at most once per
 * `METRICS_FLUSH_INTERVAL_MS`: counts reach the MetricsTotals object within about that long even if no
 * other request comes. `0` turns the background flush off (a scrape still flushes the isolate that
 * serves it): for tests, which run in one isolate.
 */
export function flushMetricsSoon(env: Env, waitUntil: (promise: Promise<unknown>) => void): void {
  if (!(Number(env.METRICS_FLUSH_INTERVAL_MS) > 0) || (!hasPending() && !unsent)) return;
  flushEnv = env;
  // Only the request that starts or books a run waits for it: handing the same flush to every request's
  // waitUntil kept each request open until the next flush, up to a second, and cost every request CPU.
  if (background.booked) return;
  waitUntil(background.run());
}

/** The exposition: `# HELP`, `# TYPE`, then the samples of each metric, in {@link METRICS} order. */
export function renderMetrics(samples: readonly Sample[]): string {
  const byMetric = new Map<string, Sample[]>();
  for (const sample of samples) {
    const base = sample.name.replace(/_(bucket|sum|count)$/, "");
    const family = base in METRICS ? base : sample.name;
    const list = byMetric.get(family);
    if (list) list.push(sample);
    else byMetric.set(family, [sample]);
  }
  const lines: string[] = [];
  for (const [name, { type, help }] of Object.entries(METRICS)) {
    lines.push(`# HELP ${name} ${help}`, `# TYPE ${name} ${type}`);
    const family = byMetric.get(name) ?? [];
    if (type === "histogram") family.sort(histogramOrder);
    for (const s of family) lines.push(`${s.name}${s.labels} ${s.value}`);
  }
  return `${lines.join("\n")}\n`;
}

const LE = /,?le="([^"]*)"/;
const SUFFIX_ORDER: Record<string, number> = { bucket: 0, sum: 1, count: 2 };

/** A histogram's series together, buckets by increasing `le` (then `_sum`, `_count`), as parsers expect. */
function histogramOrder(a: Sample, b: Sample): number {
  const key = (s: Sample) => {
    const le = LE.exec(s.labels)?.[1];
    return {
      series: s.labels.replace(LE, "").replace("{,", "{"),
      suffix: SUFFIX_ORDER[s.name.slice(s.name.lastIndexOf("_") + 1)] ?? 3,
      le: le === undefined ? 0 : le === "+Inf" ? Number.POSITIVE_INFINITY : Number(le),
    };
  };
  const x = key(a);
  const y = key(b);
  return x.series.localeCompare(y.series) || x.suffix - y.suffix || x.le - y.le;
}
