import { cloudflareTest, readD1Migrations } from "@cloudflare/vitest-pool-workers";
import { defineConfig } from "vitest/config";

// Two layers of tests:
//   *.unit.test.ts, *.integration.test.ts  run inside workerd (the real Workers runtime);
//   *.e2e.test.ts                          run in Node against real processes (wrangler dev, redis-server).
export default defineConfig({
  test: {
    // Logs of passing tests are noise (the consumer logs every injected failure); failures keep theirs.
    silent: "passed-only",
    projects: [
      {
        plugins: [
          cloudflareTest(async () => ({
            wrangler: { configPath: "./wrangler.toml" },
            miniflare: {
              bindings: {
                TEST_MIGRATIONS: await readD1Migrations("./migrations"),
                AUTH_SECRET: "test-auth-secret",
                TOKEN_SECRET: "test-token-secret",
                ADMIN_TOKEN: "test-admin-token",
                PAYMENT_WEBHOOK_SECRET: "test-webhook-secret",
              },
            },
          })),
        ],
        test: {
          name: "workers",
          include: ["test/**/*.unit.test.ts", "test/**/*.integration.test.ts"],
          setupFiles: ["./test/support/apply-migrations.ts"],
        },
      },
      {
        test: {
          name: "node",
          include: ["test/**/*.e2e.test.ts"],
          environment: "node",
          testTimeout: 120_000,
          hookTimeout: 120_000,
        },
      },
    ],
  },
});
