// `npm run chaos [-- --seed N] [--quick | --minutes M] [--no-fuzz | --fuzz-only]`
//
// Starts the real system locally (redis-server + the Upstash bridge + wrangler dev with its queues, D1
// and Durable Objects, `--var CHAOS:true` so the fault switches exist), runs hundreds of seeded
// shoppers against it on 127.0.0.1 while faults are injected on a seeded schedule, stops the faults,
// lets the system settle (dead-letter replays, reconciliation), checks the invariants of
// docs/ARCHITECTURE.md by id (1-12 and 15; which are checked on line and which at the end: docs/DEVELOPMENT.md,
// "Chaos"), then runs the bad-input pass (and 11 again after it). Prints a summary; exits 1 on any violation.
import { randomBytes } from "node:crypto";
import { startDevServer } from "../../tools/dev-server";
import { proxyRestarts, workerRestarts } from "../../tools/proxy-restart";
import { startRedis } from "../../tools/redis-server";
import { startBridge } from "../../tools/upstash-bridge";
import { FaultInjector, RedisControl } from "./faults";
import { FUZZ_GHOSTS, fuzz } from "./fuzz";
import { CHAOS_RETRY_SCHEDULE, type HookCheck, ShopHooks } from "./hooks";
import { Client, type Secrets, sleep } from "./http";
import {
  checkInvariants,
  checkMetrics,
  checkNoStrandedStock,
  checkNothingStored,
  converged,
  d1Query,
  firstOrderMismatch,
  type SkuView,
  skuView,
} from "./invariants";
import { verifySaleLogs } from "./sale-log";
import { describeFault, faultSchedule, parseOptions, skuPlans } from "./schedule";
import { Shoppers } from "./shoppers";

const began = Date.now();
// The bridge logs every command it could not pass on while redis-server is down: count those lines.
let bridgeErrors = 0;
const consoleError = console.error.bind(console);
console.error = (...args: unknown[]) => {
  if (typeof args[0] === "string" && args[0].startsWith("upstash-bridge:")) bridgeErrors++;
  else consoleError(...args);
};
const log = (line: string) => console.log(`[chaos ${((Date.now() - began) / 1000).toFixed(1).padStart(6)}s] ${line}`);

const opts = parseOptions(process.argv.slice(2));
const skus = skuPlans(opts);
const schedule = faultSchedule(opts, skus);
log(
  `seed ${opts.seed}, traffic ${opts.trafficMs / 1000} s, ${opts.shoppers} shoppers (${opts.concurrency} at once), proof of work ${opts.powBits > 0 ? `${opts.powBits} bits` : "off"}, ` +
    `${skus.length} SKUs, ${schedule.length} scheduled faults`,
);
for (const item of schedule.slice(0, 6))
  log(`  schedule t+${(item.atMs / 1000).toFixed(1)}s ${describeFault(item.fault)}`);
if (schedule.length > 6) log(`  ... and ${schedule.length - 6} more`);

const secrets: Secrets = {
  authSecret: `chaos-auth-${randomBytes(8).toString("hex")}`,
  adminToken: `chaos-admin-${randomBytes(8).toString("hex")}`,
  webhookSecret: `chaos-webhook-${randomBytes(8).toString("hex")}`,
  stripeSecret: `whsec_chaos${randomBytes(12).toString("hex")}`,
};

const redis = new RedisControl(await startRedis());
const bridgeToken = randomBytes(24).toString("hex");
const bridge = await startBridge({ redisUrl: redis.server.url, token: bridgeToken, host: "127.0.0.1" });
log(`redis-server on port ${redis.server.port}, Upstash bridge on ${bridge.url}; starting wrangler dev`);
const server = await startDevServer({
  vars: {
    CHAOS: "true",
    RECONCILE_GRACE_MS: "0",
    AUTH_SECRET: secrets.authSecret,
    ADMIN_TOKEN: secrets.adminToken,
    PAYMENT_WEBHOOK_SECRET: secrets.webhookSecret,
    STRIPE_WEBHOOK_SECRET: secrets.stripeSecret,
    UPSTASH_REDIS_REST_URL: bridge.url,
    UPSTASH_REDIS_REST_TOKEN: bridgeToken,
    POW_BITS: String(opts.powBits),
    // The gathering tier for every SKU of more than one shard (their gatherers' faults: faults.ts);
    // the one-shard SKUs call their stock objects directly, so both paths run at once.
    GATHER: "sharded",
    // The shop's webhook receiver runs in this process, on http://127.0.0.1 (hooks.ts).
    WEBHOOK_ALLOW_HTTP_LOCALHOST: "true",
    WEBHOOK_RETRY_SCHEDULE: CHAOS_RETRY_SCHEDULE,
  },
});
log(`wrangler dev on ${server.url} (state in ${server.stateDir})`);
const client = new Client(server.url, secrets, opts.powBits);

let exitCode = 1;
let hooks: ShopHooks | null = null;
/** `keepState`: a run that did not pass keeps what the Worker stored (D1, every object's SQLite) to be read. */
const stopAll = async (keepState = false) => {
  clearInterval(watchdog);
  await hooks?.close().catch(() => undefined);
  await server.stop({ keepState }).catch(() => undefined);
  if (keepState) console.log(`state kept in ${server.stateDir} (D1 and the objects' SQLite files, for the failure)`);
  await bridge.close().catch(() => undefined);
  await redis.server.stop().catch(() => undefined);
};
process.on("SIGINT", () => void stopAll().then(() => process.exit(130)));

// A wrangler dev that stops answering every route would hang the run for good: after HANG_MS without
// any answer to /healthz, say so with its reloads and what it printed last, and stop (exit 2).
const HANG_MS = 90_000;
let answeredAt = Date.now();
let hung = false;
const watchdog = setInterval(() => {
  fetch(`${server.url}/healthz`, { signal: AbortSignal.timeout(10_000) }).then(
    () => {
      answeredAt = Date.now();
    },
    () => {
      if (hung || Date.now() - answeredAt < HANG_MS) return;
      hung = true; // once, though probes sent before this one may fail after it
      clearInterval(watchdog);
      log(`wrangler dev has answered nothing for ${HANG_MS / 1000} s (${server.reloads()} reloads); it last printed:`);
      console.log(server.tail(40));
      // A runtime that died says so between request lines, which would push it out of the tail.
      const said = server
        .tail(20_000)
        .split("\n")
        .filter(
          (line) => line.trim() !== "" && !line.startsWith("[wrangler:info]") && !line.includes('"msg":"request"'),
        );
      log(`and the last of what it printed that is no request line:\n${said.slice(-30).join("\n")}`);
      void stopAll(true).then(() => process.exit(2));
    },
  );
}, 5_000);
watchdog.unref();

try {
  if (opts.chaos) {
    hooks = await ShopHooks.start(client, opts.seed);
    log(`shop webhook receiver on ${hooks.receiver.url}: ${hooks.describe()}`);
  }
  for (const plan of skus) {
    const { sku, totalStock, perUserLimit, holdSeconds, shards, opening } = plan;
    const reply = await client.admin("PUT", `/admin/skus/${sku}`, {
      name: sku,
      totalStock,
      perUserLimit,
      holdSeconds,
      shards,
      // Fair opening: shoppers who come before the start are refused a token; those in the window enter the draw.
      ...(opening
        ? { startsAt: new Date(Date.now() + opening.leadMs).toISOString(), openingWindowMs: opening.windowMs }
        : {}),
    });
    if (reply.status !== 200) throw new Error(`configuring ${sku} answered ${reply.status}: ${reply.text}`);
    log(`SKU ${sku}: total ${totalStock}, perUserLimit ${perUserLimit}, holdSeconds ${holdSeconds}, shards ${shards}`);
  }

  const shoppers = new Shoppers(client, opts, skus);
  const faults = new FaultInjector(client, redis, log, skus, shoppers.ledger, opts.seed);
  faults.hooks = hooks;
  faults.restartWorker = () => server.restart();
  const configured = skus.map((plan) => plan.sku);
  let strayFiles = new Set<string>();
  let violations: { invariant: number; message: string }[] = [];
  let checked: Record<number, string> = {};
  let pipelineViolation: { invariant: number; message: string } | null = null;
  let metricFailures: string[] = [];
  let saleLogFailures: string[] = [];
  let saleLogSummary = "not run";
  let hookCheck: HookCheck | null = null;

  if (opts.chaos) {
    // ---- traffic under faults
    const start = Date.now();
    log("traffic and faults start");
    await Promise.all([shoppers.runAll(log, start + opts.trafficMs + 60_000), faults.run(schedule, start)]);
    log(
      `traffic done in ${((Date.now() - start) / 1000).toFixed(0)} s: ${shoppers.ledger.acked.size} reservations acknowledged`,
    );

    // ---- settle: faults off, redis up, the shop's receiver healthy, holds lapse, dead letters replayed, reconciliation
    await faults.consumerOff();
    if (redis.down) await redis.restart();
    if (hooks) {
      await hooks.healthy();
      const { failed, pending } = await hooks.retryFailed();
      log(`shop webhook receiver healthy; ${failed} failed deliveries retried by the operator, ${pending} pending`);
    }
    const consumer = await client.admin("GET", "/chaos/consumer-faults");
    log(`faults stopped; consumer faults injected by the Worker: ${consumer.text}`);
    const lastShortExpiry = Math.max(
      0,
      ...[...shoppers.ledger.acked.values()].filter((a) => a.expiresAt - Date.now() < 20_000).map((a) => a.expiresAt),
    );
    if (lastShortExpiry > Date.now()) {
      log(`waiting ${Math.ceil((lastShortExpiry - Date.now()) / 1000)} s for short holds to lapse`);
      await sleep(lastShortExpiry - Date.now() + 1_000);
    }
    // Phase A: the order pipeline alone (queue retries, duplicates, dead-letter replays; no reconciliation)
    // must bring D1 to the stock objects' state. Reading the admin views wakes aborted objects, whose
    // constructor sends what their outbox still holds. Reconciliation repairing what a correct pipeline
    // would have delivered would hide consumer bugs, so it only runs after this.
    const selfDeadline = Date.now() + 90_000;
    let pipelineGap: string | null = null;
    for (let round = 1; ; round++) {
      const replayed = await faults.replayDeadLetters();
      pipelineGap = await converged(client, server.stateDir, skus, shoppers.ledger, { mirror: false });
      log(
        `drain round ${round} (no reconciliation): ${replayed} dead letters replayed; ${pipelineGap ?? "D1 matches the stock objects"}`,
      );
      if (pipelineGap === null || Date.now() > selfDeadline) break;
      await sleep(5_000);
    }
    if (pipelineGap !== null) {
      const mismatch = await firstOrderMismatch(client, server.stateDir, skus, shoppers.ledger);
      pipelineViolation = {
        invariant: 4,
        message: `the order pipeline did not converge in 90 s after the faults stopped (${pipelineGap})${mismatch ? `; first: ${mismatch}` : ""}`,
      };
      log(`VIOLATION (invariant 4): ${pipelineViolation.message}`);
    }

    // Phase B: reconciliation (check-back, mirror rewrite after redis lost its data, overdue holds).
    const settleDeadline = Date.now() + (opts.quick ? 120_000 : 240_000);
    let round = 0;
    let calm = 0;
    for (;;) {
      round++;
      const replayed = await faults.replayDeadLetters();
      const run = await client.admin("POST", "/admin/reconcile?full=true");
      const differences = (run.json as { differences?: { kind: string }[] } | null)?.differences ?? [];
      const kinds = [...new Set(differences.map((d) => d.kind))].join(",");
      await sleep(2_000);
      const gap = await converged(client, server.stateDir, skus, shoppers.ledger);
      log(
        `settle round ${round}: ${replayed} dead letters replayed, reconcile ${run.status} with ${differences.length} differences${kinds ? ` (${kinds})` : ""}; ${gap ?? "converged"}`,
      );
      calm = gap === null && differences.length === 0 ? calm + 1 : 0;
      if (calm >= 1 && gap === null) break;
      if (Date.now() > settleDeadline) {
        log("settle deadline passed: checking invariants as they stand");
        break;
      }
      await sleep(3_000);
    }

    // ---- invariants
    log("checking invariants");
    // The D1 read and the stock objects' views are moments apart, and holds granted from a waitlist
    // (10-s holds) may still lapse in between: a disagreement is read again after a pause, up to three
    // times. A real violation stays; a snapshot that straddled an expiry does not.
    // Violations recorded on line (the ledger's) stay whatever is read: only the others are read again.
    const onLine = new Set(shoppers.ledger.violations);
    for (let attempt = 1; ; attempt++) {
      ({ violations, checked } = await checkInvariants(client, server.stateDir, skus, shoppers.ledger, faults.lastPut));
      const read = violations.filter((v) => !onLine.has(v));
      if (read.length === 0 || attempt === 3) break;
      log(`check ${attempt} found ${read.length} violation(s), first: ${read[0]?.message}; reading again`);
      await sleep(3_000);
    }
    if (pipelineViolation) violations.unshift(pipelineViolation);
    // The scrape and the D1 read are seconds apart, and waitlisted buyers' 10-s holds keep lapsing: a
    // disagreement is read again (a real one stays), up to three times.
    for (let attempt = 0; attempt < 3; attempt++) {
      metricFailures = await checkMetrics(client, server.stateDir, skus);
      if (metricFailures.length === 0) break;
      log(`metrics disagree (${metricFailures[0]}); reading again`);
      await sleep(3_000);
    }
    // 11: no stock object file, no D1 row for a SKU never configured (the stranger's included).
    const stored = await checkNothingStored(client, server.stateDir, configured, faults.actors.ghosts);
    violations.push(...stored.violations);
    strayFiles = stored.stray;
    checked[11] = stored.summary;
    // 9: a fresh shopper per SKU with units available (after 11: its holds are on configured SKUs).
    const stranded = await checkNoStrandedStock(client, skus, shoppers.ledger, opts.seed);
    violations.push(...stranded.violations);
    checked[9] = stranded.summary;
    checked[10] = faults.actors.summary10();
    checked[15] = faults.summary15();
    for (const v of [...stored.violations, ...stranded.violations])
      log(`VIOLATION (invariant ${v.invariant}): ${v.message}`);
    // 12: after the checks above (9's probes make changes too), every change delivered to its endpoints.
    // The verifiable sale: every SKU's public log checks out with npm run verify-sale.
    const logs = await verifySaleLogs(server.url, configured, log);
    saleLogFailures = logs.failures;
    saleLogSummary = logs.summary;
    if (hooks) {
      hookCheck = await hooks.settle(server.stateDir, Date.now() + (opts.quick ? 60_000 : 120_000), log);
      violations.push(...hookCheck.violations);
      checked[12] = hookCheck.summary;
      for (const v of hookCheck.violations.slice(0, 5)) log(`VIOLATION (invariant 12): ${v.message}`);
    }
  }

  // ---- bad-input pass: every answer a contract 4xx, state unchanged
  let fuzzFailures: string[] = [];
  let fuzzSummary = "skipped";
  if (opts.fuzz) {
    const anyAcked = [...shoppers.ledger.acked.values()][0];
    const owner = anyAcked?.userId ?? "fuzz-owner";
    const known = {
      sku: skus[0]?.sku ?? "none",
      reservationId: anyAcked?.id ?? `${skus[0]?.sku}.0.${"0".repeat(32)}`,
      ownerId: owner,
    };
    const snapshot = async () => {
      const views: SkuView[] = [];
      for (const plan of skus) views.push(await skuView(client, plan.sku));
      const rows = await d1Query<{ n: number; s: string }>(
        server.stateDir,
        "SELECT COUNT(*) AS n, group_concat(status) AS s FROM (SELECT status FROM orders ORDER BY reservation_id)",
      );
      const list = await client.admin("GET", "/admin/skus");
      return JSON.stringify({
        views: views.map(({ sku, stock, orders, waitlist, version }) => ({ sku, stock, orders, waitlist, version })),
        rows,
        skus: (list.json as { skus?: { sku: string }[] } | null)?.skus?.map((s) => s.sku).sort(),
      });
    };
    // Holds keep lapsing by themselves (10 s holds hand units to waitlisted buyers, whose holds lapse
    // in turn), which would look like a change made by bad input. Pause every SKU (no new holds) and
    // wait until two snapshots 2 s apart agree, so only the bad requests could change anything.
    for (const plan of skus) {
      const view = await skuView(client, plan.sku);
      await client.admin("PUT", `/admin/skus/${plan.sku}`, { totalStock: view.stock.total, status: "paused" });
    }
    // A 10-second hold (a waitlisted buyer's, say) outlives a 2-s comparison: wait until SKUs with short
    // holds hold nothing, so no expiry can land in the middle of the pass.
    for (let wait = 0; wait < 20; wait++) {
      const short = skus.filter((plan) => plan.holdSeconds <= 10);
      const views = await Promise.all(short.map((plan) => skuView(client, plan.sku)));
      if (views.every((v) => v.stock.held === 0)) break;
      await sleep(1_000);
    }
    let before = await snapshot();
    for (let settle = 0; settle < 30; settle++) {
      await new Promise((resolve) => setTimeout(resolve, 2_000));
      const again = await snapshot();
      if (again === before) break;
      before = again;
    }
    log("bad-input pass: SKUs paused and settled");
    const result = await fuzz(client, known, log);
    const after = await snapshot();
    fuzzFailures = result.failures;
    if (before !== after)
      fuzzFailures.push(`state changed by the bad-input pass:\n  before ${before}\n  after  ${after}`);
    // 11 again: the pass asks about ids never configured too; only files it added are reported.
    const stored = await checkNothingStored(
      client,
      server.stateDir,
      configured,
      [...faults.actors.ghosts, ...FUZZ_GHOSTS],
      strayFiles,
    );
    for (const v of stored.violations) {
      const message = `after the bad-input pass: ${v.message}`;
      if (opts.chaos) violations.push({ invariant: v.invariant, message });
      else fuzzFailures.push(`invariant ${v.invariant}: ${message}`);
    }
    if (stored.violations.length > 0)
      log(`VIOLATION (invariant 11) after the bad-input pass: ${stored.violations[0]?.message}`);
    fuzzSummary = `${result.cases} bad requests, answers ${[...result.byStatus]
      .sort((a, b) => a[0] - b[0])
      .map(([s, n]) => `${s}×${n}`)
      .join(" ")}, ${fuzzFailures.length} failures, state ${before === after ? "unchanged" : "CHANGED"}`;
  }

  // ---- summary
  console.log("\n================ chaos summary ================");
  console.log(
    `seed ${opts.seed}  traffic ${opts.trafficMs / 1000} s  shoppers ${opts.shoppers}  wall ${((Date.now() - began) / 1000).toFixed(0)} s`,
  );
  if (opts.chaos) {
    console.log("operations by outcome:");
    for (const [key, n] of [...shoppers.ledger.outcomes].sort()) console.log(`  ${key.padEnd(42)} ${n}`);
    console.log(
      `reservations acknowledged: ${shoppers.ledger.acked.size}; payment event ids: ${shoppers.ledger.payments.size}`,
    );
    console.log("faults injected:");
    const row = (key: string, n: unknown) => console.log(`  ${key.padEnd(42)} ${n}`);
    for (const [key, n] of faults.injected) row(key, n);
    for (const [ending, n] of [...shoppers.stripeFlows].sort())
      row(`Stripe delayed payments (unpaid, then ${ending})`, n);
    const ghosts = faults.actors.ghosts;
    row("never-configured SKU ids asked about", `${ghosts.size} (${[...ghosts].join(", ")})`);
    row("mirror commands refused while redis was down", bridgeErrors);
    console.log(`  gathering tier (GATHER "sharded"): ${faults.witness.summary()}`);
    const consumerFaults = (await client.admin("GET", "/chaos/consumer-faults")).text;
    console.log(`  worker-side consumer faults               ${consumerFaults}`);
    const letters = await client.admin("GET", "/admin/dead-letters");
    const stored = (letters.json as { deadLetters?: { replayedAt: string | null }[] } | null)?.deadLetters ?? [];
    row("dead letters stored / replayed", `${stored.length} / ${stored.filter((l) => l.replayedAt).length}`);
    row("requests resent after wrangler dev's proxy dropped them", proxyRestarts.retried);
    row("requests resent after a Worker restart cut them", workerRestarts.resent);
    // It watches the worktree: an edit or a merge there mid-run reloads the Worker under the traffic.
    row("wrangler dev reloads mid-run (files changed)", server.reloads());
    for (const sample of shoppers.ledger.serverErrors) console.log(`  5xx seen by shoppers: ${sample}`);
    for (const error of faults.errors.slice(0, 12)) console.log(`  fault injection error: ${error}`);
    console.log("final stock per SKU:");
    for (const plan of skus) {
      const v = await skuView(client, plan.sku);
      console.log(
        `  ${plan.sku.padEnd(20)} stock ${JSON.stringify(v.stock)} orders ${JSON.stringify(v.orders)} mirror ${JSON.stringify(v.mirror)}`,
      );
    }
    if (hookCheck) {
      console.log("webhook endpoints (the shop's receiver):");
      for (const e of hookCheck.endpoints) {
        const answers = Object.entries(e.answers)
          .sort()
          .map(([answer, n]) => `${answer}×${n}`)
          .join(" ");
        console.log(
          `  ${e.id.padEnd(20)} ${e.events.length >= 6 ? "all events" : e.events.join(",")}: ${e.delivered}/${e.owed} delivered, ${e.requests} requests (${answers}), ${e.seenTwice} webhook-ids seen twice or more, ${e.processedTwice} processed twice, ${e.unverified} unverified, change to arrival p50 ${e.lagP50Ms} ms max ${e.lagMaxMs} ms`,
        );
      }
    }
    console.log("invariants:");
    // 13 and 14 (early access, places in the line) are the simulator's and the workerd tests' (ARCHITECTURE.md).
    for (const id of [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 15]) {
      const first = violations.find((v) => v.invariant === id);
      const n = violations.filter((v) => v.invariant === id).length;
      console.log(first ? `  ${id}: VIOLATED (${n}): ${first.message}` : `  ${id}: held — ${checked[id] ?? ""}`);
    }
  }
  if (opts.chaos) {
    console.log(
      metricFailures.length === 0
        ? "metrics: /metrics parses; its stock and order gauges equal the admin view and D1"
        : `metrics: ${metricFailures.length} DISAGREE: ${metricFailures.slice(0, 3).join("; ")}`,
    );
  }
  const unexpected = shoppers.ledger.unexpected;
  console.log(
    unexpected.length === 0
      ? "server errors: none but 503 BUSY"
      : `server errors: ${unexpected.length} UNEXPECTED (not 503): ${unexpected.slice(0, 3).join("; ")}`,
  );
  console.log(`bad-input pass: ${fuzzSummary}`);
  fuzzFailures.sort((a, b) => Number(b.startsWith("state changed")) - Number(a.startsWith("state changed")));
  for (const failure of fuzzFailures.slice(0, 10)) console.log(`  FAIL ${failure}`);
  const firstViolation = violations[0];
  if (firstViolation)
    console.log(`\nFIRST VIOLATION: invariant ${firstViolation.invariant}: ${firstViolation.message}`);
  if (opts.chaos) {
    console.log(`sale logs (npm run verify-sale): ${saleLogSummary}`);
    for (const failure of saleLogFailures.slice(0, 5)) console.log(`  FAIL ${failure}`);
  }
  const failed =
    violations.length + fuzzFailures.length + metricFailures.length + unexpected.length + saleLogFailures.length;
  exitCode = failed === 0 ? 0 : 1;
  console.log(exitCode === 0 ? "RESULT: PASS" : "RESULT: FAIL");
} catch (err) {
  console.error(`[chaos] aborted: ${err instanceof Error ? (err.stack ?? err.message) : String(err)}`);
  exitCode = 2;
} finally {
  await stopAll(exitCode !== 0);
}
process.exit(exitCode);
