// `npm run dev`: the whole system on one machine with one command.
//   1. .dev.vars from .dev.vars.example when missing;
//   2. D1 migrations applied to the local database;
//   3. the Redis mirror, when redis-server is installed: a private redis-server (its own free port and
//      a fresh data directory) and the Upstash REST bridge in front of it, handed to the Worker as
//      UPSTASH_REDIS_REST_URL/_TOKEN; without redis-server the Worker runs with the mirror off;
//   4. wrangler dev on 127.0.0.1:8787 with the harness entry, src/harness/index.ts (the Worker plus the
//      storefront's /dev routes; `wrangler deploy` never bundles them); extra arguments are passed
//      through: `npm run dev -- --port 9000`;
//   5. the cron trigger, which wrangler dev never fires by itself: once wrangler answers, a ticker runs the
//      Worker's `scheduled` handler (reconciliation) every 60 s through `GET /__scheduled` (wrangler dev
//      --test-scheduled; see test/support/dev-server.ts for why not /cdn-cgi/handler/scheduled) and logs
//      one line per run. DEV_CRON_INTERVAL_MS changes the period; DEV_CRON_INTERVAL_MS=0 turns it off.
// Everything it starts stops with it (Ctrl-C).
import { type ChildProcess, spawn } from "node:child_process";
import { randomBytes } from "node:crypto";
import { ensureDevVars, readDevVars } from "./lib/dev-vars";
import { HARNESS_ENTRY } from "./lib/harness";
import { hasRedisServer, type RedisServer, startRedis } from "./lib/redis-server";
import { type Bridge, startBridge } from "./upstash-bridge";

const passThrough = process.argv.slice(2);
const children: ChildProcess[] = [];
let redis: RedisServer | undefined;
let bridge: Bridge | undefined;
const log = (line: string) => console.log(`[dev] ${line}`);

/** The value of `--name value` or `--name=value` among the pass-through arguments. */
function passedValue(name: string): string | undefined {
  const at = passThrough.indexOf(name);
  if (at >= 0) return passThrough[at + 1];
  return passThrough.find((arg) => arg.startsWith(`${name}=`))?.slice(name.length + 1);
}
const passed = (name: string) => passThrough.some((arg) => arg === name || arg.startsWith(`${name}=`));

/** The cron pattern of wrangler.toml's `[triggers]` (`* * * * *`), what the handler is told it runs for. */
const CRON = "* * * * *";
const CRON_PERIOD_MS = Number(process.env.DEV_CRON_INTERVAL_MS ?? 60_000);
const cron: { timer?: NodeJS.Timeout; stopped: boolean; running: boolean } = { stopped: false, running: false };

/** Resolves once wrangler dev answers on `base`, or with false when it exited or dev is stopping first. */
async function ready(base: string, wrangler: ChildProcess): Promise<boolean> {
  while (wrangler.exitCode === null && !cron.stopped) {
    try {
      const response = await fetch(`${base}/healthz`, { signal: AbortSignal.timeout(2_000) });
      await response.body?.cancel();
      if (response.ok) return true;
    } catch {
      // not listening yet
    }
    await new Promise((resolve) => setTimeout(resolve, 500));
  }
  return false;
}

interface CronRun {
  runId: string;
  trigger: string;
  skusChecked: number;
  errors: number;
  differences: { repaired: boolean }[];
}

/** Fires the scheduled handler once and logs one line: what the run found, or why it failed. */
async function fireCron(base: string, adminToken: string | undefined): Promise<void> {
  if (cron.running) return log("cron: the previous run is still going, skipping this minute");
  cron.running = true;
  const started = Date.now();
  try {
    // A hung run is given up on after a period (at least a minute), so it cannot stop the ticker for good.
    const signal = AbortSignal.timeout(Math.max(CRON_PERIOD_MS, 60_000));
    const fired = await fetch(`${base}/__scheduled?cron=${encodeURIComponent(CRON)}`, { signal });
    const body = await fired.text();
    const ms = Date.now() - started;
    if (!fired.ok)
      return log(`cron: scheduled handler failed, HTTP ${fired.status} in ${ms} ms: ${body.split("\n")[0]}`);
    const runs = await fetch(`${base}/admin/reconcile/runs?limit=5`, {
      headers: { authorization: `Bearer ${adminToken ?? ""}` },
      signal,
    });
    const run = runs.ok
      ? ((await runs.json()) as { runs: CronRun[] }).runs.find((r) => r.trigger === "cron")
      : undefined;
    if (!run) return log(`cron: reconciliation ran in ${ms} ms (its run is not readable: HTTP ${runs.status})`);
    const repaired = run.differences.filter((d) => d.repaired).length;
    log(
      `cron: reconciliation ${run.runId.slice(0, 8)} in ${ms} ms: ${run.skusChecked} SKUs checked, ` +
        `${run.differences.length} differences (${repaired} repaired), ${run.errors} errors`,
    );
  } catch (err) {
    if (!cron.stopped) log(`cron: could not reach wrangler dev: ${String(err)}`);
  } finally {
    cron.running = false;
  }
}

/** Starts the once-a-minute ticker as soon as wrangler dev answers. */
async function startCron(wrangler: ChildProcess): Promise<void> {
  if (!(CRON_PERIOD_MS > 0)) return log("cron: off (DEV_CRON_INTERVAL_MS=0); fire it by hand with GET /__scheduled");
  const ip = passedValue("--ip") ?? "127.0.0.1";
  const host = ip === "0.0.0.0" || ip === "*" ? "127.0.0.1" : ip.includes(":") ? `[${ip}]` : ip;
  const base = `http://${host}:${passedValue("--port") ?? "8787"}`;
  const adminVar = passThrough.find((arg) => arg.startsWith("ADMIN_TOKEN:"));
  const adminToken = adminVar ? adminVar.slice("ADMIN_TOKEN:".length) : readDevVars().ADMIN_TOKEN;
  if (!(await ready(base, wrangler))) return;
  log(`cron: reconciliation every ${CRON_PERIOD_MS / 1000} s through ${base}/__scheduled`);
  cron.timer = setInterval(() => void fireCron(base, adminToken), CRON_PERIOD_MS);
}

function run(command: string, args: string[]): Promise<void> {
  return new Promise((resolve, reject) => {
    const child = spawn(command, args, { stdio: "inherit" });
    child.once("error", reject);
    child.once("exit", (code) =>
      code === 0 ? resolve() : reject(new Error(`${command} ${args.join(" ")} exited ${code}`)),
    );
  });
}

let stopping = false;
async function stop(code: number): Promise<never> {
  if (!stopping) {
    stopping = true;
    clearInterval(cron.timer);
    cron.stopped = true;
    for (const child of children) if (child.exitCode === null) child.kill("SIGTERM");
    await bridge?.close().catch(() => undefined);
    await redis?.stop().catch(() => undefined);
  }
  process.exit(code);
}
process.on("SIGINT", () => void stop(0));
process.on("SIGTERM", () => void stop(0));

/** wrangler dev arguments that switch the mirror on, or none (with one line saying why). */
async function startMirror(): Promise<string[]> {
  const configured = passThrough.some((arg) => arg.startsWith("UPSTASH_REDIS_REST_URL:"));
  if (configured || readDevVars().UPSTASH_REDIS_REST_URL) {
    log("Redis mirror: using the UPSTASH_REDIS_REST_URL you configured");
    return [];
  }
  if (!hasRedisServer()) {
    log("Redis mirror: off (redis-server not found; apt-get install -y redis-server to turn it on)");
    return [];
  }
  redis = await startRedis();
  const token = randomBytes(24).toString("hex");
  bridge = await startBridge({ redisUrl: redis.url, token });
  log(`Redis mirror: redis-server on ${redis.url} (data in ${redis.dir}), Upstash bridge on ${bridge.url}`);
  return ["--var", `UPSTASH_REDIS_REST_URL:${bridge.url}`, "--var", `UPSTASH_REDIS_REST_TOKEN:${token}`];
}

try {
  if (ensureDevVars()) log("created .dev.vars from .dev.vars.example (local secrets)");

  log("applying D1 migrations to the local database");
  await run("npx", ["wrangler", "d1", "migrations", "apply", "DB", "--local"]);

  const mirrorArgs = await startMirror();
  // The harness entry: the Worker with the demo storefront's /dev routes (never deployed).
  const args = ["wrangler", "dev", HARNESS_ENTRY, ...passThrough, ...mirrorArgs];
  if (!passed("--port")) args.push("--port", "8787");
  if (!passed("--ip")) args.push("--ip", "127.0.0.1");
  if (!passed("--test-scheduled")) args.push("--test-scheduled");
  // The token is a secret of this run: log the command without it.
  log(`starting ${args.join(" ").replace(/UPSTASH_REDIS_REST_TOKEN:\S+/, "UPSTASH_REDIS_REST_TOKEN:***")}`);
  const wrangler = spawn("npx", args, { stdio: "inherit" });
  children.push(wrangler);
  wrangler.once("exit", (code) => void stop(code ?? 0));
  await startCron(wrangler);
} catch (err) {
  console.error(`[dev] ${err instanceof Error ? err.message : String(err)}`);
  await stop(1);
}
