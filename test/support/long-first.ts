import { BaseSequencer, type TestSpecification } from "vitest/node";

/**
 * The suite's long files, longest first (seconds of wall in a quiet `npm test` on a slow 2-core machine,
 * a workerd file's in its tier's run), whatever their tier:
 * started first, two at a time, so the short ones fill in at the end. A browser file mostly waits
 * for its pages and a workerd file mostly computes, so the two tiers interleave and keep both cores
 * busy. (vitest's own order runs the projects one after another, and needs a cache of past runs,
 * which a fresh clone lacks.)
 */
const LONG_FIRST = [
  "test/order-handoff.integration.test.ts", // 99
  "test/browser.e2e.test.ts", // 81
  "test/storefront-line.e2e.test.ts", // 74
  "test/sku-archive.integration.test.ts", // 54
  "test/verify-sale.e2e.test.ts", // 48
  "test/sharding.integration.test.ts", // 47
  "test/dev-first-screen.e2e.test.ts", // 45
  "test/console.e2e.test.ts", // 41
  "test/dashboard-handoff.e2e.test.ts", // 40
  "test/receipts.e2e.test.ts", // 37
  "test/fair-opening.integration.test.ts", // 34
  "test/contract-lines.integration.test.ts", // 30
  "test/sizes.e2e.test.ts", // 25
  "test/embed.e2e.test.ts", // 24
  "test/sale-day.e2e.test.ts", // 22
  "test/reservations.integration.test.ts", // 21
  "test/sim-101-200.unit.test.ts", // 21
  "test/deploy.e2e.test.ts", // 19
  "test/sim.unit.test.ts", // 19
  "test/payments.integration.test.ts", // 14
  "test/opening-draw.unit.test.ts", // 3
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
