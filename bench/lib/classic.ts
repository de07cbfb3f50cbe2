import { type ChildProcess, spawn } from "node:child_process";
import { fileURLToPath } from "node:url";
import type { createClient } from "redis";
import { runScript, shardKeys } from "../../tools/lua";
import { stopChild, untilPrinted } from "../../tools/proc";
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
  await untilPrinted(child, "ready", "classic server", 30_000);
  return {
    url: `http://127.0.0.1:${port}`,
    pid: child.pid ?? 0,
    stop: () => stopChild(child),
  };
}
