import { createHash } from "node:crypto";
import { readFileSync } from "node:fs";

/**
 * The Redis scripts of `lua/` for Node (tests, bench, dev tooling): their source, their SHA1 (the
 * name Redis gives a script in SCRIPT LOAD / EVALSHA), the KEYS of a shard, and a runner that tries
 * EVALSHA first and falls back to EVAL only when Redis answers NOSCRIPT.
 *
 * The Worker does not use this file: it imports the `.lua` files as Text modules.
 */

export const LUA_SCRIPT_NAMES = ["reserve", "release", "confirm", "configure"] as const;
export type LuaScriptName = (typeof LUA_SCRIPT_NAMES)[number];

export interface LuaScript {
  name: LuaScriptName;
  source: string;
  /** Hex SHA1 of `source`, as SCRIPT LOAD returns it. */
  sha1: string;
}

const LUA_DIR = new URL("../../lua/", import.meta.url);

export function sha1Hex(source: string): string {
  return createHash("sha1").update(source, "utf8").digest("hex");
}

function load(name: LuaScriptName): LuaScript {
  const source = readFileSync(new URL(`${name}.lua`, LUA_DIR), "utf8");
  return { name, source, sha1: sha1Hex(source) };
}

export const LUA_SCRIPTS: Readonly<Record<LuaScriptName, LuaScript>> = {
  reserve: load("reserve"),
  release: load("release"),
  confirm: load("confirm"),
  configure: load("configure"),
};

export const LUA_SOURCES = Object.fromEntries(LUA_SCRIPT_NAMES.map((n) => [n, LUA_SCRIPTS[n].source])) as Readonly<
  Record<LuaScriptName, string>
>;

export const LUA_SHA1 = Object.fromEntries(LUA_SCRIPT_NAMES.map((n) => [n, LUA_SCRIPTS[n].sha1])) as Readonly<
  Record<LuaScriptName, string>
>;

/** The hash tag that keeps one shard's keys in one cluster slot. */
export function shardTag(sku: string, shard: number): string {
  return `{fg:${sku}:${shard}}`;
}

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

/** The part of a node-redis v5 client the runner needs. */
export interface ScriptClient {
  evalSha(sha1: string, options: { keys: string[]; arguments: string[] }): Promise<unknown>;
  eval(script: string, options: { keys: string[]; arguments: string[] }): Promise<unknown>;
  scriptLoad(script: string): Promise<unknown>;
}

export function isNoScript(error: unknown): boolean {
  return error instanceof Error && error.message.startsWith("NOSCRIPT");
}

/** SCRIPT LOADs every script and checks that Redis names each by the SHA1 computed here. */
export async function loadScripts(client: ScriptClient): Promise<void> {
  for (const script of Object.values(LUA_SCRIPTS)) {
    const sha = await client.scriptLoad(script.source);
    if (sha !== script.sha1) throw new Error(`SCRIPT LOAD of ${script.name}.lua answered ${String(sha)}`);
  }
}

/** EVALSHA, then EVAL on NOSCRIPT only (which also caches the script again); any other error is thrown. */
export async function runScript(
  client: ScriptClient,
  script: LuaScript | LuaScriptName,
  keys: string[],
  args: ReadonlyArray<string | number>,
): Promise<unknown> {
  const { source, sha1 } = typeof script === "string" ? LUA_SCRIPTS[script] : script;
  const options = { keys, arguments: args.map(String) };
  try {
    return await client.evalSha(sha1, options);
  } catch (error) {
    if (!isNoScript(error)) throw error;
    return await client.eval(source, options);
  }
}
