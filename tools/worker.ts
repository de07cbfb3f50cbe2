import { execFile } from "node:child_process";
import { cpSync, existsSync, mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import type { Readable } from "node:stream";
import { fileURLToPath } from "node:url";
import { promisify } from "node:util";
import { Log, LogLevel, Miniflare } from "miniflare";
import { unstable_getMiniflareWorkerOptions } from "wrangler";
import type { z } from "zod";
import type { AdminSku as AdminSkuView } from "../src/routes/contract-schemas";
import { ensureDevVars, SECRETS } from "./dev-vars";
import { HARNESS_ENTRY } from "./harness";
import { migrateInto } from "./migrated-d1";
import { atExit, workerdChildren } from "./proc";
import { freePort } from "./redis-server";

/**
 * The Worker in workerd through Miniflare, with wrangler.toml's bindings (wrangler's own
 * `unstable_getMiniflareWorkerOptions`) and wrangler's bundle (`wrangler deploy --dry-run`): a free port
 * of 127.0.0.1, its own state directory (D1 migrated first, laid out as `wrangler dev --persist-to`),
 * plus the bench's vars: the dev secrets (so the harness can mint JWTs and purchase tokens),
 * DEV_TOOLS=true (the /bench routes), and whatever the scenario sets (GROUP_COMMIT, the Redis mirror).
 *
 * Not `wrangler dev`: it puts a second workerd (its ProxyWorker) in front of the Worker's and
 * forwards every request over pooled keep-alive connections whose idle timeouts race (kj closes an
 * idle connection after 5 s on both ends), and it answers a POST that lost such a connection with
 * `503 Your worker restarted mid-request` (cloudflare/workers-sdk#14641). Here the load generator talks
 * to the Worker's workerd directly. Request logging is off; the Worker's own output is kept for errors.
 */
export interface WorkerServer {
  label: string;
  url: string;
  /**
   * The same Worker on its own socket in the same workerd, with no Miniflare entry worker in front
   * (the bench measures both ways in: bench/lib/via.ts).
   */
  directUrl: string;
  /** The workerd process serving it (for CPU time and memory from /proc). */
  pid: number;
  /** Its state directory (D1, the Durable Objects' SQLite files, the bundle): `copyOf` starts another over a copy. */
  stateDir: string;
  /** The workerd inspector's port (Chrome DevTools protocol), when started with `inspect`. */
  inspectorPort?: number;
  /**
   * With `copies`: a front on its own socket that hands each request to the next of the Worker's
   * copies in turn (each its own isolate, all reaching the one set of objects), as a spike lands on
   * many isolates on Cloudflare.
   */
  copiesUrl?: string;
  stop(): Promise<void>;
  /** The tail of the Worker's output, for error messages. */
  logTail(): string;
}

const run = promisify(execFile);

/** The queue in `objectAlone` mode: takes `send`/`sendBatch` over RPC and drops the messages. */
const QUEUE_SINK = `import { WorkerEntrypoint } from "cloudflare:workers";
export class QueueSink extends WorkerEntrypoint {
  async send(body) {}
  async sendBatch(messages) {}
}
export default { fetch: () => new Response(null, { status: 404 }) };
`;
/** The front of the copies: round robin over the service bindings COPY_0 … COPY_{n-1}. */
const COPIES_FRONT = `let next = 0;
export default {
  fetch(request, env) {
    const copy = env["COPY_" + (next++ % Number(env.COPIES))];
    return copy.fetch(request);
  },
};
`;
const HERE = fileURLToPath(new URL("..", import.meta.url));

/**
 * `root`: the checkout whose Worker to run (default this one); the bench runs an earlier commit's
 * Worker from a worktree of it beside today's, to measure a change before and after in one run.
 * `stateRoot`: where its state directory (D1, the Durable Objects' SQLite files) is made; the OS's
 * temporary directory by default. `objectAlone`: the stock objects without the order pipeline that
 * shares their process and thread here and runs elsewhere on Cloudflare: no queue consumer, and the
 * `order-events` producer bound to a sink (an RPC entrypoint in the same workerd that drops what it
 * gets, {@link QUEUE_SINK}) instead of Miniflare's queue broker, whose bookkeeping per message would
 * run on the objects' thread; the object still pays its `sendBatch` calls. `copies`: that many more
 * copies of the Worker in the same workerd, each its own isolate with its own module state (its own
 * group commit), whose object bindings reach this Worker's objects, behind a round-robin front
 * ({@link WorkerServer.copiesUrl}); they run no queue consumer. `copyOf`: a state directory of another
 * server (idle: nothing in flight, the queue drained) to start over a copy of, bundle and all: the same
 * stored state in a fresh workerd, whose isolates remember nothing (a restart, or a new deploy).
 */
export async function startWorker(
  label: string,
  vars: Record<string, string>,
  opts: {
    inspect?: boolean;
    root?: string;
    stateRoot?: string;
    objectAlone?: boolean;
    copies?: number;
    copyOf?: string;
  } = {},
): Promise<WorkerServer> {
  const ROOT = opts.root ?? HERE;
  const CONFIG = join(ROOT, "wrangler.toml");
  ensureDevVars();
  const port = await freePort();
  const inspectorPort = opts.inspect ? await freePort() : undefined;
  // `stateRoot` on a tmpfs (/dev/shm) makes every fsync of the local SQLite databases a no-op.
  const state = mkdtempSync(join(opts.stateRoot ?? tmpdir(), "flashgate-bench-"));
  const cancelExit = atExit(() => rmSync(state, { recursive: true, force: true }));
  const bundle = join(state, "bundle");
  const env = { ...process.env, CI: "true", WRANGLER_SEND_METRICS: "false" };
  if (opts.copyOf !== undefined) cpSync(opts.copyOf, state, { recursive: true });
  await Promise.all([
    opts.copyOf !== undefined ? undefined : migrateInto(state, ROOT),
    // An earlier commit (a --baseline) from before the harness entry had its routes in wrangler.toml's `main`.
    opts.copyOf !== undefined
      ? undefined
      : run(
          "npx",
          [
            "wrangler",
            "deploy",
            "--dry-run",
            ...(existsSync(join(ROOT, HARNESS_ENTRY)) ? [HARNESS_ENTRY] : []),
            "--outdir",
            bundle,
          ],
          {
            env,
            cwd: ROOT,
          },
        ),
  ]);
  const { workerOptions } = unstable_getMiniflareWorkerOptions(CONFIG);
  const sink = opts.objectAlone === true;
  if (sink) {
    delete workerOptions.queueConsumers;
    const producers = workerOptions.queueProducers as Record<string, unknown> | undefined;
    if (producers) delete producers.ORDER_EVENTS;
  }
  const copies = opts.copies ?? 0;
  // A copy binds the main Worker's object classes by script name: one set of objects for all of them.
  const objects = Object.fromEntries(
    Object.entries((workerOptions.durableObjects ?? {}) as Record<string, { className: string }>).map(
      ([binding, o]) => [binding, { className: o.className, scriptName: "flashgate", useSQLite: true }],
    ),
  );
  /** The Worker as wrangler.toml has it, with the dev secrets and `vars`; with `sink`, its queue a sink. */
  const flashgate = {
    ...workerOptions,
    modules: true,
    scriptPath: join(bundle, "index.js"),
    modulesRoot: bundle,
    bindings: { ...workerOptions.bindings, ...SECRETS, DEV_TOOLS: "true", ...vars },
    ...(sink
      ? {
          serviceBindings: {
            ...(workerOptions.serviceBindings as Record<string, unknown> | undefined),
            ORDER_EVENTS: { name: "queue-sink", entrypoint: "QueueSink" },
          },
        }
      : {}),
  };
  const before = new Set(workerdChildren(process.pid));
  const output: string[] = []; // the last chunks of the Worker's output (it logs a line per request)
  const keep = (d: Buffer) => {
    if (output.push(d.toString()) > 200) output.splice(0, 100);
  };
  const mf = new Miniflare({
    host: "127.0.0.1",
    port,
    ...(inspectorPort === undefined ? {} : { inspectorPort }),
    defaultPersistRoot: join(state, "v3"), // where `wrangler d1 migrations apply --persist-to` wrote
    cf: false, // the placeholder `request.cf`, without fetching the real one from the network
    log: new Log(LogLevel.WARN),
    handleRuntimeStdio(stdout: Readable, stderr: Readable) {
      stdout.on("data", keep);
      stderr.on("data", keep);
    },
    workers: [
      { ...flashgate, name: "flashgate", unsafeDirectSockets: [{ host: "127.0.0.1" }] }, // directUrl
      ...(sink
        ? [{ name: "queue-sink", modules: [{ type: "ESModule" as const, path: "sink.mjs", contents: QUEUE_SINK }] }]
        : []),
      ...Array.from({ length: copies }, (_, i) => ({
        ...flashgate,
        queueConsumers: {},
        durableObjects: objects,
        name: `copy-${i}`,
      })),
      ...(copies > 0
        ? [
            {
              name: "copies-front",
              modules: [{ type: "ESModule" as const, path: "front.mjs", contents: COPIES_FRONT }],
              bindings: { COPIES: String(copies) },
              serviceBindings: Object.fromEntries(Array.from({ length: copies }, (_, i) => [`COPY_${i}`, `copy-${i}`])),
              unsafeDirectSockets: [{ host: "127.0.0.1" }],
            },
          ]
        : []),
    ],
  });
  try {
    await mf.ready;
  } catch (err) {
    await mf.dispose().catch(() => {});
    rmSync(state, { recursive: true, force: true });
    throw new Error(`the Worker (${label}) did not start: ${String(err)}\n${output.join("")}`);
  }
  const pid = workerdChildren(process.pid).find((p) => !before.has(p));
  if (pid === undefined) throw new Error(`the Worker (${label}): no workerd process found`);
  const directUrl = (await mf.unsafeGetDirectURL("flashgate")).origin;
  const copiesUrl = copies > 0 ? (await mf.unsafeGetDirectURL("copies-front")).origin : undefined;
  return {
    label,
    url: `http://127.0.0.1:${port}`,
    directUrl,
    pid,
    stateDir: state,
    ...(inspectorPort === undefined ? {} : { inspectorPort }),
    ...(copiesUrl === undefined ? {} : { copiesUrl }),
    logTail: () => output.join("").slice(-4000),
    async stop() {
      cancelExit();
      await mf.dispose();
      rmSync(state, { recursive: true, force: true });
    },
  };
}

/** An admin call to the Worker (`Authorization: Bearer dev-admin-token`). */
export async function admin<T>(server: WorkerServer, method: string, path: string, body?: unknown): Promise<T> {
  const init: RequestInit = {
    method,
    headers: { authorization: `Bearer ${SECRETS.ADMIN_TOKEN}`, "content-type": "application/json" },
  };
  if (body !== undefined) init.body = JSON.stringify(body);
  const res = await fetch(`${server.url}${path}`, init);
  const text = await res.text();
  if (!res.ok) throw new Error(`${method} ${path} on ${server.label}: ${res.status} ${text}`);
  return JSON.parse(text) as T;
}

/** The admin SKU view (stock from the stock objects, order counts from D1), as the contract describes it. */
export type AdminSku = z.infer<typeof AdminSkuView>;

export function createSku(server: WorkerServer, sku: string, totalStock: number, shards = 1): Promise<AdminSku> {
  return admin<AdminSku>(server, "PUT", `/admin/skus/${sku}`, {
    name: `bench ${sku}`,
    totalStock,
    perUserLimit: 1,
    holdSeconds: 3600,
    shards,
  });
}
