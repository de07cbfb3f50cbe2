// `npm run dev`: the whole system on one machine with one command.
//   1. .dev.vars from .dev.vars.example when missing;
//   2. D1 migrations applied to the local database;
//   3. the Redis mirror, when redis-server is installed: a private redis-server (its own free port and
//      a fresh data directory) and the Upstash REST bridge in front of it, handed to the Worker as
//      UPSTASH_REDIS_REST_URL/_TOKEN; without redis-server the Worker runs with the mirror off;
//   4. wrangler dev on 127.0.0.1:8787 (extra arguments are passed through: `npm run dev -- --port 9000`).
// Everything it starts stops with it (Ctrl-C).
import { type ChildProcess, spawn } from "node:child_process";
import { randomBytes } from "node:crypto";
import { ensureDevVars, readDevVars } from "./lib/dev-vars";
import { hasRedisServer, type RedisServer, startRedis } from "./lib/redis-server";
import { type Bridge, startBridge } from "./upstash-bridge";

const passThrough = process.argv.slice(2);
const children: ChildProcess[] = [];
let redis: RedisServer | undefined;
let bridge: Bridge | undefined;
const log = (line: string) => console.log(`[dev] ${line}`);

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
  const args = ["wrangler", "dev", ...passThrough, ...mirrorArgs];
  if (!passThrough.includes("--port")) args.push("--port", "8787");
  if (!passThrough.includes("--ip")) args.push("--ip", "127.0.0.1");
  // The token is a secret of this run: log the command without it.
  log(`starting ${args.join(" ").replace(/UPSTASH_REDIS_REST_TOKEN:\S+/, "UPSTASH_REDIS_REST_TOKEN:***")}`);
  const wrangler = spawn("npx", args, { stdio: "inherit" });
  children.push(wrangler);
  wrangler.once("exit", (code) => void stop(code ?? 0));
} catch (err) {
  console.error(`[dev] ${err instanceof Error ? err.message : String(err)}`);
  await stop(1);
}
