// The Redis mirror's settings are optional secrets (mirror off when unset), so `wrangler types` cannot
// infer them from .dev.vars; they are declared here, optional, and merged into the generated `Env`.
// `npm run dev` passes them to wrangler dev with --var when a local redis-server is available.
declare namespace Cloudflare {
  interface Env {
    /** Upstash REST URL of the Redis mirror (locally: scripts/upstash-bridge.ts). */
    UPSTASH_REDIS_REST_URL?: string;
    UPSTASH_REDIS_REST_TOKEN?: string;
  }
}
