/**
 * The harness entry of the Worker (src/harness/index.ts): production's routes plus `/dev/*`,
 * `/bench/*` and `/chaos/*`. Local tooling passes it to wrangler in place of wrangler.toml's `main`
 * (`wrangler dev <entry>`, `wrangler deploy --dry-run <entry>`); `wrangler deploy` never sees it.
 */
export const HARNESS_ENTRY = "src/harness/index.ts";
