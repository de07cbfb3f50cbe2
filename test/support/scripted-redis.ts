import { createClient } from "redis";
import { afterAll, beforeAll } from "vitest";
import { loadScripts } from "../../tools/lua";
import { hasRedisServer, REDIS_MISSING, type RedisServer, startRedis } from "../../tools/redis-server";

export type RedisClient = ReturnType<typeof createClient>;

/**
 * A redis-server of the test file's own, started before its tests and stopped after them, and a
 * node-redis client with lua/'s scripts loaded (SCRIPT LOAD answering each the SHA1 the product
 * sends with EVALSHA). Returns the client's getter.
 */
export function scriptedRedis(): () => RedisClient {
  let server: RedisServer | undefined;
  let client: RedisClient | undefined;
  beforeAll(async () => {
    if (!hasRedisServer()) throw new Error(REDIS_MISSING);
    server = await startRedis();
    client = createClient({ url: server.url });
    client.on("error", () => {});
    await client.connect();
    await loadScripts(client);
  });
  afterAll(async () => {
    await client?.close();
    await server?.stop();
  });
  return () => {
    if (!client) throw new Error("redis client not connected");
    return client;
  };
}
