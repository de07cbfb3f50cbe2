import { describe, expect, it } from "vitest";
import type { Sample } from "../durable-objects/metrics/metrics-totals";
import { flushMetrics, increment } from "../src/observability/metrics";

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
