// `npm start`: the gateway for local load, without wrangler dev's proxy in front of it.
//
// `npm run dev` runs the Worker behind wrangler dev's ProxyWorker, which drops a POST now and then under
// concurrent load with `503 Your worker restarted mid-request` (cloudflare/workers-sdk#14641): a local
// load test would measure the proxy. This runs the Worker in workerd through Miniflare, exactly as the
// benchmark does (tools/worker.ts `startWorker`: wrangler.toml's bindings, wrangler's bundle, D1
// migrated in a fresh state directory), with the secrets of .dev.vars, the Redis mirror when
// redis-server is installed, and reconciliation every 60 s (POST /admin/reconcile; the cron trigger
// does not fire locally). State is temporary: it is deleted when the server stops (Ctrl-C).
// START_RECONCILE_INTERVAL_MS changes the period; 0 turns it off.
import { randomBytes } from "node:crypto";
import { ensureDevVars, readDevVars } from "../tools/dev-vars";
import { hasRedisServer, type RedisServer, startRedis } from "../tools/redis-server";
import { type Bridge, startBridge } from "../tools/upstash-bridge";
import { startWorker, type WorkerServer } from "../tools/worker";

const log = (line: string) => console.log(`[start] ${line}`);
const RECONCILE_PERIOD_MS = Number(process.env.START_RECONCILE_INTERVAL_MS ?? 60_000);

let server: WorkerServer | undefined;
let redis: RedisServer | undefined;
let bridge: Bridge | undefined;
let ticker: NodeJS.Timeout | undefined;
let stopping = false;

async function stop(code: number): Promise<never> {
  if (!stopping) {
    stopping = true;
    clearInterval(ticker);
    await server?.stop().catch(() => undefined);
    await bridge?.close().catch(() => undefined);
    await redis?.stop().catch(() => undefined);
  }
  process.exit(code);
}
process.on("SIGINT", () => void stop(0));
process.on("SIGTERM", () => void stop(0));

/** The Worker vars that switch the Redis mirror on, or none (with one line saying why). */
async function startMirror(configured: Record<string, string>): Promise<Record<string, string>> {
  if (configured.UPSTASH_REDIS_REST_URL) {
    log("Redis mirror: using the UPSTASH_REDIS_REST_URL of .dev.vars");
    return {};
  }
  if (!hasRedisServer()) {
    log("Redis mirror: off (redis-server not found; apt-get install -y redis-server to turn it on)");
    return {};
  }
  redis = await startRedis();
  const token = randomBytes(24).toString("hex");
  bridge = await startBridge({ redisUrl: redis.url, token });
  log(`Redis mirror: redis-server on ${redis.url}, Upstash bridge on ${bridge.url}`);
  return { UPSTASH_REDIS_REST_URL: bridge.url, UPSTASH_REDIS_REST_TOKEN: token };
}

/** Runs reconciliation once and logs one line. */
async function reconcile(url: string, adminToken: string): Promise<void> {
  try {
    const reply = await fetch(`${url}/admin/reconcile`, {
      method: "POST",
      headers: { authorization: `Bearer ${adminToken}` },
      signal: AbortSignal.timeout(60_000),
    });
    const run = (await reply.json()) as { skusChecked?: number; differences?: { repaired: boolean }[] };
    const differences = run.differences ?? [];
    log(
      reply.ok
        ? `reconciliation: ${run.skusChecked} SKUs checked, ${differences.length} differences (${differences.filter((d) => d.repaired).length} repaired)`
        : `reconciliation answered ${reply.status}`,
    );
  } catch (err) {
    if (!stopping) log(`reconciliation failed: ${String(err)}`);
  }
}

try {
  if (ensureDevVars()) log("created .dev.vars from .dev.vars.example (local secrets)");
  const vars = readDevVars();
  const mirror = await startMirror(vars);
  log("bundling the Worker and migrating a fresh local D1 (a few seconds)");
  server = await startWorker("start", { ...vars, ...mirror });
  const adminToken = vars.ADMIN_TOKEN ?? "";
  log(`Flashgate on ${server.url} (workerd through Miniflare, no dev proxy); Ctrl-C stops it`);
  log(`try: curl ${server.url}/healthz`);
  if (RECONCILE_PERIOD_MS > 0) {
    const url = server.url;
    ticker = setInterval(() => void reconcile(url, adminToken), RECONCILE_PERIOD_MS);
    log(`reconciliation every ${RECONCILE_PERIOD_MS / 1000} s`);
  }
} catch (err) {
  console.error(`[start] ${err instanceof Error ? err.message : String(err)}`);
  await stop(1);
}
