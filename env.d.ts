import type { D1Migration } from "cloudflare:test";

// What the Worker's `Env` has beyond what `npm run types` generates into worker-configuration.d.ts
// from wrangler.toml and .dev.vars.example: every hand-written addition, in this one file.

declare global {
  namespace Cloudflare {
    interface Env {
      // Production, optional: the Redis mirror's settings are secrets (mirror off when unset), so
      // `wrangler types` cannot infer them. `npm run dev` passes them to wrangler dev with --var when a
      // local redis-server is available.
      /** Upstash REST URL of the Redis mirror (locally: tools/upstash-bridge.ts). */
      UPSTASH_REDIS_REST_URL?: string;
      UPSTASH_REDIS_REST_TOKEN?: string;

      // Local tooling only, read by the harness entry (src/harness/); never set in wrangler.toml.
      /** "true" only under the chaos harness: enables /chaos/* and the consumer fault hook. */
      CHAOS?: string;
      /** "true" under scripts/soak.ts: the harness stock object counts its engine's rows read. */
      COUNT_ROWS_READ?: string;

      // Tests only.
      /** Bound by vitest.config.ts: the D1 migrations, read from migrations/ in Node. */
      TEST_MIGRATIONS: D1Migration[];
    }
  }
}
