import type { ObjectFloor } from "./lib/floors";
import type { Point } from "./lib/measure";
import type { PerfPoint } from "./lib/perf-record";

/**
 * Issue 31's targets: each point's CPU µs per request, direct (the Worker's own socket), divided by
 * a floor measured in the same run, the bare Worker's runs bracketing the point as for every edge
 * point. The hot SKU is also set against the sum of the floors of what it does at the batch size it
 * ran with; the stock object's fixed cost per call against the floor object committing one row.
 */

export interface FloorFigures {
  points: Record<string, Point>;
  ceilings?: Record<string, { cpuUsPerRequest: number }> | undefined;
  engine_core?: { cpuUsPerReservation: number; batch: number } | undefined;
  engine_core_batch1?: { cpuUsPerReservation: number; batch: number } | undefined;
  floor_rpc_noop?: ObjectFloor | undefined;
  floor_rpc_row_tmpfs?: ObjectFloor | undefined;
  floor_rpc_row_disk?: ObjectFloor | undefined;
  hot_sku_direct_batch?: { reserveCalls: number; reservations: number; meanBatch: number } | undefined;
  pipelineCpuUsPerOrder?: number | undefined;
}

export interface FloorTarget {
  what: string;
  value: number;
  wanted: string;
  met: boolean;
  /** The figures the ratio is made of, in words. */
  from: string;
}

/** The sum of a hot-SKU reservation's floors, part by part (CPU µs), at the batch it ran with. */
export interface HotSum {
  parts: [string, number][];
  total: number;
  meanBatch: number;
}

const us = (v: number | undefined) => (v !== undefined && Number.isFinite(v) ? `${Math.round(v)} µs` : "–");

export function hotSum(f: FloorFigures): HotSum | undefined {
  const body = f.points.body_floor_direct?.cpuUsPerRequest;
  const checks = f.points.sold_out_floor_direct?.cpuUsPerRequest;
  const row = f.floor_rpc_row_disk?.cpuUsPerCall;
  const rowTmpfs = f.floor_rpc_row_tmpfs?.cpuUsPerCall;
  const engine = f.engine_core;
  const batch = f.hot_sku_direct_batch?.meanBatch;
  const pipeline = f.pipelineCpuUsPerOrder;
  if ([body, checks, row, rowTmpfs, engine, batch, pipeline].some((v) => v === undefined)) return undefined;
  const b = batch as number;
  const parts: [string, number][] = [
    ["body-reading floor", body as number],
    [
      "edge checks (the sold-out floor's JWT, rate limit and token beyond reading the body)",
      (checks as number) - (body as number),
    ],
    [`one-row RPC floor on disk ÷ mean batch ${b.toFixed(1)}`, (row as number) / b],
    [
      `engine work (engine core per reservation at batches of ${engine?.batch}, less its one-row commit share)`,
      (engine?.cpuUsPerReservation as number) - (rowTmpfs as number) / (engine?.batch as number),
    ],
    ["the order pipeline per order (broker, consumer, D1)", pipeline as number],
  ];
  return { parts, total: parts.reduce((sum, [, v]) => sum + v, 0), meanBatch: b };
}

export function floorTargets(f: FloorFigures): FloorTarget[] {
  const p = f.points;
  const rows: FloorTarget[] = [];
  const bare = (key: string) => f.ceilings?.[key]?.cpuUsPerRequest;
  /** The target `num ÷ den ≤ limit` (CPU µs each), and the figures it is made of in words. */
  const over = (what: string, num?: number, den?: number, limit = 1, from = `${us(num)} ÷ ${us(den)}`) => {
    const value = num !== undefined && den ? num / den : Number.NaN;
    rows.push({ what, value, wanted: `≤ ${limit}×`, met: Number.isFinite(value) && value <= limit, from });
  };
  const vsBare = (what: string, key: string, limit: number) => {
    const [point, ceiling] = [p[key]?.cpuUsPerRequest, bare(key)];
    over(what, point, ceiling, limit, `${us(point)} ÷ bare ${us(ceiling)}`);
  };
  vsBare("GET /healthz ÷ bare Worker", "healthz_direct", 1.15);
  vsBare("public SKU view ÷ bare Worker", "sku_view_direct", 1.3);
  vsBare("sold-out storm ÷ bare Worker", "sold_out_direct", 1.5);
  over(
    "sold-out storm ÷ body-reading floor",
    p.sold_out_direct?.cpuUsPerRequest,
    p.body_floor_direct?.cpuUsPerRequest,
    1.1,
  );
  vsBare("hot-SKU reservation (1 shard, group commit on) ÷ bare Worker", "hot_sku_direct", 6);
  const [hot, sum] = [p.hot_sku_direct?.cpuUsPerRequest, hotSum(f)];
  const batch = sum?.meanBatch.toFixed(1) ?? "–";
  over(
    "hot-SKU reservation ÷ the sum of its floors at its mean batch",
    hot,
    sum?.total,
    1.25,
    `${us(hot)} ÷ ${us(sum?.total)} (mean batch ${batch})`,
  );
  over(
    "engine core, batches of 1 ÷ the one-row RPC floor (object alone, tmpfs)",
    f.engine_core_batch1?.cpuUsPerReservation,
    f.floor_rpc_row_tmpfs?.cpuUsPerCall,
    1.5,
  );
  return rows;
}

const x2 = (v: number) => (Number.isFinite(v) ? `${v.toFixed(2)}×` : "–");

/** The section of docs/PERFORMANCE.md (markdown lines). */
export function floorSection(f: FloorFigures): string[] {
  const rows = floorTargets(f);
  const sum = hotSum(f);
  const objectRows = (
    [
      ["RPC doing nothing (tmpfs)", f.floor_rpc_noop],
      ["RPC committing one row in `transactionSync`, state on tmpfs", f.floor_rpc_row_tmpfs],
      ["the same, state on disk (an fsync per commit)", f.floor_rpc_row_disk],
    ] as const
  ).map(
    ([what, fig]) =>
      `| ${what} | ${fig ? Math.round(fig.perSec).toLocaleString("en-US") : "–"} | ${fig ? us(fig.cpuUsPerCall) : "–"} |`,
  );
  return [
    "## Targets against the floors (direct)",
    "",
    "CPU µs per request of each point reached directly, divided by a floor measured in the same run: the bare Worker's runs just before and after the point (as above), the body floor (bench/lib/floors.ts: a Worker that reads the reservation's JSON body and answers), or a floor object. Floors are what the runtime charges for the work itself; a ratio says what Flashgate's code adds.",
    "",
    "| target | this run | wanted | met | from |",
    "| --- | --- | --- | --- | --- |",
    ...rows.map((t) => `| ${t.what} | ${x2(t.value)} | ${t.wanted} | ${t.met ? "yes" : "**no**"} | ${t.from} |`),
    "",
    "The floor objects (bench/lib/floors.ts), each in a workerd of its own, called from their Worker one call in flight, as the bench route calls the stock object (CPU of that workerd per call: caller and object):",
    "",
    "| floor object | calls/s | CPU per call |",
    "| --- | --- | --- |",
    ...objectRows,
    "",
    ...(sum
      ? [
          `A hot-SKU reservation's floors at the mean group-commit batch it ran with (${sum.meanBatch.toFixed(1)} reservations per reserve RPC, from the stock object's own count):`,
          "",
          "| part | CPU µs |",
          "| --- | --- |",
          ...sum.parts.map(([what, v]) => `| ${what} | ${Math.round(v)} |`),
          `| **sum** | **${Math.round(sum.total)}** |`,
          "",
        ]
      : []),
  ];
}

/**
 * Where workerd's CPU went for each profiled point (bench/lib/perf-record.ts): µs per request (per
 * call for the engine and the floor object) by what the code is, each group's share of perf's samples
 * times the point's CPU per request measured in that same profiled run.
 */
export function perfSection(perf: Record<string, PerfPoint> | undefined): string[] {
  if (!perf || Object.keys(perf).length === 0) return [];
  const points = Object.values(perf);
  const groups = [...new Set(points.flatMap((p) => p.profile.groups.map(([g]) => g)))];
  const share = (p: PerfPoint, g: string) => p.profile.groups.find(([name]) => name === g)?.[1] ?? 0;
  const total = (g: string) => points.reduce((sum, p) => sum + (share(p, g) * p.cpuUs) / 100, 0);
  groups.sort((a, b) => total(b) - total(a));
  const cell = (p: PerfPoint, g: string) => {
    const pct = share(p, g);
    return pct === 0 ? "–" : `${Math.round((pct * p.cpuUs) / 100)} (${pct.toFixed(0)}%)`;
  };
  return [
    "## Where workerd's CPU goes (perf)",
    "",
    "Each point measured again, directly, while `perf record` sampled its workerd (software clock, 4 kHz; C++ and JavaScript alike, by symbol, grouped by what the code is: bench/lib/perf-record.ts). Cells: µs per request (per call for the last two) and the group's share of the samples. JavaScript runs in V8's interpreter and baseline code, whose handlers are V8 builtins; the time of a binding (SQL, RPC, headers) is in its workerd group.",
    "",
    `| group | ${points.map((p) => `${p.label} (${Math.round(p.cpuUs)} µs)`).join(" | ")} |`,
    `|${[0, ...points].map(() => " --- ").join("|")}|`,
    ...groups.map((g) => `| ${g} | ${points.map((p) => cell(p, g)).join(" | ")} |`),
    "",
  ];
}
