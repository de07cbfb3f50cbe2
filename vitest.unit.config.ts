import { availableParallelism } from "node:os";
import { defineConfig } from "vitest/config";

// The unit tier: pure logic in plain Node, the stock engine over real SQLite (sql.js, see
// test/support/sqlite-storage.ts). `npm run test:unit` runs it alone, `npm run test:watch` on every
// save; vitest.config.ts includes it as a project, so `npm test` runs it with everything else.
export default defineConfig({
  test: {
    name: "unit",
    include: ["test/**/*.unit.test.ts"],
    environment: "node",
    silent: "passed-only",
    // Every core: vitest's default leaves one free, which on a 2-core machine runs the files one by one.
    maxWorkers: availableParallelism(),
    // Worker threads, not child processes: cheaper to start, and no process per file to boot.
    pool: "threads",
  },
});
