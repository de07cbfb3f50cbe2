import { BaseSequencer, type TestSpecification } from "vitest/node";

/**
 * The suite's long files, longest first (seconds of wall in a quiet `npm test`), whatever their tier:
 * started first, two at a time, so the short ones fill in at the end. A browser file mostly waits
 * for its pages and a workerd file mostly computes, so the two tiers interleave and keep both cores
 * busy. (vitest's own order runs the projects one after another, and needs a cache of past runs,
 * which a fresh clone lacks.)
 */
const LONG_FIRST = [
  "test/browser.e2e.test.ts", // 73
  "test/storefront-line.e2e.test.ts", // 65
  "test/dashboard-handoff.e2e.test.ts", // 36
  "test/console.e2e.test.ts", // 33
  "test/endpoint-isolation.integration.test.ts", // 32
  "test/dev-first-screen.e2e.test.ts", // 26
  "test/verify-sale.e2e.test.ts", // 26
  "test/deploy.e2e.test.ts", // 22
  "test/receipts.e2e.test.ts", // 22
  "test/webhook-batches.integration.test.ts", // 21
  "test/sale-day.e2e.test.ts", // 20
  "test/waitlist-line.integration.test.ts", // 19
  "test/reservations.integration.test.ts", // 16
  "test/sim.unit.test.ts", // 16
  "test/embed.e2e.test.ts", // 16
  "test/sizes.e2e.test.ts", // 16
  "test/reconcile.integration.test.ts", // 15
  "test/sim-101-200.unit.test.ts", // 15
  "test/early-access.integration.test.ts", // 15
  "test/order-handoff.integration.test.ts", // 14
  "test/payments.integration.test.ts", // 14
  "test/variants.integration.test.ts", // 12
  "test/fair-opening.integration.test.ts", // 12
  "test/opening-draw.unit.test.ts", // 7
  "test/opening-draw-21-40.unit.test.ts", // 6
  "test/stock-engine.unit.test.ts", // 3
  "test/stock-engine-restarts.unit.test.ts", // 2
];

export class LongFirst extends BaseSequencer {
  override async sort(files: TestSpecification[]): Promise<TestSpecification[]> {
    const rank = (file: TestSpecification) => {
      const i = LONG_FIRST.findIndex((name) => file.moduleId.endsWith(name));
      return i < 0 ? LONG_FIRST.length : i;
    };
    return (await super.sort(files)).sort((a, b) => rank(a) - rank(b));
  }
}
