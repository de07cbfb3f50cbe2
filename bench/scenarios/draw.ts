import { cpuMeter, rssBytes } from "../../tools/proc";
import { admin, type WorkerServer } from "../../tools/worker";
import type { Bench } from "../lib/context";
import { benchRoute, stockStats } from "../lib/engine-route";
import { log } from "../lib/log";

/** Entrants of the bench's opening window (issue 19: "a window with 50,000 entrants"). */
const ENTRANTS = 50_000;
const UNITS = 1_000;
const ENTER_CALL = 2_000;

const drawCall = <T>(server: WorkerServer, body: unknown) => benchRoute<T>(server, "/bench/draw", body);

/**
 * Fair opening: the decision of a 50,000-entrant draw on one stock object (the alarm's work at the
 * window's close: close entries, rank them by HMAC-SHA256(seed, entryId), then one
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
    `  decided in ${decideMs.toFixed(0)} ms (${fig.decideCpuMs.toFixed(0)} ms workerd CPU, ${fig.decideCpuUsPerEntrant.toFixed(1)} µs/entrant); workerd RSS ${fig.rssBeforeMiB.toFixed(0)} → ${fig.rssAfterMiB.toFixed(0)} MiB; entering cost ${fig.enterCpuUsPerEntrant.toFixed(1)} µs/entrant`,
  );
  bench.figures.draw_decide = fig;
  return fig;
}

/** Entrants of the sharded draw (`--draw-entrants N` to change), half of them winning a unit. */
export const SHARDED_ENTRANTS = 10_000;
const SHARDS = 4;

type Answers = { answered: number; held: number; codes: Record<string, number> };

/**
 * Fair opening on a sharded SKU: the decision of `entrants` entrants over 4 shards, each entrant's
 * request waiting for its answer on its home shard (`awaitDraw`, started inside workerd as the edge
 * would after `DRAW_PENDING`). Timed from shard 0's alarm at the close until every waiting request
 * is answered; the engine transactions of all four shards over that time are counted (the harness's
 * storage, src/harness/harness-stock.ts) and given per entrant.
 */
export async function drawDecideSharded(bench: Bench, server: WorkerServer, entrants = SHARDED_ENTRANTS) {
  const sku = `drawsh-${Date.now().toString(36)}`;
  const units = Math.floor(entrants / 2);
  await admin(server, "PUT", `/admin/skus/${sku}`, {
    name: `bench ${sku}`,
    totalStock: units,
    perUserLimit: 1,
    holdSeconds: 3600,
    shards: SHARDS,
    startsAt: new Date(Date.now() + 3_600_000).toISOString(),
    openingWindowMs: 10_000,
  });
  log(`draw (${SHARDS} shards): ${entrants} entrants, each with a waiting request, then the decision (${units} units)`);
  const runs: { shard: number; run: string; count: number }[] = [];
  for (let shard = 0; shard < SHARDS; shard++) {
    const share = Math.floor(entrants / SHARDS) + (shard < entrants % SHARDS ? 1 : 0);
    for (let k = 0; k * ENTER_CALL < share; k++) {
      runs.push({ shard, run: `${sku}-s${shard}-${k}`, count: Math.min(ENTER_CALL, share - k * ENTER_CALL) });
    }
  }
  let entered = 0;
  for (const r of runs) entered += (await drawCall<{ entered: number }>(server, { sku, phase: "enter", ...r })).entered;
  if (entered !== entrants) bench.problems.push(`draw sharded: ${entered}/${entrants} entered`);
  for (const r of runs) await drawCall(server, { sku, phase: "wait", ...r });
  for (let shard = 1; shard < SHARDS; shard++) await drawCall(server, { sku, phase: "close", shard });
  const shardList = Array.from({ length: SHARDS }, (_, shard) => shard);
  const transactions = async () =>
    (await Promise.all(shardList.map((shard) => stockStats(server, sku, shard)))).reduce(
      (sum, s) => sum + s.transactions,
      0,
    );
  const before = await transactions();
  const meter = cpuMeter([server.pid]);
  const t0 = performance.now();
  await drawCall(server, { sku, phase: "start", shard: 0 });
  // A poll only reads, so one whose connection workerd dropped while shard 0 was deciding is asked again.
  const answersOf = (shard: number): Promise<Answers> =>
    drawCall<Answers>(server, { sku, phase: "answers", shard }).catch((err: unknown) => {
      if (err instanceof TypeError) return answersOf(shard);
      throw err;
    });
  let answers: Answers[] = [];
  for (;;) {
    answers = await Promise.all(shardList.map(answersOf));
    if (answers.reduce((n, a) => n + a.answered, 0) >= entrants) break;
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
  const decideMs = performance.now() - t0;
  const decideCpuUs = meter.stop();
  const spent = (await transactions()) - before;
  const held = answers.reduce((n, a) => n + a.held, 0);
  const codes: Record<string, number> = {};
  for (const a of answers) for (const [code, n] of Object.entries(a.codes)) codes[code] = (codes[code] ?? 0) + n;
  const stock = (await admin<{ stock: { held: number } }>(server, "GET", `/admin/skus/${sku}`)).stock;
  if (held !== units || stock.held !== units || Object.keys(codes).some((code) => code !== "SOLD_OUT"))
    bench.problems.push(
      `draw sharded: ${held} answered held (${stock.held} in the stock objects), ${JSON.stringify(codes)}, expected ${units} held`,
    );
  const fig = {
    entrants,
    units,
    shards: SHARDS,
    decideMs,
    decideCpuMs: decideCpuUs / 1000,
    transactions: spent,
    transactionsPerEntrant: spent / entrants,
  };
  log(
    `  decided and answered in ${decideMs.toFixed(0)} ms (${fig.decideCpuMs.toFixed(0)} ms workerd CPU); ${spent} engine transactions, ${fig.transactionsPerEntrant.toFixed(2)} per entrant`,
  );
  bench.figures.draw_decide_sharded = fig;
  return fig;
}
