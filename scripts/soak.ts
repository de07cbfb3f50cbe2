// `npx tsx scripts/soak.ts [--phases 1000,10000,100000] [--concurrency 16]`: the long sale.
//
// Starts the Worker's harness bundle in workerd through Miniflare (tools/worker.ts), creates one
// SKU and runs reserve → cancel cycles through the public API (token, reservation, cancel: distinct
// shoppers), with reconciliation every 1,000 cycles as the cron would run it (it moves the watermark,
// and its visit prunes what D1 has). At each phase boundary (finished reservations so far) it measures,
// on the same SKU:
//   rows read per reservation and per release (the stock object's SQL, over 200 of each),
//   rows read per reconciliation (its own report: D1 and the objects) and per /metrics scrape,
//   the object's database size and rows per table, and workerd's resident memory.
// Flat figures from the first phase to the last are the claim of issue 16; the script prints a table
// (and `--json <file>` writes the figures). Tokens live 5 s here (PURCHASE_TOKEN_TTL_SECONDS), so
// finished rows become prunable a minute later (tokens + the clock margin), not six.
import { execFileSync } from "node:child_process";
import { writeFileSync } from "node:fs";
import { SECRETS } from "../tools/dev-vars";
import { shopperJwt } from "../tools/jwt";
import { startWorker, type WorkerServer } from "../tools/worker";

const args = process.argv.slice(2);
const option = (name: string, fallback: string) => {
  const i = args.indexOf(`--${name}`);
  return i >= 0 && args[i + 1] ? (args[i + 1] as string) : fallback;
};
const PHASES = option("phases", "1000,10000,100000").split(",").map(Number);
const CONCURRENCY = Number(option("concurrency", "16"));
const JSON_OUT = option("json", "");
const SAMPLE = 200;
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
  cyclesPerSecond: number;
}

const log = (line: string) => console.log(`[soak] ${line}`);

async function main(): Promise<void> {
  log(`phases ${PHASES.join(" → ")} finished reservations, ${CONCURRENCY} concurrent shoppers`);
  const server = await startWorker("soak", {
    RECONCILE_GRACE_MS: "0",
    PURCHASE_TOKEN_TTL_SECONDS: "5",
    GROUP_COMMIT: "on",
    COUNT_ROWS_READ: "true", // the harness stock object counts its engine's rows read (src/harness/harness-stock.ts)
  });
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
      phases.push(phase);
      log(
        `${finished} finished: ${phase.rowsPerReservation.toFixed(1)} rows/reservation, ` +
          `${phase.rowsPerRelease.toFixed(1)} rows/release, ${phase.rowsPerReconciliation} rows/reconciliation, ` +
          `${phase.objectRowsPerScrape} object rows/scrape, db ${(phase.databaseBytes / 1024).toFixed(0)} KiB, ` +
          `${phase.reservationRows} reservation rows, workerd ${phase.workerdRssMiB} MiB (${phase.cyclesPerSecond.toFixed(0)} cycles/s)`,
      );
    }
    console.table(phases);
    if (JSON_OUT) writeFileSync(JSON_OUT, `${JSON.stringify({ phases }, null, 2)}\n`);
  } finally {
    await server.stop();
  }
}

/** One shopper's reserve → cancel. */
async function cycle(server: WorkerServer, userId: string): Promise<void> {
  const auth = { authorization: `Bearer ${await jwt(userId)}` };
  const token = await http(server, "POST", `/api/skus/${SKU}/tokens`, auth);
  const held = await http(server, "POST", `/api/skus/${SKU}/reservations`, auth, { token: token.token, quantity: 1 });
  await http(server, "POST", `/api/reservations/${held.reservationId}/cancel`, auth);
}

/** The figures of one phase, from fresh shoppers on the same SKU. */
async function measure(server: WorkerServer, prefix: string, finished: number, rate: number): Promise<Phase> {
  const users = Array.from({ length: SAMPLE }, (_, i) => `${prefix}-${i}`);
  const auths = await Promise.all(users.map(async (u) => ({ authorization: `Bearer ${await jwt(u)}` })));
  const tokens = [];
  for (const auth of auths) tokens.push((await http(server, "POST", `/api/skus/${SKU}/tokens`, auth)).token);

  const s0 = await stats(server);
  const ids: string[] = [];
  for (const [i, auth] of auths.entries()) {
    ids.push(
      (await http(server, "POST", `/api/skus/${SKU}/reservations`, auth, { token: tokens[i], quantity: 1 }))
        .reservationId,
    );
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
    rowsPerReservation: (s1.rowsRead - s0.rowsRead) / SAMPLE,
    rowsPerRelease: (s2.rowsRead - s1.rowsRead) / SAMPLE,
    rowsPerReconciliation: report.rowsRead,
    objectRowsPerReconciliation: s3.rowsRead - s2.rowsRead,
    objectRowsPerScrape: s4.rowsRead - s3.rowsRead,
    databaseBytes: s4.databaseSize,
    reservationRows: s4.rows.reservations ?? 0,
    workerdRssMiB: workerdRssMiB(),
    cyclesPerSecond: rate,
  };
}

function stats(server: WorkerServer): Promise<Stats> {
  return http(server, "GET", `/bench/stock/${SKU}/0/stats`, {});
}

const jwts = new Map<string, string>();
async function jwt(userId: string): Promise<string> {
  let token = jwts.get(userId);
  if (!token) {
    token = await shopperJwt(userId, SECRETS.AUTH_SECRET);
    jwts.set(userId, token);
  }
  return token;
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
    const res = await fetch(`${server.url}${path}`, {
      method,
      headers: { ...headers, ...(body === undefined ? {} : { "content-type": "application/json" }) },
      ...(body === undefined ? {} : { body: JSON.stringify(body) }),
    });
    const answer = await res.text();
    if (res.status === 503 && attempt < 5) continue; // BUSY: the same request again
    if (!res.ok) throw new Error(`${method} ${path}: ${res.status} ${answer}\n${server.logTail()}`);
    return text ? answer : JSON.parse(answer);
  }
}

function admin<T = unknown>(server: WorkerServer, method: string, path: string, body?: unknown): Promise<T> {
  return http(server, method, path, { authorization: `Bearer ${SECRETS.ADMIN_TOKEN}` }, body);
}

/** The resident memory of the workerd processes this script started, in MiB. */
function workerdRssMiB(): number {
  const table = execFileSync("ps", ["-eo", "pid=,ppid=,rss=,comm="], { encoding: "utf8" });
  const procs = table
    .trim()
    .split("\n")
    .map((line) => line.trim().split(/\s+/))
    .map(([pid, ppid, rss, comm]) => ({ pid: Number(pid), ppid: Number(ppid), rss: Number(rss), comm: comm ?? "" }));
  const mine = new Set([process.pid]);
  for (let grew = true; grew; ) {
    grew = false;
    for (const p of procs) {
      if (mine.has(p.ppid) && !mine.has(p.pid)) {
        mine.add(p.pid);
        grew = true;
      }
    }
  }
  const kib = procs.filter((p) => mine.has(p.pid) && p.comm.includes("workerd")).reduce((n, p) => n + p.rss, 0);
  return Math.round(kib / 1024);
}

await main();
