import type { CpuProfile } from "./profile";

/**
 * Where a hot-SKU reservation's time goes, part by part (issue #55): each sample of the Worker
 * isolate's CPU profile is charged to the part whose modules hold the function it was in. A native
 * call (SQL, WebCrypto, a Response) and the runtime's own modules (`node-internal:`,
 * `cloudflare-internal:`) are charged to the nearest bundle function that called them, and so is
 * code every side calls (durable-objects/shared/, the hash and fetch libraries under them); the
 * bundle names each module in a `// <path>` line where its code starts. A sample with no bundle
 * function on its stack (the runtime resuming its own code after an await) is the runtime's, as are
 * the runtime outside JavaScript and garbage collection; idle samples are no part.
 */

/** The parts, each with the modules whose time is its (the first that matches wins). */
export const PARTS: readonly (readonly [string, RegExp])[] = [
  ["edge: the framework (Hono: routing, context, response)", /^node_modules\/hono\//],
  ["edge: the shopper's JWT (jose)", /^node_modules\/jose\/|^src\/http\/(auth|jwks|jwt-refusal)\.ts$/],
  ["edge: the purchase token", /^src\/edge\/(purchase-token|base64url)\.ts$/],
  [
    "edge: the body, read and validated (zod)",
    /^node_modules\/zod\/|^src\/http\/body\.ts$|^src\/routes\/contract-schemas\.ts$/,
  ],
  [
    "edge: group commit and the call to the stock object",
    /^src\/edge\/(group-commit|gatherer|gather-name|reserve)\.ts$|^src\/stock\/|^src\/harness\/harness-gatherer\.ts$/,
  ],
  ["edge: the buyer's salt and receipts (sale log)", /^src\/sale-log\//],
  ["edge: the route, its answer, metrics and request log", /^src\/(routes|http|edge|observability)\/|^src\/app\.ts$/],
  [
    "stock object: the outbox flush to the queue and the log",
    /^durable-objects\/(stock\/outbox-|engine\/outbox\.ts|log\/sale-log-client\.ts)/,
  ],
  [
    "stock object: the decision, its SQL and its commit",
    /^durable-objects\/(engine|stock)\/|^src\/harness\/harness-stock\.ts$|^node_modules\/uuid\//,
  ],
  ["sale log object: entries, hashes, checkpoints", /^durable-objects\/log\/|^src\/harness\/harness-sale-log\.ts$/],
  ["queue consumer: orders into D1", /^src\/(orders|db|handoff)\/|^src\/index\.ts$|^node_modules\/drizzle-orm\//],
  ["Redis mirror", /^durable-objects\/mirror\/|^node_modules\/@upstash\//],
  ["metrics object", /^durable-objects\/metrics\//],
];

/** Modules every side calls: their time is their caller's. */
const CALLED = /^durable-objects\/shared\/|^node_modules\/(@noble|uncrypto)\//;

export const RUNTIME = "the runtime outside JavaScript (HTTP, RPC transport, event loop)";
export const GC = "garbage collection";
/** Shared code reached only after an `await` (no caller on its stack): the sale log's salts and hashes, log lines. */
export const SHARED = "shared code after an await (salts, hashes, log lines)";

export interface Parts {
  /** The isolate's samples, and of them idle. */
  samples: number;
  idleSamples: number;
  /** Busy samples by part, largest first. */
  parts: { part: string; samples: number }[];
}
/** The module of each line of the bundle's source (null before the first module, and in one outside these folders). */
function modulesOf(bundle: string): (string | null)[] {
  const out: (string | null)[] = [];
  let current: string | null = null;
  let found = 0;
  for (const line of bundle.split("\n")) {
    if (/^\/\/ \S+\.\w+$/.test(line)) {
      current = /^\/\/ ((?:src|durable-objects|node_modules)\/\S+)$/.exec(line)?.[1] ?? null;
      found++;
    }
    out.push(current);
  }
  if (found === 0) throw new Error("the bundle names no module (a `// <path>` line): minified?");
  return out;
}

const partOfModule = (module: string) => PARTS.find(([, re]) => re.test(module))?.[0] ?? `other: ${module}`;

/** `profile`'s samples by part; `bundle` is the source of the Worker's bundle (its index.js). */
export function partsOf(profile: CpuProfile, bundle: string): Parts {
  const modules = modulesOf(bundle);
  const byId = new Map(profile.nodes.map((node) => [node.id, node]));
  const parent = new Map<number, number>();
  for (const node of profile.nodes) for (const child of node.children ?? []) parent.set(child, node.id);
  const bundleFile = profile.nodes.find((n) => n.callFrame.url.split("/").pop() === "index.js")?.callFrame.url;
  if (bundleFile === undefined) throw new Error("no sample of the profile is in the bundle (index.js)");
  const partOf = (id: number): string | null => {
    const first = byId.get(id)?.callFrame.functionName;
    if (first === "(idle)") return null;
    if (first === "(program)" || first === "(root)") return RUNTIME;
    if (first === "(garbage collector)") return GC;
    let shared = false;
    for (let at: number | undefined = id; at !== undefined; at = parent.get(at)) {
      const frame = byId.get(at)?.callFrame;
      if (!frame || frame.url !== bundleFile) continue;
      const module = modules[frame.lineNumber];
      if (!module) continue;
      if (CALLED.test(module)) {
        shared = true;
        continue;
      }
      return partOfModule(module);
    }
    return shared ? SHARED : RUNTIME;
  };
  let samples = 0;
  let idleSamples = 0;
  const byPart = new Map<string, number>();
  for (const node of profile.nodes) {
    const hits = node.hitCount ?? 0;
    if (hits === 0) continue;
    samples += hits;
    const part = partOf(node.id);
    if (part === null) idleSamples += hits;
    else byPart.set(part, (byPart.get(part) ?? 0) + hits);
  }
  return {
    samples,
    idleSamples,
    parts: [...byPart].map(([part, n]) => ({ part, samples: n })).sort((a, b) => b.samples - a.samples),
  };
}

/** `figures.hot_sku_parts` in bench/results.json (`npm run bench:perf -- hot_sku --js --save`). */
export interface PartsFigure extends Parts {
  /** workerd's CPU per request in the profiled run (the profiler on, and `perf record` too if `perf`), from /proc. */
  cpuUsPerRequest: number;
  perf: boolean;
  /** How long the load ran while the profiler sampled (warm-up and measured run). */
  loadSeconds: number;
  commit: string;
  date: string;
}

/** A profile's parts as results.json keeps them, with the run they came from. */
export function partsFigure(
  parts: Parts,
  run: { cpuUsPerRequest: number; perf: boolean; loadSeconds: number; commit: string },
): PartsFigure {
  return { ...parts, ...run, date: new Date().toISOString() };
}

/** The sides a part belongs to, by the start of its name, for the summary line. */
const SIDES: readonly (readonly [string, string])[] = [
  ["edge", "edge:"],
  ["stock object", "stock object:"],
  ["sale log object", "sale log object"],
  ["shared code after an await", "shared code"],
  ["queue consumer", "queue consumer"],
  ["Redis mirror", "Redis mirror"],
  ["metrics object", "metrics object"],
  ["runtime outside JavaScript", RUNTIME],
  ["garbage collection", GC],
];

/** docs/PERFORMANCE.md's section: the parts of a hot-SKU reservation, as shares of the isolate's busy samples. */
export function partsSection(f: PartsFigure | undefined): string[] {
  if (!f) return [];
  const busy = f.samples - f.idleSamples;
  const pct = (n: number) => `${((n * 100) / Math.max(1, busy)).toFixed(1)}%`;
  const shown = f.parts.filter((p) => p.samples * 200 >= busy);
  const rest = f.parts.filter((p) => p.samples * 200 < busy).reduce((n, p) => n + p.samples, 0);
  let sided = 0;
  const sides = SIDES.map(([side, prefix]) => {
    const n = f.parts.filter((p) => p.part.startsWith(prefix)).reduce((sum, p) => sum + p.samples, 0);
    sided += n;
    return `${side} ${pct(n)}`;
  });
  sides.push(`the rest ${pct(busy - sided)}`);
  return [
    "## Where a hot-SKU reservation's time goes, by part",
    "",
    `The Worker's isolate under the hot-SKU load (one shard, group commit on, direct), profiled by the inspector over ${f.loadSeconds} s of load (the full \`npm run bench\`, or \`npm run bench:perf -- hot_sku --js --save\`; bench/lib/parts.ts) at \`${f.commit}\`: each sample is charged to the part whose code it was in; a native call (SQL, WebCrypto, a Response), the runtime's own modules and code both sides share (durable-objects/shared/) to the nearest function of the bundle that called them. ${busy.toLocaleString("en-US")} busy samples of ${f.samples.toLocaleString("en-US")} (the rest idle); workerd's CPU per request in that run, the profiler${f.perf ? " and `perf record`" : ""} on, ${Math.round(f.cpuUsPerRequest)} µs. The isolate runs the Worker and its objects (stock, log, metrics) alike; the D1 database and the queue broker are Miniflare's own isolates, not sampled here. "The runtime outside JavaScript" holds workerd's HTTP, RPC transport and event loop, and may hold time spent waiting, so the other parts' shares are, if anything, below their shares of the isolate's CPU. By side: ${sides.join(", ")}.`,
    "",
    "| part | share of the isolate's busy samples |",
    "| --- | --- |",
    ...shown.map((p) => `| ${p.part} | ${pct(p.samples)} |`),
    ...(rest > 0 ? [`| the rest (each under 0.5%) | ${pct(rest)} |`] : []),
    "",
  ];
}
