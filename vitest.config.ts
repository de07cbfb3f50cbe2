import { cloudflareTest, readD1Migrations } from "@cloudflare/vitest-pool-workers";
import { configDefaults, defineConfig } from "vitest/config";
import { FILES_AT_ONCE, LongFirst } from "./test/support/long-first";

// Three tiers of tests (docs/DEVELOPMENT.md, "Test tiers"):
//   *.unit.test.ts                            run in plain Node: pure logic, the engine over real SQLite
//                                             (vitest.unit.config.ts; `npm run test:unit`);
//   *.integration.test.ts                     run inside workerd (the real Workers runtime);
//   *.e2e.test.ts                             run in Node against real processes (wrangler dev, redis-server).
//
// Both workerd projects get a private redis-server and Upstash bridge from a Node globalSetup
// (test/support/redis-global-setup.ts; tests reach it with `inject("redis")`). In "workers" the
// Worker runs with the mirror off, as it does when UPSTASH_* are unset. In "workers-mirror" the
// Worker's mirror is bound to that project's own Redis, which its tests stop, restart and freeze:
// a project of its own, so those outages never reach another test file.

/** Test files that need the Worker's Redis mirror switched on (it runs test/suites/reconcile-mirror.ts too). */
const MIRROR_BOUND = ["test/mirror-sync.integration.test.ts"];
const REDIS_SETUP = "./test/support/redis-global-setup.ts";

const workerBindings = async () => ({
  TEST_MIGRATIONS: await readD1Migrations("./migrations"),
  AUTH_SECRET: "test-auth-secret",
  TOKEN_SECRET: "test-token-secret",
  ADMIN_TOKEN: "test-admin-token",
  PAYMENT_WEBHOOK_SECRET: "test-webhook-secret",
  STRIPE_WEBHOOK_SECRET: "test-stripe-secret",
  // Tests wait for the queue themselves, so reconciliation may judge every change at once.
  RECONCILE_GRACE_MS: "0",
  // One isolate: a scrape flushes it, so no background flush (which would hold each call's waitUntil).
  METRICS_FLUSH_INTERVAL_MS: "0",
  // Every request line is written, so the log tests can follow any request (production samples 1%).
  REQUEST_LOG_SAMPLE_RATE: "1",
  // Webhook endpoints are the test receiver on 127.0.0.1; retries after 1 s and 2 s, then failed.
  WEBHOOK_ALLOW_HTTP_LOCALHOST: "true",
  WEBHOOK_RETRY_SCHEDULE: "1,2",
  // The sale log's key (.dev.vars.example's): every SKU keeps its log, as in `npm run dev`.
  LOG_SIGNING_KEY: "PRIVATE+KEY+flashgate-dev+8238a725+ATkDZ4MQgpm0Szd0XgDTaes4dGSXhguzpOHRmnqbEwtl",
});

export default defineConfig({
  test: {
    // Logs of passing tests are noise (the consumer logs every injected failure); failures keep theirs.
    silent: "passed-only",
    // A file that stops making progress ends the run rather than hanging it (test/support/watchdog.ts).
    reporters: ["default", "./test/support/watchdog.ts"],
    maxWorkers: FILES_AT_ONCE,
    // Long files first, the tiers mixed (test/support/long-first.ts).
    sequence: { sequencer: LongFirst },
    projects: [
      "./vitest.unit.config.ts",
      {
        plugins: [
          cloudflareTest(async () => ({
            wrangler: { configPath: "./wrangler.toml" },
            miniflare: { bindings: await workerBindings() },
          })),
        ],
        test: {
          name: "workers",
          // The official `stripe` package signs the payment tests' events; as one pre-bundled module, not
          // its 271 files each transformed and sent to workerd (and each a warning about its source map).
          deps: { optimizer: { ssr: { enabled: true, include: ["stripe"] } } },
          // Queue deliveries and alarms are awaited by polling; a loaded 2-core machine needs room.
          testTimeout: 30_000,
          include: ["test/**/*.integration.test.ts"],
          exclude: [...configDefaults.exclude, ...MIRROR_BOUND],
          globalSetup: [REDIS_SETUP],
          setupFiles: ["./test/support/apply-migrations.ts"],
        },
      },
      {
        plugins: [
          cloudflareTest(async ({ inject }) => {
            const redis = inject("redis");
            return {
              wrangler: { configPath: "./wrangler.toml" },
              miniflare: {
                bindings: {
                  ...(await workerBindings()),
                  UPSTASH_REDIS_REST_URL: redis.bridgeUrl,
                  UPSTASH_REDIS_REST_TOKEN: redis.token,
                },
              },
            };
          }),
        ],
        test: {
          name: "workers-mirror",
          testTimeout: 30_000,
          include: MIRROR_BOUND,
          // These files stop, restart and freeze one shared redis-server: one file at a time.
          fileParallelism: false,
          globalSetup: [REDIS_SETUP],
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
          // An expect.poll without its own timeout waits 10 s, not vitest's 1 s: after a click the page's
          // answer takes one to three requests to wrangler dev, which a loaded 2-core machine can hold up.
          expect: { poll: { timeout: 10_000 } },
        },
      },
    ],
  },
});
