import { SECRETS } from "../../tools/dev-vars";
import type { WorkerServer } from "../../tools/worker";

export interface EngineRun {
  elapsedMs: number;
  ok: number;
  rejected: Record<string, number>;
  rpcs: number;
  rpcMs: number[];
}

/** Calls the bench-only route that drives the stock object's reserve RPC inside workerd (src/harness/bench-routes.ts). */
export async function engineRun(
  server: WorkerServer,
  body: { sku: string; count: number; batch: number; concurrency: number; run: string; via?: "stock" | "gatherer" },
): Promise<EngineRun> {
  const res = await fetch(`${server.url}/bench/engine`, {
    method: "POST",
    headers: { "content-type": "application/json", authorization: `Bearer ${SECRETS.ADMIN_TOKEN}` },
    body: JSON.stringify(body),
  });
  const text = await res.text();
  if (!res.ok) throw new Error(`/bench/engine: ${res.status} ${text}`);
  return JSON.parse(text) as EngineRun;
}
