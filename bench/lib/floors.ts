import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { cpuMeter } from "../../tools/proc";
import { type BareWorker, startScriptWorker } from "./bare-worker";
import { log } from "./log";

/**
 * The floors the targets are ratios to: what the runtime itself charges for the work a request
 * needs, each in a workerd of its own started like Flashgate's, measured in the same run.
 * - the body floor: a Worker that reads the JSON POST body (the reservation's) and answers;
 * - the framework floor: Hono with one route, what the router costs before any of the gateway's code;
 * - floor objects: a Durable Object whose RPC does nothing, and one whose RPC inserts one row in
 *   `transactionSync`, its SQLite state on a tmpfs (no fsync) or on disk, called from the Worker one
 *   call in flight at a time, as the bench route calls the stock object's reserve RPC; and one whose
 *   RPC runs the six statements a hold needs in the engine's tables, without the engine's logic.
 */

const BODY_SCRIPT = `export default {
  async fetch(request) {
    const body = await request.json();
    return new Response(JSON.stringify({ ok: typeof body === "object" }), { headers: { "content-type": "application/json" } });
  },
};`;

export function startBodyWorker(): Promise<BareWorker> {
  return startScriptWorker("body floor", BODY_SCRIPT);
}

// Hono as the gateway loads it (its ESM build from node_modules, each module as Miniflare finds it).
const FRAMEWORK_SCRIPT = `import { Hono } from "../../node_modules/hono/dist/hono.js";
const app = new Hono();
app.get("/healthz", (c) => c.json({ ok: true }));
export default app;`;

/** The framework floor: Hono, the gateway's router, with one route answering as `/healthz` does. */
export function startFrameworkWorker(): Promise<BareWorker> {
  const root = join(import.meta.dirname, "../..");
  return startScriptWorker("framework floor", FRAMEWORK_SCRIPT, {
    scriptPath: join(root, "bench/lib/framework-floor.js"),
    modulesRoot: root,
    modulesRules: [{ type: "ESModule", include: ["node_modules/hono/**/*.js"] }],
  });
}

const OBJECT_SCRIPT = `import { DurableObject } from "cloudflare:workers";
export class Floor extends DurableObject {
  constructor(ctx, env) {
    super(ctx, env);
    ctx.storage.sql.exec("CREATE TABLE IF NOT EXISTS r (id INTEGER PRIMARY KEY, user TEXT NOT NULL, at INTEGER NOT NULL)");
  }
  noop() {
    return null;
  }
  row(user) {
    this.ctx.storage.transactionSync(() => {
      this.ctx.storage.sql.exec("INSERT INTO r (user, at) VALUES (?, ?)", user, Date.now());
    });
    return null;
  }
  // The statements a hold needs in the engine's tables (the columns and indexes of
  // durable-objects/engine/schema.ts that a hold touches), no logic:
  // replay lookup, the user's quota, the hold, the quota, the SKU's counters, the outbox event.
  statements(user) {
    const sql = this.ctx.storage.sql;
    if (!this.holdTables) {
      for (const ddl of HOLD_TABLES) sql.exec(ddl);
      this.holdTables = true;
    }
    const now = Date.now();
    const id = crypto.randomUUID();
    const nonce = crypto.randomUUID();
    this.ctx.storage.transactionSync(() => {
      sql.exec("SELECT * FROM reservations WHERE nonce = ?", nonce).toArray();
      const active = sql.exec("SELECT active FROM user_quota WHERE user_id = ?", user).toArray()[0]?.active ?? 0;
      const seq = sql.exec("UPDATE sku SET held = held + 1, seq = seq + 1, created = created + 1 WHERE id = 1 RETURNING seq").one().seq;
      sql.exec("INSERT INTO reservations (id, user_id, quantity, status, nonce, created_at, expires_at, updated_at, seq, token_expires_at) VALUES (?, ?, 1, 'held', ?, ?, ?, ?, ?, ?)", id, user, nonce, now, now + 600000, now, seq, now + 60000);
      sql.exec("INSERT INTO user_quota (user_id, active) VALUES (?, ?) ON CONFLICT (user_id) DO UPDATE SET active = excluded.active", user, active + 1);
      sql.exec("INSERT INTO outbox_events (first_seq, last_seq, count, events) VALUES (?, ?, 1, ?)", seq, seq, JSON.stringify({ seq, type: "reservation.created", id, user, quantity: 1, at: now }));
    });
    return null;
  }
}
const HOLD_TABLES = [
  "CREATE TABLE IF NOT EXISTS sku (id INTEGER PRIMARY KEY CHECK (id = 1), held INTEGER NOT NULL DEFAULT 0 CHECK (held >= 0), seq INTEGER NOT NULL DEFAULT 0, created INTEGER NOT NULL DEFAULT 0)",
  "INSERT OR IGNORE INTO sku (id) VALUES (1)",
  "CREATE TABLE IF NOT EXISTS reservations (id TEXT PRIMARY KEY, user_id TEXT NOT NULL, quantity INTEGER NOT NULL CHECK (quantity >= 1), status TEXT NOT NULL, nonce TEXT UNIQUE, created_at INTEGER NOT NULL, expires_at INTEGER NOT NULL, updated_at INTEGER NOT NULL, seq INTEGER NOT NULL DEFAULT 0, token_expires_at INTEGER)",
  "CREATE INDEX IF NOT EXISTS reservations_held_by_expiry ON reservations (expires_at) WHERE status = 'held'",
  "CREATE INDEX IF NOT EXISTS reservations_by_seq ON reservations (seq)",
  "CREATE TABLE IF NOT EXISTS user_quota (user_id TEXT PRIMARY KEY, active INTEGER NOT NULL CHECK (active >= 0))",
  "CREATE TABLE IF NOT EXISTS outbox_events (first_seq INTEGER PRIMARY KEY, last_seq INTEGER NOT NULL, count INTEGER NOT NULL, events TEXT NOT NULL)",
];
export default {
  async fetch(request, env) {
    const { method, count, name } = await request.json();
    const stub = env.FLOOR.get(env.FLOOR.idFromName(name));
    await stub.noop();
    const started = Date.now();
    for (let i = 0; i < count; i++) {
      if (method === "row") await stub.row("u" + i);
      else if (method === "statements") await stub.statements("u" + i);
      else await stub.noop();
      // As the engine route does after each call (src/harness/bench-routes.ts): the event loop idles once.
      await scheduler.wait(0);
    }
    return Response.json({ calls: count, elapsedMs: Date.now() - started });
  },
};`;

/** The floor objects in a workerd of their own, their SQLite state under `stateRoot`. */
export async function startFloorObjects(stateRoot: string): Promise<BareWorker> {
  const state = mkdtempSync(join(stateRoot, "flashgate-floor-"));
  const objects = await startScriptWorker("floor objects", OBJECT_SCRIPT, {
    durableObjects: { FLOOR: { className: "Floor", useSQLite: true } },
    durableObjectsPersist: state,
  });
  return {
    ...objects,
    stop: async () => {
      await objects.stop();
      rmSync(state, { recursive: true, force: true });
    },
  };
}

export interface ObjectFloor {
  calls: number;
  perSec: number;
  /** workerd CPU per call: the caller's side and the object's, one process. */
  cpuUsPerCall: number;
}

/** `count` calls of `method`, one in flight, after a warm-up of a quarter as many on the same object. */
export async function objectFloor(
  objects: BareWorker,
  method: "noop" | "row" | "statements",
  count: number,
  label: string,
): Promise<ObjectFloor> {
  const name = `${method}-${Date.now().toString(36)}`;
  const drive = async (calls: number) => {
    const res = await fetch(objects.url, { method: "POST", body: JSON.stringify({ method, count: calls, name }) });
    if (!res.ok) throw new Error(`floor object ${method}: ${res.status} ${await res.text()}`);
    return (await res.json()) as { calls: number; elapsedMs: number };
  };
  await drive(Math.ceil(count / 4));
  const meter = cpuMeter([objects.pid]);
  const r = await drive(count);
  const cpu = meter.stop();
  const fig = { calls: count, perSec: (count * 1000) / Math.max(1, r.elapsedMs), cpuUsPerCall: cpu / count };
  log(`  ${label}: ${fig.perSec.toFixed(0)} calls/s, ${fig.cpuUsPerCall.toFixed(0)} µs workerd CPU each`);
  return fig;
}

/** Where the floor objects' state goes: a tmpfs when the machine has one, and the disk. */
export const FLOOR_STATE = { tmpfs: "/dev/shm", disk: tmpdir() } as const;
