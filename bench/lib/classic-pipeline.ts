// The classic design's full pipeline (bench point `classic_pipeline`), the pieces its processes share:
// the hold script with its outbox, the message, the settings each child gets, and a line protocol
// between the bench and its children (bench/lib/classic-producer.ts, bench/lib/classic-consumer.ts).
import { type ChildProcess, spawn } from "node:child_process";
import { createHash } from "node:crypto";
import { fileURLToPath } from "node:url";
import { LUA_SOURCES } from "../../tools/lua";

/**
 * lua/reserve.lua with the seeds' "local transaction" record written in the same script: on a new
 * hold it also XADDs the order message to the shard's outbox stream (a 7th key, same hash tag) and
 * answers `{ok, outbox: <stream id>, body}`. The seeds (duolaimall's PromoTransactionProducer) run
 * the Lua hold and then set a `transactionId → success` bucket, two Redis calls with a crash window
 * between them that their own write-up names; here hold and record are one script, so a hold without
 * its message record cannot exist. Replays and rejections answer as reserve.lua does, with no record.
 */
function holdWithOutbox(): string {
  const source = LUA_SOURCES.reserve;
  const keys = 'if #KEYS ~= 6 then return redis.error_reply("ERR reserve.lua expects 6 keys") end';
  const last =
    "return answer({ reservation = reservation(newId), replayed = false, available = available - quantity })";
  if (!source.includes(keys) || !source.includes(last))
    throw new Error("lua/reserve.lua changed: bench/lib/classic-pipeline.ts cannot add its outbox write");
  return source
    .replace(keys, 'if #KEYS ~= 7 then return redis.error_reply("ERR reserve+outbox expects 7 keys") end')
    .replace(
      last,
      [
        "local body = cjson.encode({ id = newId, sku = skuName, userId = userId, quantity = quantity, createdAt = now })",
        'local outboxId = redis.call("XADD", KEYS[7], "*", "m", body)',
        "return cjson.encode({ ok = true, outbox = outboxId, body = body })",
      ].join("\n"),
    );
}
export const HOLD_WITH_OUTBOX = holdWithOutbox();
export const HOLD_WITH_OUTBOX_SHA1 = createHash("sha1").update(HOLD_WITH_OUTBOX).digest("hex");

/** The order message: the hold as the consumer writes it (createdAt: the hold's `now`, epoch ms). */
export interface OrderMessage {
  id: string;
  sku: string;
  userId: string;
  quantity: number;
  createdAt: number;
}

export interface ProducerSettings {
  redisUrl: string;
  amqpUrl: string;
  queue: string;
  sku: string;
  /** The shard's six keys (tools/lua.ts `shardKeys`) and the outbox stream's. */
  keys: string[];
  outboxKey: string;
  reservations: number;
  /** Holds per second at most, in chunks of `chunk`, each chunk in groups of `group` in flight at once. */
  rate: number;
  chunk: number;
  group: number;
  run: string;
  /** The check-back: outbox entries older than this are published again (their confirm never came). */
  checkBackMs: number;
}

export interface ProducerResult {
  ok: number;
  rejected: Record<string, number>;
  published: number;
  confirmed: number;
  nacked: number;
  /** Messages the check-back published again (an outbox entry still there `checkBackMs` after its hold). */
  republished: number;
  firstHoldAt: number;
  saleMs: number;
  /** When the last confirm arrived, ms after the sale's start. */
  confirmedMs: number;
}

export interface ConsumerSettings {
  amqpUrl: string;
  queue: string;
  mysql: { host: string; port: number; user: string; password: string; database: string };
  table: string;
  /** Unacknowledged deliveries RabbitMQ lets the consumer hold. */
  prefetch: number;
  /** Rows per INSERT (one transaction, one commit). */
  maxBatch: number;
}

export interface ConsumerStats {
  /** Messages whose row is committed (inserted or found already there) and acknowledged. */
  persisted: number;
  /** Of those, messages whose row was already there (ON DUPLICATE KEY: no change). */
  duplicates: number;
  batches: number;
}

/** A child of the bench speaking one JSON object per line on stdout; the bench writes lines to its stdin. */
export interface LineChild {
  pid: number;
  send(line: string): void;
  /** The next line (parsed) for which `match` holds, or a rejection when the child exits or `ms` pass. */
  next<T>(match: (msg: Record<string, unknown>) => boolean, ms: number): Promise<T>;
  /** Calls `each` on every line from now on. */
  onLine(each: (msg: Record<string, unknown>) => void): void;
  stop(): Promise<void>;
}

/** Starts `bench/lib/<file>` in a Node process of its own (this process's loader flags: tsx), its settings as argv[2]. */
export function startLineChild(file: string, settings: object): LineChild {
  const path = fileURLToPath(new URL(`./${file}`, import.meta.url));
  const child: ChildProcess = spawn(process.execPath, [...process.execArgv, path, JSON.stringify(settings)], {
    stdio: ["pipe", "pipe", "inherit"],
  });
  const listeners = new Set<(msg: Record<string, unknown>) => void>();
  let buffer = "";
  child.stdout?.on("data", (chunk: Buffer) => {
    buffer += chunk.toString();
    for (let nl = buffer.indexOf("\n"); nl >= 0; nl = buffer.indexOf("\n")) {
      const line = buffer.slice(0, nl).trim();
      buffer = buffer.slice(nl + 1);
      if (!line) continue;
      const msg = JSON.parse(line) as Record<string, unknown>;
      for (const each of [...listeners]) each(msg);
    }
  });
  const exited = new Promise<number | null>((resolve) => child.once("exit", (code) => resolve(code)));
  return {
    pid: child.pid ?? 0,
    send: (line) => void child.stdin?.write(`${line}\n`),
    onLine: (each) => void listeners.add(each),
    next<T>(match: (msg: Record<string, unknown>) => boolean, ms: number) {
      return new Promise<T>((resolve, reject) => {
        const timer = setTimeout(() => done(new Error(`${file}: no answer in ${ms} ms`)), ms);
        const done = (err?: Error, msg?: unknown) => {
          clearTimeout(timer);
          listeners.delete(listen);
          if (err) reject(err);
          else resolve(msg as T);
        };
        const listen = (msg: Record<string, unknown>) => {
          if (typeof msg.error === "string") done(new Error(`${file}: ${msg.error}`));
          else if (match(msg)) done(undefined, msg);
        };
        listeners.add(listen);
        void exited.then((code) => done(new Error(`${file} exited (${code})`)));
      });
    },
    async stop() {
      if (child.exitCode !== null || child.signalCode !== null) return;
      child.stdin?.end(); // each child closes its connections and exits when its stdin ends
      const timer = setTimeout(() => child.kill("SIGKILL"), 5000);
      await exited;
      clearTimeout(timer);
    },
  };
}
