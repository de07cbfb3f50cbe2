import { type AdminSku, admin } from "../../tools/worker";
import type { Bench } from "./context";

/**
 * Every reservation the bench made, checked afterwards through the admin view: per SKU, the stock
 * object must hold every reservation the bench saw acknowledged (none lost) and no more than those
 * plus the answers wrk did not wait for when it stopped (nothing invented or oversold), nothing sold, the counters must add up, and where
 * the scenario waited for the queue, D1 must have one `held` row per reservation.
 */
export async function verify(bench: Bench): Promise<void> {
  for (const check of bench.checks) {
    const view = await admin<AdminSku>(check.server, "GET", `/admin/skus/${check.sku}`);
    const s = view.stock;
    const wrong: string[] = [];
    if (s.total !== check.total) wrong.push(`total ${s.total} ≠ ${check.total}`);
    const unseen = check.unseen ?? 0;
    if (s.held < check.held || s.held > check.held + unseen)
      wrong.push(`held ${s.held}, acknowledged ${check.held} (+ at most ${unseen} answers wrk did not wait for)`);
    if (s.sold !== 0) wrong.push(`sold ${s.sold}`);
    if (s.available < 0 || s.available + s.held + s.sold !== s.total) wrong.push(`counters ${JSON.stringify(s)}`);
    if (check.orders && view.orders.held !== s.held) wrong.push(`D1 held rows ${view.orders.held} ≠ ${s.held} holds`);
    if (wrong.length > 0) bench.problems.push(`check ${check.sku} (${check.server.label}): ${wrong.join("; ")}`);
  }
}
