// `npx tsx scripts/soak.ts [--phases 1000,20000,50000,100000] [--rate 200] [--concurrency 16]`: the long sale.
//
// Starts the Worker's harness bundle in workerd through Miniflare (tools/worker.ts), creates one
// SKU and runs reserve → cancel cycles through the public API (token, reservation, cancel: distinct
// shoppers) at a steady `--rate` (cycles per second; 0 = as fast as it goes), with reconciliation
// every 1,000 cycles as the cron would run it (it moves the watermark, and its visit prunes what D1
// has). At each phase boundary (finished reservations so far) it measures, on the same SKU:
//   rows read per reservation and per release (the stock object's SQL, over 200 of each),
//   rows read per reconciliation (its own report: D1 and the objects) and per /metrics scrape,
//   the object's database size and rows per table (and rows ÷ rate: the seconds of sale it holds),
//   and workerd's resident memory, beside a control: a bare Worker (`fetch() → new Response(…)`) in a
//   workerd of its own, sent as many requests at the same concurrency, whose memory is the runtime's
//   own under that traffic (`--no-control` skips it).
// Flat figures after the first phase are the claim of issue 16; the script prints a table (and
// `--json <file>` writes the figures). Tokens live 5 s here (PURCHASE_TOKEN_TTL_SECONDS), so finished
// rows become prunable a minute later (tokens + the clock margin), not six: the object holds about
// 65 s of the sale, which the first phase must outlast for its storage to be at its plateau.
import { readFileSync, writeFileSync } from "node:fs";
import { startBareWorker } from "../bench/lib/bare-worker";
import { SECRETS } from "../tools/dev-vars";
import { collectGarbage, type IsolateHeap, isolateHeaps, writeHeapSnapshot } from "../tools/heap";
import { shopperJwt } from "../tools/jwt";
import { type NativeMemory, nativeMemory, releaseFreeMemory } from "../tools/native-memory";
import { rssBytes } from "../tools/proc";
import { startWorker, type WorkerServer } from "../tools/worker";

const args = process.argv.slice(2);
const option = (name: string, fallback: string) => {
  const i = args.indexOf(`--${name}`);
  return i >= 0 && args[i + 1] ? (args[i + 1] as string) : fallback;
};
const PHASES = option("phases", "1000,20000,50000,100000").split(",").map(Number);
const CONCURRENCY = Number(option("concurrency", "16"));
/** Cycles started per second at most (0: no pacing). Steady, so the object's window of rows is too. */
const RATE = Number(option("rate", "200"));
/** Without `--no-control`: a bare Worker gets as many requests per phase, for the runtime's own memory. */
const CONTROL = !args.includes("--no-control");
const JSON_OUT = option("json", "");
/** With `--inspect`: each phase also reports every isolate's JavaScript heap (after a collection). */
const INSPECT = args.includes("--inspect");
/** `--snapshots <dir>`: a heap snapshot of the Worker's isolate per phase (implies --inspect). */
const SNAPSHOTS = option("snapshots", "");
/** With `--native`: each phase also reads workerd's tcmalloc and SQLite figures through gdb (tools/native-memory.ts). */
const NATIVE = args.includes("--native");
/** `--var NAME=value` (repeatable): a var for the Worker, e.g. to switch a feature off while hunting memory. */
const VARS = args.flatMap((a, i) => (a === "--var" && args[i + 1] ? [args[i + 1] as string] : []));
const SAMPLE = 200;
/** Reservations measured per batch of tokens (minted together, used within their 5 s). */
const MEASURE_BATCH = 20;
const RECONCILE_EVERY = 1_000;
const SKU = "soak";

interface Stats {
  rowsRead: number;
  databaseSize: number;
  rows: Record<string, number>;
}

interface Phase {
  finished: number;
  rowsPerReservation: number;
  rowsPerRelease: number;
  rowsPerReconciliation: number;
  objectRowsPerReconciliation: number;
  objectRowsPerScrape: number;
  databaseBytes: number;
  reservationRows: number;
  workerdRssMiB: number;
  /** Of which anonymous memory (heaps: V8's, SQLite's page caches, workerd's own), not mapped files. */
  workerdAnonMiB: number;
  cyclesPerSecond: number;
  /** Reservation rows ÷ cycles per second: how many seconds of the sale the object holds. */
  secondsHeld: number;
  /** The control's workerd RSS after as many requests as the soak has sent so far (MiB). */
  bareWorkerRssMiB?: number;
  /** Cycles so far whose token lapsed before use (they minted another). */
  tokenRetries: number;
  /** MiB of JavaScript heap per isolate (with --inspect). */
  heapsMiB?: Record<string, number>;
  /** MiB of workerd's native heap (with --native). */
  nativeMiB?: Record<keyof NativeMemory, number>;
  /** workerd's RSS once tcmalloc gave its free memory back (with --native). */
  rssAfterReleaseMiB?: number;
}

const log = (line: string) => console.log(`[soak] ${line}`);

async function main(): Promise<void> {
  for (const [i, n] of PHASES.entries()) {
    if (!Number.isInteger(n) || n <= (PHASES[i - 1] ?? 0))
      throw new Error("--phases: rising whole numbers, e.g. 1000,20000");
  }
  if (!(RATE >= 0)) throw new Error("--rate: cycles per second, 0 for no pacing");
  log(
    `phases ${PHASES.join(" → ")} finished reservations, ${CONCURRENCY} concurrent shoppers, ${RATE > 0 ? `${RATE} cycles/s` : "unpaced"}${CONTROL ? ", bare Worker control" : ""}`,
  );
  const control = CONTROL ? await startBareWorker() : undefined;
  let controlSent = 0;
  const server = await startWorker(
    "soak",
    {
      RECONCILE_GRACE_MS: "0",
      PURCHASE_TOKEN_TTL_SECONDS: "5",
      GROUP_COMMIT: "on",
      COUNT_ROWS_READ: "true", // the harness stock object counts its engine's rows read (src/harness/harness-stock.ts)
      ...Object.fromEntries(VARS.map((v) => v.split("=") as [string, string])),
    },
    { inspect: INSPECT || SNAPSHOTS !== "" },
  );
  try {
    await admin(server, "PUT", `/admin/skus/${SKU}`, { totalStock: 10_000, perUserLimit: 1, holdSeconds: 600 });
    const phases: Phase[] = [];
    let finished = 0;
    let user = 0;
    for (const target of PHASES) {
      const started = performance.now();
      const cycles = target - finished;
      let next = 0;
      const lane = async () => {
        for (let i = next++; i < cycles; i = next++) {
          const due = started + (RATE > 0 ? (i * 1000) / RATE : 0);
          const early = due - performance.now();
          if (early > 0) await new Promise((resolve) => setTimeout(resolve, early)); // pacing, not waiting on the system
          await cycle(server, `soak-${user + i}`);
          if ((finished + i + 1) % RECONCILE_EVERY === 0) await admin(server, "POST", "/admin/reconcile");
        }
      };
      await Promise.all(Array.from({ length: CONCURRENCY }, lane));
      const seconds = (performance.now() - started) / 1000;
      user += cycles;
      finished = target;
      await admin(server, "POST", "/admin/reconcile");
      const phase = await measure(server, `soak-m${target}`, finished, cycles / seconds);
      if (control) {
        // The same number of requests as the soak sent so far (three a cycle), at the same concurrency.
        const due = requestsSent - controlSent;
        await loadBare(control.url, due);
        controlSent += due;
        phase.bareWorkerRssMiB = Math.round(rssBytes(control.pid) / 2 ** 20);
      }
      if (server.inspectorPort !== undefined) {
        phase.heapsMiB = heapsMiB(await isolateHeaps(server.inspectorPort));
        log(`heaps (MiB, after GC): ${JSON.stringify(phase.heapsMiB)}`);
        if (SNAPSHOTS)
          await writeHeapSnapshot(server.inspectorPort, "flashgate", `${SNAPSHOTS}/soak-${target}.heapsnapshot`);
      }
      if (NATIVE) {
        const native = await nativeMemory(server.pid);
        phase.nativeMiB = Object.fromEntries(
          Object.entries(native).map(([k, v]) => [k, Math.round((v / 2 ** 20) * 10) / 10]),
        ) as Record<keyof NativeMemory, number>;
        log(`native (MiB): ${JSON.stringify(phase.nativeMiB)}`);
        await releaseFreeMemory(server.pid);
        phase.rssAfterReleaseMiB = Math.round(rssBytes(server.pid) / 2 ** 20);
        log(`workerd after tcmalloc released its free memory: ${phase.rssAfterReleaseMiB} MiB`);
        if (server.inspectorPort !== undefined) {
          // What a garbage collection gives back: C++ memory owned by JS objects nobody reaches any more.
          await collectGarbage(server.inspectorPort);
          const after = await nativeMemory(server.pid);
          log(
            `after GC: ${JSON.stringify(heapsMiB(await isolateHeaps(server.inspectorPort)))}, native allocated ${(after.allocatedBytes / 2 ** 20).toFixed(1)} MiB, workerd ${Math.round(rssBytes(server.pid) / 2 ** 20)} MiB (${Math.round(statusKiB(server.pid, "RssAnon") / 1024)} anon)`,
          );
        }
      }
      phases.push(phase);
      // Written after every phase: a long soak cut short still leaves its figures.
      if (JSON_OUT) writeFileSync(JSON_OUT, `${JSON.stringify({ phases }, null, 2)}\n`);
      log(
        `${finished} finished: ${phase.rowsPerReservation.toFixed(1)} rows/reservation, ${phase.rowsPerRelease.toFixed(1)} rows/release, ${phase.rowsPerReconciliation} rows/reconciliation, ${phase.objectRowsPerScrape} object rows/scrape, db ${(phase.databaseBytes / 1024).toFixed(0)} KiB, ${phase.reservationRows} reservation rows (${phase.secondsHeld.toFixed(0)} s of sale), workerd ${phase.workerdRssMiB} MiB (${phase.workerdAnonMiB} anon)${phase.bareWorkerRssMiB === undefined ? "" : `, bare Worker ${phase.bareWorkerRssMiB} MiB`} ` +
          `(${phase.cyclesPerSecond.toFixed(0)} cycles/s)`,
      );
    }
    console.table(phases.map(({ heapsMiB: _h, nativeMiB: _n, ...figures }) => figures));
  } finally {
    await server.stop();
    await control?.stop();
  }
}

/** `count` small JSON POSTs to the control Worker, CONCURRENCY at a time (Node's fetch, like the soak). */
async function loadBare(url: string, count: number): Promise<void> {
  let next = 0;
  const lane = async () => {
    for (let i = next++; i < count; i = next++) {
      const res = await fetch(url, {
        method: "POST",
        headers: { "content-type": "application/json" },
        body: '{"quantity":1}',
      });
      await res.text();
    }
  };
  await Promise.all(Array.from({ length: CONCURRENCY }, lane));
}

/** One shopper's reserve → cancel. */
async function cycle(server: WorkerServer, userId: string): Promise<void> {
  const auth = { authorization: `Bearer ${await jwt(userId)}` };
  for (let attempt = 1; ; attempt++) {
    const token = await http(server, "POST", `/api/skus/${SKU}/tokens`, auth);
    try {
      const body = { token: token.token, quantity: 1 };
      const held = await http(server, "POST", `/api/skus/${SKU}/reservations`, auth, body);
      await http(server, "POST", `/api/reservations/${held.reservationId}/cancel`, auth);
      return;
    } catch (err) {
      // A 5-s token can lapse on a loaded machine between minting and use: a new one, as a shopper would.
      if (attempt >= 5 || !String(err).includes("TOKEN_EXPIRED")) throw err;
      tokenRetries++;
    }
  }
}

/** Tokens that lapsed before their reservation (the cycle minted another). */
let tokenRetries = 0;
/** HTTP requests sent to the Worker so far (the control gets as many). */
let requestsSent = 0;

/** The figures of one phase, from fresh shoppers on the same SKU. */
async function measure(server: WorkerServer, prefix: string, finished: number, rate: number): Promise<Phase> {
  const users = Array.from({ length: SAMPLE }, (_, i) => `${prefix}-${i}`);
  const auths = await Promise.all(users.map(async (u) => ({ authorization: `Bearer ${await jwt(u)}` })));
  // Tokens live 5 s: they are minted a batch at a time just before their reservations, outside the
  // counted window (minting reads the SKU's state from the object).
  let reserveRows = 0;
  const ids: string[] = [];
  for (let start = 0; start < SAMPLE; start += MEASURE_BATCH) {
    const batch = auths.slice(start, start + MEASURE_BATCH);
    const tokens: string[] = [];
    for (const auth of batch) tokens.push((await http(server, "POST", `/api/skus/${SKU}/tokens`, auth)).token);
    const before = await stats(server);
    for (const [i, auth] of batch.entries()) {
      ids.push(
        (await http(server, "POST", `/api/skus/${SKU}/reservations`, auth, { token: tokens[i], quantity: 1 }))
          .reservationId,
      );
    }
    reserveRows += (await stats(server)).rowsRead - before.rowsRead;
  }
  const s1 = await stats(server);
  for (const [i, auth] of auths.entries()) await http(server, "POST", `/api/reservations/${ids[i]}/cancel`, auth);
  const s2 = await stats(server);
  const report = await admin<{ rowsRead: number }>(server, "POST", "/admin/reconcile");
  const s3 = await stats(server);
  await http(server, "GET", "/metrics", { authorization: `Bearer ${SECRETS.ADMIN_TOKEN}` }, undefined, true);
  const s4 = await stats(server);
  return {
    finished,
    rowsPerReservation: reserveRows / SAMPLE,
    rowsPerRelease: (s2.rowsRead - s1.rowsRead) / SAMPLE,
    rowsPerReconciliation: report.rowsRead,
    objectRowsPerReconciliation: s3.rowsRead - s2.rowsRead,
    objectRowsPerScrape: s4.rowsRead - s3.rowsRead,
    databaseBytes: s4.databaseSize,
    reservationRows: s4.rows.reservations ?? 0,
    workerdRssMiB: Math.round(rssBytes(server.pid) / 2 ** 20),
    workerdAnonMiB: Math.round(statusKiB(server.pid, "RssAnon") / 1024),
    cyclesPerSecond: rate,
    secondsHeld: (s4.rows.reservations ?? 0) / rate,
    tokenRetries,
  };
}

function stats(server: WorkerServer): Promise<Stats> {
  return http(server, "GET", `/bench/stock/${SKU}/0/stats`, {});
}

/** A shopper's JWT, signed per use: each shopper runs one cycle, so a cache would only grow. */
async function jwt(userId: string): Promise<string> {
  return shopperJwt(userId, SECRETS.AUTH_SECRET);
}

// The soak reads a few known fields of JSON answers.
// biome-ignore lint/suspicious/noExplicitAny: see above
type AnyJson = any;

async function http(
  server: WorkerServer,
  method: string,
  path: string,
  headers: Record<string, string>,
  body?: unknown,
  text = false,
): Promise<AnyJson> {
  for (let attempt = 0; ; attempt++) {
    let res: Response;
    requestsSent++;
    try {
      res = await fetch(`${server.url}${path}`, {
        method,
        headers: { ...headers, ...(body === undefined ? {} : { "content-type": "application/json" }) },
        ...(body === undefined ? {} : { body: JSON.stringify(body) }),
      });
    } catch (err) {
      // A connection reset (workerd stopped a moment, e.g. by a debugger): every call here is safe to
      // send again (a reservation replays by its token's nonce, a cancel is idempotent).
      if (attempt < 5) continue;
      throw err;
    }
    const answer = await res.text();
    if (res.status === 503 && attempt < 5) continue; // BUSY: the same request again
    if (!res.ok) throw new Error(`${method} ${path}: ${res.status} ${answer}\n${server.logTail()}`);
    return text ? answer : JSON.parse(answer);
  }
}

function admin<T = unknown>(server: WorkerServer, method: string, path: string, body?: unknown): Promise<T> {
  return http(server, method, path, { authorization: `Bearer ${SECRETS.ADMIN_TOKEN}` }, body);
}

/** A `/proc/<pid>/status` figure in KiB (VmRSS, RssAnon, RssFile…). */
function statusKiB(pid: number, field: string): number {
  const m = new RegExp(`^${field}:\\s+(\\d+) kB`, "m").exec(readFileSync(`/proc/${pid}/status`, "utf8"));
  return m ? Number(m[1]) : Number.NaN;
}

function heapsMiB(heaps: IsolateHeap[]): Record<string, number> {
  return Object.fromEntries(heaps.map((h) => [h.target, Math.round((h.usedBytes / 2 ** 20) * 10) / 10]));
}

await main();
