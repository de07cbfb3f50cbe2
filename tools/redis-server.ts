import { type ChildProcess, spawn, spawnSync } from "node:child_process";
import { mkdtempSync, rmSync } from "node:fs";
import { createServer } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { atExit, stopChild, untilPrinted } from "./proc";

/**
 * Starts and stops a private `redis-server` for the dev server, the tests and the bench:
 * its own free port on 127.0.0.1 and its own data directory, so it never touches another Redis.
 */

export const REDIS_MISSING =
  "redis-server was not found on PATH: install it (Debian/Ubuntu: apt-get install -y redis-server).";

export function hasRedisServer(): boolean {
  return spawnSync("redis-server", ["--version"], { stdio: "ignore" }).status === 0;
}

/** A TCP port that was free a moment ago on 127.0.0.1. */
export function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = createServer();
    server.once("error", reject);
    server.listen(0, "127.0.0.1", () => {
      const address = server.address();
      const port = typeof address === "object" && address ? address.port : 0;
      server.close(() => resolve(port));
    });
  });
}

export interface RedisServer {
  port: number;
  url: string;
  dir: string;
  process: ChildProcess;
  /** Stops the server (SIGTERM, then SIGKILL) and, unless `keepData`, removes its directory. */
  stop(opts?: { keepData?: boolean }): Promise<void>;
}

/** Starts redis-server and resolves once it accepts connections. */
/**
 * `appendfsync`: an append-only file fsynced as Redis's option says ("always": every write is on
 * disk before its answer, the durability of a committed SQLite transaction); implies `persist`.
 */
export async function startRedis(
  opts: { port?: number; dir?: string; persist?: boolean; appendfsync?: "always" | "everysec" | "no" } = {},
): Promise<RedisServer> {
  if (!hasRedisServer()) throw new Error(REDIS_MISSING);
  const port = opts.port ?? (await freePort());
  const dir = opts.dir ?? mkdtempSync(join(tmpdir(), "flashgate-redis-"));
  const args = ["--port", String(port), "--bind", "127.0.0.1", "--dir", dir, "--save", "", "--protected-mode", "yes"];
  args.push("--appendonly", opts.persist || opts.appendfsync ? "yes" : "no");
  if (opts.appendfsync) args.push("--appendfsync", opts.appendfsync);
  const child = spawn("redis-server", args, { stdio: ["ignore", "pipe", "pipe"] });
  const removeDir = () => {
    if (!opts.dir) rmSync(dir, { recursive: true, force: true });
  };
  const cancelExit = atExit(() => {
    child.kill("SIGKILL");
    removeDir();
  });
  await untilPrinted(child, "Ready to accept connections", `redis-server on port ${port}`, 10_000);
  return {
    port,
    dir,
    url: `redis://127.0.0.1:${port}`,
    process: child,
    async stop({ keepData = false } = {}) {
      cancelExit();
      await stopChild(child, 5_000);
      if (!keepData) removeDir();
    },
  };
}
