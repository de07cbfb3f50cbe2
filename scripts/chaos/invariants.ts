/**
 * The invariants of docs/ARCHITECTURE.md, checked by id after the system settled (8: the SKU's total is the last
 * PUT's, against the operator faults' record). Sources: the admin SKU
 * views (stock objects, D1 order counts, the Redis mirror), `GET /api/reservations/:id` as the owner
 * (stock object status + D1 order status), and the D1 `orders` table read with `wrangler d1 execute`.
 * 9 (no unit stranded while buyers are told SOLD_OUT or a line waits) is probed by a fresh shopper
 * per SKU after settling ({@link checkNoStrandedStock}); 10 (a refused change changed nothing, a
 * resize is all or nothing) is checked on line by the actors (actors.ts); 11 (nothing stored for a
 * SKU never configured) reads the dev server's state directory and D1 ({@link checkNothingStored});
 * 12 (every order change delivered to every webhook endpoint subscribed to it) is hooks.ts's.
 * The count checks of 1 and 2 are tools/stock-invariants.ts's, which the simulator (tools/sim/) runs too.
 */
import { execFile } from "node:child_process";
import { existsSync, readdirSync } from "node:fs";
import { join } from "node:path";
import { promisify } from "node:util";
import type { z } from "zod";
import type { AdminSku } from "../../src/routes/contract-schemas";
import { shopperJwt } from "../../tools/jwt";
import { Scrape } from "../../tools/prometheus";
import { countsViolation, limitViolations } from "../../tools/stock-invariants";
import { type Client, errorCode, field, type Reply, sleep, str } from "./http";
import type { SkuPlan } from "./schedule";
import { call, heldAcked, type Ledger } from "./shoppers";

export interface Violation {
  invariant: number;
  message: string;
}

export interface OrderRow {
  reservation_id: string;
  sku: string;
  user_id: string;
  quantity: number;
  status: string;
}

/**
 * Runs one SQL statement on the local D1 of the dev server (its persisted state directory). It is a
 * second process on the server's SQLite file, so a write of the Worker's (a webhook sender's alarm,
 * say) can make it `SQLITE_BUSY`: that is this harness's collision, not an answer, and it asks again.
 */
export async function d1Query<T>(stateDir: string, sql: string): Promise<T[]> {
  const args = ["wrangler", "d1", "execute", "DB", "--local", "--persist-to", stateDir, "--json", "--command", sql];
  const env = { ...process.env, CI: "true", WRANGLER_SEND_METRICS: "false" };
  let out = "";
  for (let attempt = 1; ; attempt++) {
    const run = await promisify(execFile)("npx", args, { env, maxBuffer: 2 ** 30 }).then(
      (done) => ({ ok: true as const, out: done.stdout }),
      (e: { code?: number; stderr?: string; stdout?: string }) => ({
        ok: false as const,
        error: `wrangler d1 execute exited ${e.code}: ${e.stderr || e.stdout}`,
      }),
    );
    if (run.ok) {
      out = run.out;
      break;
    }
    if (!run.error.includes("SQLITE_BUSY") || attempt === 5) throw new Error(run.error);
    await sleep(500 * attempt);
  }
  try {
    return (JSON.parse(out) as { results: T[] }[]).flatMap((p) => p.results);
  } catch (e) {
    throw new Error(`wrangler d1 execute printed no JSON: ${String(e)}: ${out.slice(0, 300)}`);
  }
}

/** The admin view of a SKU (`GET /admin/skus/:sku`), as the contract describes it. */
export type SkuView = z.infer<typeof AdminSku>;

export async function skuView(client: Client, sku: string): Promise<SkuView> {
  const reply = await client.admin("GET", `/admin/skus/${sku}`);
  if (reply.status !== 200)
    throw new Error(`GET /admin/skus/${sku} answered ${reply.status}: ${reply.text.slice(0, 200)}`);
  return reply.json as SkuView;
}

export function ordersSql(skus: SkuPlan[]): string {
  const list = skus.map((s) => `'${s.sku}'`).join(",");
  return `SELECT reservation_id, sku, user_id, quantity, status FROM orders WHERE sku IN (${list})`;
}

/** Quantity per status of D1 rows of one SKU. */
function sums(rows: OrderRow[], sku: string): Record<string, number> {
  const out: Record<string, number> = {};
  for (const row of rows) if (row.sku === sku) out[row.status] = (out[row.status] ?? 0) + row.quantity;
  return out;
}

/** Cheap convergence test used while settling: D1 and the mirror agree with the stock objects. */
export async function converged(
  client: Client,
  stateDir: string,
  skus: SkuPlan[],
  ledger: Ledger,
  opts: { mirror: boolean } = { mirror: true },
): Promise<string | null> {
  const rows = await d1Query<OrderRow>(stateDir, ordersSql(skus));
  const ids = new Set(rows.map((r) => r.reservation_id));
  const missing = [...ledger.acked.keys()].filter((id) => !ids.has(id));
  if (missing.length > 0) return `${missing.length} acknowledged reservations not in D1 yet (e.g. ${missing[0]})`;
  for (const plan of skus) {
    const view = await skuView(client, plan.sku);
    const q = sums(rows, plan.sku);
    if ((q.held ?? 0) !== view.stock.held || (q.paid ?? 0) !== view.stock.sold) {
      return `${plan.sku}: D1 held/paid ${q.held ?? 0}/${q.paid ?? 0} vs stock held/sold ${view.stock.held}/${view.stock.sold}`;
    }
    const m = view.mirror;
    if (!opts.mirror) continue;
    if (!m || m.available !== view.stock.available || m.held !== view.stock.held || m.sold !== view.stock.sold) {
      return `${plan.sku}: mirror ${JSON.stringify(m)} vs stock ${JSON.stringify(view.stock)}`;
    }
  }
  return null;
}

/** The first acknowledged reservation whose D1 order status differs from its stock object's, or null. */
export async function firstOrderMismatch(
  client: Client,
  stateDir: string,
  skus: SkuPlan[],
  ledger: Ledger,
): Promise<string | null> {
  const rows = new Map((await d1Query<OrderRow>(stateDir, ordersSql(skus))).map((r) => [r.reservation_id, r]));
  for (const a of ledger.acked.values()) {
    const row = rows.get(a.id);
    if (!row) return `reservation ${a.id} (${a.sku}, user ${a.userId}) has no D1 order`;
    const reply = await readAsOwner(client, a.id, a.userId);
    const status = str(reply.json, "status");
    if (reply.status === 200 && status !== row.status) {
      return `reservation ${a.id} (${a.sku}, user ${a.userId}): stock object says ${status}, D1 order says ${row.status}`;
    }
  }
  return null;
}

export async function readAsOwner(client: Client, id: string, userId: string): Promise<Reply> {
  const jwt = await shopperJwt(userId, client.secrets.authSecret);
  for (let attempt = 0; ; attempt++) {
    const reply = await client.request("GET", `/api/reservations/${id}`, {
      headers: { authorization: `Bearer ${jwt}` },
    });
    // 429 and 503 BUSY (an object reset mid-call) both say: the same request again, later.
    const busy = reply.status === 503 && errorCode(reply.json) === "BUSY";
    if ((reply.status !== 429 && !busy) || attempt > 10) return reply;
    await sleep(busy ? 500 : 2_000);
  }
}

export interface CheckResult {
  violations: Violation[];
  checked: Record<number, string>;
}

export async function checkInvariants(
  client: Client,
  stateDir: string,
  skus: SkuPlan[],
  ledger: Ledger,
  lastPut: ReadonlyMap<string, number | null> = new Map(),
): Promise<CheckResult> {
  const violations: Violation[] = [...ledger.violations];
  const fail = (invariant: number, message: string) => violations.push({ invariant, message });
  const checked: Record<number, string> = {};
  const now = Date.now();
  const rows = await d1Query<OrderRow>(stateDir, ordersSql(skus));
  const dupRows = await d1Query<{ reservation_id: string; n: number }>(
    stateDir,
    "SELECT reservation_id, COUNT(*) AS n FROM orders GROUP BY reservation_id HAVING n > 1",
  );
  const byId = new Map(rows.map((r) => [r.reservation_id, r]));
  const views = new Map<string, SkuView>();
  for (const plan of skus) views.set(plan.sku, await skuView(client, plan.sku));

  // 1. available + held + sold == total, none negative; stock sums exact against D1 rows.
  for (const [sku, view] of views) {
    const broken = countsViolation(sku, view.stock);
    if (broken) fail(1, broken);
    const { sold } = view.stock;
    const q = sums(rows, sku);
    if ((q.paid ?? 0) !== sold) fail(1, `${sku}: stock sold ${sold} but D1 paid orders sum to ${q.paid ?? 0}`);
  }
  checked[1] = `${views.size} SKUs: available+held+sold == total, sold == Σ paid order quantities`;

  // 2. Per-user limit: active (held + paid) quantity per user and SKU.
  const active = new Map<string, Map<string, number>>();
  let pairs = 0;
  for (const row of rows) {
    if (row.status !== "held" && row.status !== "paid") continue;
    const users = active.get(row.sku) ?? new Map<string, number>();
    active.set(row.sku, users);
    if (!users.has(row.user_id)) pairs++;
    users.set(row.user_id, (users.get(row.user_id) ?? 0) + row.quantity);
  }
  for (const [sku, users] of active)
    for (const broken of limitViolations(users, views.get(sku)?.perUserLimit ?? 0, sku)) fail(2, broken);
  checked[2] = `${pairs} (user, SKU) pairs within perUserLimit`;

  // 3. Checked on line by the shoppers (concurrent double submits and replays); see ledger.
  checked[3] = "token replays and concurrent double submits answered one reservation";

  // 4. Every acknowledged reservation: exactly one D1 row, its status equal to the stock object's.
  for (const row of dupRows) fail(4, `reservation ${row.reservation_id} has ${row.n} D1 rows`);
  let read = 0;
  const finalStatus = new Map<string, string>();
  const acked = [...ledger.acked.values()];
  for (let i = 0; i < acked.length; i += 16) {
    await Promise.all(
      acked.slice(i, i + 16).map(async (a) => {
        const reply = await readAsOwner(client, a.id, a.userId);
        read++;
        if (reply.status !== 200)
          return fail(4, `GET /api/reservations/${a.id} answered ${reply.status}: ${reply.text.slice(0, 120)}`);
        const status = str(reply.json, "status") ?? "?";
        finalStatus.set(a.id, status);
        const order = field(reply.json, "order");
        const row = byId.get(a.id);
        if (field(order, "persisted") !== true || !row)
          return fail(4, `acknowledged reservation ${a.id} (${a.sku}, ${a.userId}) has no D1 order row`);
        if (row.status !== status || str(order, "status") !== status) {
          fail(4, `reservation ${a.id}: stock object says ${status}, D1 order says ${row.status}`);
        }
        if (row.quantity !== a.quantity && a.origin === "reservation")
          fail(4, `reservation ${a.id}: D1 quantity ${row.quantity}, acknowledged ${a.quantity}`);
        // What the shopper was told last must still hold (no silent reversal).
        if (a.finalBy !== null && status !== a.finalBy)
          fail(6, `reservation ${a.id}: payment answered ${a.finalBy}, final status ${status}`);
        const allowed: Record<string, string[]> = {
          held: ["held", "expired"],
          cancelled: ["cancelled"],
          expired: ["expired"],
          paid: ["paid"],
          refund_required: ["refund_required"],
        };
        const possible = [...(allowed[a.lastKnown] ?? [a.lastKnown]), ...(a.unanswered ?? [])];
        if (a.finalBy === null && !possible.includes(status)) {
          fail(5, `reservation ${a.id}: last answered ${a.lastKnown}, final status ${status}`);
        }
      }),
    );
  }
  const ackedIds = new Set(ledger.acked.keys());
  const unexplained = rows.filter(
    (r) => !ackedIds.has(r.reservation_id) && !ledger.waitlisted.has(r.user_id) && !ledger.unanswered.has(r.user_id),
  );
  for (const row of unexplained.slice(0, 5))
    fail(4, `D1 order ${row.reservation_id} (${row.user_id}) was never acknowledged to anyone`);
  checked[4] = `${acked.length} acknowledged reservations read back (${read} reads), ${rows.length} D1 rows, none duplicated`;

  // 5. Holds released exactly once: held stock equals Σ held orders; no hold left past its expiry.
  for (const [sku, view] of views) {
    const q = sums(rows, sku);
    if ((q.held ?? 0) !== view.stock.held)
      fail(5, `${sku}: stock held ${view.stock.held} but D1 held orders sum to ${q.held ?? 0}`);
  }
  for (const a of acked) {
    if (finalStatus.get(a.id) === "held" && a.expiresAt < now - 5_000)
      fail(5, `reservation ${a.id} still held ${Math.round((now - a.expiresAt) / 1000)} s after its expiry`);
  }
  checked[5] = "held == Σ held orders per SKU, no overdue hold, no reversal of a release";

  // 6. Each payment event effective once: every answer for one event id is the same.
  for (const [eventId, record] of ledger.payments) {
    if (new Set(record.answers).size > 1)
      fail(6, `payment ${eventId} for ${record.reservationId} answered ${record.answers.join(", ")}`);
  }
  // On the money SKUs (nobody else pays there) every event answered refund_required is counted once.
  let flaggedChecked = 0;
  for (const plan of skus.filter((p) => p.role === "money")) {
    const flagged = ledger.flagged.get(plan.sku);
    const counted = views.get(plan.sku)?.payments.refund_required;
    if (flagged === null) continue; // a payment there went unanswered: what it was told is unknown
    flaggedChecked += flagged?.size ?? 0;
    if (counted !== (flagged?.size ?? 0))
      fail(6, `${plan.sku}: ${flagged?.size ?? 0} payment events answered refund_required, the SKU counts ${counted}`);
  }
  checked[6] = `${ledger.payments.size} payment event ids, each answered one way; sold == Σ paid (1); ${flaggedChecked} flagged payments on the money SKUs each counted once`;

  // 7. Mirror equals the stock objects.
  for (const [sku, view] of views) {
    const m = view.mirror;
    if (!m || m.available !== view.stock.available || m.held !== view.stock.held || m.sold !== view.stock.sold) {
      fail(7, `${sku}: mirror ${JSON.stringify(m)} differs from stock ${JSON.stringify(view.stock)}`);
    }
  }
  checked[7] = `${views.size} SKU mirrors equal to their stock objects`;

  // 8. The SKU's total (the sum of its shards' totals) is the totalStock of the last PUT answered 200,
  // whatever transfers, reservations and other PUTs raced it.
  for (const [sku, view] of views) {
    const expected = lastPut.get(sku);
    if (expected === null) fail(8, `${sku}: a PUT never answered, so the last total set is unknown`);
    else if (expected !== undefined && view.stock.total !== expected)
      fail(8, `${sku}: shards hold ${view.stock.total} in total, the last PUT answered 200 set ${expected}`);
  }
  checked[8] = `${views.size} SKU totals equal to the last totalStock an operator PUT set`;

  return { violations, checked };
}

/**
 * `/metrics` after the run: it must parse, and its gauges must equal what the invariants read
 * (stock per SKU from the admin view, order rows per SKU and status counted in D1 itself, against
 * the counts the D1 triggers kept through every duplicate, reordering and re-emit of the run).
 */
export async function checkMetrics(client: Client, stateDir: string, skus: SkuPlan[]): Promise<string[]> {
  const failures: string[] = [];
  const reply = await client.admin("GET", "/metrics");
  if (reply.status !== 200) return [`GET /metrics answered ${reply.status}`];
  let scrape: Scrape;
  try {
    scrape = new Scrape(reply.text);
  } catch (err) {
    return [`GET /metrics does not parse: ${String(err)}`];
  }
  const rows = await d1Query<OrderRow>(stateDir, ordersSql(skus));
  for (const plan of skus) {
    const view = await skuView(client, plan.sku);
    for (const [state, value] of Object.entries(view.stock)) {
      const metric = scrape.value("flashgate_stock", { sku: plan.sku, state });
      if (metric !== value)
        failures.push(`flashgate_stock{sku=${plan.sku},state=${state}} ${metric}, admin view ${value}`);
    }
    for (const status of ["held", "paid", "expired", "cancelled", "refund_required"]) {
      const counted = rows.filter((r) => r.sku === plan.sku && r.status === status).length;
      const metric = scrape.value("flashgate_orders", { sku: plan.sku, status });
      if (metric !== counted)
        failures.push(`flashgate_orders{sku=${plan.sku},status=${status}} ${metric}, D1 rows ${counted}`);
    }
  }
  return failures;
}

/**
 * 9. No unit stays available while every buyer is answered SOLD_OUT, and no waitlist waits on units that
 * are there. After settling, for every SKU on sale with units available: a waitlist may not remain
 * once the units available reach perUserLimit (every entry's quantity is within the limit, so each
 * one fits: what remains can never be served), and a fresh shopper's purchase token and reservation
 * of one unit may not answer SOLD_OUT (tried a few times, past the isolates' 1-s sold-out cache).
 * The probe's hold is cancelled at once and recorded like any reservation.
 */
export async function checkNoStrandedStock(
  client: Client,
  skus: SkuPlan[],
  ledger: Ledger,
  seed: number,
): Promise<{ violations: Violation[]; summary: string }> {
  const violations: Violation[] = [];
  const fail = (message: string) => violations.push({ invariant: 9, message });
  const answers = new Map<string, number>();
  let probed = 0;
  for (const plan of skus) {
    const view = await skuView(client, plan.sku);
    const now = Date.now();
    const onSale =
      view.status === "on_sale" &&
      (view.startsAt === null || Date.parse(view.startsAt) <= now) &&
      (view.endsAt === null || Date.parse(view.endsAt) > now);
    const { available } = view.stock;
    if (!onSale || available <= 0) continue;
    probed++;
    // A SKU in sizes: its line waits for the sizes each entry listed, not for others' units.
    const sized = view.variants?.filter((v) => v.stock.available > 0).map((v) => v.id);
    if (view.waitlist > 0 && available >= view.perUserLimit && !sized) {
      fail(
        `${plan.sku}: ${available} units available (perUserLimit ${view.perUserLimit}, so any entry fits) while ${view.waitlist} buyer(s) still wait after settling: the waitlist keeps an entry that can never be served`,
      );
    }
    const userId = `probe-${seed}-${plan.sku}`;
    const jwt = await shopperJwt(userId, client.secrets.authSecret);
    ledger.users.set(userId, jwt);
    const headers = { authorization: `Bearer ${jwt}` };
    const retried = async (op: string, send: () => Promise<Reply>, ok: number): Promise<Reply | null> => {
      let reply: Reply | null = null;
      for (let attempt = 0; attempt < 4; attempt++) {
        reply = await call(ledger, op, send);
        if (reply?.status === ok || errorCode(reply?.json) !== "SOLD_OUT") return reply;
        await sleep(1_500); // past the isolates' sold-out cache (SOLD_OUT_CACHE_TTL_MS, 1 s)
      }
      return reply;
    };
    const minted = await retried("probe token", () => client.mint(plan.sku, headers), 201);
    const token = minted?.status === 201 ? str(minted.json, "token") : undefined;
    const key = (reply: Reply | null) =>
      `${reply?.status ?? 0}${errorCode(reply?.json) ? ` ${errorCode(reply?.json)}` : ""}`;
    if (!token) {
      answers.set(`token ${key(minted)}`, (answers.get(`token ${key(minted)}`) ?? 0) + 1);
      if (errorCode(minted?.json) === "SOLD_OUT")
        fail(`${plan.sku}: ${available} units available, yet a fresh shopper's purchase token answered SOLD_OUT`);
      continue;
    }
    ledger.unanswered.add(userId); // until answered: a reservation without an answer may have committed
    const reply = await retried(
      "probe reserve",
      () =>
        client.request("POST", `/api/skus/${plan.sku}/reservations`, {
          headers,
          body: { token, quantity: 1, ...(sized ? { variants: sized.slice(0, 5) } : {}) },
        }),
      202,
    );
    answers.set(key(reply), (answers.get(key(reply)) ?? 0) + 1);
    if (errorCode(reply?.json) === "SOLD_OUT") {
      fail(
        `${plan.sku}: ${available} units available (waitlist ${view.waitlist}), yet a fresh shopper's reservation of 1 answered SOLD_OUT, four times over 6 s`,
      );
    }
    const id = reply?.status === 202 ? str(reply.json, "reservationId") : undefined;
    if (reply && id) {
      const acked = heldAcked(id, plan.sku, userId, 1, reply.json);
      ledger.acked.set(id, acked);
      const cancelled = await call(ledger, "probe cancel", () =>
        client.request("POST", `/api/reservations/${id}/cancel`, { headers }),
      );
      if (cancelled?.status === 200) acked.lastKnown = str(cancelled.json, "status") ?? acked.lastKnown;
    }
  }
  const told = [...answers].map(([k, n]) => `${k}×${n}`).join(" ");
  return {
    violations,
    summary: `${probed} SKUs on sale with units available: no waitlist left waiting on them, a fresh shopper answered ${told || "nothing"}`,
  };
}

/** The directory of the stock objects' SQLite files under the dev server's state (`v3/do/<script>-SkuStock`). */
export function stockObjectDir(stateDir: string): string | null {
  const root = join(stateDir, "v3", "do");
  if (!existsSync(root)) return null;
  const dirs = readdirSync(root).filter((d) => d.endsWith("-SkuStock"));
  return dirs.length === 1 && dirs[0] ? join(root, dirs[0]) : null;
}

/** Shards a request can name: a reservation id carries up to two digits (`<sku>.<n>.<hex>`). */
const NAMEABLE_SHARDS = 100;

/**
 * 11. Nothing is stored for a SKU that was never configured. Every stock object that ever ran has a
 * SQLite file `<id>.sqlite` in the state directory (the object creates its tables when it starts),
 * named by the hex id that `idFromName("<sku>#<shard>")` gives (computed by the harness route
 * `POST /chaos/stock-ids`); every file must be a shard of a configured SKU. `asked` names the ids
 * never configured that requests were about, so their files are named in the message. D1 may hold
 * no catalog, order, count or watermark row for other SKUs either. `known` files are not reported
 * again (a second check after the bad-input pass reports only what that pass stored).
 */
export async function checkNothingStored(
  client: Client,
  stateDir: string,
  configured: string[],
  asked: Iterable<string>,
  known: ReadonlySet<string> = new Set(),
): Promise<{ violations: Violation[]; summary: string; stray: Set<string> }> {
  const violations: Violation[] = [];
  const fail = (message: string) => violations.push({ invariant: 11, message });
  const stray = new Set<string>(known);
  const dir = stockObjectDir(stateDir);
  if (!dir) {
    fail(`no stock object directory (v3/do/*-SkuStock) under ${stateDir}: the check cannot read what is stored`);
    return { violations, summary: "", stray };
  }
  const files = readdirSync(dir)
    .filter((f) => /^[0-9a-f]{64}\.sqlite$/.test(f))
    .map((f) => f.slice(0, 64));
  const others = [...new Set(asked)].filter((sku) => !configured.includes(sku));
  const reply = await client.admin("POST", "/chaos/stock-ids", {
    skus: [...configured, ...others],
    shards: NAMEABLE_SHARDS,
  });
  const answer = reply.json as { names?: string[]; ids?: string[] } | null;
  const ids = answer?.ids;
  const all = answer?.names ?? [];
  if (reply.status !== 200 || !ids || ids.length !== (configured.length + others.length) * NAMEABLE_SHARDS) {
    fail(`POST /chaos/stock-ids answered ${reply.status}: ${reply.text.slice(0, 160)}`);
    return { violations, summary: "", stray };
  }
  const byId = new Map(ids.map((id, i) => [id, all[i] ?? "?"]));
  const allowed = new Set(ids.slice(0, configured.length * NAMEABLE_SHARDS));
  const present = new Set(files);
  // The layout is what this check assumes only if every configured SKU's shard 0 has its file.
  const missing = configured.filter((sku) => !present.has(ids[configured.indexOf(sku) * NAMEABLE_SHARDS] ?? ""));
  if (missing.length > 0)
    fail(
      `no SQLite file in ${dir} for shard 0 of ${missing.join(", ")}: the state layout is not what the check assumes`,
    );
  const fresh = files.filter((id) => !allowed.has(id) && !known.has(id));
  for (const id of fresh) stray.add(id);
  for (const id of fresh.slice(0, 10)) {
    const name = byId.get(id);
    fail(
      name
        ? `stock object ${name} has state (${id.slice(0, 12)}….sqlite) though SKU ${name.split("#")[0]} was never configured`
        : `stock object file ${id.slice(0, 12)}….sqlite is no shard of a configured SKU`,
    );
  }
  if (fresh.length > 10) fail(`… and ${fresh.length - 10} more stock object files of SKUs never configured`);
  const list = configured.map((sku) => `'${sku.replaceAll("'", "''")}'`).join(",");
  const rows = await d1Query<{ t: string; sku: string; n: number }>(
    stateDir,
    `SELECT 'skus' AS t, sku, COUNT(*) AS n FROM skus WHERE sku NOT IN (${list}) GROUP BY sku
     UNION ALL SELECT 'orders', sku, COUNT(*) FROM orders WHERE sku NOT IN (${list}) GROUP BY sku
     UNION ALL SELECT 'order_counts', sku, COUNT(*) FROM order_counts WHERE sku NOT IN (${list}) GROUP BY sku
     UNION ALL SELECT 'reconcile_watermarks', sku, COUNT(*) FROM reconcile_watermarks WHERE sku NOT IN (${list}) GROUP BY sku`,
  );
  for (const row of rows.slice(0, 10)) fail(`D1 ${row.t} holds ${row.n} row(s) for ${row.sku}, a SKU never configured`);
  return {
    violations,
    stray,
    summary: `${files.length} stock object files, each a shard of the ${configured.length} configured SKUs; no D1 row for another SKU (${others.length} never-configured ids asked about)`,
  };
}
