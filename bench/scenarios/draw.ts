import { SECRETS } from "../../tools/dev-vars";
import { cpuMeter, rssBytes } from "../../tools/proc";
import { admin, type WorkerServer } from "../../tools/worker";
import type { Bench } from "../lib/context";
import { log } from "../lib/log";

/** Entrants of the bench's opening window (issue 19: "a window with 50,000 entrants"). */
const ENTRANTS = 50_000;
const UNITS = 1_000;
const ENTER_CALL = 2_000;

async function drawCall<T>(server: WorkerServer, body: unknown): Promise<T> {
  const res = await fetch(`${server.url}/bench/draw`, {
    method: "POST",
    headers: { "content-type": "application/json", authorization: `Bearer ${SECRETS.ADMIN_TOKEN}` },
    body: JSON.stringify(body),
  });
  const text = await res.text();
  if (!res.ok) throw new Error(`/bench/draw: ${res.status} ${text}`);
  return JSON.parse(text) as T;
}

/**
 * Fair opening: the decision of a 50,000-entrant draw on one stock object (the alarm's work at the
 * window's close: close entries, rank them by HMAC-SHA256(seed, entryId) with WebCrypto, then one
 * transaction deciding 1,000 units and recording every entrant's result). Entries go in first,
 * inside workerd (src/harness/harness-stock.ts), at a clock inside the window; then the decision is
 * timed from here, with workerd's CPU (/proc) and resident memory around it.
 */
export async function drawDecide(bench: Bench, server: WorkerServer) {
  const sku = `draw-${Date.now().toString(36)}`;
  await admin(server, "PUT", `/admin/skus/${sku}`, {
    name: `bench ${sku}`,
    totalStock: UNITS,
    perUserLimit: 1,
    holdSeconds: 3600,
    startsAt: new Date(Date.now() + 3_600_000).toISOString(),
    openingWindowMs: 10_000,
  });
  log(`draw: ${ENTRANTS} entrants into one window, then the decision (${UNITS} units)`);
  const enterCpu = cpuMeter([server.pid]);
  let t0 = performance.now();
  let entered = 0;
  // Calls of 2,000 entrants (about as many as a busy second brings): one call of 50,000 is a single
  // synchronous stretch of the object that workerd cuts off.
  for (let k = 0; k * ENTER_CALL < ENTRANTS; k++) {
    const count = Math.min(ENTER_CALL, ENTRANTS - k * ENTER_CALL);
    entered += (await drawCall<{ entered: number }>(server, { sku, phase: "enter", count, run: `${sku}-${k}` }))
      .entered;
  }
  const enterMs = performance.now() - t0;
  const enterUs = enterCpu.stop();
  if (entered !== ENTRANTS) bench.problems.push(`draw: ${entered}/${ENTRANTS} entered`);

  const rssBefore = rssBytes(server.pid);
  const meter = cpuMeter([server.pid]);
  t0 = performance.now();
  const decided = await drawCall<{ entrants: number; held: number; seedRevealed: boolean }>(server, {
    sku,
    phase: "decide",
  });
  const decideMs = performance.now() - t0;
  const decideCpuUs = meter.stop();
  const rssAfter = rssBytes(server.pid);
  if (decided.entrants !== ENTRANTS || decided.held !== UNITS || !decided.seedRevealed)
    bench.problems.push(`draw: decided ${JSON.stringify(decided)}, expected ${ENTRANTS} entrants, ${UNITS} held`);
  const fig = {
    entrants: ENTRANTS,
    units: UNITS,
    enterMs,
    enterCpuUsPerEntrant: enterUs / ENTRANTS,
    decideMs,
    decideCpuMs: decideCpuUs / 1000,
    decideCpuUsPerEntrant: decideCpuUs / ENTRANTS,
    rssBeforeMiB: rssBefore / 2 ** 20,
    rssAfterMiB: rssAfter / 2 ** 20,
  };
  log(
    `  decided in ${decideMs.toFixed(0)} ms (${fig.decideCpuMs.toFixed(0)} ms workerd CPU, ${fig.decideCpuUsPerEntrant.toFixed(1)} µs/entrant); ` +
      `workerd RSS ${fig.rssBeforeMiB.toFixed(0)} → ${fig.rssAfterMiB.toFixed(0)} MiB; entering cost ${fig.enterCpuUsPerEntrant.toFixed(1)} µs/entrant`,
  );
  bench.figures.draw_decide = fig;
  return fig;
}
