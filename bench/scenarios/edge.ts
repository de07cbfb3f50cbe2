import { admin, createSku, type WorkerServer } from "../../tools/worker";
import type { BareWorker } from "../lib/bare-worker";
import { answered, type Bench, measured } from "../lib/context";
import { stockStats } from "../lib/engine-route";
import type { Point } from "../lib/measure";
import { reservationRequests, tokenRequests } from "../lib/shoppers";
import { through, type Via, viaKey } from "../lib/via";
import type { WrkRequest } from "../lib/wrk";

/**
 * The edge's load points, each a wrk run from its own process against one workerd:
 * - the ceiling: a bare Worker in its own workerd;
 * - `GET /healthz`, measured like any other path;
 * - the sold-out storm: a SKU with no stock, every request a fresh user and token (409 SOLD_OUT);
 * - the hot SKU: one SKU with far more stock than the run can take, fresh users and tokens (202);
 * - purchase tokens, fresh users, with and without a proof of work to check (201).
 */
const get = (path: string) => async (): Promise<WrkRequest[]> => [{ method: "GET", path }];

let runs = 0;
const runId = (prefix: string) => `${prefix}${Date.now().toString(36)}${runs++}`;

/** The bare Worker's run `key` (`bare_worker…`), its label naming the point it follows and how it was reached. */
export function ceiling(bench: Bench, bare: BareWorker, key = "bare_worker", via: Via = "entry"): Promise<Point> {
  const after = key.startsWith("bare_worker_after_") ? `after ${key.slice("bare_worker_after_".length)}` : "";
  const how = [after, via === "direct" ? "direct" : ""].filter(Boolean).join(", ");
  return measured(bench, {
    key: viaKey(key, via),
    label: `bare Worker (ceiling${how ? `, ${how}` : ""})`,
    url: through(bare, via).url,
    pids: [bare.pid],
    requests: get("/"),
    fresh: false,
    expected: [200],
  });
}

/** The ceiling a point is divided by: the mean of the bare Worker's runs just before and after it. */
export interface Ceiling {
  runs: string[];
  rps: number;
  cpuUsPerRequest: number;
}

export function ceilingOf(runs: Point[]): Ceiling {
  const mean = (f: (p: Point) => number) => runs.reduce((sum, p) => sum + f(p), 0) / runs.length;
  return { runs: runs.map((p) => p.key), rps: mean((p) => p.rps), cpuUsPerRequest: mean((p) => p.cpuUsPerRequest) };
}

export function healthz(bench: Bench, server: WorkerServer, key = "healthz"): Promise<Point> {
  return measured(bench, {
    key,
    label: `GET /healthz (${server.label})`,
    url: server.url,
    pids: [server.pid],
    requests: get("/healthz"),
    fresh: false,
    expected: [200],
  });
}

/** The public SKU view (`GET /api/skus/:sku`, no JWT) of a SKU with stock: what a storefront polls. */
export async function skuView(bench: Bench, server: WorkerServer, key = "sku_view"): Promise<Point> {
  const sku = `view-${runId("v")}`;
  await createSku(server, sku, 1_000);
  return measured(bench, {
    key,
    label: `public SKU view (${server.label})`,
    url: server.url,
    pids: [server.pid],
    requests: get(`/api/skus/${sku}`),
    fresh: false,
    expected: [200],
  });
}

/**
 * The body floor (bench/lib/floors.ts) under the sold-out storm's requests: a Worker that reads the
 * same JSON POST bodies and answers, nothing else.
 */
export function bodyFloor(bench: Bench, floor: BareWorker, via: Via = "entry"): Promise<Point> {
  const run = runId("bf");
  return measured(bench, {
    key: viaKey("body_floor", via),
    label: `body floor (reads the JSON body${via === "direct" ? ", direct" : ""})`,
    url: through(floor, via).url,
    pids: [floor.pid],
    requests: (n, phase) => reservationRequests(`${run}${phase}`, `gone-${run}`, 1, n),
    fresh: true,
    expected: [200],
  });
}

export async function soldOut(bench: Bench, server: WorkerServer, key = "sold_out"): Promise<Point> {
  const run = runId("so");
  const sku = `gone-${run}`;
  await createSku(server, sku, 0);
  const point = await measured(bench, {
    key,
    label: `sold-out storm (${server.label})`,
    url: server.url,
    pids: [server.pid],
    requests: (n, phase) => reservationRequests(`${run}${phase}`, sku, 1, n),
    fresh: true,
    expected: [409],
  });
  bench.checks.push({ server, sku, total: 0, held: 0 });
  return point;
}

/**
 * The same sold-out storm against the floor Worker (bench/lib/floor-worker.ts): only the work the
 * contract requires before a sold-out answer, hand-written. Flashgate's storm ÷ this is the cost of
 * its own structure (framework, logging, metrics) beyond that work.
 */
export function soldOutFloor(bench: Bench, floor: BareWorker, via: Via = "entry"): Promise<Point> {
  const run = runId("fl");
  const sku = `gone-${run}`;
  return measured(bench, {
    key: viaKey("sold_out_floor", via),
    label: `sold-out floor (hand-written checks only${via === "direct" ? ", direct" : ""})`,
    url: through(floor, via).url,
    pids: [floor.pid],
    requests: (n, phase) => reservationRequests(`${run}${phase}`, sku, 1, n),
    fresh: true,
    expected: [409],
  });
}

export async function hotSku(
  bench: Bench,
  server: WorkerServer,
  opts: { key: string; shards?: number; label?: string; sizes?: number },
): Promise<Point & { sku: string }> {
  const shards = opts.shards ?? 1;
  const run = runId("h");
  const sku = `hot-${run}`;
  // Sizes (issue #51): about the same units over `sizes` variants; each buyer lists 1 to 3 of them.
  const sizes = opts.sizes ? Array.from({ length: opts.sizes }, (_, i) => `${36 + i}`) : null;
  const each = sizes ? Math.floor(5_000_000 / sizes.length) : 0;
  const total = sizes ? each * sizes.length : 5_000_000;
  if (sizes) {
    await admin(server, "PUT", `/admin/skus/${sku}`, {
      name: `bench ${sku}`,
      perUserLimit: 1,
      holdSeconds: 3600,
      shards,
      variants: sizes.map((id) => ({ id, totalStock: each })),
    });
  } else await createSku(server, sku, total, shards);
  const choices = sizes
    ? (i: number) => Array.from({ length: 1 + (i % 3) }, (_, k) => sizes[(i * 7 + k) % sizes.length] as string)
    : undefined;
  const what = sizes ? `hot product in ${sizes.length} sizes` : "hot SKU";
  const point = await measured(bench, {
    key: opts.key,
    label: opts.label ?? `${what}, ${shards} shard${shards > 1 ? "s" : ""} (${server.label})`,
    url: server.url,
    pids: [server.pid],
    requests: (n, phase) => reservationRequests(`${run}${phase}`, sku, shards, n, 1, choices),
    fresh: true,
    expected: [202],
  });
  bench.checks.push({ server, sku, total, held: answered(point, 202), unseen: 2 * point.connections });
  // The group commit's mean batch over the run: reservations ÷ reserve RPCs, every shard (a
  // baseline from before the harness counted them has none).
  let calls = 0;
  let requests = 0;
  for (let shard = 0; shard < shards; shard++) {
    const stats = await stockStats(server, sku, shard).catch(() => undefined);
    calls += stats?.reserveCalls ?? 0;
    requests += stats?.reserveRequests ?? 0;
  }
  if (calls > 0) {
    bench.figures[`${opts.key}_batch`] = { reserveCalls: calls, reservations: requests, meanBatch: requests / calls };
  }
  return { ...point, sku };
}

/**
 * Purchase tokens for a SKU with stock, every request a fresh user; with `powBits` (the Worker
 * started with that POW_BITS), each carries its user's solved proof of work. The difference in CPU
 * per token between the two is what checking a proof of work costs the Worker (one HMAC, one hash:
 * the same at any difficulty, so the bench solves an easy one).
 */
export async function tokens(
  bench: Bench,
  server: WorkerServer,
  opts: { key: string; powBits?: number; accessCodes?: true },
): Promise<Point> {
  const run = runId("t");
  const sku = `tok-${run}`;
  await createSku(server, sku, 1_000);
  if (opts.accessCodes) await presale(server, sku);
  const bits = opts.powBits ?? 0;
  const what =
    bits > 0
      ? `, proof of work checked (POW_BITS ${bits})`
      : opts.accessCodes
        ? ", each with its access code, before the start"
        : "";
  return await measured(bench, {
    key: opts.key,
    label: `purchase tokens${what} (${server.label})`,
    url: server.url,
    pids: [server.pid],
    requests: async (n, phase) =>
      tokenRequests(`${run}${phase}`, sku, n, bits, opts.accessCodes ? await accessCodes(server, sku, n) : undefined),
    fresh: true,
    expected: [201],
  });
}

/**
 * Early access (API.md "Early access"): the SKU's public start an hour away, and a tier of codes open
 * since a minute ago, so every token request is admitted by its code (hashed at the edge, judged and
 * taken by shard 0 in the call that reads the SKU's state). Beside the `tokens` point, its CPU per
 * request is what a code costs (issue 43: at most 1.2x one without).
 */
async function presale(server: WorkerServer, sku: string): Promise<void> {
  const now = Date.now();
  await admin(server, "PUT", `/admin/skus/${sku}`, {
    startsAt: new Date(now + 3_600_000).toISOString(),
    access: [{ name: "codes", startsAt: new Date(now - 60_000).toISOString() }],
  });
}

/** `count` fresh codes of the SKU's tier `codes`, made 10,000 a call (the route's most). */
async function accessCodes(server: WorkerServer, sku: string, count: number): Promise<string[]> {
  const codes: string[] = [];
  while (codes.length < count) {
    const made = await admin<{ codes: string[] }>(server, "POST", `/admin/skus/${sku}/access-codes`, {
      tier: "codes",
      count: Math.min(10_000, count - codes.length),
    });
    codes.push(...made.codes);
  }
  return codes;
}
