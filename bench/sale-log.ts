/**
 * `npx tsx bench/sale-log.ts [--rounds N] [--count N]`: what the verifiable sale's log costs
 * (issue #52), measured locally in one workerd (tools/worker.ts):
 *
 * - engine core without the log, with the floor's log (SALE_LOG_FLOOR: each batch committed as one
 *   row, nothing else: the least an append costs), with the format's floor (the same after the
 *   hashes every entry asks, src/harness/harness-sale-log.ts) and with the log, in rounds (the order rotating):
 *   `count` fresh reservations through the stock object's reserve RPC (`POST /bench/engine`,
 *   batches of 16, 8 in flight), their reservations/s, and workerd's CPU per reservation from /proc
 *   until the outbox and the log have taken every event. Locally the log object shares the process,
 *   so its own work is in the "on" figure; on Cloudflare it runs in an object of its own;
 * - the hot SKU directly (bench/scenarios/edge.ts, quick timing) without the log, with the format's
 *   floor and with the log, in rounds (the order rotating): the point's CPU per request, and the CPU from the warm-up until the outbox drained
 *   per reservation (the log's work after the measured seconds counted too);
 * - receipt lag at sale pace: holds made over HTTP at `pace`/s, and for a sample of them the time
 *   from the `202` to the first `GET /api/reservations/:id` that carries the hold's receipt;
 * - storage: the log object's database (checkpointed) per entry.
 *
 * Prints one JSON object; `--write` keeps it in bench/results.json (`figures.sale_log`, or with
 * `--before` `figures.sale_log_before`) and regenerates docs/PERFORMANCE.md. Not part of `npm run
 * bench`, whose runs keep these figures.
 */
import { execFileSync, execSync } from "node:child_process";
import { copyFileSync, existsSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { shopperJwt } from "../tools/jwt";
import { cpuMeter } from "../tools/proc";
import { startWorker, type WorkerServer } from "../tools/worker";
import { answered, newBench, QUICK } from "./lib/context";
import { through } from "./lib/via";
import { type Results, writeReport } from "./report";
import { hotSku } from "./scenarios/edge";

const args = process.argv.slice(2);
const option = (name: string, fallback: number) => {
  const i = args.indexOf(name);
  return i < 0 ? fallback : Number(args[i + 1]);
};
const ROOT = fileURLToPath(new URL("..", import.meta.url));
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

type LogMode = "off" | "floor" | "hashes" | "on";
const LOG_VARS: Record<LogMode, Record<string, string>> = {
  off: { LOG_SIGNING_KEY: "" },
  floor: { SALE_LOG_FLOOR: "on" },
  hashes: { SALE_LOG_FLOOR: "hashes" },
  on: {},
};

async function engineRound(mode: LogMode, round: number) {
  const server = await startWorker(`engine-${mode}`, LOG_VARS[mode]);
  try {
    const sku = `bench-log-${round}-${mode}`;
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
      mode,
      ok: result.ok,
      perSecond: (result.ok / result.elapsedMs) * 1000,
      cpuUsPerReservation: cpuUs / result.ok,
    };
  } finally {
    await server.stop();
  }
}

/** The hot SKU directly, with or without the log: the point's CPU per request and per reservation drained. */
async function hotRound(mode: LogMode, round: number) {
  const server = await startWorker(`hot-${mode}`, LOG_VARS[mode]);
  const bench = newBench(QUICK, server.stateDir);
  try {
    const meter = cpuMeter([server.pid]);
    const point = await hotSku(bench, through(server, "direct"), { key: `hot_${mode}_r${round}` });
    await drained(server, point.sku);
    const cpuUs = meter.stop();
    const held = answered(point, 202);
    if (bench.problems.length > 0) throw new Error(bench.problems.join("; "));
    return { mode, rps: point.rps, cpuUsPerRequest: point.cpuUsPerRequest, drainedCpuUsPerReservation: cpuUs / held };
  } finally {
    await server.stop();
  }
}

/**
 * The log object's database in bytes (Miniflare's state: v3/do/<script>-SaleLog/<id>.sqlite): a copy
 * of its file and write-ahead log opened by the sqlite3 command, checkpointed, page count × page size
 * (the file alone misses what the WAL still holds).
 */
function logBytes(doDir: string): number {
  const logDir = readdirSync(doDir).find((d) => d.endsWith("SaleLog"));
  const file = logDir && readdirSync(join(doDir, logDir)).find((f) => f.endsWith(".sqlite") && f !== "metadata.sqlite");
  if (!logDir || !file) return 0;
  const copy = mkdtempSync(join(tmpdir(), "sale-log-db-"));
  try {
    for (const suffix of ["", "-wal"])
      if (existsSync(join(doDir, logDir, file + suffix)))
        copyFileSync(join(doDir, logDir, file + suffix), join(copy, `log.sqlite${suffix}`));
    const pragma = (name: string) =>
      Number(
        execFileSync("sqlite3", [join(copy, "log.sqlite"), `PRAGMA ${name};`])
          .toString()
          .trim()
          .split("\n")
          .pop(),
      );
    pragma("wal_checkpoint(TRUNCATE)");
    return pragma("page_count") * pragma("page_size");
  } finally {
    rmSync(copy, { recursive: true, force: true });
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
    const bytes = logBytes(join(server.stateDir, "v3", "do"));
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

const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)] ?? 0;
/** The median over rounds of each round's ratio `mode` ÷ off. */
function ratios<R extends { mode: LogMode }>(rounds: R[][], mode: LogMode, pick: (r: R) => number) {
  return median(
    rounds.map((round) => {
      const with_ = round.find((r) => r.mode === mode);
      const off = round.find((r) => r.mode === "off");
      return with_ && off ? pick(with_) / pick(off) : 0;
    }),
  );
}

const MODES: LogMode[] = ["off", "floor", "hashes", "on"];
const HOT_MODES: LogMode[] = ["off", "hashes", "on"];

async function measureAll() {
  const engine: Awaited<ReturnType<typeof engineRound>>[][] = [];
  for (let round = 0; round < ROUNDS; round++) {
    const results = [];
    for (let i = 0; i < MODES.length; i++) {
      const mode = MODES[(i + round) % MODES.length] as LogMode;
      const result = await engineRound(mode, round);
      progress(
        `engine round ${round + 1} log ${mode}: ${result.perSecond.toFixed(0)} reservations/s, ${result.cpuUsPerReservation.toFixed(1)} µs CPU each`,
      );
      results.push(result);
    }
    engine.push(results);
  }
  const hot: Awaited<ReturnType<typeof hotRound>>[][] = [];
  for (let round = 0; round < ROUNDS; round++) {
    const results = [];
    for (let i = 0; i < HOT_MODES.length; i++) {
      const mode = HOT_MODES[(i + round) % HOT_MODES.length] as LogMode;
      const result = await hotRound(mode, round);
      progress(
        `hot SKU round ${round + 1} log ${mode}: ${result.cpuUsPerRequest.toFixed(0)} µs CPU/request, ${result.drainedCpuUsPerReservation.toFixed(0)} µs drained`,
      );
      results.push(result);
    }
    hot.push(results);
  }
  const receipts = await receiptLag();
  return {
    measured: new Date().toISOString(),
    commit: execSync("git rev-parse --short HEAD").toString().trim(),
    dirty: execSync("git status --porcelain -- durable-objects src bench").toString().trim() !== "",
    engine: {
      count: COUNT,
      rounds: engine,
      medianRatioToOff: Object.fromEntries(
        (["floor", "hashes", "on"] as const).map((mode) => [
          mode,
          {
            perSecond: ratios(engine, mode, (r) => r.perSecond),
            cpuPerReservation: ratios(engine, mode, (r) => r.cpuUsPerReservation),
          },
        ]),
      ) as Record<"floor" | "on", { perSecond: number; cpuPerReservation: number }> &
        Partial<Record<"hashes", { perSecond: number; cpuPerReservation: number }>>,
    },
    hotSkuDirect: {
      rounds: hot,
      medianRatioOnOff: {
        cpuPerRequest: ratios(hot, "on", (r) => r.cpuUsPerRequest),
        drainedCpuPerReservation: ratios(hot, "on", (r) => r.drainedCpuUsPerReservation),
      },
      /** The format's floor (SALE_LOG_FLOOR=hashes: the edge's salt, the log's hashes, a row a batch) ÷ off. */
      medianRatioHashesOff: {
        cpuPerRequest: ratios(hot, "hashes", (r) => r.cpuUsPerRequest),
        drainedCpuPerReservation: ratios(hot, "hashes", (r) => r.drainedCpuUsPerReservation),
      },
    },
    receipts,
  };
}

/** What bench/results.json keeps of a run (`figures.sale_log`, and `sale_log_before` for the before → after). */
export type SaleLogFigures = Awaited<ReturnType<typeof measureAll>>;

// `--from <file>`: a run printed before (an earlier commit's, from its worktree) instead of measuring.
const from = args.indexOf("--from");
const figures: SaleLogFigures =
  from < 0 ? await measureAll() : JSON.parse(readFileSync(args[from + 1] as string, "utf8"));
console.log(JSON.stringify(figures, null, 2));
if (args.includes("--write")) {
  // Kept from run to run by bench/run.ts; docs/PERFORMANCE.md's sale log section is made from it.
  const file = join(ROOT, "bench/results.json");
  const results = JSON.parse(readFileSync(file, "utf8")) as Results;
  (results.figures as Record<string, unknown>)[args.includes("--before") ? "sale_log_before" : "sale_log"] = figures;
  writeFileSync(file, `${JSON.stringify(results, null, 2)}\n`);
  writeReport(results);
  progress("wrote bench/results.json and docs/PERFORMANCE.md");
}
process.exit(0);
