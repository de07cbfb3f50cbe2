import type { Bench } from "../lib/context";
import { summary } from "../lib/context";
import { runLoad, unexpected } from "../lib/load";
import { log } from "../lib/log";
import { mintShoppers } from "../lib/shoppers";
import { createSku } from "../lib/worker";

/** 3. Sold-out storm: the hot-SKU load against a SKU with no stock; 409 SOLD_OUT is the expected answer. */
export async function soldOut(bench: Bench, connections: number) {
  const run = `so${Date.now().toString(36)}c${connections}`;
  const sku = `gone-${run}`;
  await createSku(bench.on, sku, 0);
  const shoppers = await mintShoppers(run, sku, 1, bench.sizes.soldOut);
  log(`3. sold-out storm: ${bench.sizes.soldOut} reservations at concurrency ${connections} on ${sku} (0 units)`);
  const r = await runLoad({
    label: `sold-out c${connections}`,
    url: bench.on.url,
    path: `/api/skus/${sku}/reservations`,
    method: "POST",
    connections,
    amount: bench.sizes.soldOut,
    shoppers,
  });
  const bad = unexpected(r, [409]);
  const otherCodes = Object.keys(r.codes).filter((c) => c !== "SOLD_OUT");
  if (bad || otherCodes.length > 0) bench.problems.push(`sold-out c${connections}: ${bad} ${JSON.stringify(r.codes)}`);
  bench.checks.push({ server: bench.on, sku, total: 0, held: 0 });
  bench.rows.push({
    scenario: "3 sold-out storm",
    setting: `GC on c${connections}`,
    figure: `${r.rps.toFixed(0)} answers/s`,
    p50: r.p50Ms,
    p99: r.p99Ms,
    errors: r.responses - (r.codes.SOLD_OUT ?? 0) + r.transportErrors,
  });
  bench.figures[`sold_out_c${connections}`] = { sku, ...summary(r) };
  return r;
}
