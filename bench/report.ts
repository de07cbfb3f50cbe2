// The bench's report, generated from bench/results.json and never typed by hand: docs/PERFORMANCE.md,
// the one document with the bench's figures (the others link to its sections). `npm run bench` writes
// it after a run; `npm run bench:report` again from the file.
import { readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import type { CopiesRounds } from "./copies";
import { type CutFigures, cutSection, onOverOff, pairedMedian, unbatchedTarget } from "./delivery-floor";
import { type FloorFigures, floorSection, perfSection } from "./floor-targets";
import type { CallgrindPoint } from "./lib/callgrind";
import type { Capacity } from "./lib/capacity";
import type { CapacitySimulation } from "./lib/capacity-sim";
import { median } from "./lib/log";
import type { Point } from "./lib/measure";
import { type PartsFigure, partsSection } from "./lib/parts";
import type { PerfPoint } from "./lib/perf-record";
import type { ProfileLine } from "./lib/profile";
import type { RedisBenchResult } from "./lib/redis-benchmark";
import { type Via, viaKey } from "./lib/via";
import type { SaleLogFigures } from "./sale-log";
import { saleLogSection } from "./sale-log-report";
import type { ClassicPipelineFigures } from "./scenarios/classic-pipeline";
import type { CopiesFigure } from "./scenarios/copies";
import type { drawDecide, drawDecideSharded } from "./scenarios/draw";
import type { Ceiling } from "./scenarios/edge";
import type { engineCore } from "./scenarios/engine-core";
import type { HandOffFigures } from "./scenarios/order-hand-off";
import type { orderPipeline, PipelineFigures } from "./scenarios/order-pipeline";

const ROOT = fileURLToPath(new URL("..", import.meta.url));

export interface Results {
  date: string;
  mode: string;
  timing: { warmSeconds: number; seconds: number; connections: number };
  commit: string;
  dirty: boolean;
  machine: { cpu: string; cores: number; memoryGiB: number; platform: string };
  versions: Record<string, string>;
  load: string;
  cpu: string;
  points: Record<string, Point>;
  redis: Record<string, RedisBenchResult>;
  figures: {
    /** Per edge point, the bare Worker's runs beside it (before and after) and their mean. */
    ceilings?: Record<string, Ceiling>;
    engine_core?: EngineFigure;
    /** The object alone, state on disk: an fsync per commit. */
    engine_core_fsync?: EngineFigure;
    /** The whole order pipeline in the object's workerd, state on disk (as `npm run dev` runs it). */
    engine_core_shared?: EngineFigure;
    /** The object alone on tmpfs, one reservation per call: its fixed cost per call. */
    engine_core_batch1?: EngineFigure;
    floor_rpc_noop?: FloorFigures["floor_rpc_noop"];
    floor_rpc_row_tmpfs?: FloorFigures["floor_rpc_row_tmpfs"];
    floor_rpc_row_disk?: FloorFigures["floor_rpc_row_disk"];
    hot_sku_direct_batch?: FloorFigures["hot_sku_direct_batch"];
    /** perf profiles of workerd per point (bench/lib/perf-record.ts). */
    perf?: Record<string, PerfPoint>;
    memory?: { liveHolds?: MemoryFigure & { holds: number }; userQuotas?: MemoryFigure & { users: number } };
    order_pipeline?: Awaited<ReturnType<typeof orderPipeline>>;
    hot_sku_orders?: PipelineFigures;
    /** The order pipeline with one webhook endpoint subscribed to every type, beside it off (bench/scenarios/order-hand-off.ts). */
    order_pipeline_webhooks?: HandOffFigures;
    /** The same with the endpoint batched, up to 100 events a message (issue #53). */
    order_pipeline_webhook_batches?: HandOffFigures;
    /** The hand-off as first measured, kept from run to run (bench/run.ts): its before → after. */
    order_pipeline_webhooks_before?: {
      measured: string;
      commit: string;
      what: string;
      rounds: number;
      plain: HandOffFigures["plain"];
      hooks: HandOffFigures["hooks"];
    };
    /** Issue #53's cut of a delivery toward its floor, before → after (bench/delivery-floor.ts); kept from run to run. */
    order_pipeline_webhooks_cut?: CutFigures;
    /** The sale log's costs (`bench/sale-log.ts --write`), and before its rework (`--before`); kept from run to run. */
    sale_log?: SaleLogFigures;
    sale_log_before?: SaleLogFigures;
    /** `--profile`: one hand-off sale on a Worker with the inspector, `perf` over its workerd. */
    order_pipeline_webhooks_profile?: {
      cpuUsPerOrderDelivered: number;
      profile: PerfPoint["profile"];
      functions: ProfileLine[];
    };
    /** The classic design's whole pipeline: Redis Lua + outbox → RabbitMQ → MariaDB (bench/scenarios/classic-pipeline.ts). */
    classic_pipeline?: ClassicPipelineFigures;
    /** Fair opening, one shard: the alarm's decision of a full window (bench/scenarios/draw.ts). */
    draw_decide?: Awaited<ReturnType<typeof drawDecide>>;
    /** Fair opening, sharded: the decision with a request waiting per entrant, until all are answered. */
    draw_decide_sharded?: Awaited<ReturnType<typeof drawDecideSharded>> & {
      /** Set when the figure was measured in another (partial) run than the rest of the file. */
      measuredIn?: string;
    };
    /** A proof of work checked in workerd, less the loop (bench/scenarios/pow-check.ts). */
    pow_check?: { checks: number; rounds: { checkUs: number; floorUs: number }[]; medianUsPerCheck: number };
    /** Solving in headless Chromium with the storefront's solver (bench/scenarios/pow-browser.ts). */
    pow_browser?: { webcryptoUsPerHash: number; bits16?: Solves; bits20?: Solves };
    /** The hot SKU's profile by part (`npm run bench:perf -- hot_sku --js --save`). */
    hot_sku_parts?: PartsFigure;
    /** Issue #51: the hot SKU in sizes beside the plain one, direct, paired rounds. */
    hot_sizes?: { rounds: number; sizes?: number; plainCpuUs: number[]; sizesCpuUs: number[]; ratio: number };
    /** Instructions per call under callgrind (`npm run bench:perf -- <point> --callgrind --save`). */
    callgrind?: Record<string, CallgrindPoint & { commit: string; date: string }>;
  };
  /** The capacity model (bench/lib/capacity.ts); absent in results of runs before it existed. */
  capacity?: Capacity;
  baselines: {
    ref: string;
    commit: string;
    subject: string;
    /** Each point's first round, by name (`healthz`, `now_healthz_direct`, …). */
    keys: Record<string, string>;
    /** Every round's key by name (absent in results from before rounds). */
    rounds?: Record<string, string[]>;
  }[];
  problems: string[];
}

type Solves = { solves: number; medianMs: number; maxMs: number; usPerHash: number };

type MemoryFigure = { heapUsedMiB: number; heapDeltaMiB: number; rssDeltaMiB: number; databaseMiB: number };

type EngineFigure = Awaited<ReturnType<typeof engineCore>>;

const n0 = (v: number | undefined) =>
  v === undefined || !Number.isFinite(v) ? "–" : Math.round(v).toLocaleString("en-US");
const n1 = (v: number | undefined) => (v === undefined || !Number.isFinite(v) ? "–" : v.toFixed(1));
const x2 = (v: number | undefined) => (v === undefined || !Number.isFinite(v) ? "–" : `${v.toFixed(2)}×`);

/** A commit's subject as a table cell: its first sentence, at most 80 characters (our subjects run long). */
function headline(subject: string): string {
  const sentence = subject.split(/(?<=\.)\s/)[0] ?? subject;
  return sentence.length <= 80 ? sentence : `${sentence.slice(0, 79)}…`;
}

/** A markdown table; `head` may be written as its row, "a | b | c". */
function table(head: string | string[], rows: string[][]): string {
  const cells = typeof head === "string" ? head.split(" | ") : head;
  return [
    `| ${cells.join(" | ")} |`,
    `|${cells.map(() => " --- ").join("|")}|`,
    ...rows.map((r) => `| ${r.join(" | ")} |`),
  ].join("\n");
}

/** Markdown blocks (paragraphs, tables, headings) as lines, each followed by a blank one; a non-string is left out. */
function blocks(...parts: (string | false | null | undefined)[]): string[] {
  return parts.flatMap((part) => (typeof part === "string" ? [part, ""] : []));
}

/** A median and, over more than one round, each round in parentheses: "512 (498, 512, 530)". */
const withRounds = (mid: number | undefined, each: number[]) =>
  `${n0(mid)}${each.length > 1 ? ` (${each.map((v) => n0(v)).join(", ")})` : ""}`;

/** This run's Worker or object, as a row beside an earlier commit's. */
const thisRun = (r: Results) => `\`${r.commit}\`${r.dirty ? " (with uncommitted changes)" : ""} this run`;

/**
 * What a point is divided by: the bare Worker's runs beside it (bench/run.ts), or for a run that
 * had none (an older results.json), the one bare run at the start.
 */
function ceilingFor(r: Results, key: string): { rps: number; cpuUsPerRequest: number } | undefined {
  return r.figures.ceilings?.[key] ?? r.points[key.endsWith("_direct") ? "bare_worker_direct" : "bare_worker"];
}

/** The bare Worker's runs reached `via` (`bare_worker…`, ending in `_direct` when direct), by key. */
function bareRuns(r: Results, via: Via): [string, Point][] {
  return Object.entries(r.points).filter(
    ([key]) => key.startsWith("bare_worker") && key.endsWith("_direct") === (via === "direct"),
  );
}

/** An estimate from one run, and its spread: the lowest and highest it came out over the bare runs used. */
export type Estimate = { value: number; low: number; high: number };

const estimateOf = (values: number[]): Estimate => {
  const finite = values.filter(Number.isFinite);
  if (finite.length === 0) return { value: Number.NaN, low: Number.NaN, high: Number.NaN };
  return {
    value: finite.reduce((a, b) => a + b, 0) / finite.length,
    low: Math.min(...finite),
    high: Math.max(...finite),
  };
};

/**
 * An estimate of the most any implementation of the contract could reach on this run's runtime,
 * from the floors measured beside the points. The sold-out floor (bench/lib/floor-worker.ts) does
 * only the checks a reservation needs before any answer (JWT, rate limit, body, purchase token)
 * with no framework; a hot-SKU reservation does all of that and then the stock object's transaction
 * and the order pipeline, whose CPU this run measured too (engine core as `npm run dev` runs it,
 * pipeline per order). Each is an estimate from one run: its value uses the mean of the bare
 * Worker's runs beside the floor, its spread each of those runs alone. A measured ratio at or past
 * it says the estimate is loose, not that the code beat a limit; it never proves a target unreachable.
 */
function bounds(r: Results, via: Via) {
  const p = r.points;
  const floorKey = viaKey("sold_out_floor", via);
  const floor = p[floorKey];
  const floorCeiling = ceilingFor(r, floorKey);
  // The bare runs beside the floor, one by one (an older results file has only the mean).
  const bareRunsBeside = (r.figures.ceilings?.[floorKey]?.runs ?? [])
    .map((key) => p[key])
    .filter((point): point is Point => point !== undefined);
  const bares = bareRunsBeside.length > 0 ? bareRunsBeside : floorCeiling ? [floorCeiling] : [];
  const engine = r.figures.engine_core_shared?.cpuUsPerReservation;
  const pipeline = r.figures.order_pipeline?.pipelineCpuUsPerOrder;
  const nan = Number.NaN;
  // A hot reservation costs at least the floor's checks, the object's work and the pipeline's.
  const hotCpu =
    floor && engine !== undefined && pipeline !== undefined ? floor.cpuUsPerRequest + engine + pipeline : nan;
  /** The estimate from the mean of the bare runs, its spread from each run alone. */
  const over = (f: (bare: { rps: number; cpuUsPerRequest: number }) => number): Estimate => {
    if (!floorCeiling) return estimateOf([]);
    const each = estimateOf(bares.map(f));
    return { ...each, value: f(floorCeiling) };
  };
  // A hot reservation does more than the floor, so it is no faster than the floor, nor than workerd's
  // one thread allows at the least CPU a reservation costs (1e6 µs ÷ that: req/s × CPU µs per
  // request was 0.96 to 1.07 s per second for every edge point of the committed run).
  const vsClassic = floor && p.classic ? Math.min(floor.rps, 1e6 / hotCpu) / p.classic.rps : nan;
  return {
    sold_out: floor ? over((bare) => floor.rps / bare.rps) : estimateOf([]),
    // Throughput bound by CPU (workerd's one thread runs every isolate): the bare request's CPU ÷ the least a hot reservation costs.
    hot_sku: over((bare) => bare.cpuUsPerRequest / hotCpu),
    hot_vs_classic: { value: vsClassic, low: vsClassic, high: vsClassic },
    hot_cpu: over((bare) => hotCpu / bare.cpuUsPerRequest),
  };
}

/** `0.64× (0.62–0.65×)`: an estimate and its spread (just the value when it has none). */
const xSpread = (e: Estimate | undefined) => {
  if (!e || !Number.isFinite(e.value)) return "–";
  if (!(e.high > e.low)) return x2(e.value);
  return `${x2(e.value)} (${e.low.toFixed(2)}–${x2(e.high)})`;
};

const ratio = (a?: number, b?: number) => (a === undefined || b === undefined ? Number.NaN : a / b);

/** The edge's ratios as `via` reached it, each point against the bare runs beside it. */
function edgeRatios(r: Results, via: Via) {
  const p = r.points;
  const at = (key: string) => p[viaKey(key, via)];
  const bare = (key: string) => ceilingFor(r, viaKey(key, via));
  return {
    healthz: ratio(at("healthz")?.rps, bare("healthz")?.rps),
    sold_out: ratio(at("sold_out")?.rps, bare("sold_out")?.rps),
    tail: ratio(at("sold_out")?.p99Ms, at("sold_out")?.p50Ms),
    hot_sku: ratio(at("hot_sku")?.rps, bare("hot_sku")?.rps),
    hot_vs_classic: ratio(at("hot_sku")?.rps, p.classic?.rps),
    hot_cpu: ratio(at("hot_sku")?.cpuUsPerRequest, bare("hot_sku")?.cpuUsPerRequest),
  };
}

/** A target: the figure, what it is wanted to be, and the test of it. */
interface Goal {
  what: string;
  value: number;
  target: string;
  met: (v: number) => boolean;
  opts: { shown?: string };
}

/** A goal tested by its wanted text ("≥ 0.9×", "< 2,000"), so the two cannot disagree; `shown` formats the figure. */
function goal(what: string, value: number | undefined, target: string, shown = x2): Goal {
  const [op, figure = ""] = target.split(" ");
  const bound = Number(figure.replace(/[,×]/g, ""));
  const met = (v: number) => (op === "≥" ? v >= bound : op === "≤" ? v <= bound : v < bound);
  return { what, value: value ?? Number.NaN, target, met, opts: { shown: shown(value) } };
}

const yesNo = (met: boolean) => (met ? "yes" : "**no**");

/**
 * The targets of the open speed issues, each a ratio or a figure from this run. An edge target is
 * judged as the issue measured it (through Miniflare's entry worker); `direct` is the same ratio
 * with nothing in front of the Worker, and each has its bound (see {@link bounds}).
 */
function targets(r: Results) {
  const lua = r.redis.reserve_lua_p1;
  const engine = r.figures.engine_core;
  const pipe = r.figures.order_pipeline;
  const entry = { ratios: edgeRatios(r, "entry"), bounds: bounds(r, "entry") };
  const direct = { ratios: edgeRatios(r, "direct"), bounds: bounds(r, "direct") };
  /** An edge target, from both ways in; /healthz has no bound (no floor does less than the bare Worker). */
  const edge = (what: string, key: keyof ReturnType<typeof edgeRatios>, target: string) => {
    const bound = (b: ReturnType<typeof bounds>) => (key in b ? b[key as keyof typeof b] : estimateOf([]));
    return {
      ...goal(what, entry.ratios[key], target),
      bound: bound(entry.bounds),
      direct: { value: direct.ratios[key], bound: bound(direct.bounds) },
    };
  };
  const withCode = r.points[viaKey("tokens_code", "direct")];
  const handOff = r.figures.order_pipeline_webhooks;
  const rows: (Goal & { bound?: Estimate; direct?: { value: number; bound: Estimate } })[] = [
    edge("GET /healthz ÷ bare Worker (req/s)", "healthz", "≥ 0.9×"),
    edge("sold-out storm ÷ bare Worker (req/s)", "sold_out", "≥ 0.9×"),
    edge("sold-out storm p99 ÷ its p50", "tail", "≤ 3×"),
    edge("hot SKU ÷ bare Worker (req/s)", "hot_sku", "≥ 0.5×"),
    edge("hot SKU ÷ classic design (req/s)", "hot_vs_classic", "≥ 1.0×"),
    edge("CPU per hot-SKU reservation ÷ CPU per bare request", "hot_cpu", "≤ 2×"),
    ...(withCode
      ? [
          goal(
            "a purchase token with an access code ÷ one without, CPU per request (direct socket)",
            ratio(withCode.cpuUsPerRequest, r.points[viaKey("tokens", "direct")]?.cpuUsPerRequest),
            "≤ 1.2×",
          ),
        ]
      : []),
    goal(
      "engine core, reservations/s per stock object (as on Cloudflare: alone, no local fsync)",
      engine?.perSec,
      "≥ 40,000",
      n0,
    ),
    goal("engine core ÷ Redis EVALSHA reserve.lua (unpipelined)", ratio(engine?.perSec, lua?.perSec), "≥ 1.0×"),
    goal(
      "the same, both durable per commit: engine core with fsync ÷ Redis with appendfsync always",
      ratio(r.figures.engine_core_fsync?.perSec, r.redis.reserve_lua_p1_fsync_always?.perSec),
      "≥ 1.0×",
    ),
    goal("orders persisted in D1 per second", pipe?.ordersPerSec, "≥ 5,000", n0),
    goal("order lag p99, hold → D1 row (ms)", pipe?.lagP99Ms, "< 2,000", n0),
    ...(handOff
      ? [
          goal(
            "the same with one webhook endpoint subscribed to every type: orders persisted in D1 per second (median of the rounds)",
            handOff.hooks.ordersPerSec,
            "≥ 5,000",
            n0,
          ),
          goal(
            "and its order lag p99, hold → D1 row (ms; median of the rounds)",
            handOff.hooks.lagP99Ms,
            "< 2,000",
            n0,
          ),
          ...handOffTargets(handOff),
        ]
      : []),
    ...unbatchedTarget(handOff),
    ...handOffTargets(r.figures.order_pipeline_webhook_batches, true),
  ];
  return rows.map((t) => ({ ...t, met: Number.isFinite(t.value) && t.met(t.value) }));
}

/** A load point's req/s, p50 and p99 ms, and CPU µs per request. */
const pointCells = (p: Point) => [n0(p.rps), n1(p.p50Ms), n1(p.p99Ms), n0(p.cpuUsPerRequest)];

/** The edge's points as `via` reached them, each beside the bare Worker's runs reached the same way. */
function edgeTable(r: Results, via: Via): string {
  const bareKey = viaKey("bare_worker", via);
  const after = bareRuns(r, via)
    .map(([key]) => key)
    .filter((key) => key.startsWith("bare_worker_after_"));
  const points = ["healthz", "sold_out", "sold_out_floor", "tokens", "tokens_pow", "tokens_code", "hot_sku"];
  const others = via === "entry" ? ["hot_sku_gc_off", "hot_sku_4_shards", "classic"] : [];
  const keys = [bareKey, ...after, ...points.map((k) => viaKey(k, via)), ...others];
  const rows = keys.flatMap((k) => {
    const p = r.points[k];
    if (!p) return [];
    const bare = k.startsWith("bare_worker") ? r.points[bareKey] : ceilingFor(r, k);
    const per = (a: number, b?: number) => x2(a / (b ?? Number.NaN));
    return [[p.label, ...pointCells(p), per(p.rps, bare?.rps), per(p.cpuUsPerRequest, bare?.cpuUsPerRequest)]];
  });
  return table(["path (wrk, c50)", "req/s", "p50 ms", "p99 ms", "CPU µs/req", "req/s ÷ bare", "CPU ÷ bare"], rows);
}

/**
 * What each point costs beyond a bare Worker (its CPU per request less the mean of the bare runs
 * beside it), both ways in, and what Miniflare's entry worker adds to a bare request.
 */
function costTable(r: Results): string[] {
  const own = (key: string, via: Via) =>
    (r.points[viaKey(key, via)]?.cpuUsPerRequest ?? Number.NaN) -
    (ceilingFor(r, viaKey(key, via))?.cpuUsPerRequest ?? Number.NaN);
  const labels: [string, string][] = [
    ["healthz", "GET /healthz"],
    ["sold_out", "sold-out storm"],
    ["sold_out_floor", "sold-out floor (hand-written checks only)"],
    ["hot_sku", "hot SKU reservation (1 shard, group commit on)"],
  ];
  const bareCpu = (via: Via) => {
    const cpu = bareRuns(r, via).map(([, p]) => p.cpuUsPerRequest);
    return cpu.length === 0 ? Number.NaN : cpu.reduce((a, b) => a + b, 0) / cpu.length;
  };
  const bareEntry = bareCpu("entry");
  const bareDirect = bareCpu("direct");
  return blocks(
    table(
      ["CPU µs per request beyond a bare Worker's", "through the entry worker", "direct"],
      [
        ...labels.map(([key, label]) => [label, n0(own(key, "entry")), n0(own(key, "direct"))]),
        ["a bare Worker's own request (mean of its runs)", n0(bareEntry), n0(bareDirect)],
      ],
    ),
    `Miniflare's entry worker, which \`wrangler dev\` puts in front of every request and which does not exist on Cloudflare, costs ${n0(bareEntry - bareDirect)} µs of a bare request's ${n0(bareEntry)} here (the same workerd, reached both ways). It is paid by the bare Worker and by the gateway alike, so every ratio to a bare Worker reached through it is squeezed toward 1; the direct column is what the gateway's own code costs, and where a change to it shows.`,
  );
}

/** The bare Worker's own p99 ÷ p50 over its runs reached `via`: "lowest–highest". */
function bareTails(r: Results, via: Via): string {
  const tails = bareRuns(r, via).map(([, bare]) => bare.p99Ms / bare.p50Ms);
  return tails.length === 0 ? "–" : `${x2(Math.min(...tails))}–${x2(Math.max(...tails))}`;
}

function targetTable(r: Results): string[] {
  return blocks(
    table(
      ["target", "this run", "wanted", "met", "estimated bound (spread)", "direct; its estimated bound"],
      targets(r).map((t) => [
        t.what,
        t.opts.shown ?? x2(t.value),
        t.target,
        yesNo(t.met),
        xSpread(t.bound),
        t.direct
          ? `${x2(t.direct.value)}${Number.isFinite(t.direct.bound.value) ? `; bound ${xSpread(t.direct.bound)}` : ""}`
          : "–",
      ]),
    ),
    `"Estimated bound" is an estimate, from this one run, of the most any code could reach on a target here: the sold-out floor (bench/lib/floor-worker.ts: JWT, rate limit, body and purchase token checked by hand, no framework) for the sold-out storm; for the hot SKU, the floor's checks plus the stock object's CPU per reservation and the order pipeline's per order (both measured in this run, in the same workerd as locally), as a throughput if CPU is all that bounds it. The figure uses the mean of the bare Worker's runs beside the floor; in brackets, the lowest and highest it comes out with each of those runs alone, which is how much the runtime moved within the run. It is not a proof: a measured ratio at or past it (as can happen within the spread) means the estimate is loose, and one run cannot show that a target is out of reach. What it does say: the part of each request spent in the local runtime (Miniflare's entry worker in front of every request, the body pumped between the two, the queue and D1 on the objects' thread) is not Flashgate's to remove. "Direct" is the same ratio and its estimate with the Worker reached directly (no entry worker in front of either side), where the gateway's own cost is a larger part of each request.`,
    `The latency target has no bound: the same ratio of the bare Worker's runs in this run was ${bareTails(r, "entry")} through the entry worker and ${bareTails(r, "direct")} directly (their p50 and p99 in the tables above). Under a closed loop of 50 connections on 2 cores the tail is the runtime's and the machine's more than the gateway's: a Worker that does nothing has it too, and from run to run it moves more than any code could.`,
  );
}

/**
 * Before → after as `via` reached the Workers: each earlier commit's Worker and this run's measured
 * back to back (`now_…`, over `rounds`; a results file from before those pairs has only this run's
 * main points).
 */
function baselineTable(r: Results, via: Via): string {
  const points = ["healthz", "sold_out", "hot_sku"];
  type Baseline = Results["baselines"][number];
  /** Median req/s and CPU of a name's rounds; with more than one, each round's CPU too. */
  const cells = (b: Baseline, name: string, fallback?: string) => {
    const keys = b.rounds?.[name] ?? [b.keys[name] ?? fallback ?? ""];
    const runs = keys.map((k) => r.points[k]).filter((p): p is Point => p !== undefined);
    if (runs.length === 0) return ["–", "–"];
    const cpu = runs.map((p) => p.cpuUsPerRequest);
    return [n0(median(runs.map((p) => p.rps))), withRounds(median(cpu), cpu)];
  };
  const now = thisRun(r);
  const rows = r.baselines.flatMap((b) => [
    [`\`${b.commit}\` ${headline(b.subject)}`, ...points.flatMap((point) => cells(b, viaKey(point, via)))],
    [`${now}, beside it`, ...points.flatMap((point) => cells(b, viaKey(`now_${point}`, via), viaKey(point, via)))],
  ]);
  return table(
    ["Worker at commit", "/healthz req/s", "µs/req", "sold-out req/s", "µs/req", "hot SKU req/s", "µs/req"],
    rows,
  );
}

/** Issue #51: what a hot product in sizes costs beside the plain hot SKU (paired rounds, direct). */
function sizesLine(f: Results["figures"]["hot_sizes"]): string[] {
  if (!f) return [];
  const list = (xs: number[]) => xs.map((x) => n0(x)).join(", ");
  // Results from before the figure kept its count had 12.
  return blocks(
    `A hot product in ${f.sizes ?? 12} sizes, each buyer listing 1 to 3 of them (issue #51), beside the plain hot SKU, directly, in ${f.rounds} pairs of rounds (which goes first alternating): CPU µs per reservation ${list(f.sizesCpuUs)} in sizes, ${list(f.plainCpuUs)} plain; the medians' ratio ${x2(f.ratio)}.`,
  );
}

/** "Instructions per call": the callgrind counts, group by group, beside the floors counted the same way. */
function callgrindSection(r: Results): string[] {
  const counted = r.figures.callgrind;
  if (!counted) return [];
  const labels: Record<string, string> = {
    engine1: "engine core, batches of 1",
    statements: "floor: a hold's six statements, no logic",
    row: "floor: RPC committing one row",
    noop: "floor: RPC doing nothing",
    healthz: "GET /healthz",
    framework: "framework floor: Hono, one route",
    bare: "bare Worker",
  };
  const k = (p: CallgrindPoint, g: string) => p.groups.find(([name]) => name === g)?.[1] ?? 0;
  /** The points counted of `keys`, their groups largest first (by the first point's count). */
  const groupTable = (keys: string[], per: string) => {
    const points = keys.flatMap((key) => (counted[key] ? [[key, counted[key]] as const] : []));
    const first = points[0]?.[1];
    if (!first) return undefined;
    const groups = [...new Set(points.flatMap(([, p]) => p.groups.map(([g]) => g)))];
    groups.sort((a, b) => k(first, b) - k(first, a));
    return table(
      [`group (K instructions per ${per})`, ...points.map(([key, p]) => `${labels[key] ?? key} (${n0(p.calls)})`)],
      [
        ...groups.map((g) => [g, ...points.map(([, p]) => n1(k(p, g)))]),
        ["all of workerd", ...points.map(([, p]) => `**${n0(p.kInstructions)}**`)],
      ],
    );
  };
  const ratio = (a: string, b: string, says: string, of: string) => {
    const [x, y] = [counted[a], counted[b]];
    return x && y ? ` ${says} ${x2(x.kInstructions / y.kInstructions)} ${of}.` : "";
  };
  const at = Object.entries(counted).map(([key, p]) => `${key} \`${p.commit}\``);
  return blocks(
    "## Instructions per call (callgrind)",
    `workerd under valgrind's callgrind, instrumented only while the measured calls ran (\`npm run bench:perf -- <point> --callgrind --save\`, bench/lib/callgrind.ts): thousands of instructions per call (per request for a GET, ten in flight), by the groups of the perf table; in brackets, the calls counted. An instruction count moves far less with the machine's other load than CPU time does (a GET's by about a tenth from count to count, with garbage collection and allocation); it leaves out the kernel's work (the syscalls of a commit) and the cost of cache misses, and under valgrind the object's outbox, paced by the wall clock, flushes on every call (the gateway's metrics, paced the same way, are flushed once a minute there rather than once a second). Counted at ${at.join(", ")}.${ratio("engine1", "row", "The engine core's call runs", "the one-row floor's instructions")}${ratio("statements", "row", "A hold's six statements alone, in the engine's tables, run", "the one-row floor's")}${ratio("healthz", "bare", "GET /healthz runs", "the bare Worker's")}${ratio("framework", "bare", "Hono alone, one route and no gateway code, runs", "the bare Worker's")}`,
    groupTable(["engine1", "statements", "row", "noop"], "call"),
    groupTable(["healthz", "framework", "bare"], "request"),
  );
}

/**
 * The engine core before → after: each baseline's object and this run's, alone on tmpfs, in
 * batches of 1 back to back over the rounds (medians; each round in parentheses) and of 64 once.
 */
function engineBaselineTable(r: Results): string[] {
  const figure = (key: string | undefined) =>
    key === undefined ? undefined : (r.figures as Record<string, EngineFigure | undefined>)[key];
  const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];
  const rounds = (keys: string[] | undefined) => {
    const cpu = (keys ?? []).map((k) => figure(k)?.cpuUsPerReservation).filter((v): v is number => v !== undefined);
    return cpu.length === 0 ? "–" : withRounds(median(cpu), cpu);
  };
  const batch1 = (what: string, keys: string[] | undefined, batch64?: number) => [
    what,
    rounds(keys),
    n1(figure(keys?.[0])?.sqlStatementsPerReservation),
    n1(batch64),
  ];
  const rows = r.baselines
    .filter((b) => b.rounds?.engine_core_batch1 !== undefined)
    .flatMap((b) => [
      batch1(
        `\`${b.commit}\` ${headline(b.subject)}`,
        b.rounds?.engine_core_batch1,
        figure(b.keys.engine_core)?.cpuUsPerReservation,
      ),
      batch1(`${thisRun(r)}, beside it`, b.rounds?.now_engine_core_batch1, r.figures.engine_core?.cpuUsPerReservation),
    ]);
  if (rows.length === 0) return [];
  return blocks(
    "The engine core (the object alone, state on tmpfs), the earlier object and this run's: in batches of 1 back to back over the rounds, which one goes first alternating; in batches of 64 once each (this run's from its own section above).",
    table(["object at commit", "batch 1: CPU µs per call", "SQL statements", "batch 64: CPU µs per reservation"], rows),
  );
}

export function performanceDoc(r: Results): string {
  const engine = r.figures.engine_core;
  const pipe = r.figures.order_pipeline;
  const hotOrders = r.figures.hot_sku_orders;
  /** Rows of the stock table: per second and CPU, with the latencies where they were measured. */
  const objectRow = (what: string, f?: EngineFigure) => [what, n0(f?.perSec), "", "", n0(f?.cpuUsPerReservation)];
  const luaRow = (what: string, b?: RedisBenchResult) => [
    what,
    n0(b?.perSec),
    n1(b?.p50Ms),
    n1(b?.p99Ms),
    n1(b?.cpuUsPerCall),
  ];
  const ordersRow = (what: string, f: PipelineFigures | undefined, cpu: string) => [
    what,
    n0(f?.ordersPerSec),
    n0(f?.lagP50Ms),
    n0(f?.lagP99Ms),
    cpu,
  ];
  const out: string[] = [
    ...blocks(
      "# Performance",
      `Generated by \`npm run bench\` (bench/report.ts, from bench/results.json); do not edit by hand. Run of ${r.date}, commit \`${r.commit}\`${r.dirty ? " with uncommitted changes" : ""}, ${r.mode} mode (${r.timing.warmSeconds} s warm-up, then ${r.timing.seconds} s measured, ${r.timing.connections} connections), on ${r.machine.cores} cores of ${r.machine.cpu}, ${r.machine.memoryGiB} GiB, ${r.machine.platform}.`,
      `Load: ${r.load}. CPU: ${r.cpu}. The Worker runs in workerd through Miniflare with wrangler.toml's bindings (tools/worker.ts), the ceiling is a bare Worker (\`fetch() → new Response('{"ok":true}')\`) in its own workerd started the same way. Both are reached two ways: through Miniflare's entry worker (as \`wrangler dev\` serves them) and directly (the Worker's own socket in the same workerd). Wall-clock throughput on a shared 2-core machine swings by a third from run to run; CPU per request barely moves, and it is what Workers bills.`,
      "## The edge, side by side",
      "Through Miniflare's entry worker, as `wrangler dev` serves the Worker (and as the issue that set the targets measured it):",
      edgeTable(r, "entry"),
      "Direct: the same workerd's own socket for the Worker, nothing in front of it, as on Cloudflare:",
      edgeTable(r, "direct"),
      `Each edge point is divided by the bare Worker's runs just before and after it (their mean), reached the same way: the bare rows are those runs, and how far they differ is how much the machine drifted during the bench.`,
      "## What the code costs",
    ),
    ...costTable(r),
    ...sizesLine(r.figures.hot_sizes),
    ...floorSection({ ...r.figures, points: r.points, pipelineCpuUsPerOrder: pipe?.pipelineCpuUsPerOrder }),
    ...perfSection(r.figures.perf),
    ...callgrindSection(r),
    ...partsSection(r.figures.hot_sku_parts),
    ...blocks("## Targets"),
    ...targetTable(r),
    ...blocks(
      "## Stock decisions and orders",
      table(
        ["what", "per second", "p50 ms", "p99 ms", "CPU µs each"],
        [
          objectRow(
            `engine core: the stock object's reserve RPC, batches of ${engine?.batch ?? 64} (in workerd, no HTTP), as the object runs on Cloudflare: alone in its workerd (its outbox written and sent; the consumer and D1 are elsewhere there) and its commit not waiting for a local fsync (state on tmpfs; Cloudflare makes a commit durable by replication while the object goes on)`,
            engine,
          ),
          objectRow(
            "the same object with an fsync per commit (state on disk): durability-equal to Redis with appendfsync always",
            r.figures.engine_core_fsync,
          ),
          objectRow(
            "the same on disk with the whole order pipeline (queue broker, consumer, D1) in its workerd, as `npm run dev` runs it",
            r.figures.engine_core_shared,
          ),
          luaRow("redis-benchmark EVALSHA reserve.lua, c50, unpipelined", r.redis.reserve_lua_p1),
          luaRow("redis-benchmark EVALSHA reserve.lua, c50, -P 16", r.redis.reserve_lua_p16),
          luaRow("the same, unpipelined, redis-server with appendfsync always", r.redis.reserve_lua_p1_fsync_always),
          ordersRow(
            `orders persisted in D1, a sale of ${n0(pipe?.rows)} through the reserve RPC (first hold → last row; lag hold → row)`,
            pipe,
            n0(pipe?.cpuUsPerOrder),
          ),
          [
            "the same orders, the consumer's rate once it started (CPU: the above less the stock object's share, the engine core on disk: broker + consumer + D1)",
            n0(pipe?.persistPerSec),
            "",
            "",
            n0(pipe?.pipelineCpuUsPerOrder),
          ],
          ordersRow(`orders of the hot-SKU run (${n0(hotOrders?.rows)} rows, HTTP load)`, hotOrders, ""),
        ],
      ),
    ),
    ...handOffSection(r),
    ...classicPipelineSection(r),
    ...blocks(
      `SQL statements per reservation in the engine core (each a call from JS into SQLite, outbox flushes included): ${engine?.sqlStatementsPerReservation?.toFixed(2) ?? "–"}.`,
    ),
    ...memorySection(r.figures.memory),
    ...drawSection(r),
    ...challengeSection(r),
    ...capacitySection(r.capacity),
    ...copiesSection(r),
    ...saleLogSection(r.figures.sale_log, r.figures.sale_log_before),
  ];
  if (r.baselines.length > 0) {
    out.push(
      ...blocks(
        "## Before → after",
        "Each earlier commit's Worker was started from a worktree of it and measured in this same run (`npm run bench -- --baseline <ref>,…`), each point paired with this run's Worker on the same point, back to back (which one goes first alternating over `--rounds`, 3 by default), so each pair shares the machine's conditions. Each cell is the median of the rounds; the CPU of each round follows in parentheses.",
        "Through Miniflare's entry worker:",
        baselineTable(r, "entry"),
        "Direct (the Worker's own socket; where a change to the gateway's code shows):",
        baselineTable(r, "direct"),
      ),
      ...engineBaselineTable(r),
    );
  }
  if (r.problems.length > 0) out.push(...blocks("## Problems in this run", r.problems.map((p) => `- ${p}`).join("\n")));
  return `${out.join("\n")}\n`;
}

/** "Stock object memory": one object's heap and RSS with many live holds, and with many users' quotas. */
function memorySection(mem: Results["figures"]["memory"]): string[] {
  if (!mem) return [];
  return blocks(
    "## Stock object memory",
    "The isolate's JS heap after a full GC (the inspector's `Runtime.getHeapUsage`; the 128 MB limit is on it) and workerd's RSS, after one object was filled and then decided reserve batches over what it holds.",
    table(
      ["one object with", "heap MiB", "heap Δ MiB", "RSS Δ MiB", "SQLite MiB"],
      [
        [`${n0(mem.liveHolds?.holds)} live holds`, mem.liveHolds] as const,
        [`${n0(mem.userQuotas?.users)} users' quotas`, mem.userQuotas] as const,
      ].map(([what, m]) => [what, n1(m?.heapUsedMiB), n1(m?.heapDeltaMiB), n1(m?.rssDeltaMiB), n1(m?.databaseMiB)]),
    ),
  );
}

/** The hand-off's medians as first measured beside this run's (absent until a "before" is kept). */
function beforeAfter(
  before: NonNullable<Results["figures"]["order_pipeline_webhooks_before"]> | undefined,
  now: HandOffFigures,
): string[] {
  if (!before) return [];
  type Medians = Pick<HandOffFigures, "plain" | "hooks">;
  const per = (a: number | undefined, b: number | undefined) => (a ?? Number.NaN) / (b ?? Number.NaN);
  const rows: [string, (f: Medians) => number | undefined, typeof n0][] = [
    ["orders/s", (f) => f.hooks.ordersPerSec, n0],
    ["deliveries/s", (f) => f.hooks.deliveriesPerSec, n0],
    ["deliveries/s ÷ orders/s", (f) => per(f.hooks.deliveriesPerSec, f.hooks.ordersPerSec), x2],
    ["delivery lag p50 ms", (f) => f.hooks.deliveryLagP50Ms, n0],
    ["delivery lag p99 ms", (f) => f.hooks.deliveryLagP99Ms, n0],
    ["workerd CPU µs per order, endpoint on", (f) => f.hooks.cpuUsPerOrderDelivered, n0],
    ["workerd CPU µs per order, endpoint disabled", (f) => f.plain.cpuUsPerOrder, n0],
    ["on ÷ disabled", (f) => per(f.hooks.cpuUsPerOrderDelivered, f.plain.cpuUsPerOrder), x2],
  ];
  return blocks(
    "### Before → after",
    `Before: ${before.what}, measured ${before.measured.slice(0, 10)} at ${before.commit} (medians of ${before.rounds} rounds); after: this run's medians.`,
    table(
      ["median, endpoint on", "before", "after"],
      rows.map(([what, pick, shown]) => [what, shown(pick(before)), shown(pick(now))]),
    ),
  );
}

/** "Order hand-off": the order pipeline with one webhook endpoint, beside it without (absent from runs without it). */
function handOffSection(r: Results): string[] {
  const h = r.figures.order_pipeline_webhooks;
  if (!h || h.rounds.length === 0) return [];
  /** A run's cells; the endpoint's own figures are blank for the runs with it disabled. */
  const row = (what: string, plainRun: object, hooksRun?: object) => {
    const plain = plainRun as Record<string, number>;
    const hooks = hooksRun as Record<string, number> | undefined;
    const of = (run: typeof hooks, ...keys: string[]) => keys.map((key) => (run ? n0(run[key]) : ""));
    return [
      what,
      ...of(plain, "ordersPerSec", "lagP50Ms", "lagP99Ms"),
      ...of(hooks, "deliveriesPerSec", "sendPerSec", "deliveryLagP50Ms", "deliveryLagP99Ms"),
      n0(hooks ? hooks.cpuUsPerOrderDelivered : plain.cpuUsPerOrder),
      ...of(hooks, "receiverCpuUsPerDelivery"),
    ];
  };
  const rows = h.rounds.flatMap((round, i) => {
    const off = row(`round ${i + 1}, endpoint disabled`, round.plain);
    const on = row(`round ${i + 1}, endpoint on`, round.hooks, round.hooks);
    return round.first === "plain" ? [off, on] : [on, off];
  });
  rows.push(row("median, endpoint disabled", h.plain), row("median, endpoint on", h.hooks, h.hooks));
  const sum = (pick: (run: HandOffFigures["rounds"][number]["hooks"]) => number) =>
    h.rounds.reduce((n, round) => n + pick(round.hooks), 0);
  const plainCpu = h.plain.cpuUsPerOrder ?? Number.NaN;
  const perDelivery = (h.hooks.cpuUsPerOrderDelivered ?? Number.NaN) - plainCpu;
  const floor = h.floor ?? {};
  const wide = h.floorWide ?? {};
  const kept = h.floorKept?.cpuUsPerPost === undefined ? undefined : h.floorKept;
  const floorCpu = floor.cpuUsPerPost ?? Number.NaN;
  const keptCpu = kept?.cpuUsPerPost ?? Number.NaN;
  const floorRow = (what: string, f: Record<string, number>) => [
    what,
    n0(f.perSec),
    n0(f.cpuUsPerPost),
    n0(f.receiverCpuUsPerPost),
    `${n0(f.verified)} / ${n0(f.posts)}`,
  ];
  // The share of one core the floor's workerd used while it POSTed.
  const busy = (f: Record<string, number>) => ((f.perSec ?? Number.NaN) * (f.cpuUsPerPost ?? Number.NaN)) / 10_000;
  const floorBound = (plainCpu + floorCpu) / plainCpu;
  return [
    ...blocks(
      "## Order hand-off: one webhook endpoint",
      `The order pipeline's sale (${n0(h.rounds[0]?.plain.rows)} holds through the reserve RPC, paced at 10,000/s at most, as above) on a Worker of its own with one endpoint subscribed to every event type (\`PUT /admin/webhooks/:id\`, ${h.endpoint.events.length} types) at tools/webhook-receiver.ts, which checks each signature with \`standardwebhooks\` and answers 204; it runs in a Node process of its own (bench/lib/receiver.ts), off the event loop of the process hosting Miniflare. Every order change writes its delivery row in the order batch's transaction (migration 0006's triggers), the order consumer wakes the sender (queue \`webhook-deliveries\`), and the sender, in the same workerd as the stock object and the consumer, POSTs the due rows. Each round runs the sale twice on that Worker, the endpoint disabled (the plain pipeline: no delivery rows, no wake-ups) and enabled, which goes first alternating (\`--rounds\`); the targets take the medians of the rounds with the endpoint on, the CPU ratio each round's own (its two runs back to back), then their median.`,
      "Orders/s and the order lag are measured as in the order pipeline's row above (first hold → last row; hold → row). Deliveries/s: deliveries ÷ (last receipt − first hold); the sender's rate: the same ÷ (last receipt − first receipt); the delivery lag: receipt − the change's `data.updatedAt` (the hold's creation), as the receiver measures it. With the endpoint on, workerd's CPU runs from the sale's start to the last delivery; the receiver's is its own process's, per request.",
      table(
        "run | orders/s | order lag p50 ms | p99 ms | deliveries/s | sender's rate /s | delivery lag p50 ms | p99 ms | workerd CPU µs per order | receiver CPU µs per delivery",
        rows,
      ),
      `Checked against D1 (\`GET /bench/deliveries/:sku\`) in every round: ${n0(sum((x) => x.delivered))} deliveries verified by the receiver for ${n0(sum((x) => x.changes))} order changes, ${n0(sum((x) => x.unverified))} that did not verify, ${n0(sum((x) => x.duplicates))} sent twice. What a delivery costs workerd here (the medians' difference in CPU per order): ${n0(perDelivery)} µs, on the one thread that also runs the stock object and the order consumer; on Cloudflare the sender is an invocation of its own, and what the deliveries share with the orders is D1.`,
    ),
    ...beforeAfter(r.figures.order_pipeline_webhooks_before, h),
    ...blocks(
      "### The delivery floor",
      "In the same run, beside each round: a Worker in a workerd of its own (bench/lib/post-floor.ts) that POSTs the sender's body (an order object, built and serialized per POST), signed as src/handoff/signature.ts signs it (Standard Webhooks, HMAC-SHA256 by WebCrypto, the key imported once), to the same receiver, reading each answer, with a sender object's six in flight, then with 24. No D1, no queue, no alarm, no bookkeeping: what workerd charges for one signed POST, which a delivery cannot go below.",
      table(
        ["floor", "POSTs/s", "workerd CPU µs per POST", "receiver CPU µs per POST", "verified"],
        [
          floorRow("signed POST, 6 in flight (a sender object's connections)", floor),
          floorRow(`signed POST, ${n0(wide.connections)} in flight`, wide),
          ...(kept
            ? [floorRow("signed POST kept in D1, 6 in flight (written, taken and recorded a page at a time)", kept)]
            : []),
        ],
      ),
      kept &&
        `The last row is the least a delivery that nothing can lose costs (bench/lib/post-floor.ts with D1 bound, on disk as the gateway's is): the same signed POSTs, each kept in a D1 table, a statement each per page of ${n0(kept.page)} (the sender's page when it ran), the page's rows written (as the order batch's trigger writes them), taken under a lease and their answers recorded, with no logic around them. It costs ${x2(keptCpu / floorCpu)} the signed POST's CPU; issue #53 asks a delivery for 1.3× the signed POST's.`,
      table(
        ["a delivery's workerd CPU, µs", "median of the rounds"],
        [
          ["a delivery (CPU per order with the endpoint − without)", n0(perDelivery)],
          ["of which the floor: sign, serialize the body, fetch, read the answer", n0(floor.cpuUsPerPost)],
          ...(kept
            ? [
                [
                  "of which keeping it in D1 at the least (the kept floor less the signed POST's): its row written, taken and recorded, a statement each per page",
                  n0(keptCpu - floorCpu),
                ],
                [
                  "above both: the delivery row as the trigger writes it (with the change's feed position), the wake-ups (a queue message per order batch, the due-endpoints read, the object's RPC, alarm and storage calls), the SELECT joining delivery, change and order rows (and the endpoint's row once a take), the body built from the row, the attempt's timer and AbortController",
                  n0(perDelivery - keptCpu),
                ],
              ]
            : [
                [
                  "above the floor: the delivery row (the trigger's insert in the order batch), the wake-ups (a queue message per order batch, the due-endpoints read, the object's RPC, alarm and storage calls), taking each page from D1 (an UPDATE under a lease and a SELECT joining delivery, change and order rows, each row serialized through D1's binding, and the endpoint's row once a take), the body built from the row, the attempt's timer and AbortController, and the outcomes' UPDATE (one per page)",
                  n0(perDelivery - floorCpu),
                ],
              ]),
        ],
      ),
    ),
    ...handOffProfile(r),
    ...cutSection(r.figures.order_pipeline_webhooks_cut, n0, x2),
    ...blocks(
      "### Issue #42's targets for this point (medians of the rounds)",
      table(
        ["target", "figure", "goal", "met"],
        handOffTargets(h).map((t) => [t.what, t.opts.shown ?? x2(t.value), t.target, yesNo(t.met(t.value))]),
      ),
      `What stops them is the floor. The CPU target leaves a delivery at most the plain pipeline's CPU per order (${n0(plainCpu)} µs); a bare signed POST in workerd costs ${n0(floor.cpuUsPerPost)} µs, so even a sender that did nothing but POST would make ${x2(floorBound)} the CPU per order. And with six in flight, the floor itself POSTs ${n0(floor.perSec)}/s with workerd doing nothing else, while the sale persists ${n0(h.hooks.ordersPerSec)} orders/s with the endpoint on (${n0(h.plain.ordersPerSec)} without): one endpoint's sender cannot deliver 0.9× that, and a backlog that grows through the sale is a lag of seconds. ${(wide.perSec ?? 0) > (floor.perSec ?? 0) * 1.1 ? `More in flight raises the floor to ${n0(wide.perSec)}/s with ${n0(wide.connections)}: an invocation's six connections are part of the limit.` : `More in flight did not raise it here (${n0(wide.perSec)}/s with ${n0(wide.connections)}), and the floor's workerd was busy ${n0(busy(floor))}% of the time with six (${n0(busy(wide))}% with ${n0(wide.connections)}): each POST's round trip through the machine (the receiver's process, the other processes' load) bounds it, not the connection count or workerd's CPU.`}${(h.plain.ordersPerSec ?? 0) < (h.hooks.ordersPerSec ?? 0) ? " The sale without the endpoint ran slower than the one with it: the machine's other load moved between the two, so compare figures within one sale, and the floor with the delivery beside it." : ""}`,
    ),
  ];
}

/** Where a delivery's time goes (`--profile`), when the run has it. */
function handOffProfile(r: Results): string[] {
  const p = r.figures.order_pipeline_webhooks_profile;
  if (!p) return [];
  const share = (keep: (l: ProfileLine) => boolean) => p.functions.filter(keep).reduce((n, l) => n + l.selfPct, 0);
  const pct = (names: string[]) => `${share((l) => names.includes(l.fn)).toFixed(1)}%`;
  const d1 = share((l) => l.where.startsWith("cloudflare-internal:d1-api")).toFixed(1);
  return blocks(
    "### Where the time goes (`--profile`)",
    `One sale with the endpoint on, on a Worker started with the inspector (which costs CPU of its own: ${n0(p.cpuUsPerOrderDelivered)} µs per order delivered there): \`perf\` over the whole workerd (the stock object, the order consumer, D1's SQLite and the sender share it), by what the code is, and the isolate's JavaScript by function, self time (idle included).`,
    table(
      ["workerd, by group", "share of samples"],
      p.profile.groups.map(([g, pct]) => [g, `${pct.toFixed(1)}%`]),
    ),
    `In words: of the isolate's samples, ${pct(["post", "attempt", "fetch", "text"])} went to the POST itself (\`post\`, \`fetch\`, reading the answer), ${pct(["sign", "keyOf2", "base643", "btoa", "encode"])} to signing it, ${pct(["setTimeout", "clearTimeout", "AbortController"])} to each attempt's timeout (a timer set and cleared and an AbortController per attempt), ${pct(["orderObjectOf", "bodyOf"])} to building the body from the row (dates to ISO strings, JSON), and ${d1}% to D1's binding (\`cloudflare-internal:d1-api\`, requests and results serialized, the order consumer's included); the stock object's SQL (\`exec\`) and the order pipeline take most of the rest. Over the whole process, the kernel (the sockets' syscalls and scheduling), kj's event loop and HTTP, V8's runtime and tcmalloc outweigh SQLite several times: a delivery's cost is mostly the POST's, which the floor above measures on its own.`,
    table(
      ["isolate's JavaScript, self time", "share", "where"],
      p.functions.slice(0, 24).map((l) => [`\`${l.fn}\``, `${l.selfPct.toFixed(1)}%`, l.where]),
    ),
  );
}

/**
 * The hand-off's targets, from the medians of its rounds (the CPU ratio: of each round's pair):
 * issue #42's for one event a message, issue #53's for batches of up to 100 (API.md v1.4 "Webhook
 * batches").
 */
function handOffTargets(h: HandOffFigures | undefined, batched = false): Goal[] {
  if (!h) return [];
  const [of, pace, cpu] = batched ? ["webhook batches of up to 100", 0.95, 1.3] : ["order hand-off", 0.9, 2];
  const delivered = batched ? "events delivered/s" : "deliveries/s";
  return [
    goal(
      `${of}: ${delivered} ÷ orders persisted/s over the sale${batched ? "" : " (one endpoint, every type)"}`,
      (h.hooks.deliveriesPerSec ?? Number.NaN) / (h.hooks.ordersPerSec ?? Number.NaN),
      `≥ ${pace}×`,
    ),
    goal(`${of}: delivery lag p99, receipt − the change's time (ms)`, h.hooks.deliveryLagP99Ms, "≤ 2,000", n0),
    goal(
      `${of}: workerd CPU per order with the endpoint ÷ without (each round's pair, median of the rounds)`,
      pairedMedian(h, onOverOff),
      `≤ ${cpu}×`,
    ),
  ];
}

/** "Orders, Flashgate beside the classic pipeline" (absent from runs without the classic pipeline point). */
function classicPipelineSection(r: Results): string[] {
  const c = r.figures.classic_pipeline;
  if (!c) return [];
  const head = "## Orders: Flashgate beside the classic pipeline";
  if (c.skipped !== undefined) return blocks(head, `The classic pipeline point did not run: ${c.skipped}.`);
  const f = r.figures.order_pipeline;
  const split = Object.entries(c.cpuUsPerOrderBy)
    .map(([name, us]) => `${name} ${n0(us)}`)
    .join(", ");
  const met = f?.cpuUsPerOrder !== undefined && f.cpuUsPerOrder <= c.cpuUsPerOrder;
  return blocks(
    head,
    `The seeds' design end to end on this machine's own services (bench/scenarios/classic-pipeline.ts): a producer process holds each unit with lua/reserve.lua in redis-server (the bench's own, as for the classic design above: no persistence), the same script also appending the order message to the shard's outbox stream (hold and message record are one atomic script: the seeds' "local transaction" and the transactionId record their broker checks back), then publishes it to RabbitMQ ${c.versions.rabbitmq} on a confirm channel (persistent, durable queue) and deletes the outbox entry on the broker's confirm; a check-back publishes again any entry older than 5 s (the seeds' RocketMQ half message and \`checkLocalTransaction\`). A consumer process writes the orders into MariaDB ${c.versions.mariadb} (InnoDB, a log flush per commit) in multi-row INSERTs, idempotent by the order id's primary key (ON DUPLICATE KEY), and acks each batch after its commit. The sale is Flashgate's order pipeline's: ${n0(c.reservations)} holds paced at 10,000/s at most, in groups of 64. The lag is each row's INSERT time (MariaDB's clock, a column default) less the hold's time carried in the message, read after the run. CPU: utime + stime of every process of each pipeline (/proc), from the sale's start to the last row, ÷ rows; Flashgate's is its one workerd (stock object, queue, consumer, D1).`,
    table(
      ["", "Flashgate (order_pipeline)", "classic pipeline"],
      [
        ["orders persisted/s (first hold → last row)", n0(f?.ordersPerSec), n0(c.ordersPerSec)],
        ["the consumer's rate once it started, /s", n0(f?.persistPerSec), n0(c.persistPerSec)],
        ["CPU µs per persisted order, all processes", n0(f?.cpuUsPerOrder), n0(c.cpuUsPerOrder)],
        ["of which, by process", "workerd (all of it)", split],
        ["lag hold → row p50 ms", n0(f?.lagP50Ms), n0(c.lagP50Ms)],
        ["lag hold → row p99 ms", n0(f?.lagP99Ms), n0(c.lagP99Ms)],
        ["rows", n0(f?.rows), n0(c.rows)],
      ],
    ),
    table(
      ["goal", "Flashgate", "classic", "met"],
      [
        [
          "Flashgate's CPU per persisted order ≤ the classic pipeline's (µs)",
          n0(f?.cpuUsPerOrder),
          n0(c.cpuUsPerOrder),
          yesNo(met),
        ],
      ],
    ),
    `Checked after the run: ${n0(c.rows)} rows in MariaDB for ${n0(c.held)} holds in Redis, no order twice; ${n0(c.producer.confirmed)} confirms, ${n0(c.producer.nacked)} nacks, ${n0(c.producer.republished)} messages published again by the check-back, ${n0(c.consumer.duplicates)} repeats absorbed by the unique key; the consumer's mean batch ${n1(c.consumer.meanBatch)} rows. The services are the machine's, running before the bench${c.started.length > 0 ? ` (the bench started ${c.started.join(", ")})` : ""}; idle, just before the sale, they used ${
      Object.entries(c.idleCpuUsPerSec)
        .filter(([, us]) => us > 0)
        .map(([name, us]) => `${name} ${n0(us / 1000)} ms/s`)
        .join(", ") || "no CPU"
    } (included above).`,
  );
}

/** "Fair opening": the decision of a draw, one shard and sharded (absent from runs without them). */
function drawSection(r: Results): string[] {
  const one = r.figures.draw_decide;
  const sharded = r.figures.draw_decide_sharded;
  if (!one && !sharded) return [];
  const row = (
    what: string,
    d: Pick<NonNullable<typeof one>, "units" | "entrants" | "decideMs" | "decideCpuMs">,
    perEntrant: string,
  ) => [`${what} (${n0(d.units)} units)`, n0(d.entrants), n0(d.decideMs), n0(d.decideCpuMs), perEntrant];
  return blocks(
    "## Fair opening",
    "The decision of an opening draw at the window's close (bench/scenarios/draw.ts): entries go in first, inside workerd, then the decision is timed from the driver, with workerd's CPU around it. Transactions are the engine's on every shard over that time (the harness's storage counts them).",
    table(
      ["draw", "entrants", "decision ms", "workerd CPU ms", "transactions per entrant"],
      [
        ...(one ? [row("1 shard, the alarm alone", one, "–")] : []),
        ...(sharded
          ? [
              row(
                `${sharded.shards} shards, a request waiting per entrant, until all answered`,
                sharded,
                sharded.transactionsPerEntrant.toFixed(2),
              ),
            ]
          : []),
      ],
    ),
    sharded?.measuredIn ? `The sharded row comes from another run: ${sharded.measuredIn}.` : undefined,
  );
}

/** "Bot challenges": what a proof of work costs the Worker and an honest shopper's browser. */
function challengeSection(r: Results): string[] {
  const check = r.figures.pow_check;
  const browser = r.figures.pow_browser;
  if (!check && !browser) return [];
  const rows = (["bits16", "bits20"] as const).flatMap((k) => {
    const b = browser?.[k];
    return b ? [[k.slice(4), String(b.solves), n0(b.medianMs), n0(b.maxMs), b.usPerHash.toFixed(2)]] : [];
  });
  return blocks(
    "## Bot challenges",
    check &&
      `Checking a proof of work (bench/scenarios/pow-check.ts): one solved challenge checked ${n0(check.checks)} times inside workerd (one HMAC verify and one SHA-256 digest, WebCrypto), workerd's CPU from /proc less the same loop that only splits the header: ${check.rounds.map((x) => (x.checkUs - x.floorUs).toFixed(2)).join(", ")} µs a check over ${check.rounds.length} rounds, median ${check.medianUsPerCheck.toFixed(2)} µs. The edge tables' \`tokens_pow\` row is a second workerd with POW_BITS 4 beside the \`tokens\` row's; their difference mixes two processes' drift and is not the check's cost.`,
    browser &&
      "Solving in headless Chromium on this machine with the storefront's solver (public/static/pow-worker.js: SHA-256 written out, in a Web Worker), each difficulty solved five times:",
    browser && table(["bits", "solves", "median ms", "max ms", "µs a hash"], rows),
    browser &&
      `WebCrypto's \`crypto.subtle.digest\` on the same page: ${browser.webcryptoUsPerHash.toFixed(2)} µs a hash (a promise per hash), which is why the solver hashes by hand.`,
  );
}

/** "Capacity on Cloudflare": the simulation (bench/lib/capacity-sim.ts), the queue and D1, and the limits they rest on. */
function capacitySection(c: Capacity | undefined): string[] {
  if (!c) return [];
  return [
    ...blocks("## Capacity on Cloudflare (model)"),
    ...(c.simulation
      ? simulationSection(c.simulation)
      : blocks(
          "The results of this run predate the simulation (`npm run capacity -- --write` adds it from the file's figures).",
        )),
    ...blocks(
      `One queue: ${n0(c.queue.messagesPerSec)} messages/s × ${c.queue.eventsPerMessage} events per message = ${n0(c.queue.eventsPerSec)} events/s (with one event per message, as before: ${n0(c.queue.eventsPerSecOneEventPerMessage)}). ${n0(c.target)} holds/s need ${n0(c.queue.messagesForTarget)} messages/s: ${c.queue.oneQueueCarriesTarget ? "one queue carries them" : "more than one queue"}. A delivery is at most ${c.inputs.consumer.maxBatchSize} messages = ${n0(c.queue.eventsPerDelivery)} events${c.inputs.consumer.maxConcurrency ? `, at most ${c.inputs.consumer.maxConcurrency} deliveries at once` : ""}.`,
      c.d1 &&
        `One D1 database is single-threaded: at the pipeline's CPU per order it takes about ${n0(c.d1.ordersPerSec)} orders/s (an estimate: local SQLite without D1's network and replication, but with the broker's and consumer's CPU counted in; ${c.d1.statementsPerDelivery} statements for a full delivery, each within 100 bound parameters). It is the pipeline's ceiling, not the sale's: the queue holds the backlog, so one second at ${n0(c.target)} holds/s takes about ${c.d1.secondsToPersistOneSecondAtTarget.toFixed(1)} s to persist, and the order lag grows by that while the burst lasts.`,
      "Documented limits the model rests on:",
      table(
        ["limit", "value", "source"],
        Object.values(c.limits).map((l) => [l.what, `${n0(l.value)} ${l.unit}`, l.source]),
      ),
    ),
  ];
}

/** Issue 44 on this machine: the hot SKU behind copies of the Worker, GATHER off and on (bench/scenarios/copies.ts). */
function copiesSection(r: Results): string[] {
  const figures = r.figures as Record<string, unknown>;
  const runs = Object.entries(r.points)
    .filter(([key]) => /^hot_sku_copies\d+(_gather)?$/.test(key))
    .map(([key, p]) => ({ p, f: figures[`${key}_batch`] as CopiesFigure | undefined }))
    .filter((x): x is { p: Point; f: CopiesFigure } => x.f !== undefined);
  if (runs.length === 0) return [];
  type Gather = { cpuUsPerReservation?: number } | undefined;
  const gather = figures.gather_core as Gather;
  const gather1 = figures.gather_core_batch1 as Gather;
  return [
    ...blocks(
      "## Many isolates on this machine (issue 44)",
      `The hot SKU (one shard) behind ${runs[0]?.f.copies} copies of the Worker in one workerd, each its own isolate with its own group commit, wrk's requests handed to them in turn by a front on its own socket, the stock object alone (its queue a sink), \`npm run bench:copies\`. CPU per reservation is the whole workerd's: front, copies, gatherer and object. The object's calls/s are the holds/s ÷ its mean batch (its own count of reserve calls).`,
      table(
        "GATHER | holds/s | time-to-hold p50 ms | p99 ms | CPU µs per reservation | object calls/s | mean batch",
        runs.map(({ p, f }) => [f.gather ? "on" : "off", ...pointCells(p), n0(f.callsPerSec), n1(f.meanBatch)]),
      ),
    ),
    ...copiesRounds(figures.copies_rounds as CopiesRounds | undefined),
    ...blocks(
      gather?.cpuUsPerReservation !== undefined &&
        gather1?.cpuUsPerReservation !== undefined &&
        `The gatherer's own cost (\`npm run bench:gather\`, as the engine core is measured: the same batches straight to the object and through the gatherer, the difference in workerd CPU): ${n1(gather1.cpuUsPerReservation)} µs per reservation in calls of one, ${n1(gather.cpuUsPerReservation)} µs in calls of 64.`,
    ),
  ];
}

/** The rounds of `npm run bench:copies` (off and on alternating first), their medians, and one copy's latency. */
function copiesRounds(c: CopiesRounds | undefined): string[] {
  if (!c) return [];
  const row = (label: string, gather: string, s: CopiesRounds["median"]["off"], ratio: string) => [
    label,
    gather,
    n0(s.holdsPerSec),
    n1(s.p50Ms),
    n1(s.p99Ms),
    n0(s.cpuUsPerReservation),
    n0(s.callsPerSec),
    n1(s.meanBatch),
    ratio,
  ];
  const head = ["GATHER", "holds/s", "p50 ms", "p99 ms", "CPU µs/res.", "object calls/s", "mean batch"];
  const m = c.median;
  return blocks(
    `${c.rounds.length} rounds on the same two workerds (a fresh SKU each point), GATHER off first in odd rounds and on first in even ones. The goal (at least 4× fewer object calls for the same holds, holds/s no lower) is judged on the medians: "fewer calls" is the ratio of the object's calls per hold (1 ÷ its mean batch), which the share of this shared machine a point got does not change as it changes calls/s. The table above shows the round closest to the median ratio.`,
    table(
      ["round", ...head, "fewer calls"],
      [
        ...c.rounds.flatMap((r, i) => [
          row(`${i + 1} (${r.first} first)`, "off", r.off, ""),
          row(
            "",
            "on",
            r.on,
            `${n1(r.fewerCalls)}×, holds/s ${r.holdsRatio.toFixed(2)}×${r.load === undefined ? "" : ` (load average ${n1(r.load)})`}`,
          ),
        ]),
        row("median", "off", m.off, ""),
        row("", "on", m.on, `${n1(m.fewerCalls)}×, holds/s ${m.holdsRatio.toFixed(2)}×`),
      ],
    ),
    `What bounds the batch here: with GATHER on, a gatherer batch is what reached the gatherer while its previous call to the object was out (it sends at once when idle and never lingers, as group-commit.ts does). wrk's ${c.connections ?? 50} connections over ${c.copies} copies leave about ${n1((c.connections ?? 50) / c.copies)} reservations in flight per copy, each copy's own group commit sends them as one call, so the gatherer has at most ${c.copies} calls and ${c.connections ?? 50} reservations to join, and the mean batch (${n1(m.on.meanBatch)} at the median) is this closed loop's arrivals during one object call. It grows when that call is slower or more reservations are in flight, not by waiting: the rounds' load averages show how busy the shared machine was. A real spike has no closed loop: the model above gives the tier's batches at 100,000/s.`,
    "The latency the tier adds on one isolate: one copy of the Worker, GATHER off and on, unloaded (one connection: the extra hop alone) and at the points' load.",
    table(
      ["one copy", ...head, ""],
      Object.entries(c.single).flatMap(([load, s]) => [
        row(`${load.slice(1)} connection${load === "c1" ? "" : "s"}`, "off", s.off, ""),
        row("", "on", s.on, `p50 ${signed(s.on.p50Ms - s.off.p50Ms)} ms, p99 ${signed(s.on.p99Ms - s.off.p99Ms)} ms`),
      ]),
    ),
  );
}

/** A difference with its sign: +3.3, -67.5. */
const signed = (v: number) => `${v >= 0 ? "+" : "−"}${n1(Math.abs(v))}`;

/** ∞ for a hold that never came (more than 1% answered 503) or a figure that is not a number. */
const ms0 = (v: number | null | undefined) => (v === null || v === undefined ? "∞" : n0(v));

/** Issue 44: the shards the target needs as the isolates grow, without and with the gathering tier. */
function tierSection(sim: CapacitySimulation): string[] {
  const t = sim.tier;
  if (!t || !sim.isolateRows) return [];
  const shards = (n: number | null) => (n === null ? "none up to 64" : String(n));
  return blocks(
    `**However many isolates the spike lands on.** Each isolate coalesces only its own requests, so the more isolates share a spike, the smaller each batch, and every object meets its cost per call and its requests/s with batches of one. The gathering tier (\`GATHER\`, by default on for the SKUs of more than one shard; src/edge/README.md) puts ${t.perShard} gatherer objects per shard between the isolates and the stock object: a colo's isolates send to the one its name hashes to, and each gatherer coalesces what all its isolates sent into one call to the object (one in flight, up to ${sim.maxBatch}), as group-commit.ts does in an isolate. Simulated as above, plus: each isolate-to-gatherer round trip drawn like the colo-to-object one (${t.rtt.source}); each gatherer serial, ${n0(t.inUs)} + ${n1(t.inPerReservationUs)}·n µs per call it receives and ${n0(t.outUs)} µs per batch it sends (${t.from}), and no more than ${n0(t.maxCallsPerSec)} calls/s.`,
    t.notes.length > 0 && t.notes.map((n) => `Note: ${n}.`).join("\n"),
    table(
      `isolates | colos | shards for ${n0(sim.target.perSec)}/s, p99 < ${n0(sim.target.p99Ms)} ms | with the tier | with it there: hold p50 / p99 ms | object batch mean | calls to a gatherer: mean | busiest gatherer`,
      sim.isolateRows.map((r) => [
        n0(r.isolates),
        n0(r.colos),
        shards(r.without),
        shards(r.with),
        `${ms0(r.withTier.holdP50Ms)} / ${ms0(r.withTier.holdP99Ms)}`,
        n1(r.withTier.batch.mean),
        n1(r.withTier.tier?.meanIn),
        `${n0(r.withTier.tier?.busyMaxPct)}%`,
      ]),
    ),
    holdsAt(sim.isolateRows),
  );
}

/** Which isolate counts the design holds the target at, within the issue's 16 shards, without and with the tier. */
function holdsAt(rows: NonNullable<CapacitySimulation["isolateRows"]>): string {
  const within = (shards: number | null) => shards !== null && shards <= 16;
  const list = (pick: (r: (typeof rows)[number]) => boolean) => {
    const counts = [...new Set(rows.filter(pick).map((r) => n0(r.isolates)))];
    return counts.length > 0 ? counts.join(", ") : "none";
  };
  const all = [...new Set(rows.map((r) => n0(r.isolates)))].join(", ");
  return `**Where the design holds** (the target with at most 16 shards), of ${all} isolates simulated: without the tier at ${list((r) => within(r.without))}; with it at ${list((r) => within(r.with))}.`;
}

/** The simulated spike: its assumptions, the table for 1–64 shards, the shards the target needs, the check. */
function simulationSection(sim: CapacitySimulation): string[] {
  const i = sim.inputs;
  const v = sim.validation;
  const fromFigures = i.from
    .map((f) => `${n1(f.cpuUsPerReservation)} µs per reservation in batches of ${f.batch} (${f.figure})`)
    .join(" and ");
  const shards = (n: number | null) => (n === null ? "none up to 256" : String(n));
  const asAbove = {
    label: "as above",
    isolates: sim.spread.isolates,
    capped: true,
    rttMedianMs: sim.rtt.medianMs,
    rttP99Ms: sim.rtt.p99Ms,
    shards: sim.shardsForTarget,
  };
  return [
    ...blocks(
      `A discrete-event simulation (bench/lib/capacity-sim.ts, seed ${sim.seed}; \`npm run capacity\` prints it from bench/results.json): ${n0(sim.target.perSec)} shoppers/s, Poisson, for ${sim.spread.seconds} s, each at one of ${n0(sim.spread.isolates)} isolates over ${sim.spread.colos} colos, picked at random, and to its home shard (fnv1a of the user id modulo the shards, as the edge picks it). Each isolate coalesces per shard as src/edge/group-commit.ts does: one call in flight per shard, and when it answers the next batch takes whatever queued, up to ${sim.maxBatch}; a reservation unanswered after ${sim.maxWaitMs / 1000} s answers 503. Each colo's round trip to the objects is drawn from a lognormal of median ${sim.rtt.medianMs} ms and p99 ${sim.rtt.p99Ms} ms (times a per-call jitter of σ ${sim.rtt.jitterSigma}): ${sim.rtt.source}. Each object serves its calls one at a time, in arrival order, for a + b·batch = ${n0(i.aUs)} + ${n1(i.bUs)}·batch µs, from ${fromFigures} (a call of n costs n × its CPU per reservation), and never more than ${n0(i.maxCallsPerSec)} calls/s (the documented requests/s per object, taken as a floor of ${n1(1000 / i.maxCallsPerSec)} ms per call). The edge's ${n0(i.edgeUs)} µs per reservation (below) is latency only: an isolate's own thread is taken as never the bottleneck.`,
      i.notes.length > 0 && i.notes.map((n) => `Note: ${n}.`).join("\n"),
      "Sustained is holds answered per second in the spike's second half; time-to-hold runs from the request reaching the edge to its hold there (503s count as never). The busiest object's share of that half spent serving calls is shown: one call in flight per isolate keeps an object busy whenever enough isolates have something queued, and batches grow until it keeps up.",
      table(
        "shards | sustained/s | hold p50 ms | hold p99 ms | 503s | calls | batch mean | p50 | p99 | max | busiest object",
        sim.rows.map((r) => [
          String(r.shards),
          n0(r.sustainedPerSec),
          ms0(r.holdP50Ms),
          ms0(r.holdP99Ms),
          n0(r.busy),
          n0(r.batch.calls),
          n1(r.batch.mean),
          String(r.batch.p50),
          String(r.batch.p99),
          String(r.batch.max),
          `${n0(r.objectBusyMaxPct)}%`,
        ]),
      ),
      "Calls by batch size:",
      table(
        ["shards", ...(sim.rows[0]?.batch.histogram.map((h) => h.bucket) ?? [])],
        sim.rows.map((r) => [String(r.shards), ...r.batch.histogram.map((h) => n0(h.calls))]),
      ),
      `**Shards for ${n0(sim.target.perSec)} reservations/s on one SKU with time-to-hold p99 < ${n0(sim.target.p99Ms)} ms** (no 503s, and ≥ 98% of the offered rate sustained): **${sim.shardsForTarget ?? "none up to 256"}**. How that moves with the assumptions:`,
      table(
        ["variant", "isolates", "calls/s cap", "RTT median / p99 ms", "shards for the target"],
        [asAbove, ...sim.sensitivity].map((s) => [
          s.label,
          n0(s.isolates),
          s.capped ? n0(i.maxCallsPerSec) : "none",
          `${s.rttMedianMs} / ${s.rttP99Ms}`,
          shards(s.shards),
        ]),
      ),
    ),
    ...tierSection(sim),
    ...blocks(
      v
        ? `Checked once against this machine, in a closed-loop mode with local parameters: one isolate, RTT 0, ${v.connections} connections each sending its next reservation when the last one answers (as wrk does), and the Worker and the object sharing workerd's one thread in FIFO order (locally they run in one process). The edge's cost per reservation is the \`${v.point}\` point's ${n0(v.measuredCpuUsPerRequest)} µs of workerd CPU per request less the object's share at the batch the loop runs with (a ÷ mean batch + b), solved together: ${n0(i.edgeUs)} µs. Predicted ${n0(v.predicted.perSec)} reservations/s (time-to-hold p50 ${n1(v.predicted.holdP50Ms)} ms, p99 ${n1(v.predicted.holdP99Ms)} ms; batch mean ${n1(v.predicted.batch.mean)}, p50 ${v.predicted.batch.p50}, p99 ${v.predicted.batch.p99}), measured ${n0(v.measuredPerSec)}/s (p50 ${n1(v.measuredP50Ms)} ms, p99 ${n1(v.measuredP99Ms)} ms): **ratio ${v.ratio.toFixed(2)}, ${v.within25Pct ? "within" : "not within"} 25%**. With the thread the only server, the loop predicts 1e6 ÷ the CPU per request; what it adds is the batch the loop settles at, and the measured rate falls short of it by the share of the thread workerd did not get on this shared 2-core machine.`
        : "No hot-SKU point in this run: the simulation is not checked against this machine.",
    ),
  ];
}

export function writeReport(results: Results): void {
  writeFileSync(join(ROOT, "docs/PERFORMANCE.md"), performanceDoc(results));
}

if (process.argv[1] && fileURLToPath(import.meta.url) === process.argv[1]) {
  writeReport(JSON.parse(readFileSync(join(ROOT, "bench/results.json"), "utf8")) as Results);
  console.log("wrote docs/PERFORMANCE.md from bench/results.json");
}
