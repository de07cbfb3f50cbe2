import type { Bench } from "../lib/context";
import { summary } from "../lib/context";
import { runLoad, unexpected } from "../lib/load";
import { log } from "../lib/log";

/** 1. Ceiling: GET /healthz on the same Worker (same workerd, same path through it). */
export async function ceiling(bench: Bench, connections: number) {
  log(`1. ceiling: GET /healthz, ${bench.sizes.ceiling} requests at concurrency ${connections}`);
  const r = await runLoad({
    label: `healthz c${connections}`,
    url: bench.on.url,
    path: "/healthz",
    method: "GET",
    connections,
    amount: bench.sizes.ceiling,
  });
  const bad = unexpected(r, [200]);
  if (bad) bench.problems.push(`ceiling c${connections}: ${bad}`);
  bench.rows.push({
    scenario: "1 ceiling",
    setting: `GET /healthz c${connections}`,
    figure: `${r.rps.toFixed(0)} req/s`,
    p50: r.p50Ms,
    p99: r.p99Ms,
    errors: r.responses - (r.statuses["200"] ?? 0) + r.transportErrors,
  });
  bench.figures[`ceiling_c${connections}`] = summary(r);
  return r;
}
