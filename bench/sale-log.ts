/**
 * `npx tsx bench/sale-log.ts [--rounds N] [--count N]`: what the verifiable sale's log costs
 * (issue #52), measured locally in one workerd (tools/worker.ts):
 *
 * - engine core with and without the log (paired rounds, alternating which goes first): `count`
 *   fresh reservations through the stock object's reserve RPC (`POST /bench/engine`, batches of 16,
 *   8 in flight), their reservations/s, and workerd's CPU per reservation from /proc until the
 *   outbox and the log have taken every event. Locally the log object shares the process, so its own
 *   work is in the "on" figure; on Cloudflare it runs in an object of its own;
 * - receipt lag at sale pace: holds made over HTTP at `pace`/s, and for a sample of them the time
 *   from the `202` to the first `GET /api/reservations/:id` that carries the hold's receipt;
 * - storage: the log object's SQLite file size per entry.
 *
 * Prints one JSON object. Not part of `npm run bench` (docs/PERFORMANCE.md is generated from it).
 */
import { readdirSync, statSync } from "node:fs";
import { join } from "node:path";
import { shopperJwt } from "../tools/jwt";
import { cpuMeter } from "../tools/proc";
import { startWorker, type WorkerServer } from "../tools/worker";

const args = process.argv.slice(2);
const option = (name: string, fallback: number) => {
  const i = args.indexOf(name);
  return i < 0 ? fallback : Number(args[i + 1]);
};
const ROUNDS = option("--rounds", 3);
const COUNT = option("--count", 4_000);
const PACE = option("--pace", 100);
const SAMPLE = option("--sample", 40);
const ADMIN = { authorization: "Bearer dev-admin-token", "content-type": "application/json" };
const progress = (line: string) => process.stderr.write(`[sale-log bench] ${line}\n`);
const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

async function put(server: WorkerServer, sku: string, body: unknown) {
  const r = await fetch(`${server.url}/admin/skus/${sku}`, {
    method: "PUT",
    headers: ADMIN,
    body: JSON.stringify(body),
  });
  if (r.status !== 200) throw new Error(`PUT ${sku}: ${r.status} ${await r.text()}`);
}

/** Waits until the stock object's outbox is empty (its events sent, and logged when the log is on). */
async function drained(server: WorkerServer, sku: string) {
  for (let i = 0; i < 600; i++) {
    const r = await fetch(`${server.url}/bench/stock/${sku}/0/stats`);
    const stats = (await r.json()) as { rows?: Record<string, number> };
    if ((stats.rows?.outbox_events ?? 0) === 0) return;
    await sleep(100);
  }
  throw new Error("the outbox never drained");
}

async function engineRound(log: boolean, round: number) {
  const server = await startWorker(`engine-${log ? "on" : "off"}`, log ? {} : { LOG_SIGNING_KEY: "" });
  try {
    const sku = `bench-log-${round}-${log ? "on" : "off"}`;
    await put(server, sku, { name: "Bench", totalStock: COUNT, perUserLimit: 1 });
    const meter = cpuMeter([server.pid]);
    const r = await fetch(`${server.url}/bench/engine`, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify({ sku, count: COUNT, batch: 16, concurrency: 8, run: `r${round}` }),
    });
    const result = (await r.json()) as { elapsedMs: number; ok: number };
    await drained(server, sku);
    const cpuUs = meter.stop();
    return {
      log,
      ok: result.ok,
      perSecond: (result.ok / result.elapsedMs) * 1000,
      cpuUsPerReservation: cpuUs / result.ok,
    };
  } finally {
    await server.stop();
  }
}

async function receiptLag() {
  const server = await startWorker("receipts", {});
  try {
    const sku = "bench-receipts";
    const total = PACE * 10;
    await put(server, sku, { name: "Receipts", totalStock: total, perUserLimit: 1 });
    const jwt = (user: string) => shopperJwt(user, "dev-auth-secret");
    const hold = async (user: string) => {
      const auth = { authorization: `Bearer ${await jwt(user)}`, "content-type": "application/json" };
      const token = (await (
        await fetch(`${server.url}/api/skus/${sku}/tokens`, { method: "POST", headers: auth, body: "{}" })
      ).json()) as { token: string };
      const held = await fetch(`${server.url}/api/skus/${sku}/reservations`, {
        method: "POST",
        headers: auth,
        body: JSON.stringify({ token: token.token, quantity: 1 }),
      });
      const at = Date.now();
      const body = (await held.json()) as { reservationId: string };
      return { user, auth, id: body.reservationId, at };
    };
    const sampled: Promise<number>[] = [];
    const every = Math.max(1, Math.floor(total / SAMPLE));
    const started = Date.now();
    const all: Promise<unknown>[] = [];
    for (let i = 0; i < total; i++) {
      // Sale pace: the i-th hold is asked at i / PACE seconds.
      const wait = started + (i * 1000) / PACE - Date.now();
      if (wait > 0) await sleep(wait);
      const made = hold(`u${i}`);
      all.push(made);
      if (i % every === 0)
        sampled.push(
          made.then(async (h) => {
            for (;;) {
              const view = await fetch(`${server.url}/api/reservations/${h.id}`, { headers: h.auth });
              const body = (await view.json()) as { receipts?: { entry: string }[] };
              if (body.receipts?.some((r) => r.entry === "hold")) return Date.now() - h.at;
              await sleep(100); // 10 reads a second: within the shopper's rate limit over 2 s
            }
          }),
        );
    }
    await Promise.all(all);
    const lags = (await Promise.all(sampled)).sort((a, b) => a - b);
    const at = (q: number) => lags[Math.min(lags.length - 1, Math.floor(q * lags.length))] ?? 0;
    await sleep(2_000);
    // The log object's SQLite file(s) (Miniflare's state: v3/do/<script>-SaleLog/*.sqlite).
    const dir = join(server.stateDir, "v3", "do");
    const logDir = readdirSync(dir).find((d) => d.endsWith("SaleLog"));
    const bytes = logDir
      ? readdirSync(join(dir, logDir))
          .filter((f) => f.endsWith(".sqlite"))
          .reduce((n, f) => n + statSync(join(dir, logDir, f)).size, 0)
      : 0;
    const note = await (await fetch(`${server.url}/api/skus/${sku}/log/checkpoint`)).text();
    const entries = Number(note.split("\n")[1]);
    return {
      pace: PACE,
      holds: total,
      sampled: lags.length,
      receiptLagMs: { p50: at(0.5), p99: at(0.99), max: lags.at(-1) ?? 0 },
      log: { entries, sqliteBytes: bytes, bytesPerEntry: Math.round(bytes / Math.max(1, entries)) },
    };
  } finally {
    await server.stop();
  }
}

const rounds: Awaited<ReturnType<typeof engineRound>>[][] = [];
for (let round = 0; round < ROUNDS; round++) {
  const order = round % 2 === 0 ? [false, true] : [true, false];
  const pair = [];
  for (const log of order) {
    const result = await engineRound(log, round);
    progress(
      `round ${round + 1} log ${log ? "on " : "off"}: ${result.perSecond.toFixed(0)} reservations/s, ${result.cpuUsPerReservation.toFixed(1)} µs CPU each`,
    );
    pair.push(result);
  }
  rounds.push(pair);
}
const median = (xs: number[]) => xs.sort((a, b) => a - b)[Math.floor(xs.length / 2)] ?? 0;
const ratio = (pick: (r: (typeof rounds)[number][number]) => number) =>
  median(
    rounds.map((pair) => {
      const on = pair.find((r) => r.log);
      const off = pair.find((r) => !r.log);
      return on && off ? pick(on) / pick(off) : 0;
    }),
  );
const lag = await receiptLag();
console.log(
  JSON.stringify(
    {
      engine: {
        count: COUNT,
        rounds: rounds.flat(),
        medianRatioOnOff: {
          perSecond: ratio((r) => r.perSecond),
          cpuPerReservation: ratio((r) => r.cpuUsPerReservation),
        },
      },
      receipts: lag,
    },
    null,
    2,
  ),
);
process.exit(0);
