import { readFileSync } from "node:fs";
import { LuaScript, runScript as runLuaScript, shardTag } from "../durable-objects/mirror/lua-script";

/**
 * The classic design's Redis scripts of `lua/` for Node (tests, bench): their source and SHA1, the
 * KEYS of a shard, and node-redis calls of the Worker's own runner (durable-objects/mirror/lua-script.ts), which
 * tries EVALSHA first and falls back to EVAL only when Redis answers NOSCRIPT.
 */

export const LUA_SCRIPT_NAMES = ["reserve", "release", "confirm", "configure"] as const;
export type LuaScriptName = (typeof LUA_SCRIPT_NAMES)[number];

const LUA_DIR = new URL("../lua/", import.meta.url);

const load = (name: LuaScriptName) => new LuaScript(readFileSync(new URL(`${name}.lua`, LUA_DIR), "utf8"));

export const LUA_SCRIPTS: Readonly<Record<LuaScriptName, LuaScript>> = {
  reserve: load("reserve"),
  release: load("release"),
  confirm: load("confirm"),
  configure: load("configure"),
};

export const LUA_SOURCES = Object.fromEntries(LUA_SCRIPT_NAMES.map((n) => [n, LUA_SCRIPTS[n].source])) as Readonly<
  Record<LuaScriptName, string>
>;

/** Hex SHA1 of each script, as SCRIPT LOAD returns it (redis-benchmark sends EVALSHA with it). */
export const LUA_SHA1 = Object.fromEntries(
  await Promise.all(LUA_SCRIPT_NAMES.map(async (n) => [n, await LUA_SCRIPTS[n].sha1()])),
) as Readonly<Record<LuaScriptName, string>>;

/**
 * The six KEYS every Flashgate script takes, in order: sku (hash), holds (zset), quota (hash),
 * nonces (hash), payments (hash), and the prefix of the reservation hashes (`<prefix><id>`).
 */
export function shardKeys(sku: string, shard: number): string[] {
  const tag = shardTag(sku, shard);
  return [`${tag}:sku`, `${tag}:holds`, `${tag}:quota`, `${tag}:nonces`, `${tag}:payments`, `${tag}:res:`];
}

/** The key of one reservation hash of a shard. */
export function reservationKey(sku: string, shard: number, id: string): string {
  return `${shardTag(sku, shard)}:res:${id}`;
}

/** The part of a node-redis v5 client the scripts need. */
export interface ScriptClient {
  evalSha(sha1: string, options: { keys: string[]; arguments: string[] }): Promise<unknown>;
  eval(script: string, options: { keys: string[]; arguments: string[] }): Promise<unknown>;
  scriptLoad(script: string): Promise<unknown>;
}

/** SCRIPT LOADs every script and checks that Redis names each by the SHA1 computed here. */
export async function loadScripts(client: ScriptClient): Promise<void> {
  for (const name of LUA_SCRIPT_NAMES) {
    const sha = await client.scriptLoad(LUA_SOURCES[name]);
    if (sha !== LUA_SHA1[name]) throw new Error(`SCRIPT LOAD of ${name}.lua answered ${String(sha)}`);
  }
}

/** Runs one script on node-redis: EVALSHA, then EVAL on NOSCRIPT only; any other error is thrown. */
export function runScript(
  client: ScriptClient,
  name: LuaScriptName,
  keys: string[],
  args: ReadonlyArray<string | number>,
): Promise<unknown> {
  const nodeRedis = {
    evalsha: (sha1: string, keys: string[], args: string[]) => client.evalSha(sha1, { keys, arguments: args }),
    eval: (source: string, keys: string[], args: string[]) => client.eval(source, { keys, arguments: args }),
  };
  return runLuaScript(nodeRedis, LUA_SCRIPTS[name], keys, args);
}
