import { type ChildProcess, execFile, spawn } from "node:child_process";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { promisify } from "node:util";
import { ensureDevVars } from "../../scripts/lib/dev-vars";
import { freePort } from "../../scripts/lib/redis-server";
import { SECRETS } from "./shoppers";

/**
 * The Worker in workerd through `wrangler dev`, as test/support/dev-server.ts starts it: a free port
 * of 127.0.0.1, its own state directory (D1 migrated first), plus the bench's vars: the dev secrets
 * (so the harness can mint JWTs and purchase tokens), DEV_TOOLS=true (the /bench routes), and
 * whatever the scenario sets (GROUP_COMMIT, the Redis mirror). Request logging is off
 * (`--log-level warn`) so the dev server's console does not take CPU from the Worker.
 */
export interface WorkerServer {
  label: string;
  url: string;
  stop(): Promise<void>;
  /** The tail of wrangler's output, for error messages. */
  logTail(): string;
}

const run = promisify(execFile);

export async function startWorker(label: string, vars: Record<string, string>): Promise<WorkerServer> {
  ensureDevVars();
  const port = await freePort();
  const inspector = await freePort(); // two servers at once: the default inspector port 9229 would clash
  const state = mkdtempSync(join(tmpdir(), "flashgate-bench-"));
  await run("npx", ["wrangler", "d1", "migrations", "apply", "DB", "--local", "--persist-to", state], {
    env: { ...process.env, CI: "true", WRANGLER_SEND_METRICS: "false" },
  });
  const all = { ...SECRETS, DEV_TOOLS: "true", ...vars };
  const args = ["wrangler", "dev", "--port", String(port), "--ip", "127.0.0.1", "--persist-to", state];
  args.push("--log-level", "warn", "--show-interactive-dev-session=false", "--inspector-port", String(inspector));
  for (const [k, v] of Object.entries(all)) args.push("--var", `${k}:${v}`);
  const child: ChildProcess = spawn("npx", args, {
    stdio: ["ignore", "pipe", "pipe"],
    env: { ...process.env, WRANGLER_SEND_METRICS: "false" },
    detached: true,
  });
  let log = "";
  const keep = (d: Buffer) => {
    log = (log + d.toString()).slice(-20_000);
  };
  child.stdout?.on("data", keep);
  child.stderr?.on("data", keep);
  const url = `http://127.0.0.1:${port}`;
  const deadline = Date.now() + 90_000;
  for (;;) {
    if (child.exitCode !== null) throw new Error(`wrangler dev (${label}) exited ${child.exitCode}:\n${log}`);
    try {
      const res = await fetch(`${url}/healthz`);
      await res.body?.cancel();
      if (res.ok) break;
    } catch {
      // not listening yet
    }
    if (Date.now() > deadline) throw new Error(`wrangler dev (${label}) did not become ready:\n${log}`);
    await new Promise((resolve) => setTimeout(resolve, 250));
  }
  return {
    label,
    url,
    logTail: () => log.slice(-4000),
    async stop() {
      if (child.exitCode === null && child.signalCode === null && child.pid !== undefined) {
        const exited = new Promise((resolve) => child.once("exit", resolve));
        process.kill(-child.pid, "SIGTERM"); // the group: npx, wrangler and workerd
        const timer = setTimeout(() => {
          if (child.pid !== undefined) process.kill(-child.pid, "SIGKILL");
        }, 5_000);
        await exited;
        clearTimeout(timer);
      }
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

/** The admin SKU view (stock from the stock objects, order counts from D1). */
export interface AdminSku {
  sku: string;
  shards: number;
  stock: { total: number; available: number; held: number; sold: number };
  orders: Record<string, number>;
}

export function createSku(server: WorkerServer, sku: string, totalStock: number, shards = 1): Promise<AdminSku> {
  return admin<AdminSku>(server, "PUT", `/admin/skus/${sku}`, {
    name: `bench ${sku}`,
    totalStock,
    perUserLimit: 1,
    holdSeconds: 3600,
    shards,
  });
}
