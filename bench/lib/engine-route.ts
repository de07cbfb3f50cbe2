import type { StockStats } from "../../src/harness/harness-stock";
import { SECRETS } from "../../tools/dev-vars";
import type { WorkerServer } from "../../tools/worker";

/** A bench-only route (src/harness/bench-routes.ts) as the admin: a POST of `body` as JSON, or a GET without one. */
export async function benchRoute<T>(server: WorkerServer, path: string, body?: unknown): Promise<T> {
  const res = await fetch(`${server.url}${path}`, {
    method: body === undefined ? "GET" : "POST",
    headers: { "content-type": "application/json", authorization: `Bearer ${SECRETS.ADMIN_TOKEN}` },
    ...(body === undefined ? {} : { body: JSON.stringify(body) }),
  });
  const text = await res.text();
  if (!res.ok) throw new Error(`${path}: ${res.status} ${text}`);
  return JSON.parse(text) as T;
}

/** The stock object's storage figures, read outside the engine's statements. */
export const stockStats = (server: WorkerServer, sku: string, shard = 0) =>
  benchRoute<StockStats>(server, `/bench/stock/${sku}/${shard}/stats`);

export interface EngineRun {
  elapsedMs: number;
  ok: number;
  rejected: Record<string, number>;
  rpcs: number;
  rpcMs: number[];
}

/** Calls the bench-only route that drives the stock object's reserve RPC inside workerd (src/harness/bench-routes.ts). */
export const engineRun = (
  server: WorkerServer,
  body: { sku: string; count: number; batch: number; concurrency: number; run: string; via?: "stock" | "gatherer" },
) => benchRoute<EngineRun>(server, "/bench/engine", body);
