import { createExecutionContext, createMessageBatch, waitOnExecutionContext } from "cloudflare:test";
import { env } from "cloudflare:workers";
import { afterEach, describe, expect, it, vi } from "vitest";
import { senderOf } from "../../src/handoff/endpoint-sender";
import worker from "../../src/index";
import { Scrape } from "../../tools/prometheus";
import { call, createSku, reserve, stockOf, tokenFor, uniqueSku } from "../support/client";
import { eventually } from "../support/eventually";
import { endpoint, forgetEndpoints, logOf } from "../support/handoff";
import { pay } from "../support/payments";
import { reconcileNow } from "../support/reconcile";

const RESERVATIONS = "/api/skus/:sku/reservations";

async function scrape(): Promise<Scrape> {
  const answer = await call("GET", "/metrics", { admin: true });
  if (answer.status !== 200) throw new Error(`/metrics answered ${answer.status}`);
  return new Scrape((answer.json as { text: string }).text);
}

/**
 * The value of a series that must be there: `Scrape.value` reads a missing series as 0, which
 * cannot tell "no such series" from "zero".
 */
function present(scrape: Scrape, name: string, labels: Record<string, string> = {}): number {
  expect(scrape.find(name, labels).length, `${name} ${JSON.stringify(labels)} is exposed`).toBeGreaterThan(0);
  return scrape.value(name, labels);
}

/** No counter sample of `after` is below its value in `before` (counters never go back). */
function expectMonotonic(before: Scrape, after: Scrape): void {
  const counters = new Set(
    before.families.filter((f) => f.type === "COUNTER" || f.type === "HISTOGRAM").map((f) => f.name),
  );
  for (const sample of before.samples) {
    if (!counters.has(sample.name.replace(/_(bucket|sum|count)$/, "")) && !counters.has(sample.name)) continue;
    const now = after.samples.find(
      (s) => s.name === sample.name && JSON.stringify(s.labels) === JSON.stringify(sample.labels),
    );
    expect(now?.value, `${sample.name} ${JSON.stringify(sample.labels)}`).toBeGreaterThanOrEqual(sample.value);
  }
}

describe("GET /metrics", () => {
  afterEach(() => {
    vi.restoreAllMocks();
  });

  it("needs the admin token and answers Prometheus text with every metric of the contract", async () => {
    expect((await call("GET", "/metrics")).status).toBe(401);
    expect((await call("GET", "/metrics", { user: "alice" })).status).toBe(401);
    const answer = await call("GET", "/metrics", { admin: true });
    expect(answer.status).toBe(200);
    expect(answer.headers.get("content-type")).toContain("text/plain; version=0.0.4");
    const parsed = await scrape();
    const types = Object.fromEntries(parsed.families.map((f) => [f.name, f.type]));
    expect(types).toMatchObject({
      flashgate_reservations_total: "COUNTER",
      flashgate_stock: "GAUGE",
      flashgate_orders: "GAUGE",
      flashgate_queue_events_total: "COUNTER",
      flashgate_dead_letters: "GAUGE",
      flashgate_reconcile_differences_total: "COUNTER",
      flashgate_request_duration_seconds: "HISTOGRAM",
      flashgate_payments_total: "COUNTER",
    });
  });

  it("moves with a sale: reservations by result, stock, orders, queue events, request durations", async () => {
    const sku = uniqueSku("metrics");
    await createSku(sku, { totalStock: 3, perUserLimit: 1 });
    const users = ["m1", "m2", "m3", "m4"];
    const tokens = await Promise.all(users.map((u) => tokenFor(u, sku)));
    const before = await scrape();

    const held = await Promise.all(users.slice(0, 3).map((u, i) => reserve(u, sku, 1, tokens[i])));
    expect(held.map((a) => a.status)).toEqual([202, 202, 202]);
    expect((await reserve("m1", sku, 1, tokens[0])).headers.get("Idempotent-Replayed")).toBe("true");
    expect((await reserve("m4", sku, 1, tokens[3])).json.error.code).toBe("SOLD_OUT"); // from the edge cache
    // A forged token is refused as such where the SKU is not known sold out (on this one, sold out
    // comes first: API.md v1.2).
    expect((await reserve("m4", uniqueSku("metrics-open"), 1, "forged")).json.error.code).toBe("TOKEN_INVALID");
    expect((await pay(held[0]?.json.reservationId)).json.reservationStatus).toBe("paid");
    const cancelled = await call("POST", `/api/reservations/${held[1]?.json.reservationId}/cancel`, { user: "m2" });
    expect(cancelled.status).toBe(200);

    // The queue consumer persists 5 events (3 holds, a payment, a cancel) and counts each once it is
    // written: wait for the rows and the counts, not a time.
    const after = await eventually(async () => {
      const now = await scrape();
      expect(present(now, "flashgate_orders", { sku, status: "paid" })).toBe(1);
      expect(present(now, "flashgate_orders", { sku, status: "cancelled" })).toBe(1);
      expect(present(now, "flashgate_orders", { sku, status: "held" })).toBe(1);
      const applied = (s: Scrape) => s.value("flashgate_queue_events_total", { result: "applied" });
      expect(applied(now) - applied(before)).toBeGreaterThanOrEqual(5);
      return now;
    });
    expectMonotonic(before, after);
    const delta = (name: string, labels: Record<string, string>) =>
      after.value(name, labels) - before.value(name, labels);
    expect(delta("flashgate_reservations_total", { sku, result: "held" })).toBe(3);
    expect(delta("flashgate_reservations_total", { sku, result: "replayed" })).toBe(1);
    expect(delta("flashgate_reservations_total", { sku, result: "sold_out" })).toBe(1);
    expect(delta("flashgate_sold_out_cache_hits_total", { sku })).toBe(1);
    expect(delta("flashgate_reservations_total", { sku: "", result: "token_invalid" })).toBeGreaterThanOrEqual(1);
    // The payment is counted once, as applied.
    expect(present(after, "flashgate_payments_total", { outcome: "applied" })).toBe(
      before.value("flashgate_payments_total", { outcome: "applied" }) + 1,
    );

    const stock = await stockOf(sku);
    expect(stock).toEqual({ total: 3, available: 1, held: 1, sold: 1 });
    for (const [state, value] of Object.entries(stock))
      expect(present(after, "flashgate_stock", { sku, state })).toBe(value);
    expect(present(after, "flashgate_waitlist", { sku })).toBe(0);

    const series = { route: RESERVATIONS, method: "POST" };
    const hist = after.histogram("flashgate_request_duration_seconds", series);
    const histBefore = before.histogram("flashgate_request_duration_seconds", series);
    expect(hist.count - histBefore.count).toBeGreaterThanOrEqual(6);
    const counts = hist.buckets.map(([, n]) => n);
    expect(counts).toEqual([...counts].sort((a, b) => a - b)); // cumulative
    expect(hist.buckets.at(-1)).toEqual([Number.POSITIVE_INFINITY, hist.count]);
    expect(hist.sum).toBeGreaterThanOrEqual(0);
    expect(
      after.value("flashgate_http_responses_total", { route: RESERVATIONS, status: "202" }) -
        before.value("flashgate_http_responses_total", { route: RESERVATIONS, status: "202" }),
    ).toBeGreaterThanOrEqual(4);
  });

  it("counts dead letters and reconciliation differences", async () => {
    const sku = uniqueSku("metrics-drift");
    await createSku(sku, { totalStock: 5, perUserLimit: 1 });
    const id = (await reserve("d1", sku)).json.reservationId as string;
    await eventually(async () => {
      const row = await env.DB.prepare("SELECT 1 FROM orders WHERE reservation_id = ?").bind(id).first();
      expect(row).not.toBeNull();
    });
    const before = await scrape();

    // A dead letter arrives through the Worker's queue handler (as the DLQ delivers it).
    const letter = { id: crypto.randomUUID(), timestamp: new Date(), attempts: 6, body: { id: "poison" } };
    const ctx = createExecutionContext();
    await worker.queue(createMessageBatch("order-events-dlq", [letter]), env, ctx);
    await waitOnExecutionContext(ctx);
    // Drift: the order row disappears from D1; reconciliation re-emits it.
    await env.DB.prepare("DELETE FROM orders WHERE reservation_id = ?").bind(id).run();
    // The trigger-kept order count follows the deletion (read before the repair, which the queue
    // delivers at once)…
    expect(present(await scrape(), "flashgate_orders", { sku, status: "held" })).toBe(0);
    await reconcileNow({ sku });

    const after = await scrape();
    expect(after.value("flashgate_dead_letters")).toBeGreaterThanOrEqual(1);
    expect(after.value("flashgate_queue_events_total", { result: "dead_lettered" })).toBe(
      before.value("flashgate_queue_events_total", { result: "dead_lettered" }) + 1,
    );
    expect(after.value("flashgate_reconcile_differences_total", { kind: "order_missing" })).toBeGreaterThanOrEqual(
      before.value("flashgate_reconcile_differences_total", { kind: "order_missing" }) + 1,
    );
    expect(after.value("flashgate_reconcile_last_run_timestamp_seconds")).toBeGreaterThan(Date.now() / 1000 - 60);
    // … and the re-emitted row back.
    await eventually(async () => expect((await scrape()).value("flashgate_orders", { sku, status: "held" })).toBe(1));
  });
});

describe("the webhook sender's counts", () => {
  afterEach(forgetEndpoints);

  it("reach the totals from the sender object's own run, without a request or scrape of the Worker", async () => {
    const delivered = async () =>
      (await env.METRICS_TOTALS.getByName("global").samples())
        .filter((s) => s.name === "flashgate_webhook_deliveries_total" && s.labels === '{result="delivered"}')
        .reduce((sum, s) => sum + s.value, 0);
    const hook = await endpoint();
    const before = await delivered();
    // A change written straight to D1 and the sender woken by its stub: no Worker handler runs, so
    // only the sender's run can send its counts.
    const sku = uniqueSku("senderflush");
    await env.DB.prepare(
      `INSERT INTO orders (reservation_id, sku, user_id, quantity, status, expires_at, created_at, updated_at, last_seq, amount, currency)
       VALUES (?1, ?2, 'f1', 1, 'held', NULL, ?3, ?3, 1, NULL, 'usd')`,
    )
      .bind(`${sku}.0.1`, sku, Date.now())
      .run();
    await senderOf(env, hook.id).wake(hook.id);
    await eventually(async () => expect((await logOf(hook.id)).events).toBe(1));
    await eventually(async () => expect(await delivered()).toBeGreaterThan(before), 5_000);
  });
});

describe("MetricsTotals object", () => {
  it("applies a batch of deltas once, however often it is sent", async () => {
    const stub = env.METRICS_TOTALS.getByName("global");
    const batch = [{ name: "flashgate_sold_out_cache_hits_total", labels: '{sku="totals-once"}', value: 3 }];
    const id = crypto.randomUUID();
    await stub.add(id, batch);
    await stub.add(id, batch); // the first answer was lost: the isolate sends the same batch again
    await stub.add(crypto.randomUUID(), batch);
    const mine = (await stub.samples()).filter((s) => s.labels === '{sku="totals-once"}');
    expect(mine.map((s) => s.value)).toEqual([6]);
  });
});

describe("structured logs", () => {
  it("write JSON lines that carry the request id from the edge to the stock object and the queue consumer", async () => {
    const lines: Record<string, unknown>[] = [];
    const capture = (...args: unknown[]) => {
      for (const arg of args) if (typeof arg === "string" && arg.startsWith("{")) lines.push(JSON.parse(arg));
    };
    for (const level of ["log", "warn", "error", "debug"] as const)
      vi.spyOn(console, level).mockImplementation(capture);
    try {
      const sku = uniqueSku("logs");
      await createSku(sku, { totalStock: 2 });
      const token = await tokenFor("logger", sku);
      const requestId = `req-${crypto.randomUUID()}`;
      const answer = await call("POST", `/api/skus/${sku}/reservations`, {
        user: "logger",
        body: { token, quantity: 1 },
        headers: { "X-Request-Id": requestId },
      });
      expect(answer.status).toBe(202);
      expect(answer.headers.get("X-Request-Id")).toBe(requestId);
      // The consumer writes one line per delivery, naming the request ids of the events it applied.
      const carries = (l: Record<string, unknown>) =>
        l.requestId === requestId || (Array.isArray(l.requestIds) && l.requestIds.includes(requestId));
      await eventually(() => expect(lines.some((l) => l.msg === "order events applied" && carries(l))).toBe(true));

      const mine = lines.filter(carries);
      expect(mine.map((l) => l.msg)).toEqual(expect.arrayContaining(["request", "order events applied"]));
      const request = mine.find((l) => l.msg === "request");
      expect(request).toMatchObject({
        level: "info",
        method: "POST",
        route: RESERVATIONS,
        status: 202,
        userId: "logger",
      });
      for (const line of lines)
        expect(line).toMatchObject({ time: expect.any(String), level: expect.any(String), msg: expect.any(String) });
      // A request without an id gets a fresh one, on its answer and on its lines.
      const other = await call("GET", "/healthz");
      const fresh = other.headers.get("X-Request-Id");
      expect(fresh).toMatch(/^[0-9a-f-]{36}$/);
      expect(lines.some((l) => l.msg === "request" && l.requestId === fresh)).toBe(true);
      // An id that could forge a log line is replaced, not echoed.
      const forged = await call("GET", "/healthz", { headers: { "X-Request-Id": 'x","level":"error' } });
      expect(forged.headers.get("X-Request-Id")).not.toContain('"');
    } finally {
      vi.restoreAllMocks();
    }
  });
});

describe("request lines", () => {
  it("are a sample of ordinary requests (REQUEST_LOG_SAMPLE_RATE), while /metrics still counts every response", async () => {
    const lines: Record<string, unknown>[] = [];
    vi.spyOn(console, "log").mockImplementation((...args: unknown[]) => {
      for (const arg of args) if (typeof arg === "string" && arg.startsWith("{")) lines.push(JSON.parse(arg));
    });
    try {
      const before = (await scrape()).value("flashgate_http_responses_total", {
        route: "/healthz",
        method: "GET",
        status: "200",
      });
      const quiet = { ...env, REQUEST_LOG_SAMPLE_RATE: "0" };
      for (let i = 0; i < 20; i++) {
        const ctx = createExecutionContext();
        const res = await worker.fetch(new Request("http://flashgate.test/healthz"), quiet, ctx);
        await waitOnExecutionContext(ctx);
        expect(res.status).toBe(200);
      }
      expect(lines.filter((l) => l.msg === "request" && l.route === "/healthz")).toEqual([]);
      const after = (await scrape()).value("flashgate_http_responses_total", {
        route: "/healthz",
        method: "GET",
        status: "200",
      });
      expect(after - before).toBeGreaterThanOrEqual(20);
    } finally {
      vi.restoreAllMocks();
    }
  });
});
