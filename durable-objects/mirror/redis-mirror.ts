import { Redis } from "@upstash/redis/cloudflare";
import mirrorLua from "../../lua/mirror.lua";
import { type SaleStatus, type SkuState, sumShards } from "../engine/types";
import { LuaScript, runScript, shardTag } from "./lua-script";

/**
 * The Redis mirror of the stock objects (durable-objects/mirror/README.md): one hash per SKU shard holding the shard's newest
 * snapshot, written by `lua/mirror.lua` (a newer seq only, or a repair over the hash it read) and read by stock displays. It is never
 * read to decide a sale, and it is optional: without `UPSTASH_REDIS_REST_URL`/`_TOKEN` it is off.
 *
 * Every call is bounded by a timeout and never retried here (`retry: false`): a stock object must not
 * wait on Redis, and retrying is its alarm's job.
 */

export const MIRROR_SCRIPT = new LuaScript(mirrorLua);
/** Longest a snapshot write may take (it runs in the background of a stock object, never in a sale). */
export const MIRROR_WRITE_TIMEOUT_MS = 500;
/** Longest a display read may take before the caller falls back to the stock object. */
export const MIRROR_READ_TIMEOUT_MS = 250;

/** The mirror hash of one SKU shard; the hash tag keeps it in the shard's cluster slot. */
export function mirrorKey(sku: string, shard: number): string {
  return `${shardTag(sku, shard)}:mirror`;
}

interface MirrorConfig {
  url: string;
  token: string;
  timeoutMs: number;
}

interface PublishResult {
  /** False when the mirror already held this seq or a newer one (a repair: another seq than it read). */
  applied: boolean;
  /** The seq the mirror holds after the call (-1: none). */
  seq: number;
}

/** One shard's hash as read: its snapshot (null when absent or unreadable as one) and its stored seq. */
export interface ShardRead {
  snapshot: SkuState | null;
  /** The hash's seq field, what a repair names to be refused if the hash changed since (null: none). */
  seq: number | null;
}

/**
 * The fields of the hash, in HMGET order. The six first are mirror.lua's fixed arguments. The field
 * `version` holds the shard's seq: a stored name, kept so that snapshots already in Redis stay readable.
 */
const FIELDS = ["version", "total", "available", "held", "sold", "status", "state", "shards", "published_at"] as const;
type Field = (typeof FIELDS)[number];

export class RedisMirror {
  readonly #redis: Redis;

  constructor(config: MirrorConfig) {
    this.#redis = new Redis({
      url: config.url,
      token: config.token,
      // A fresh signal per request: a static signal would turn a timeout into a fake "Aborted" success.
      signal: () => AbortSignal.timeout(config.timeoutMs),
      retry: false,
      enableTelemetry: false,
      // One request per call: nothing is batched with another caller's command, and results stay raw.
      enableAutoPipelining: false,
      automaticDeserialization: false,
    });
  }

  /**
   * Writes a shard's snapshot unless the mirror already holds this seq or a newer one: the counts,
   * status and seq as fields of their own, and the whole state as JSON for displays.
   */
  async publish(state: SkuState, publishedAt: number): Promise<PublishResult> {
    return this.#write(state, publishedAt, "newer");
  }

  /**
   * Rewrites a shard's snapshot whatever seq it holds (reconciliation's repair of a mirror that is
   * wrong or ahead of its stock object, e.g. after the object's storage was reset), but only if the
   * hash still holds the seq `read` the repair compared (null: none). Refused (`applied: false`) when
   * it changed since: a snapshot the shard published meanwhile is newer than the repair's, and a
   * repair written over it would show the older stock until the next publish.
   */
  async replace(state: SkuState, publishedAt: number, read: number | null): Promise<PublishResult> {
    return this.#write(state, publishedAt, read === null ? "absent" : `=${read}`);
  }

  async #write(state: SkuState, publishedAt: number, guard: string): Promise<PublishResult> {
    const { total, available, held, sold } = state.stock;
    const reply = await runScript(
      this.#redis,
      MIRROR_SCRIPT,
      [mirrorKey(state.sku, state.shard)],
      [
        state.seq,
        total,
        available,
        held,
        sold,
        state.status,
        guard,
        "state",
        JSON.stringify(state),
        "shards",
        state.shards,
        "published_at",
        publishedAt,
      ],
    );
    if (!Array.isArray(reply) || reply.length !== 2) throw new Error(`mirror.lua answered ${JSON.stringify(reply)}`);
    const [applied, seq] = reply.map(Number);
    if ((applied !== 0 && applied !== 1) || seq === undefined || !Number.isSafeInteger(seq) || seq < -1) {
      throw new Error(`mirror.lua answered ${JSON.stringify(reply)}`);
    }
    return { applied: applied === 1, seq };
  }

  /**
   * Removes a shard's snapshot, so displays read the stock object rather than a snapshot that can no
   * longer be kept current (a Redis that reads but refuses writes still takes DEL: it frees memory).
   */
  async forget(sku: string, shard: number): Promise<void> {
    await this.#redis.exec(["DEL", mirrorKey(sku, shard)]);
  }

  /** One shard's snapshot, or null when the mirror has none. */
  async readShard(sku: string, shard: number): Promise<SkuState | null> {
    return (await this.inspect(sku, shard)).snapshot;
  }

  /** One shard's snapshot and the seq its hash holds (what a repair names, see {@link replace}). */
  async inspect(sku: string, shard: number): Promise<ShardRead> {
    const reply = await this.#redis.exec<unknown>(["HMGET", mirrorKey(sku, shard), ...FIELDS]);
    const snapshot = parseSnapshot(reply);
    // As mirror.lua reads it: a seq field that is not a number counts as none.
    const raw = Array.isArray(reply) ? reply[FIELDS.indexOf("version")] : null;
    const seq = raw === null || raw === undefined ? null : Number(raw);
    return { snapshot, seq: seq !== null && Number.isSafeInteger(seq) ? seq : null };
  }

  /**
   * A SKU as the mirror sees it, its counts summed over its shards (its seq is the sum of the
   * shards' seqs, which grows whenever any shard changes), or null when any shard has no snapshot.
   */
  async read(sku: string): Promise<SkuState | null> {
    const first = await this.readShard(sku, 0);
    if (!first || first.shards <= 1) return first;
    const rest = await Promise.all(Array.from({ length: first.shards - 1 }, (_, i) => this.readShard(sku, i + 1)));
    if (rest.some((shard) => shard === null)) return null;
    return sumShards([first, ...rest.filter((shard) => shard !== null)]);
  }
}

function parseSnapshot(reply: unknown): SkuState | null {
  if (!Array.isArray(reply) || reply.length !== FIELDS.length) throw new Error("unexpected HMGET reply");
  const field = (name: Field): string | null => {
    const value: unknown = reply[FIELDS.indexOf(name)];
    return value === null || value === undefined ? null : String(value);
  };
  const json = field("state");
  if (field("version") === null || json === null) return null;
  const int = (name: Field): number => {
    const value = Number(field(name));
    if (!Number.isSafeInteger(value)) throw new Error(`mirror field ${name} is not an integer`);
    return value;
  };
  const state: unknown = JSON.parse(json);
  if (typeof state !== "object" || state === null || !("sku" in state) || !("shards" in state)) {
    throw new Error("mirror state is not a stock snapshot");
  }
  const status = field("status");
  if (status !== "on_sale" && status !== "paused" && status !== "archived") {
    throw new Error(`mirror status ${String(status)}`);
  }
  // The counts, status and seq fields are what mirror.lua checked and ordered: they win.
  return {
    ...(state as SkuState),
    status: status satisfies SaleStatus,
    stock: { total: int("total"), available: int("available"), held: int("held"), sold: int("sold") },
    seq: int("version"),
  };
}

/** The mirror settings of an environment, or null when the mirror is off (either variable unset or empty). */
function mirrorConfig(env: Env, timeoutMs: number): MirrorConfig | null {
  const url = env.UPSTASH_REDIS_REST_URL;
  const token = env.UPSTASH_REDIS_REST_TOKEN;
  return url && token ? { url, token, timeoutMs } : null;
}

const clients = new Map<string, RedisMirror>();

/** The isolate's mirror client for these settings (one per URL, token and timeout), or null when off. */
export function mirrorFromEnv(env: Env, timeoutMs: number): RedisMirror | null {
  const config = mirrorConfig(env, timeoutMs);
  if (!config) return null;
  const key = JSON.stringify([config.url, config.token, timeoutMs]);
  let client = clients.get(key);
  if (!client) {
    client = new RedisMirror(config);
    clients.set(key, client);
  }
  return client;
}
