import type { D1Migration } from "cloudflare:test";

declare global {
  namespace Cloudflare {
    interface Env {
      /** Bound by vitest.config.ts: the D1 migrations, read from migrations/ in Node. */
      TEST_MIGRATIONS: D1Migration[];
    }
  }
}
