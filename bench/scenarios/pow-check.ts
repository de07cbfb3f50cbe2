import { issueChallenge } from "../../src/edge/proof-of-work";
import { SECRETS } from "../../tools/dev-vars";
import { cpuMeter } from "../../tools/proc";
import { solveProofOfWork } from "../../tools/proof-of-work";
import type { WorkerServer } from "../../tools/worker";
import type { Bench } from "../lib/context";
import { log } from "../lib/log";

const CHECKS = 200_000;
const BITS = 16;

async function run(server: WorkerServer, body: Record<string, unknown>): Promise<number> {
  const meter = cpuMeter([server.pid]);
  const res = await fetch(`${server.url}/bench/pow-check`, {
    method: "POST",
    headers: { "content-type": "application/json", authorization: `Bearer ${SECRETS.ADMIN_TOKEN}` },
    body: JSON.stringify(body),
  });
  const text = await res.text();
  const cpuUs = meter.stop();
  if (!res.ok) throw new Error(`/bench/pow-check: ${res.status} ${text}`);
  const { passed } = JSON.parse(text) as { passed: number };
  if (passed !== CHECKS) throw new Error(`/bench/pow-check: ${passed} of ${CHECKS} passed`);
  return cpuUs / CHECKS;
}

/**
 * What checking a proof of work costs the Worker, alone: one solved challenge checked 200,000 times
 * in one request (src/harness/bench-routes.ts), workerd's CPU from /proc, less the same loop that
 * only splits the header. The difficulty does not change it (one HMAC, one hash).
 */
export async function powCheck(bench: Bench, server: WorkerServer): Promise<void> {
  const userId = "bench-pow";
  const sku = "bench-pow-sku";
  const { challenge } = await issueChallenge(SECRETS.TOKEN_SECRET, userId, sku, BITS, Date.now());
  const header = solveProofOfWork(challenge, BITS);
  const body = { header, userId, sku, bits: BITS, count: CHECKS };
  await run(server, { ...body, count: CHECKS }); // warm-up
  const rounds: { checkUs: number; floorUs: number }[] = [];
  for (let i = 0; i < 3; i++) {
    const floorUs = await run(server, { ...body, floor: true });
    const checkUs = await run(server, body);
    rounds.push({ checkUs, floorUs });
  }
  const costs = rounds.map((r) => r.checkUs - r.floorUs).sort((a, b) => a - b);
  const fig = { checks: CHECKS, rounds, medianUsPerCheck: costs[1] };
  bench.figures.pow_check = fig;
  log(
    `proof-of-work check in workerd: ${costs.map((c) => c.toFixed(2)).join(", ")} µs a check above the loop (3 rounds)`,
  );
}
