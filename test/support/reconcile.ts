import { env } from "cloudflare:workers";
import { type Difference, type RunReport, reconcile } from "../../src/reconcile/reconcile";

/**
 * Runs reconciliation now (the tests' RECONCILE_GRACE_MS is 0: they wait for the queue themselves).
 * With `sku`, of that SKU alone: a test's run then costs the same whatever else its runtime holds.
 */
export async function reconcileNow(opts: { full?: boolean; sku?: string } = {}): Promise<RunReport> {
  return reconcile(env, { trigger: "admin", ...opts });
}

/** The differences a run found for the given SKUs (other test files' SKUs share the catalog). */
export function differencesOf(report: RunReport, ...skus: string[]): Difference[] {
  return report.differences.filter((d) => skus.includes(d.sku));
}

export async function ordersOf(sku: string) {
  const { results } = await env.DB.prepare(
    "SELECT reservation_id, status FROM orders WHERE sku = ? ORDER BY reservation_id",
  )
    .bind(sku)
    .all<{ reservation_id: string; status: string }>();
  return results;
}
