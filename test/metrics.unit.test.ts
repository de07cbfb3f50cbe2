import { describe, expect, it } from "vitest";
import type { Sample } from "../durable-objects/metrics/metrics-totals";
import { countResponse, flushMetrics, increment } from "../src/observability/metrics";

/** An Env whose MetricsTotals object records what it is sent, and holds its first answer until released. */
function slowMetricsTotals() {
  const received: { id: string; samples: Sample[] }[] = [];
  let release = () => {};
  const firstAnswer = new Promise<void>((resolve) => {
    release = resolve;
  });
  const env = {
    METRICS_TOTALS: {
      getByName: () => ({
        add: async (id: string, samples: Sample[]) => {
          received.push({ id, samples: structuredClone(samples) });
          if (received.length === 1) await firstAnswer;
        },
      }),
    },
  } as unknown as Env;
  return { env, received, release };
}

const label = (sku: string) => `{sku="${sku}"}`;
const sent = (received: { samples: Sample[] }[], sku: string) =>
  received.flatMap((b) => b.samples).filter((s) => s.labels === label(sku));

describe("flushMetrics", () => {
  it("sends what was counted while another flush was in flight, not only that flush's batch", async () => {
    const { env, received, release } = slowMetricsTotals();
    increment("flashgate_sold_out_cache_hits_total", { sku: "early" });
    const first = flushMetrics(env); // in flight: its answer is held back
    increment("flashgate_sold_out_cache_hits_total", { sku: "late" });
    const second = flushMetrics(env); // a scrape: must carry "late" too
    release();
    await Promise.all([first, second]);

    // The in-flight batch may go twice under one id (the MetricsTotals object applies it once) ...
    const earlyIds = new Set(received.filter((b) => sent([b], "early").length > 0).map((b) => b.id));
    expect(earlyIds.size).toBe(1);
    // ... and what was counted meanwhile goes too.
    expect(sent(received, "late").map((s) => s.value)).toContain(1);
  });

  it("keeps a batch whose send failed and sends it again under the same id", async () => {
    const received: string[] = [];
    let fail = true;
    const env = {
      METRICS_TOTALS: {
        getByName: () => ({
          add: async (id: string) => {
            received.push(id);
            if (fail) throw new Error("object unreachable");
          },
        }),
      },
    } as unknown as Env;
    increment("flashgate_sold_out_cache_hits_total", { sku: "retry" });
    await flushMetrics(env);
    fail = false;
    await flushMetrics(env);
    expect(received).toHaveLength(2);
    expect(received[1]).toBe(received[0]);
  });
});

describe("countResponse", () => {
  it("sends each answer's count by route, method and status, and its duration histogram by route and method", async () => {
    const { env, received, release } = slowMetricsTotals();
    release();
    countResponse("/api/skus/:sku", "GET", 200, 0.003);
    countResponse("/api/skus/:sku", "GET", 200, 0.02);
    countResponse("/api/skus/:sku", "GET", 404, 2);
    await flushMetrics(env);
    const samples = received.flatMap((b) => b.samples);
    const of = (name: string) => samples.filter((s) => s.name === name).map((s) => `${s.labels} ${s.value}`);
    expect(of("flashgate_http_responses_total")).toEqual([
      '{route="/api/skus/:sku",method="GET",status="200"} 2',
      '{route="/api/skus/:sku",method="GET",status="404"} 1',
    ]);
    const series = '{route="/api/skus/:sku",method="GET"}';
    expect(of("flashgate_request_duration_seconds_count")).toEqual([`${series} 3`]);
    expect(of("flashgate_request_duration_seconds_sum")).toEqual([`${series} 2.023`]);
    const buckets = of("flashgate_request_duration_seconds_bucket");
    expect(buckets).toHaveLength(14);
    expect(buckets).toEqual(
      expect.arrayContaining([
        '{route="/api/skus/:sku",method="GET",le="0.0025"} 0',
        '{route="/api/skus/:sku",method="GET",le="0.005"} 1',
        '{route="/api/skus/:sku",method="GET",le="0.025"} 2',
        '{route="/api/skus/:sku",method="GET",le="2.5"} 3',
        '{route="/api/skus/:sku",method="GET",le="+Inf"} 3',
      ]),
    );
  });
});
