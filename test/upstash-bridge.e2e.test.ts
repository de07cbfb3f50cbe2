import { execFile } from "node:child_process";
import { createHash } from "node:crypto";
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { request } from "node:http";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { promisify } from "node:util";
import { Redis, type RedisConfigNodejs } from "@upstash/redis";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { hasRedisServer, REDIS_MISSING, type RedisServer, startRedis } from "../tools/redis-server.ts";
import { type Bridge, startBridge } from "../tools/upstash-bridge.ts";

// The real @upstash/redis client against tools/upstash-bridge.ts against a real redis-server:
// if this passes, the Worker's Redis code can run locally exactly as it would against Upstash.

const TOKEN = "bridge-test-token";

let redisServer: RedisServer | undefined;
let bridge: Bridge | undefined;

beforeAll(async () => {
  // One clear line instead of a spawn ENOENT stack when the machine has no Redis.
  if (!hasRedisServer()) throw new Error(REDIS_MISSING);
  redisServer = await startRedis();
  bridge = await startBridge({ redisUrl: redisServer.url, token: TOKEN });
});

afterAll(async () => {
  await bridge?.close();
  await redisServer?.stop();
});

function bridgeUrl(): string {
  if (!bridge) throw new Error("bridge not started");
  return bridge.url;
}

function client(config: Partial<RedisConfigNodejs> = {}): Redis {
  // retry: false so a broken bridge fails a test at once instead of after the client's ~4 s of backoff.
  return new Redis({ url: bridgeUrl(), token: TOKEN, enableTelemetry: false, retry: false, ...config });
}

/** POSTs like the client does, but lets a test see status codes and raw bodies. */
async function raw(
  path: string,
  body: unknown,
  headers: Record<string, string> = { authorization: `Bearer ${TOKEN}` },
): Promise<{ status: number; json: unknown }> {
  const res = await fetch(`${bridgeUrl()}${path}`, {
    method: "POST",
    headers: { "content-type": "application/json", ...headers },
    body: typeof body === "string" ? body : JSON.stringify(body),
  });
  return { status: res.status, json: await res.json() };
}

const sha1 = (text: string) => createHash("sha1").update(text).digest("hex");

// Values chosen to trip a bridge that mangles encodings: multi-byte UTF-8, control bytes, strings that
// are themselves valid base64 (a double decode would change them), "OK" (special-cased by the client),
// and JSON-looking text.
const TRICKY_STRINGS: Record<string, string> = {
  plain: "hello",
  empty: "",
  unicode: "🛒 flash-sale ✓ — ünïcødé 日本語 עברית",
  controlBytes: "\u0000\u0001\u0002\u001f\u007f\r\n\t end",
  latin1High: "\u00ff\u00fe\u0080",
  looksBase64: "aGVsbG8=",
  ok: "OK",
  jsonText: '{"a":1,"b":[true,null]}',
  spaces: "  leading and trailing  ",
};

// @upstash/redis 1.39 auto-pipelines by default: single commands issued in the same tick are batched
// into POST /pipeline (reads and writes in separate requests), and only a few commands (hgetall, lrange,
// smembers, ...) still go to POST /. With enableAutoPipelining: false every command is its own POST /.
// Both wire paths are exercised, each with both response encodings.
const CLIENT_MODES: Array<{ name: string; config: Partial<RedisConfigNodejs> }> = [
  { name: "base64+autopipeline (client defaults)", config: {} },
  { name: "plain+autopipeline (responseEncoding: false)", config: { responseEncoding: false } },
  { name: "base64+single (enableAutoPipelining: false)", config: { enableAutoPipelining: false } },
  { name: "plain+single (both off)", config: { responseEncoding: false, enableAutoPipelining: false } },
];

describe.each(CLIENT_MODES)("@upstash/redis over the bridge, $name", ({ name, config }) => {
  const prefix = `mode:${name.split(" ")[0]}`;
  const key = (suffix: string) => `${prefix}:${suffix}`;

  it("round-trips strings byte for byte (unicode, control bytes, base64-looking text)", async () => {
    const redis = client({ ...config, automaticDeserialization: false });
    for (const [label, value] of Object.entries(TRICKY_STRINGS)) {
      expect(await redis.set(key(`s:${label}`), value)).toBe("OK");
      expect(await redis.get(key(`s:${label}`)), label).toBe(value);
    }
    const keys = Object.keys(TRICKY_STRINGS).map((label) => key(`s:${label}`));
    expect(await redis.mget(...keys)).toEqual(Object.values(TRICKY_STRINGS));
    expect(await redis.strlen(key("s:unicode"))).toBe(Buffer.byteLength(TRICKY_STRINGS.unicode ?? ""));
  });

  it("deserializes JSON values and numbers by default", async () => {
    const redis = client(config);
    await redis.set(key("obj"), { sku: "A-1", qty: 3, tags: ["x", "ü"] });
    expect(await redis.get(key("obj"))).toEqual({ sku: "A-1", qty: 3, tags: ["x", "ü"] });
    await redis.set(key("num"), 42);
    expect(await redis.get(key("num"))).toBe(42);
    await redis.set(key("bool"), true);
    expect(await redis.get(key("bool"))).toBe(true);
  });

  it("returns integers as numbers and float replies as parsed numbers", async () => {
    const redis = client(config);
    expect(await redis.incr(key("counter"))).toBe(1);
    expect(await redis.incrby(key("counter"), 41)).toBe(42);
    expect(await redis.decrby(key("counter"), 50)).toBe(-8);
    expect(await redis.incrbyfloat(key("float"), 1.5)).toBe(1.5);
    expect(await redis.zadd(key("z"), { score: 2.25, member: "m" })).toBe(1);
    expect(await redis.zscore(key("z"), "m")).toBe(2.25);
    expect(await redis.exists(key("counter"), key("missing"))).toBe(1);
    expect(await redis.ttl(key("counter"))).toBe(-1);
  });

  it("passes nulls through (missing keys, fields, empty pops)", async () => {
    const redis = client(config);
    await redis.set(key("present"), "here");
    expect(await redis.get(key("absent"))).toBeNull();
    expect(await redis.hget(key("absent-hash"), "f")).toBeNull();
    expect(await redis.lpop(key("absent-list"))).toBeNull();
    expect(await redis.mget(key("present"), key("absent"))).toEqual(["here", null]);
  });

  it("round-trips hashes", async () => {
    const redis = client(config);
    expect(await redis.hset(key("h"), { stock: 10, name: "Café ☕", note: "aGVsbG8=" })).toBe(3);
    expect(await redis.hgetall(key("h"))).toEqual({ stock: 10, name: "Café ☕", note: "aGVsbG8=" });
    expect(await redis.hincrby(key("h"), "stock", -3)).toBe(7);
    expect(await redis.hmget(key("h"), "stock", "nope")).toEqual({ stock: 7, nope: null });
    expect(await redis.hgetall(key("no-such-hash"))).toBeNull();
  });

  it("returns nested arrays (lists, sets, Lua tables with false -> null)", async () => {
    const redis = client(config);
    expect(await redis.rpush(key("l"), "a", "ü", "c")).toBe(3);
    expect(await redis.lrange(key("l"), 0, -1)).toEqual(["a", "ü", "c"]);
    await redis.sadd(key("set"), "x", "y");
    expect((await redis.smembers(key("set"))).sort()).toEqual(["x", "y"]);
    expect(await redis.eval("return {1, 'two', false, {3, 'four'}}", [], [])).toEqual([1, "two", null, [3, "four"]]);
  });

  it("runs pipelines and reports per-command errors", async () => {
    const redis = client(config);
    const p = redis.pipeline();
    p.set(key("p:s"), "v");
    p.incr(key("p:n"));
    p.get(key("p:s"));
    p.get(key("p:missing"));
    p.hset(key("p:h"), { f: "1" });
    p.hgetall(key("p:h"));
    expect(await p.exec()).toEqual(["OK", 1, "v", null, 1, { f: 1 }]);

    const failing = redis.pipeline();
    failing.set(key("p:str"), "s");
    failing.lpush(key("p:str"), "x");
    failing.get(key("p:str"));
    const entries = await failing.exec({ keepErrors: true });
    expect(entries[0]).toEqual({ result: "OK", error: undefined });
    expect(entries[1]?.error).toMatch(/^WRONGTYPE/);
    expect(entries[2]).toEqual({ result: "s", error: undefined });

    const throwing = redis.pipeline();
    throwing.get(key("p:str"));
    throwing.incr(key("p:str"));
    await expect(throwing.exec()).rejects.toThrow(/Command 2 \[ incr \] failed: ERR value is not an integer/);
  });

  it("runs multi/exec transactions and returns every result", async () => {
    const redis = client(config);
    const tx = redis.multi();
    tx.set(key("t:n"), 1);
    tx.incr(key("t:n"));
    tx.get(key("t:n"));
    tx.hset(key("t:h"), { a: "ü" });
    tx.hgetall(key("t:h"));
    expect(await tx.exec()).toEqual(["OK", 2, 2, 1, { a: "ü" }]);

    // A runtime error inside EXEC does not roll back the others (Redis semantics): all three ran.
    const partial = redis.multi();
    partial.set(key("t:s"), "s");
    partial.lpush(key("t:s"), "x");
    partial.append(key("t:s"), "!");
    const entries = await partial.exec({ keepErrors: true });
    expect(entries[0]?.result).toBe("OK");
    expect(entries[1]?.error).toMatch(/^WRONGTYPE/);
    expect(entries[2]?.result).toBe(2);
  });

  it("keeps transactions isolated from concurrent traffic", async () => {
    const redis = client(config);
    const counter = key("iso:counter");
    // Each transaction must see only its own INCR between INCR and GET, while single INCRs from other
    // requests land around (never inside) it, and every reply must reach the request that sent it.
    const transactions = Array.from({ length: 25 }, () => {
      const tx = redis.multi();
      tx.incr(counter);
      tx.get(counter);
      return tx.exec<[number, number]>();
    });
    const singles = Array.from({ length: 25 }, () => redis.incr(counter));
    const [txResults, singleResults] = await Promise.all([Promise.all(transactions), Promise.all(singles)]);
    for (const [incremented, read] of txResults) expect(read).toBe(incremented);
    const all = [...txResults.map(([incremented]) => incremented), ...singleResults].sort((a, b) => a - b);
    expect(all).toEqual(Array.from({ length: 50 }, (_, i) => i + 1));
    expect(await redis.get(counter)).toBe(50);
  });

  it("lets Script.exec fall back from EVALSHA to EVAL on NOSCRIPT, also after SCRIPT FLUSH", async () => {
    const redis = client(config);
    const source = `return {KEYS[1], ARGV[1], redis.call('INCR', KEYS[1] .. ':n'), '${name}'}`;
    const sha = sha1(source);
    await redis.scriptFlush();

    // The bare command surfaces Redis's NOSCRIPT error (the client prepends "Command failed: " when
    // auto-pipelining); Script.exec falls back when the message includes "noscript".
    await expect(redis.evalsha(sha, [key("sc")], ["a"])).rejects.toThrow(/(^|: )NOSCRIPT No matching script/);

    const script = redis.createScript<[string, string, number, string]>(source);
    expect(await redis.scriptExists(sha)).toEqual([0]);
    expect(await script.exec([key("sc")], ["a"])).toEqual([key("sc"), "a", 1, name]);
    // EVAL caches the script, so it now exists: proof the fallback went through EVAL.
    expect(await redis.scriptExists(sha)).toEqual([1]);
    expect(await script.exec([key("sc")], ["b"])).toEqual([key("sc"), "b", 2, name]);

    expect(await redis.scriptFlush()).toBe("OK");
    expect(await redis.scriptExists(sha)).toEqual([0]);
    expect(await script.exec([key("sc")], ["c"])).toEqual([key("sc"), "c", 3, name]);
  });

  it("surfaces Redis errors as UpstashError with the Redis message", async () => {
    const redis = client(config);
    await redis.set(key("e:str"), "text");
    await expect(redis.lpush(key("e:str"), "x")).rejects.toThrow(/(^|: )WRONGTYPE Operation against a key/);
    await expect(redis.incr(key("e:str"))).rejects.toThrow(/(^|: )ERR value is not an integer/);
  });
});

describe("bridge protocol (raw HTTP)", () => {
  it("answers a command array with {result}", async () => {
    expect(await raw("/", ["SET", "raw:k", "v", "EX", 100])).toEqual({ status: 200, json: { result: "OK" } });
    expect(await raw("/", ["GET", "raw:k"])).toEqual({ status: 200, json: { result: "v" } });
    expect(await raw("/", ["GET", "raw:missing"])).toEqual({ status: 200, json: { result: null } });
    // Redis rounds the time left to whole seconds: 100 only for the first half second after the SET, so
    // a slow request between them reads 99 (or less on a stalled machine).
    const ttl = await raw("/", ["TTL", "raw:k"]);
    expect(ttl.status).toBe(200);
    expect((ttl.json as { result: number }).result).toBeGreaterThan(90);
    expect((ttl.json as { result: number }).result).toBeLessThanOrEqual(100);
  });

  it("base64-encodes every result string (recursively) but never numbers, nulls or errors", async () => {
    const b64 = { authorization: `Bearer ${TOKEN}`, "upstash-encoding": "base64" };
    const enc = (s: string) => Buffer.from(s).toString("base64");
    await raw("/", ["DEL", "raw:list"]);
    await raw("/", ["RPUSH", "raw:list", "ü", "b"]);
    expect(await raw("/", ["GET", "raw:k"], b64)).toEqual({ status: 200, json: { result: enc("v") } });
    expect(await raw("/", ["SET", "raw:k2", "x"], b64)).toEqual({ status: 200, json: { result: enc("OK") } });
    expect(await raw("/", ["LRANGE", "raw:list", 0, -1], b64)).toEqual({
      status: 200,
      json: { result: [enc("ü"), enc("b")] },
    });
    expect(await raw("/", ["EVAL", "return {1, {'n', false}}", 0], b64)).toEqual({
      status: 200,
      json: { result: [1, [enc("n"), null]] },
    });
    expect(await raw("/", ["EVALSHA", sha1("never loaded"), 0], b64)).toEqual({
      status: 400,
      json: { error: "NOSCRIPT No matching script. Please use EVAL." },
    });
    expect(
      await raw(
        "/pipeline",
        [
          ["GET", "raw:k"],
          ["INCR", "raw:k"],
          ["LLEN", "raw:list"],
        ],
        b64,
      ),
    ).toEqual({
      status: 200,
      json: [{ result: enc("v") }, { error: "ERR value is not an integer or out of range" }, { result: 2 }],
    });
  });

  it("returns Redis errors as 400 with Redis's prefix", async () => {
    const noscript = await raw("/", ["EVALSHA", sha1("not loaded either"), 0]);
    expect(noscript.status).toBe(400);
    expect(noscript.json).toEqual({ error: "NOSCRIPT No matching script. Please use EVAL." });
    const unknown = await raw("/", ["NOSUCHCOMMAND", "x"]);
    expect(unknown.status).toBe(400);
    expect(unknown.json).toMatchObject({ error: expect.stringMatching(/^ERR unknown command/) });
  });

  it("rejects a multi-exec with a command that cannot be queued: 400 EXECABORT, nothing applied", async () => {
    await raw("/", ["DEL", "raw:tx"]);
    const res = await raw("/multi-exec", [["SET", "raw:tx", "1"], ["NOSUCHCOMMAND"]]);
    expect(res.status).toBe(400);
    expect(res.json).toMatchObject({ error: expect.stringMatching(/^EXECABORT .*command 2: ERR unknown command/) });
    expect(await raw("/", ["EXISTS", "raw:tx"])).toEqual({ status: 200, json: { result: 0 } });
  });

  it("refuses commands that would change a shared connection's state", async () => {
    for (const command of [["SELECT", "1"], ["MULTI"], ["SUBSCRIBE", "c"], ["CLIENT", "REPLY", "OFF"]]) {
      const res = await raw("/", command);
      expect(res.status, command.join(" ")).toBe(400);
      expect(res.json).toMatchObject({ error: expect.stringMatching(/^ERR .* not supported by the upstash bridge/) });
    }
    expect(await raw("/pipeline", [["SELECT", "1"], ["PING"]])).toMatchObject({
      status: 200,
      json: [{ error: expect.stringMatching(/^ERR 'select'/) }, { result: "PONG" }],
    });
    expect((await raw("/multi-exec", [["PING"], ["SELECT", "1"]])).status).toBe(400);
    // The shared connection is still on db 0 and answering.
    expect(await raw("/", ["GET", "raw:k"])).toEqual({ status: 200, json: { result: "v" } });
  });

  it("supports Upstash's path form, with a POST body as the last argument", async () => {
    const auth = { authorization: `Bearer ${TOKEN}` };
    const set = await fetch(`${bridgeUrl()}/set/raw:path/${encodeURIComponent("a b/ü")}`, { headers: auth });
    expect(await set.json()).toEqual({ result: "OK" });
    const get = await fetch(`${bridgeUrl()}/get/raw:path`, { headers: auth });
    expect(await get.json()).toEqual({ result: "a b/ü" });
    const post = await fetch(`${bridgeUrl()}/set/raw:body`, { method: "POST", headers: auth, body: "raw \u00e9 body" });
    expect(await post.json()).toEqual({ result: "OK" });
    expect(await raw("/", ["GET", "raw:body"])).toEqual({ status: 200, json: { result: "raw é body" } });
  });

  it("401s a wrong token, through raw fetch and through the client", async () => {
    expect(await raw("/", ["PING"], { authorization: "Bearer not-the-token" })).toEqual({
      status: 401,
      json: { error: "Unauthorized" },
    });
    expect(await raw("/pipeline", [["PING"]], { authorization: "Bearer not-the-token" })).toMatchObject({
      status: 401,
    });
    const wrong = new Redis({ url: bridgeUrl(), token: "not-the-token", enableTelemetry: false, retry: false });
    await expect(wrong.get("raw:k")).rejects.toThrow(/^Unauthorized/);
  });

  it("400s a missing or malformed Authorization header", async () => {
    for (const headers of [
      {},
      { authorization: "Basic abc" },
      { authorization: "Bearer" },
      { authorization: `Bearer ${TOKEN} x` },
    ]) {
      expect(await raw("/", ["PING"], headers), JSON.stringify(headers)).toEqual({
        status: 400,
        json: { error: "Missing/Invalid authorization header" },
      });
    }
  });

  it("400s bodies that are not a command array", async () => {
    for (const body of ["not json", "{}", "[]", "[null]", '["GET", {"k": 1}]']) {
      const res = await raw("/", body);
      expect(res.status, body).toBe(400);
      expect(res.json).toMatchObject({ error: expect.any(String) });
    }
    expect((await raw("/pipeline", ["GET", "k"])).status).toBe(400);
    expect((await raw("/multi-exec", "nope")).status).toBe(400);
  });

  it("413s a body over 1 MiB and keeps serving afterwards", async () => {
    const big = await raw("/", ["SET", "raw:big", "x".repeat(1024 * 1024 + 1)]);
    expect(big).toEqual({ status: 413, json: { error: "Request body larger than 1048576 bytes" } });
    expect(await raw("/", ["EXISTS", "raw:big"])).toEqual({ status: 200, json: { result: 0 } });
  });

  it("413s an oversized chunked upload (no Content-Length) too", async () => {
    const { status, body } = await new Promise<{ status: number; body: string }>((resolve, reject) => {
      const req = request(`${bridgeUrl()}/`, {
        method: "POST",
        headers: { authorization: `Bearer ${TOKEN}`, "content-type": "application/json" },
      });
      req.on("response", (res) => {
        let text = "";
        res.setEncoding("utf8");
        res.on("data", (chunk: string) => {
          text += chunk;
        });
        res.on("end", () => resolve({ status: res.statusCode ?? 0, body: text }));
      });
      // The bridge may close the socket while we are still uploading; the response is what matters.
      req.on("error", reject);
      const chunk = "x".repeat(64 * 1024);
      req.write('["SET","raw:chunked","');
      for (let i = 0; i < 20; i++) req.write(chunk);
      req.end('"]');
    });
    expect(status).toBe(413);
    expect(JSON.parse(body)).toEqual({ error: "Request body larger than 1048576 bytes" });
    expect(await raw("/", ["EXISTS", "raw:chunked"])).toEqual({ status: 200, json: { result: 0 } });
  });

  it("405s other methods", async () => {
    const res = await fetch(`${bridgeUrl()}/`, { method: "PUT", headers: { authorization: `Bearer ${TOKEN}` } });
    expect(res.status).toBe(405);
    const getPipeline = await fetch(`${bridgeUrl()}/pipeline`, { headers: { authorization: `Bearer ${TOKEN}` } });
    expect(getPipeline.status).toBe(405);
  });
});

describe("a redis-server of tools/redis-server.ts", () => {
  it("does not outlive the process that started it, even one that exits without stopping it", async () => {
    // As a process hosting Miniflare ends on Ctrl-C: Miniflare's own SIGINT handler calls
    // process.exit at once, so the script's stop never runs (`npm start` left both behind).
    const dir = mkdtempSync(join(tmpdir(), "redis-exit-"));
    const script = join(dir, "start-and-exit.mts"); // .mts: an ES module outside the package, top-level await
    const module = new URL("../tools/redis-server.ts", import.meta.url).href;
    writeFileSync(
      script,
      `import { startRedis } from ${JSON.stringify(module)};
const redis = await startRedis();
console.log(JSON.stringify({ pid: redis.process.pid, dir: redis.dir }));
process.exit(130);
`,
    );
    try {
      const run: { code?: number; stdout?: string } = await promisify(execFile)(
        process.execPath,
        ["--import", "tsx", script],
        { cwd: fileURLToPath(new URL("..", import.meta.url)) },
      ).catch((err: { code?: number; stdout?: string }) => err);
      expect(run.code).toBe(130);
      const started = JSON.parse(run.stdout ?? "") as { pid: number; dir: string };
      // Running, by /proc: a process killed but not yet reaped by its new parent is a zombie ("Z"), gone.
      const alive = () => {
        try {
          return readFileSync(`/proc/${started.pid}/stat`, "utf8").split(") ")[1]?.[0] !== "Z";
        } catch {
          return false;
        }
      };
      // Killed as its process exited: a moment to die.
      for (const until = Date.now() + 5_000; alive() && Date.now() < until; )
        await new Promise((r) => setTimeout(r, 50));
      expect(alive(), `redis-server ${started.pid} outlived its process`).toBe(false);
      expect(existsSync(started.dir), `${started.dir} is left`).toBe(false);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});
