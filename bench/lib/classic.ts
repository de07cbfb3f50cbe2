import { type ChildProcess, spawn } from "node:child_process";
import { fileURLToPath } from "node:url";
import type { createClient } from "redis";
import { runScript, shardKeys } from "../../tools/lua";
import { freePort } from "../../tools/redis-server";

export type Redis = ReturnType<typeof createClient>;

/** Configures one shard in Redis with lua/configure.lua (the Redis twin of the engine's configure). */
export async function configureRedisSku(redis: Redis, sku: string, totalStock: number): Promise<void> {
  const settings = { sku, shard: 0, shards: 1, totalStock, perUserLimit: 1, holdSeconds: 3600, status: "on_sale" };
  const answer = JSON.parse(String(await runScript(redis, "configure", shardKeys(sku, 0), [JSON.stringify(settings)])));
  if (!(answer as { ok?: unknown }).ok) throw new Error(`configure.lua refused ${sku}: ${JSON.stringify(answer)}`);
}

/** The counters of a Redis shard: total, held, sold. */
export async function redisCounts(redis: Redis, sku: string): Promise<{ total: number; held: number; sold: number }> {
  const [total, held, sold] = await redis.hmGet(shardKeys(sku, 0)[0] ?? "", ["total", "held", "sold"]);
  return { total: Number(total), held: Number(held), sold: Number(sold) };
}

export interface ClassicServer {
  url: string;
  /** The Node process serving it. */
  pid: number;
  stop(): Promise<void>;
}

/** Starts bench/classic-server.ts in its own Node process (its own event loop, like workerd has its own). */
export async function startClassic(redisUrl: string): Promise<ClassicServer> {
  const port = await freePort();
  const file = fileURLToPath(new URL("../classic-server.ts", import.meta.url));
  const child: ChildProcess = spawn(process.execPath, ["--import", "tsx", file, String(port), redisUrl], {
    stdio: ["ignore", "pipe", "pipe"],
  });
  let out = "";
  await new Promise<void>((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`classic server did not start:\n${out}`)), 30_000);
    const onData = (d: Buffer) => {
      out += d.toString();
      if (out.includes("ready")) {
        clearTimeout(timer);
        resolve();
      }
    };
    child.stdout?.on("data", onData);
    child.stderr?.on("data", onData);
    child.once("exit", (code) => reject(new Error(`classic server exited ${code}:\n${out}`)));
  });
  child.removeAllListeners("exit");
  return {
    url: `http://127.0.0.1:${port}`,
    pid: child.pid ?? 0,
    async stop() {
      if (child.exitCode !== null || child.signalCode !== null) return;
      const exited = new Promise((resolve) => child.once("exit", resolve));
      child.kill("SIGTERM");
      await exited;
    },
  };
}
