import type { Bench } from "../lib/context";
import { engineRun } from "../lib/engine-route";
import { log, mean } from "../lib/log";
import { createSku } from "../lib/worker";
import { hotSku } from "./hot-sku";

/**
 * 7. Sharding: the hot-SKU load (group commit on, concurrency 200) on 1, 4 and 16 shards; then the
 * mean service time of one stock-object RPC (one reservation, sent one after another from inside
 * workerd), from which the modelled capacity per SKU on Cloudflare is printed: a model, not a
 * measurement (each shard is one single-threaded object; N shards ≈ N × 1000 / t_rpc).
 */
export async function sharding(bench: Bench) {
  const rps: Record<number, number> = {};
  for (const shards of [1, 4, 16]) {
    const r = await hotSku(bench, {
      server: bench.on,
      key: `sharded_${shards}`,
      scenario: "7 sharding",
      setting: `${shards} shard${shards > 1 ? "s" : ""}, GC on c200`,
      connections: 200,
      amount: bench.sizes.sharded,
      shards,
    });
    rps[shards] = r.rps;
  }
  const n = bench.sizes.serviceRpcs;
  const run = `st${Date.now().toString(36)}`;
  const sku = `svc-${run}`;
  await createSku(bench.on, sku, n * 4);
  log(`7. service time: ${n} single-reservation RPCs one after another (in workerd)`);
  const seq = await engineRun(bench.on, { sku, count: n, batch: 1, concurrency: 1, run });
  if (seq.ok !== n) bench.problems.push(`service time run: ${seq.ok}/${n} ok ${JSON.stringify(seq.rejected)}`);
  bench.checks.push({ server: bench.on, sku, total: n * 4, held: seq.ok });
  const tRpc = mean(seq.rpcMs);
  const model = Object.fromEntries([1, 4, 16].map((s) => [s, (s * 1000) / tRpc]));
  bench.figures.sharding = { rps, serviceTimeMs: tRpc, rpcs: n, modelledCapacityPerSku: model };
  bench.rows.push({
    scenario: "7 sharding",
    setting: "mean service time per stock RPC",
    figure: `${tRpc.toFixed(2)} ms/RPC`,
  });
  bench.rows.push({
    scenario: "7 sharding",
    setting: "MODEL, not measured: N×1000/t_rpc",
    figure: `1: ${model[1]?.toFixed(0)}/s, 4: ${model[4]?.toFixed(0)}/s, 16: ${model[16]?.toFixed(0)}/s per SKU`,
  });
  return { rps, tRpc, model };
}
