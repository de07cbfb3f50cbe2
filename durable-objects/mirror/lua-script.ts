/**
 * A Redis script: its source (a `lua/*.lua` file), its SHA1 (the name Redis gives it in SCRIPT LOAD /
 * EVALSHA), the one runner that sends EVALSHA and falls back to EVAL only when Redis answers NOSCRIPT,
 * and the hash tag of a shard's keys. The Worker runs the mirror's script through @upstash/redis; the
 * tools (tools/lua.ts) run the classic design's scripts through node-redis with this same runner.
 */

/**
 * The hash tag of one SKU shard's Redis keys (`{fg:<sku>:<shard>}`): every key a script touches for
 * the shard carries it, so they all sit in one cluster slot, as a script's keys must.
 */
export function shardTag(sku: string, shard: number): string {
  return `{fg:${sku}:${shard}}`;
}

/** The two calls the runner makes; @upstash/redis's `Redis` has them. */
export interface ScriptClient {
  evalsha(sha1: string, keys: string[], args: string[]): Promise<unknown>;
  eval(script: string, keys: string[], args: string[]): Promise<unknown>;
}

export class LuaScript {
  readonly source: string;
  #sha1: Promise<string> | undefined;

  constructor(source: string) {
    this.source = source;
  }

  /** Hex SHA1 of the source, computed once. */
  sha1(): Promise<string> {
    this.#sha1 ??= sha1Hex(this.source);
    return this.#sha1;
  }
}

export async function sha1Hex(text: string): Promise<string> {
  const digest = await crypto.subtle.digest("SHA-1", new TextEncoder().encode(text));
  return [...new Uint8Array(digest)].map((b) => b.toString(16).padStart(2, "0")).join("");
}

/** Redis's NOSCRIPT reply (@upstash/redis puts Redis's message first in its error message). */
export function isNoScript(error: unknown): boolean {
  return error instanceof Error && /^NOSCRIPT\b/.test(error.message);
}

/** EVALSHA; on NOSCRIPT only, EVAL (which also caches the script in Redis). Any other error is thrown. */
export async function runScript(
  client: ScriptClient,
  script: LuaScript,
  keys: string[],
  args: ReadonlyArray<string | number>,
): Promise<unknown> {
  const argv = args.map(String);
  try {
    return await client.evalsha(await script.sha1(), keys, argv);
  } catch (error) {
    if (!isNoScript(error)) throw error;
    return await client.eval(script.source, keys, argv);
  }
}
