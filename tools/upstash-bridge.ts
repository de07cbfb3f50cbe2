import { createHash, timingSafeEqual } from "node:crypto";
import { createServer, type IncomingMessage, type ServerResponse } from "node:http";
import { resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { parseArgs } from "node:util";
import { createClient, createClientPool, ErrorReply, RESP_TYPES } from "redis";

/**
 * A local stand-in for Upstash Redis: speaks the Upstash REST protocol (the subset @upstash/redis uses)
 * in front of a real redis-server, so the Worker can run against plain Redis in dev, tests and the bench.
 * Modelled on hiett/serverless-redis-http (SRH):
 *
 *   POST /            body ["SET","k","v"]            -> 200 {"result": ...} | 400 {"error": "<redis error>"}
 *   POST /pipeline    body [["SET","k","v"],["GET","k"]] -> 200 [{"result": ...} | {"error": ...}, ...]
 *   POST /multi-exec  same body, run as MULTI ... EXEC on a dedicated connection -> 200 [...] | 400 {"error"}
 *   GET|POST /cmd/arg1/arg2   Upstash's path form (curl-friendly; a POST body becomes the last argument)
 *
 *   Authorization: Bearer <token>  missing/malformed -> 400, wrong token -> 401 (as SRH does)
 *   Upstash-Encoding: base64       every string in a result is base64 (numbers, nulls and errors are not)
 */

export interface BridgeOptions {
  redisUrl: string;
  token: string;
  /** 0 (the default) picks a free port. */
  port?: number;
  host?: string;
  /** Larger request bodies get 413. */
  maxBodyBytes?: number;
}

export interface Bridge {
  url: string;
  port: number;
  close(): Promise<void>;
}

type Arg = string | Buffer;
type Json = string | number | null | Json[];
type Entry = { result: Json } | { error: string };

const DEFAULT_MAX_BODY_BYTES = 1024 * 1024;

// Bulk and simple strings come back as Buffers so base64 is computed from Redis's bytes, not from a
// UTF-8-decoded copy that would already have mangled binary values. Passed on every call because
// `withTypeMapping()` proxies do not reach `sendCommand` in redis v5.
const RAW = { typeMapping: { [RESP_TYPES.BLOB_STRING]: Buffer, [RESP_TYPES.SIMPLE_STRING]: Buffer } } as const;

/** What the bridge needs from a redis connection (a client, or one lent by the pool). */
interface Connection {
  sendCommand(args: readonly Arg[], options: typeof RAW): Promise<unknown>;
}

/** A failure that is the HTTP client's fault; `message` becomes the `{"error"}` body. */
class HttpError extends Error {
  constructor(
    readonly status: number,
    message: string,
    /** The request body was not read to its end, so the connection cannot be reused. */
    readonly closeConnection = false,
  ) {
    super(message);
  }
}

// These change the state of the connection they run on. Requests share connections (the pool's are
// reused across requests too), so one caller's SELECT/SUBSCRIBE/CLIENT REPLY OFF would silently break
// everybody else's replies; MULTI/EXEC/WATCH are meaningless across stateless HTTP requests.
const CONNECTION_STATE_COMMANDS = new Set([
  "AUTH",
  "DISCARD",
  "EXEC",
  "HELLO",
  "MONITOR",
  "MULTI",
  "PSUBSCRIBE",
  "PSYNC",
  "PUNSUBSCRIBE",
  "QUIT",
  "RESET",
  "SELECT",
  "SSUBSCRIBE",
  "SUBSCRIBE",
  "SUNSUBSCRIBE",
  "SYNC",
  "UNSUBSCRIBE",
  "UNWATCH",
  "WATCH",
]);

function refusal(args: readonly Arg[]): string | undefined {
  const name = String(args[0]).toUpperCase();
  const sub = args[1] === undefined ? "" : String(args[1]).toUpperCase();
  if (CONNECTION_STATE_COMMANDS.has(name) || (name === "CLIENT" && (sub === "REPLY" || sub === "TRACKING"))) {
    return `ERR '${String(args[0]).toLowerCase()}' is not supported by the upstash bridge (it would change the state of a shared connection)`;
  }
  return undefined;
}

/** A JSON command array -> Redis arguments. Numbers and booleans are what @upstash/redis sends unquoted. */
function toArgs(value: unknown): string[] | undefined {
  if (!Array.isArray(value) || value.length === 0) return undefined;
  const args: string[] = [];
  for (const item of value) {
    if (typeof item === "string") args.push(item);
    else if (typeof item === "number" || typeof item === "boolean") args.push(String(item));
    else return undefined;
  }
  return args;
}

function toCommandList(value: unknown): string[][] {
  if (!Array.isArray(value)) throw new HttpError(400, "Invalid command array. Expected an array of string arrays.");
  return value.map((command) => {
    const args = toArgs(command);
    if (!args) throw new HttpError(400, "Invalid command array. Expected an array of string arrays.");
    return args;
  });
}

/** A raw RESP2 reply -> JSON, base64-encoding strings when the caller asked for it. */
function toJson(reply: unknown, base64: boolean): Json {
  if (reply === null || reply === undefined) return null;
  if (Buffer.isBuffer(reply)) return base64 ? reply.toString("base64") : reply.toString("utf8");
  // Integer replies: the client passes numbers through untouched in either encoding.
  if (typeof reply === "number") return reply;
  if (Array.isArray(reply)) return reply.map((item) => toJson(item, base64));
  // An error nested in an array (a Lua table holding redis.error_reply) is data at this level, so it is
  // encoded like any other string; only the top-level `error` fields stay plain.
  const text = reply instanceof ErrorReply ? reply.message : String(reply);
  return base64 ? Buffer.from(text).toString("base64") : text;
}

function rejectionEntry(reason: unknown): Entry {
  // Anything that is not a Redis reply (socket closed, client offline) fails the whole request with 500:
  // reporting it per command would look like Redis itself had answered.
  if (reason instanceof ErrorReply) return { error: reason.message };
  throw reason;
}

async function runSingle(conn: Connection, args: readonly Arg[], base64: boolean): Promise<[number, unknown]> {
  const refused = refusal(args);
  if (refused) return [400, { error: refused }];
  try {
    return [200, { result: toJson(await conn.sendCommand(args, RAW), base64) }];
  } catch (error) {
    // 400 with Redis's own message (NOSCRIPT ..., WRONGTYPE ...): @upstash/redis's Script.exec looks for
    // "noscript" in it to fall back from EVALSHA to EVAL.
    if (error instanceof ErrorReply) return [400, { error: error.message }];
    throw error;
  }
}

async function runPipeline(conn: Connection, commands: string[][], base64: boolean): Promise<[number, unknown]> {
  // All sendCommand calls are issued in the same tick, so node-redis writes them back to back on the
  // shared connection, in order; like Upstash's pipeline this is batching, not atomicity.
  const settled = await Promise.allSettled(
    commands.map((args) => {
      const refused = refusal(args);
      return refused ? Promise.reject(new ErrorReply(refused)) : conn.sendCommand(args, RAW);
    }),
  );
  return [
    200,
    settled.map(
      (s): Entry => (s.status === "fulfilled" ? { result: toJson(s.value, base64) } : rejectionEntry(s.reason)),
    ),
  ];
}

async function runTransaction(conn: Connection, commands: string[][], base64: boolean): Promise<[number, unknown]> {
  for (const args of commands) {
    const refused = refusal(args);
    if (refused) return [400, { error: refused }];
  }
  // Raw MULTI/queue/EXEC rather than node-redis's multi(): it keeps every queuing error and the EXEC
  // reply (EXECABORT, or per-command errors inside the EXEC array), which is what we must report.
  // `conn` is lent to this request alone, so nothing else can land between MULTI and EXEC.
  const settled = await Promise.allSettled([
    conn.sendCommand(["MULTI"], RAW),
    ...commands.map((args) => conn.sendCommand(args, RAW)),
    conn.sendCommand(["EXEC"], RAW),
  ]);
  for (const s of settled) {
    if (s.status === "rejected" && !(s.reason instanceof ErrorReply)) throw s.reason;
  }
  const exec = settled[settled.length - 1];
  if (exec?.status === "rejected") {
    const index = settled.slice(1, -1).findIndex((s) => s.status === "rejected");
    const cause = settled[index + 1];
    const detail =
      index >= 0 && cause?.status === "rejected" ? ` (command ${index + 1}: ${errorMessage(cause.reason)})` : "";
    return [400, { error: `${errorMessage(exec.reason)}${detail}` }];
  }
  const replies = exec?.value;
  if (!Array.isArray(replies)) return [400, { error: "EXECABORT Transaction aborted" }];
  return [
    200,
    replies.map(
      (reply): Entry => (reply instanceof ErrorReply ? { error: reply.message } : { result: toJson(reply, base64) }),
    ),
  ];
}

function errorMessage(error: unknown): string {
  return error instanceof Error ? error.message : String(error);
}

function readBody(req: IncomingMessage, limit: number): Promise<Buffer> {
  // An oversized body is still read (and dropped) to its end before answering 413: closing a socket the
  // client is still writing to makes the kernel reset it, and the client may then never see the 413.
  // Past `giveUpAt` draining is not worth it and the connection is closed instead.
  const giveUpAt = limit * 8;
  const tooLarge = (close: boolean) => new HttpError(413, `Request body larger than ${limit} bytes`, close);
  return new Promise((resolvePromise, reject) => {
    if (Number(req.headers["content-length"]) > giveUpAt) {
      reject(tooLarge(true));
      return;
    }
    let chunks: Buffer[] = [];
    let size = 0;
    req.on("data", (chunk: Buffer) => {
      size += chunk.length;
      if (size <= limit) chunks.push(chunk);
      else chunks = [];
      if (size > giveUpAt) reject(tooLarge(true));
    });
    req.on("end", () => (size > limit ? reject(tooLarge(false)) : resolvePromise(Buffer.concat(chunks))));
    req.on("error", reject);
  });
}

function parseJson(body: Buffer): unknown {
  try {
    return JSON.parse(body.toString("utf8"));
  } catch {
    throw new HttpError(400, "Request body is not valid JSON");
  }
}

function tokenDigest(value: string): Buffer {
  return createHash("sha256").update(value).digest();
}

function sendJson(res: ServerResponse, status: number, body: unknown, close = false): void {
  const payload = JSON.stringify(body);
  res.writeHead(status, {
    "content-type": "application/json",
    "content-length": Buffer.byteLength(payload),
    ...(close ? { connection: "close" } : {}),
  });
  res.end(payload);
}

function redactedUrl(redisUrl: string): string {
  try {
    const url = new URL(redisUrl);
    if (url.password) url.password = "***";
    return url.toString();
  } catch {
    return "<unparseable redis url>";
  }
}

export async function startBridge(options: BridgeOptions): Promise<Bridge> {
  const { redisUrl, token, port = 0, host = "127.0.0.1", maxBodyBytes = DEFAULT_MAX_BODY_BYTES } = options;
  if (!token) throw new Error("startBridge: a non-empty token is required");
  const expectedToken = tokenDigest(token);

  let connected = false;
  const clientOptions = {
    url: redisUrl,
    RESP: 2 as const,
    // Fail a command at once while Redis is down instead of queueing it behind an HTTP request.
    disableOfflineQueue: true,
    socket: {
      connectTimeout: 5_000,
      // Before the first connection succeeds, give up (startBridge rejects with the cause) rather than
      // retry forever; afterwards, ride out Redis restarts with a capped backoff.
      reconnectStrategy: (retries: number, cause: Error) => (connected ? Math.min(100 * 2 ** retries, 2_000) : cause),
    },
  };

  let lastLogged = "";
  const logRedisError = (error: Error) => {
    // A reconnect loop repeats the same error every couple of seconds; one line per distinct error is enough.
    if (error.message === lastLogged) return;
    lastLogged = error.message;
    console.error(`upstash-bridge: redis error: ${error.message}`);
  };

  const shared = createClient(clientOptions);
  shared.on("error", logRedisError);
  shared.on("ready", () => {
    lastLogged = "";
  });
  // Transactions borrow a connection of their own, so a MULTI never sees the shared connection's traffic.
  const pool = createClientPool(clientOptions, { minimum: 1, maximum: 8 });
  pool.on("error", logRedisError);

  try {
    await shared.connect();
    await pool.connect();
    connected = true;
  } catch (error) {
    for (const connection of [shared, pool]) {
      try {
        connection.destroy();
      } catch {
        // Already closed by the failed connect (destroy() throws on a closed client): nothing to release.
      }
    }
    throw new Error(`cannot connect to ${redactedUrl(redisUrl)}: ${errorMessage(error)}`);
  }

  const authorize = (header: string | undefined): void => {
    // Same shape check as SRH: exactly "Bearer <token>".
    const parts = header?.split(" ") ?? [];
    const [scheme, presented] = parts;
    if (parts.length !== 2 || scheme !== "Bearer" || !presented) {
      throw new HttpError(400, "Missing/Invalid authorization header");
    }
    // Digests have equal lengths, which timingSafeEqual needs, and hide the token's length.
    if (!timingSafeEqual(tokenDigest(presented), expectedToken)) throw new HttpError(401, "Unauthorized");
  };

  const handle = async (req: IncomingMessage, res: ServerResponse): Promise<void> => {
    const method = req.method ?? "GET";
    const path = new URL(req.url ?? "/", "http://bridge").pathname;
    const segments = path === "/" ? [] : path.slice(1).split("/");

    if (segments.length === 0 && method === "GET") {
      sendJson(res, 200, { result: "upstash-bridge: POST a command array to / (see tools/upstash-bridge.ts)" });
      return;
    }
    if (method !== "GET" && method !== "POST") throw new HttpError(405, `Method ${method} not allowed`);
    const [first] = segments;
    const batch = first === "pipeline" || first === "multi-exec";
    if (batch && (segments.length !== 1 || method !== "POST")) throw new HttpError(405, `Use POST /${first}`);

    authorize(req.headers.authorization);
    const base64 = req.headers["upstash-encoding"]?.toString().toLowerCase() === "base64";
    const body = method === "POST" ? await readBody(req, maxBodyBytes) : Buffer.alloc(0);

    let status: number;
    let reply: unknown;
    if (segments.length === 0) {
      const args = toArgs(parseJson(body));
      if (!args) throw new HttpError(400, "Invalid command array. Expected a non-empty array of strings.");
      [status, reply] = await runSingle(shared, args, base64);
    } else if (first === "pipeline") {
      [status, reply] = await runPipeline(shared, toCommandList(parseJson(body)), base64);
    } else if (first === "multi-exec") {
      const commands = toCommandList(parseJson(body));
      [status, reply] = await pool.execute((conn) => runTransaction(conn, commands, base64));
    } else {
      // Path form: /set/key/value; a POST body, when present, is the final argument, byte for byte.
      let args: Arg[];
      try {
        args = segments.map((segment) => decodeURIComponent(segment));
      } catch {
        throw new HttpError(400, "Malformed percent-encoding in path");
      }
      if (body.length > 0) args.push(body);
      [status, reply] = await runSingle(shared, args, base64);
    }
    sendJson(res, status, reply);
  };

  const server = createServer((req, res) => {
    handle(req, res).catch((error: unknown) => {
      if (res.headersSent) {
        res.destroy();
        return;
      }
      if (error instanceof HttpError) {
        sendJson(res, error.status, { error: error.message }, error.closeConnection);
        return;
      }
      // Redis unreachable or the bridge itself failed: SRH answers 500 here too.
      console.error(`upstash-bridge: ${req.method} ${req.url}: ${errorMessage(error)}`);
      sendJson(res, 500, { error: `upstash-bridge: ${errorMessage(error)}` });
    });
  });

  try {
    await new Promise<void>((resolveListen, reject) => {
      server.once("error", reject);
      server.listen(port, host, () => {
        server.off("error", reject);
        resolveListen();
      });
    });
  } catch (error) {
    await Promise.allSettled([shared.close(), pool.close()]);
    throw error;
  }

  const address = server.address();
  if (address === null || typeof address === "string") throw new Error("upstash-bridge: server has no TCP address");
  const urlHost = host.includes(":") ? `[${host}]` : host;
  let closing: Promise<void> | undefined;
  return {
    url: `http://${urlHost}:${address.port}`,
    port: address.port,
    close() {
      closing ??= (async () => {
        await new Promise<void>((resolveClose) => {
          server.close(() => resolveClose());
          // @upstash/redis fetches with keep-alive; idle sockets would otherwise hold close() open.
          server.closeAllConnections();
        });
        await Promise.allSettled([shared.close(), pool.close()]);
      })();
      return closing;
    },
  };
}

async function main(): Promise<void> {
  const { values } = parseArgs({
    options: {
      redis: { type: "string", default: process.env.REDIS_URL ?? "redis://127.0.0.1:6379" },
      token: { type: "string", default: process.env.UPSTASH_REDIS_REST_TOKEN ?? "" },
      port: { type: "string", default: "8079" },
      host: { type: "string", default: "127.0.0.1" },
    },
  });
  const port = Number(values.port);
  if (!values.token) throw new Error("--token is required (or UPSTASH_REDIS_REST_TOKEN)");
  if (!Number.isInteger(port) || port < 0 || port > 65_535) throw new Error(`--port: not a port: ${values.port}`);
  const bridge = await startBridge({ redisUrl: values.redis, token: values.token, port, host: values.host });
  console.log(`upstash-bridge: listening on ${bridge.url} -> ${redactedUrl(values.redis)}`);
  const stop = () => {
    bridge.close().then(
      () => process.exit(0),
      () => process.exit(1),
    );
  };
  process.once("SIGINT", stop);
  process.once("SIGTERM", stop);
}

// Run as a CLI only when executed directly (npx tsx tools/upstash-bridge.ts), not when imported by tests.
if (process.argv[1] !== undefined && resolve(process.argv[1]) === fileURLToPath(import.meta.url)) {
  main().catch((error: unknown) => {
    console.error(`upstash-bridge: ${errorMessage(error)}`);
    process.exit(1);
  });
}
