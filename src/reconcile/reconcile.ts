import { desc, eq, inArray, sql } from "drizzle-orm";
import { drizzle } from "drizzle-orm/d1";
import { log } from "../../durable-objects/shared/log";
import type {
  AdminFace,
  Audit,
  AuditedReservation,
  RepairDone,
  StockStub,
} from "../../durable-objects/stock/stock-model";
import { orderCounts, orders, reconcileDifferences, reconcileRuns, reconcileWatermarks, skus } from "../db/schema";
import { adminShard, callStock } from "../stock/stock-client";

/**
 * Reconciliation: the check-back between the stock objects (the truth), D1 and the Redis mirror.
 *
 * Per SKU and shard it reads one page of reservations whose latest event is after the shard's
 * watermark, compares them with their D1 rows by id, and repairs what drifted:
 *   order_missing / order_stale   re-emit the reservation's current status (a newer seq);
 *   hold_overdue                  release holds past expiry that no alarm released (their units go to
 *                                 the waitlist, as an alarm's would), re-arm the alarm;
 *   outbox_stuck                  send outbox events that were committed but never sent;
 *   transfer_pending              finish a transfer between shards that was interrupted;
 *   mirror_missing / mirror_drift rewrite the mirror from the object's snapshot;
 *   mirror_unreachable            the mirror could not be read (reported, nothing to repair here);
 *   shard_totals                  the shards' totals do not add up to the SKU's total (reported only);
 *   order_count                   D1 holds fewer (or more) orders than the SKU's stock objects made:
 *                                 the SKU is rechecked from seq 0 at once (finds rows deleted below
 *                                 the watermark, which no watermark run would see again).
 * It never invents or destroys stock: every repair goes through the stock object.
 *
 * Cost of a run: O(S + Σ min(changed_s, PAGE · PAGES_PER_RUN)) rows, S the number of shards and
 * changed_s the reservations of shard s changed since its watermark, plus one D1 lookup per compared
 * id: finished history below the watermark is never read again. A run reads every page a shard
 * changed since its watermark (up to PAGES_PER_RUN), so the watermark keeps pace with the sale; a
 * shard with more continues from its watermark (the cursor) on the next run.
 *
 * Once the watermark is stored, the run tells the shard to prune (`prune`): what is at or below it is in D1,
 * and the object forgets the finished rows there whose tokens can no longer be replayed. That is what
 * keeps a stock object's storage flat through a long sale: it holds what changed since the last run
 * and what the token lifetime needs, not the sale's history.
 */

/** Reservations read from a shard per audit call (one RPC, one D1 lookup). */
export const PAGE = 1_000;
/**
 * Pages per shard per run: 20,000 changes a minute (the cron), about 330 finished reservations a
 * second per shard, far above what one shard's sale finishes. A faster shard catches up on later runs.
 */
export const PAGES_PER_RUN = 20;
/** Ids per D1 lookup, bound as one JSON array (D1 binds at most 100 parameters, and a statement is ≤ 100 KB). */
const D1_CHUNK = 1_000;
/** A difference row binds 6 parameters. */
const DIFFERENCES_PER_INSERT = 15;

type DifferenceKind =
  | "order_missing"
  | "order_stale"
  | "hold_overdue"
  | "outbox_stuck"
  | "transfer_pending"
  | "mirror_missing"
  | "mirror_drift"
  | "mirror_unreachable"
  | "shard_totals"
  | "variant_totals"
  | "order_count"
  | "check_failed";

export interface Difference {
  sku: string;
  kind: DifferenceKind;
  expected: string;
  actual: string;
  repaired: boolean;
}

export interface RunReport {
  runId: string;
  skusChecked: number;
  differences: Difference[];
  /** Rows read from D1 and from the stock objects' databases (what "bounded" is measured in). */
  rowsRead: number;
}

interface ReconcileOptions {
  trigger: "cron" | "admin";
  now?: number;
  graceMs?: number;
  /** Start every shard from seq 0 again (a full pass, e.g. after rows were deleted by hand). */
  full?: boolean;
  /** Check this SKU alone (an operator's run after a repair); absent: the whole catalog. */
  sku?: string | undefined;
  /** Reservations per audit page (default {@link PAGE}; tests use small pages to cross many). */
  page?: number;
  /** Internal: this pass is the order count's recheck of one SKU (it does not compare the counts again). */
  recheck?: boolean;
}

/** One run: its environment, options and clock, and the report every check adds to. */
interface Run {
  env: Env;
  options: ReconcileOptions;
  now: number;
  /** Changes younger than this may still be in the queue: a later run judges them. */
  graceMs: number;
  report: RunReport;
}

type CatalogEntry = { sku: string; shards: number; totalStock: number };

/** One shard's check within a run. */
interface ShardCheck extends Run {
  sku: string;
  shard: number;
  /** The shard's watermark: only reservations changed after it are compared (0 on a full pass). */
  from: number;
  stub: StockStub<AdminFace>;
}

/** What the SKU check sums over its shards. */
interface ShardSummary {
  total: number;
  /** Sizes: the shard's variants' counts, and (shard 0) their totals as the last PUT set them. */
  variants: Audit["variants"];
  variantTotals: Audit["variantTotals"];
  pendingTransfers: number;
  created: number;
  skuTotal: number | null;
  /** Shard 0: the most shards the SKU ever had (a cut's left-out shards are still visited). */
  shardsEver: number;
  quiet: boolean;
}

export async function reconcile(env: Env, options: ReconcileOptions): Promise<RunReport> {
  const d1 = drizzle(env.DB);
  const now = options.now ?? Date.now();
  const runId = crypto.randomUUID();
  await d1.insert(reconcileRuns).values({ id: runId, trigger: options.trigger, startedAt: now });
  const catalog = await d1
    .select({ sku: skus.sku, shards: skus.shards, totalStock: skus.totalStock })
    .from(skus)
    .where(options.sku === undefined ? undefined : eq(skus.sku, options.sku));
  const report: RunReport = { runId, skusChecked: 0, differences: [], rowsRead: catalog.length };
  const run: Run = { env, options, now, graceMs: options.graceMs ?? Number(env.RECONCILE_GRACE_MS), report };
  let errors = 0;
  for (const entry of catalog) {
    try {
      await reconcileSku(run, entry);
      report.skusChecked++;
    } catch (err) {
      // One failing SKU must not stop the others; the failure is recorded as a difference.
      errors++;
      report.differences.push({
        sku: entry.sku,
        kind: "check_failed",
        expected: "ok",
        actual: String(err),
        repaired: false,
      });
    }
  }
  for (let i = 0; i < report.differences.length; i += DIFFERENCES_PER_INSERT) {
    const chunk = report.differences.slice(i, i + DIFFERENCES_PER_INSERT);
    await d1.insert(reconcileDifferences).values(chunk.map((d) => ({ runId, ...d })));
  }
  await d1
    .update(reconcileRuns)
    .set({ finishedAt: Date.now(), skusChecked: report.skusChecked, differences: report.differences.length, errors })
    .where(eq(reconcileRuns.id, runId));
  const kinds: Record<string, number> = {};
  for (const d of report.differences) kinds[d.kind] = (kinds[d.kind] ?? 0) + 1;
  log(report.differences.length > 0 ? "warn" : "info", "reconciliation finished", {
    runId,
    trigger: options.trigger,
    skusChecked: report.skusChecked,
    differences: kinds,
    errors,
    rowsRead: report.rowsRead,
  });
  return report;
}

async function reconcileSku(run: Run, entry: CatalogEntry): Promise<void> {
  const { env, options, report } = run;
  const d1 = drizzle(env.DB);
  const watermarks = await d1
    .select({ shard: reconcileWatermarks.shard, seq: reconcileWatermarks.seq })
    .from(reconcileWatermarks)
    .where(eq(reconcileWatermarks.sku, entry.sku));
  report.rowsRead += watermarks.length;
  let totals = 0;
  const variantSums = new Map<string, number>();
  let variantTotals: Record<string, number> = {};
  let pendingTransfers = 0;
  let created = 0;
  let quiet = true;
  // The SKU's total as shard 0 recorded the last PUT (the catalog's copy is written after it, so
  // two overlapping PUTs may leave the catalog with the other one's).
  let expectedTotal = entry.totalStock;
  // Past the current count too: shards a cut left out still hold finished reservations D1 counts
  // (shard 0 records the most shards the SKU had; src/catalog/configure-sku.ts marks them in D1 too).
  let reach = Math.max(entry.shards, ...watermarks.map((w) => w.shard + 1));
  for (let shard = 0; shard < reach; shard++) {
    const from = options.full ? 0 : (watermarks.find((w) => w.shard === shard)?.seq ?? 0);
    const stub = adminShard(env, entry.sku, shard);
    const checked = await reconcileShard({ ...run, sku: entry.sku, shard, from, stub });
    if (!checked) continue;
    totals += checked.total;
    for (const [id, v] of Object.entries(checked.variants)) variantSums.set(id, (variantSums.get(id) ?? 0) + v.total);
    if (shard === 0) variantTotals = checked.variantTotals;
    pendingTransfers += checked.pendingTransfers;
    created += checked.created;
    quiet &&= checked.quiet;
    if (shard === 0 && checked.skuTotal !== null) expectedTotal = checked.skuTotal;
    if (shard === 0) reach = Math.max(reach, checked.shardsEver);
  }
  if (entry.shards > 1 && pendingTransfers === 0 && totals !== expectedTotal) {
    report.differences.push({
      sku: entry.sku,
      kind: "shard_totals",
      expected: show({ total: expectedTotal }),
      actual: show({ sumOfShards: totals }),
      repaired: false,
    });
  }
  // Sizes: each variant's units over the shards are the total its last PUT set (transfers move them).
  if (pendingTransfers === 0) {
    for (const [id, expected] of Object.entries(variantTotals)) {
      const actual = variantSums.get(id) ?? 0;
      if (actual === expected) continue;
      report.differences.push({
        sku: entry.sku,
        kind: "variant_totals",
        expected: show({ variant: id, total: expected }),
        actual: show({ variant: id, sumOfShards: actual }),
        repaired: false,
      });
    }
  }
  if (quiet && !options.recheck) await checkOrderCount(run, entry, created);
}

/**
 * The watermark sees only what changed in the stock objects: an order row deleted from D1 below
 * it changes nothing there. Two counts kept current for free (each object's count of reservations it
 * created, D1's trigger-kept order_counts) catch it; when nothing is in flight they must agree, and if
 * they do not, the SKU is rechecked from seq 0 at once, which re-emits whatever D1 lacks.
 */
async function checkOrderCount(run: Run, entry: CatalogEntry, created: number): Promise<void> {
  const { env, report } = run;
  const [row] = await drizzle(env.DB)
    .select({ n: sql<number>`coalesce(sum(${orderCounts.count}), 0)` })
    .from(orderCounts)
    .where(eq(orderCounts.sku, entry.sku));
  report.rowsRead += 1;
  const inD1 = row?.n ?? 0;
  if (inD1 === created) return;
  let repaired = false;
  if (run.options.full) {
    // This pass already read every reservation the objects still hold, and re-emitted those D1 lacks.
    // A row whose reservation they forgot (pruned below the watermark) it cannot re-emit: the counts
    // still disagree beyond what it restored, and the run must say so rather than look clean.
    const restored = report.differences.filter(
      (d) => d.sku === entry.sku && d.kind === "order_missing" && d.repaired,
    ).length;
    if (inD1 + restored === created) return;
  } else {
    // The recheck passes over the whole SKU again: a difference this run reported for it already (a
    // shard total, a pending transfer, an unreachable mirror) is listed once, not twice (found in an audit).
    const said = (d: Difference) => JSON.stringify([d.sku, d.kind, d.expected, d.actual]);
    const reported = new Set(report.differences.filter((d) => d.sku === entry.sku).map(said));
    const before = report.differences.length;
    await reconcileSku({ ...run, options: { ...run.options, full: true, recheck: true } }, entry);
    const again = report.differences.splice(before);
    report.differences.push(...again.filter((d) => !reported.has(said(d))));
    // Repaired only if the recheck sent a row for every order D1 lacks, not for some of them.
    const restored = again.filter((d) => d.kind === "order_missing" && d.repaired).length;
    repaired = inD1 < created && restored === created - inD1;
  }
  report.differences.push({
    sku: entry.sku,
    kind: "order_count",
    expected: show({ orders: created }),
    actual: show({ orders: inD1 }),
    repaired,
  });
}

/**
 * One shard, in four phases: its reservations changed after the watermark compared with D1, the
 * object's own repairs, the mirror, then the watermark and what the shard may forget. Returns what
 * the SKU check sums, or null for a shard that was never configured.
 */
async function reconcileShard(check: ShardCheck): Promise<ShardSummary | null> {
  const compared = await compareChanges(check);
  if (!compared) return null;
  const { audit } = compared;
  await repairShard(check, audit, compared.stale);
  await checkShardMirror(check);
  await pruneShard(check, compared.last);
  return {
    total: audit.state.stock.total,
    variants: audit.variants,
    variantTotals: audit.variantTotals,
    pendingTransfers: audit.pendingTransfers,
    created: audit.created,
    skuTotal: audit.skuTotal,
    shardsEver: Math.max(audit.state.shards, audit.state.shardsEver ?? 0),
    quiet: compared.quiet,
  };
}

/** Adds a difference found on this shard's SKU to the run's report. */
function differ(check: ShardCheck, kind: DifferenceKind, expected: unknown, actual: unknown, repaired: boolean) {
  check.report.differences.push({ sku: check.sku, kind, expected: show(expected), actual: show(actual), repaired });
}

/**
 * Compare: the shard's reservations changed after `from` (every page of them on a full pass, up to
 * PAGES_PER_RUN otherwise) against their D1 rows; a missing or older row is a difference and its
 * reservation is re-emitted. Null for a shard that was never configured.
 */
async function compareChanges(check: ShardCheck): Promise<{
  /** The first page's audit: the shard's counts and what its object has to repair. */
  audit: Audit;
  /** Reservations whose D1 row is missing or older: reported once the repair says what it did. */
  stale: Stale[];
  /** The last reservation judged: the watermark moves past it. */
  last: AuditedReservation | undefined;
  /** Everything this shard did is judged and nothing is on its way. */
  quiet: boolean;
} | null> {
  const { env, options, now, graceMs, report, stub } = check;
  let first: Audit | null = null;
  let after = check.from;
  let last: AuditedReservation | undefined;
  let quiet = false;
  let pages = 0;
  const page = options.page ?? PAGE;
  const stale: Stale[] = [];
  for (;;) {
    const audit: Audit | null = await callStock(() => stub.audit(after, page));
    if (!audit) return null;
    first ??= audit;
    report.rowsRead += audit.rowsRead;
    // Events still in flight (unsent, or sent moments ago) are not drift: judge them later.
    const unsentFrom = audit.oldestUnsent?.seq ?? Number.POSITIVE_INFINITY;
    const judged: AuditedReservation[] = [];
    for (const r of audit.changed) {
      if (r.seq >= unsentFrom || r.updatedAt > now - graceMs) break;
      judged.push(r);
    }
    stale.push(...(await compareWithOrders(env.DB, judged, report)));
    last = judged.at(-1) ?? last;
    // Everything this shard did is judged and nothing is on its way: its counts must agree with D1's.
    quiet = audit.changed.length < page && judged.length === audit.changed.length && audit.oldestUnsent === null;
    // A full pass reads every page; a normal run up to PAGES_PER_RUN (the rest next run, from the watermark).
    pages++;
    if (judged.length < page || (!options.full && pages >= PAGES_PER_RUN)) break;
    after = judged.at(-1)?.seq ?? after;
  }
  return { audit: first, stale, last, quiet };
}

/**
 * Repair: the object re-emits, releases overdue holds, finishes transfers and sends its outbox. A
 * difference is repaired only if the object's answer shows it gone (a re-emitted event sent, no hold
 * overdue, no transfer pending, nothing stuck in the outbox): a repair that threw or did part of its
 * work reports `repaired: false`, and the next run finds what is left.
 */
async function repairShard(check: ShardCheck, audit: Audit, stale: Stale[]): Promise<void> {
  const repair = {
    reemit: stale.map((s) => s.reservation.id),
    sweep: audit.overdueHolds > 0,
    transfers: audit.pendingTransfers > 0,
  };
  // A repair always sends what the outbox holds; a stuck outbox alone is reason enough to ask for one.
  const stuckAt = (unsent: Audit["oldestUnsent"]) => unsent !== null && unsent.occurredAt <= check.now - check.graceMs;
  const stuck = stuckAt(audit.oldestUnsent);
  if (repair.reemit.length === 0 && !repair.sweep && !stuck && !repair.transfers) return;
  let done: RepairDone | null = null;
  let failure: { error: unknown } | null = null;
  try {
    done = await callStock(() => check.stub.repair(repair));
  } catch (error) {
    failure = { error };
  }
  // The outbox sends oldest first and keeps what failed: an event below the oldest unsent one went out.
  const unsentFrom = done?.oldestUnsent?.seq ?? Number.POSITIVE_INFINITY;
  // An object of the release before answers counts (`reemitted: n`, `released`, `flushed`...) and no open
  // work: nothing it did is shown gone, so nothing is called repaired, and the next run looks again.
  const reemitted: unknown = done?.reemitted;
  const sent = new Set(
    (Array.isArray(reemitted) ? (reemitted as RepairDone["reemitted"]) : [])
      .filter((r) => r.seq < unsentFrom)
      .map((r) => r.id),
  );
  for (const { reservation, row } of stale) {
    const repaired = sent.has(reservation.id);
    if (!row) differ(check, "order_missing", { id: reservation.id, status: reservation.status }, null, repaired);
    else
      differ(
        check,
        "order_stale",
        { id: reservation.id, status: reservation.status, seq: reservation.seq },
        row,
        repaired,
      );
  }
  if (repair.sweep)
    differ(check, "hold_overdue", { overdueHolds: 0 }, { overdueHolds: audit.overdueHolds }, done?.overdueHolds === 0);
  if (stuck)
    differ(
      check,
      "outbox_stuck",
      { unsent: 0 },
      { oldestUnsentSeq: audit.oldestUnsent?.seq },
      // (undefined: an object of the release before, which does not say what is left)
      done !== null && done.oldestUnsent !== undefined && !stuckAt(done.oldestUnsent),
    );
  if (repair.transfers)
    differ(
      check,
      "transfer_pending",
      { pending: 0 },
      { pending: audit.pendingTransfers },
      done?.pendingTransfers === 0,
    );
  // The shard's check stops here (check_failed): its watermark must not pass reservations not re-emitted.
  if (failure !== null) throw failure.error;
}

/** Mirror: the object compares its snapshot with Redis and rewrites it when it is missing or drifted. */
async function checkShardMirror(check: ShardCheck): Promise<void> {
  const mirror = await callStock(() => check.stub.checkMirror());
  if (mirror.status === "missing") differ(check, "mirror_missing", mirror.expected, null, mirror.repaired);
  if (mirror.status === "drift") differ(check, "mirror_drift", mirror.expected, mirror.actual, mirror.repaired);
  // Not drift, but the operator must see that the mirror went unchecked.
  if (mirror.status === "unreachable") differ(check, "mirror_unreachable", "reachable", mirror.error, false);
}

/** Prune: the watermark moves past everything judged, then the shard forgets what is below it. */
async function pruneShard(check: ShardCheck, last: AuditedReservation | undefined): Promise<void> {
  const { env, sku, shard, from, now } = check;
  // A repaired reservation has a newer seq now, so moving past it loses nothing.
  let watermark = from;
  if (last && last.seq > from) {
    await drizzle(env.DB)
      .insert(reconcileWatermarks)
      .values({ sku, shard, seq: last.seq, updatedAt: now })
      .onConflictDoUpdate({
        target: [reconcileWatermarks.sku, reconcileWatermarks.shard],
        // Overlapping runs (cron and admin) must not move a watermark backwards.
        set: { seq: sql`max(${reconcileWatermarks.seq}, excluded.seq)`, updatedAt: now },
      });
    watermark = last.seq;
  }
  // Only now, with the re-emits done and the watermark stored, may the shard forget what is below it
  // (every run, not only one that moved it: rows judged while their tokens could still be replayed
  // are forgotten by a later run). A full pass from 0 prunes at the watermark it reached.
  if (watermark > 0) check.report.rowsRead += (await callStock(() => check.stub.prune(watermark))).rowsRead;
}

type OrderSnapshot = { reservationId: string; status: string; lastSeq: number };
/** A reservation whose D1 row is missing (`row` null) or older than the object's latest event. */
type Stale = { reservation: AuditedReservation; row: OrderSnapshot | null };

/** Looks the judged reservations up in D1 by id; returns those whose row is missing or older. */
async function compareWithOrders(db: D1Database, judged: AuditedReservation[], report: RunReport): Promise<Stale[]> {
  const d1 = drizzle(db);
  const found = new Map<string, OrderSnapshot>();
  for (let i = 0; i < judged.length; i += D1_CHUNK) {
    const ids = judged.slice(i, i + D1_CHUNK).map((r) => r.id);
    // One bound parameter for the whole chunk: a primary-key lookup per id, in one statement.
    const rows = await d1
      .select({ reservationId: orders.reservationId, status: orders.status, lastSeq: orders.lastSeq })
      .from(orders)
      .where(sql`${orders.reservationId} IN (SELECT value FROM json_each(${JSON.stringify(ids)}))`);
    report.rowsRead += rows.length;
    for (const row of rows) found.set(row.reservationId, row);
  }
  const drifted: Stale[] = [];
  for (const reservation of judged) {
    const row = found.get(reservation.id) ?? null;
    if (!row || row.lastSeq < reservation.seq) drifted.push({ reservation, row });
  }
  return drifted;
}

function show(value: unknown): string {
  return typeof value === "string" ? value : JSON.stringify(value);
}

/** The latest runs with their differences, newest first. */
export async function recentRuns(db: D1Database, limit: number) {
  const d1 = drizzle(db);
  const runs = await d1.select().from(reconcileRuns).orderBy(desc(reconcileRuns.startedAt)).limit(limit);
  if (runs.length === 0) return [];
  const diffs = await d1
    .select()
    .from(reconcileDifferences)
    .where(
      inArray(
        reconcileDifferences.runId,
        runs.map((r) => r.id),
      ),
    )
    .orderBy(sql`${reconcileDifferences.id}`);
  return runs.map((run) => ({
    runId: run.id,
    trigger: run.trigger,
    startedAt: new Date(run.startedAt).toISOString(),
    finishedAt: run.finishedAt === null ? null : new Date(run.finishedAt).toISOString(),
    skusChecked: run.skusChecked,
    errors: run.errors,
    differences: diffs
      .filter((d) => d.runId === run.id)
      .map((d) => ({ sku: d.sku, kind: d.kind, expected: d.expected, actual: d.actual, repaired: d.repaired })),
  }));
}
