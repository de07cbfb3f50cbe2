import { availableParallelism } from "node:os";
import { BaseSequencer, type TestSpecification } from "vitest/node";

/**
 * Files at once, in every project (vitest requires one figure of projects that run together): a core
 * each, and one more, because the browser and `wrangler dev` files mostly wait for their pages and
 * servers (a whole `npm test` kept 2 cores 46% busy with one file per core).
 */
export const FILES_AT_ONCE = availableParallelism() + 1;

/**
 * The suite's long files, longest first (seconds of its tests in a quiet `npm test` on a 2-core
 * machine, a workerd file's in its tier's run), whatever their tier: started first, so the short ones
 * fill in at the end. A browser file mostly waits for its pages and a workerd file mostly computes,
 * so the tiers interleave and keep the cores busy. (vitest's own order runs the projects one after
 * another, and needs a cache of past runs, which a fresh clone lacks.)
 */
const LONG_FIRST = [
  "test/order-handoff.integration.test.ts", // 101
  "test/browser.e2e.test.ts", // 67
  "test/storefront-line.e2e.test.ts", // 58
  "test/dashboard-handoff.e2e.test.ts", // 47
  "test/fair-opening.integration.test.ts", // 42
  "test/verify-sale.e2e.test.ts", // 32
  "test/receipts.e2e.test.ts", // 31
  "test/console.e2e.test.ts", // 30
  "test/dev-first-screen.e2e.test.ts", // 26
  "test/sharding.integration.test.ts", // 23
  "test/payments.integration.test.ts", // 23
  "test/sale-day.e2e.test.ts", // 17
  "test/watchdog.e2e.test.ts", // 15
  "test/reservations.integration.test.ts", // 16
  "test/contract-lines.integration.test.ts", // 13
  "test/sim-101-200.unit.test.ts", // 13
  "test/sizes.e2e.test.ts", // 12
  "test/sku-archive.integration.test.ts", // 11
  "test/sim.unit.test.ts", // 11
  "test/embed.e2e.test.ts", // 11
  "test/deploy.e2e.test.ts", // 11
  "test/mirror-sync.integration.test.ts", // 7
  "test/dev-server.e2e.test.ts", // 6
  "test/smoke.e2e.test.ts", // 5
  "test/variants.unit.test.ts", // 5
  "test/lua-parity.e2e.test.ts", // 4
  "test/stock-engine.unit.test.ts", // 3
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
