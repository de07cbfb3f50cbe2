import { readFileSync } from "node:fs";
import { fileURLToPath } from "node:url";
import { defineConfig } from "vitest/config";
import { FILES_AT_ONCE, LongFirst } from "./test/support/long-first";

/**
 * The simulator's stand-ins (tools/sim/, docs/SIMULATOR.md): workerd's `cloudflare:workers` for the
 * stock object's base class, its id source (`uuid` as sku-stock.ts imports it), and `*.lua` as text
 * (wrangler.toml's rule, for the mirror client it loads), as tools/sim/resolve-hooks.mjs does for `npm run sim`.
 */
const simModules = {
  name: "sim-modules",
  enforce: "pre" as const,
  resolveId(source: string, importer: string | undefined) {
    if (source === "cloudflare:workers")
      return fileURLToPath(new URL("tools/sim/cloudflare-workers.ts", import.meta.url));
    if (source === "uuid" && importer?.endsWith("/durable-objects/stock/sku-stock.ts"))
      return fileURLToPath(new URL("tools/sim/uuid.ts", import.meta.url));
    return null;
  },
  load(id: string) {
    return id.endsWith(".lua") ? `export default ${JSON.stringify(readFileSync(id, "utf8"))};` : null;
  },
};

// The unit tier: pure logic in plain Node, the stock engine over real SQLite (sql.js, see
// tools/sqlite-storage.ts). `npm run test:unit` runs it alone, `npm run test:watch` on every
// save; vitest.config.ts includes it as a project, so `npm test` runs it with everything else.
export default defineConfig({
  plugins: [simModules],
  test: {
    name: "unit",
    include: ["test/**/*.unit.test.ts"],
    environment: "node",
    silent: "passed-only",
    // `npm test` runs this tier beside workerd and Chromium on the same cores: a test that takes 1 s
    // alone (two `npm run sim` starts) took 5 s there, vitest's default limit.
    testTimeout: 30_000,
    // As many as `npm test` runs (vitest requires one figure of projects that run together).
    maxWorkers: FILES_AT_ONCE,
    // Worker threads, not child processes: cheaper to start, and no process per file to boot.
    pool: "threads",
    // Each thread kept from file to file: a fresh one per file spent longer starting than most files run.
    isolate: false,
    sequence: { sequencer: LongFirst },
  },
});
