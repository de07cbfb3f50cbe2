// `npm run dev`: the whole system on one machine with one command.
//   1. .dev.vars from .dev.vars.example when missing;
//   2. D1 migrations applied to the local database (quietly: their output shows only if they fail);
//   3. the Redis mirror, when redis-server is installed: a private redis-server (its own free port and
//      a fresh data directory) and the Upstash REST bridge in front of it, handed to the Worker as
//      UPSTASH_REDIS_REST_URL/_TOKEN; without redis-server the Worker runs with the mirror off;
//   4. wrangler dev on 127.0.0.1:8787 with the harness entry, src/harness/index.ts (the Worker plus the
//      storefront's /dev routes; `wrangler deploy` never bundles them); extra arguments are passed
//      through: `npm run dev -- --port 9000`;
//   5. the cron trigger, which wrangler dev never fires by itself: once wrangler answers, a ticker runs the
//      Worker's `scheduled` handler (reconciliation) every 60 s through `GET /__scheduled` (wrangler dev
//      --test-scheduled; see tools/dev-server.ts for why not /cdn-cgi/handler/scheduled) and logs
//      one line per run. DEV_CRON_INTERVAL_MS changes the period; DEV_CRON_INTERVAL_MS=0 turns it off.
// Once wrangler answers, one banner says where the storefront, the dashboard, the OpenAPI document, the
// admin token and a shopper JWT are, and that the first step is to create a SKU (scripts/dev-output.ts,
// which also keeps wrangler's noise out). Nothing is printed before it unless something fails.
// Request logs are quiet: errors (5xx) and requests of a second or more only, and no routine line per
// queue batch or cron run (the [dev] cron line says each run); `--log-requests=all` (or
// DEV_LOG_REQUESTS=all) shows every line, the Worker's and wrangler's.
// Everything it starts stops with it (Ctrl-C), and redis-server's temporary data directory goes too.
import { type ChildProcess, spawn } from "node:child_process";
import { randomBytes } from "node:crypto";
import { rmSync } from "node:fs";
import type { z } from "zod";
import type { CONTRACT_SCHEMAS } from "../src/routes/contract-schemas";
import { ensureDevVars, readDevVars, SECRETS } from "../tools/dev-vars";
import { HARNESS_ENTRY } from "../tools/harness";
import { hasRedisServer, type RedisServer, startRedis } from "../tools/redis-server";
import { type Bridge, startBridge } from "../tools/upstash-bridge";
import { banner, filterWranglerDev, quietWranglerEnv, type RequestLog } from "./dev-output";

/** `--log-requests=all|quiet` is dev.ts's own; everything else goes to wrangler dev. */
const REQUESTS_FLAG = "--log-requests";
const ownFlag = process.argv.slice(2).find((arg) => arg.startsWith(`${REQUESTS_FLAG}=`));
const requestLog: RequestLog =
  (ownFlag?.slice(REQUESTS_FLAG.length + 1) ?? process.env.DEV_LOG_REQUESTS) === "all" ? "all" : "quiet";
const passThrough = process.argv.slice(2).filter((arg) => arg !== ownFlag);
/** Said in the banner (nothing is printed before it unless something fails). */
const notes: string[] = [];
const children: ChildProcess[] = [];
let redis: RedisServer | undefined;
let bridge: Bridge | undefined;
const log = (line: string) => console.log(`[dev] ${line}`);
/** wrangler without metrics, error reports, update check or Request.cf fetch (each a stack trace offline). */
const wranglerEnv = quietWranglerEnv();
/** What the banner says about the mirror (set by startMirror). */
let mirrorNote = "off";

/** The value of `--name value` or `--name=value` among the pass-through arguments. */
function passedValue(name: string): string | undefined {
  const at = passThrough.indexOf(name);
  if (at >= 0) return passThrough[at + 1];
  return passThrough.find((arg) => arg.startsWith(`${name}=`))?.slice(name.length + 1);
}
const passed = (name: string) => passThrough.some((arg) => arg === name || arg.startsWith(`${name}=`));

/** The admin token of .dev.vars.example (local only): the banner's next steps may show it. */
const EXAMPLE_ADMIN_TOKEN = "dev-admin-token";
/** The wrangler dev command line, without the mirror's token (said only if wrangler fails to start). */
let command = "";

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

/** `GET /admin/reconcile/runs`, as the contract describes it. */
type CronRuns = z.infer<(typeof CONTRACT_SCHEMAS)["ReconcileRuns"]>;

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
    const run = runs.ok ? ((await runs.json()) as CronRuns).runs.find((r) => r.trigger === "cron") : undefined;
    if (!run) return log(`cron: reconciliation ran in ${ms} ms (its run is not readable: HTTP ${runs.status})`);
    const repaired = run.differences.filter((d) => d.repaired).length;
    log(
      `cron: reconciliation ${run.runId.slice(0, 8)} in ${ms} ms: ${run.skusChecked} SKUs checked, ${run.differences.length} differences (${repaired} repaired), ${run.errors} errors`,
    );
  } catch (err) {
    if (!cron.stopped) log(`cron: could not reach wrangler dev: ${String(err)}`);
  } finally {
    cron.running = false;
  }
}

/** Starts the once-a-minute ticker as soon as wrangler dev answers. */
async function startCron(wrangler: ChildProcess): Promise<void> {
  const ip = passedValue("--ip") ?? "127.0.0.1";
  const host = ip === "0.0.0.0" || ip === "*" ? "127.0.0.1" : ip.includes(":") ? `[${ip}]` : ip;
  const base = `http://${host}:${passedValue("--port") ?? "8787"}`;
  const adminVar = passThrough.find((arg) => arg.startsWith("ADMIN_TOKEN:"));
  const adminToken = adminVar ? adminVar.slice("ADMIN_TOKEN:".length) : readDevVars().ADMIN_TOKEN;
  if (!(await ready(base, wrangler))) {
    if (!cron.stopped) console.error(`[dev] wrangler dev stopped before it answered on ${base} (${command})`);
    return;
  }
  const cronOn = CRON_PERIOD_MS > 0;
  console.log(
    banner({
      base,
      // The example's well-known local token is shown in the next steps; any other stays a variable.
      adminToken: adminToken === EXAMPLE_ADMIN_TOKEN && !adminVar ? adminToken : null,
      requests: requestLog,
      notes,
      adminTokenSource: adminVar ? "the ADMIN_TOKEN you passed with --var" : "ADMIN_TOKEN in .dev.vars",
      mirror: mirrorNote,
      cron: cronOn
        ? `reconciliation every ${CRON_PERIOD_MS / 1000} s (one [dev] cron line per run)`
        : `off (DEV_CRON_INTERVAL_MS=0); fire it with GET ${base}/__scheduled`,
    }),
  );
  if (!cronOn) return;
  cron.timer = setInterval(() => void fireCron(base, adminToken), CRON_PERIOD_MS);
}

/** Runs a command quietly: its output is shown only when it fails. Resolves with that output. */
function run(command: string, args: string[]): Promise<string> {
  return new Promise((resolve, reject) => {
    const child = spawn(command, args, { stdio: ["ignore", "pipe", "pipe"], env: wranglerEnv });
    let output = "";
    child.stdout.on("data", (d: Buffer) => {
      output += d.toString();
    });
    child.stderr.on("data", (d: Buffer) => {
      output += d.toString();
    });
    child.once("error", reject);
    child.once("exit", (code) =>
      code === 0 ? resolve(output) : reject(new Error(`${command} ${args.join(" ")} exited ${code}:\n${output}`)),
    );
  });
}

/**
 * Stops everything, once, then exits. Ctrl-C reaches every process of the terminal's group: wrangler
 * exits too, and its exit calls this again; that call waits for the first one's clean-up (it used to
 * exit at once, before redis-server's data directory was removed, leaving a `flashgate-redis-*`
 * folder in the temp directory after every run).
 */
let stopping: Promise<never> | undefined;
function stop(code: number): Promise<never> {
  stopping ??= (async () => {
    clearInterval(cron.timer);
    cron.stopped = true;
    for (const child of children) if (child.exitCode === null) child.kill("SIGTERM");
    await bridge?.close().catch(() => undefined);
    await redis?.stop().catch(() => undefined);
    process.exit(code);
  })();
  return stopping;
}
// Whatever way the process ends (an uncaught error included), redis-server's data directory goes with it.
process.once("exit", () => {
  if (redis) rmSync(redis.dir, { recursive: true, force: true });
});
process.on("SIGINT", () => void stop(0));
process.on("SIGTERM", () => void stop(0));

/** wrangler dev arguments that switch the mirror on, or none (with one line saying why). */
async function startMirror(): Promise<string[]> {
  const configured = passThrough.some((arg) => arg.startsWith("UPSTASH_REDIS_REST_URL:"));
  if (configured || readDevVars().UPSTASH_REDIS_REST_URL) {
    mirrorNote = "the UPSTASH_REDIS_REST_URL you configured";
    return [];
  }
  if (!hasRedisServer()) {
    mirrorNote = "off (redis-server not found; apt-get install -y redis-server to turn it on)";
    return [];
  }
  redis = await startRedis();
  const token = randomBytes(24).toString("hex");
  bridge = await startBridge({ redisUrl: redis.url, token });
  mirrorNote = `redis-server on ${redis.url} (data in ${redis.dir}), Upstash bridge on ${bridge.url}`;
  return ["--var", `UPSTASH_REDIS_REST_URL:${bridge.url}`, "--var", `UPSTASH_REDIS_REST_TOKEN:${token}`];
}

try {
  if (ensureDevVars()) notes.push("Local secrets: .dev.vars, created just now from .dev.vars.example.");

  // Quiet unless they fail (then `run` rejects with their output, printed below).
  await run("npx", ["wrangler", "d1", "migrations", "apply", "DB", "--local"]);

  const mirrorArgs = await startMirror();
  // The harness entry: the Worker with the demo storefront's /dev routes (never deployed).
  const args = ["wrangler", "dev", HARNESS_ENTRY, ...passThrough, ...mirrorArgs];
  if (!passed("--port")) args.push("--port", "8787");
  if (!passed("--ip")) args.push("--ip", "127.0.0.1");
  if (!passed("--test-scheduled")) args.push("--test-scheduled");
  // Request lines: errors and slow requests only (the Worker always writes those), or with
  // --log-requests=all every request, so a request id can be followed through the dev log
  // (production samples 1%, wrangler.toml).
  if (!passThrough.some((a) => a.startsWith("REQUEST_LOG_SAMPLE_RATE:")))
    args.push("--var", `REQUEST_LOG_SAMPLE_RATE:${requestLog === "all" ? 1 : 0}`);
  // The sale log's key (.dev.vars.example's) for a .dev.vars made before the log had one.
  if (!readDevVars().LOG_SIGNING_KEY) args.push("--var", `LOG_SIGNING_KEY:${SECRETS.LOG_SIGNING_KEY}`);
  // The token is a secret of this run: the command is said without it, and only if wrangler fails.
  command = args.join(" ").replace(/UPSTASH_REDIS_REST_TOKEN:\S+/, "UPSTASH_REDIS_REST_TOKEN:***");
  // Piped, so wrangler's banner and bindings table can be left out (and it shows no hotkey bar: the
  // banner below names the URLs; Ctrl-C still stops everything).
  const wrangler = spawn("npx", args, { stdio: ["inherit", "pipe", "pipe"], env: wranglerEnv });
  if (wrangler.stdout) filterWranglerDev(wrangler.stdout, process.stdout, requestLog);
  if (wrangler.stderr) filterWranglerDev(wrangler.stderr, process.stderr, requestLog);
  children.push(wrangler);
  wrangler.once("exit", (code) => void stop(code ?? 0));
  await startCron(wrangler);
} catch (err) {
  console.error(`[dev] ${err instanceof Error ? err.message : String(err)}`);
  await stop(1);
}
