// What `npm run dev` prints: wrangler's own noise filtered out, and one banner that says where
// everything is. (The Worker's warnings and errors, wrangler's warnings, errors and reload notices
// pass; the quiet default leaves out the routine lines of requests, queue batches and cron runs.)
import type { Readable, Writable } from "node:stream";

/**
 * Environment for the wrangler processes `npm run dev` starts: no usage metrics or error reports
 * sent, no update check banner, no fetch of the `Request.cf` placeholder from workers.cloudflare.com
 * (offline each of these prints a stack trace; the Worker reads nothing from `request.cf`).
 * A value the user set in their own environment wins.
 */
export function quietWranglerEnv(env: NodeJS.ProcessEnv = process.env): NodeJS.ProcessEnv {
  return {
    WRANGLER_SEND_METRICS: "false",
    WRANGLER_SEND_ERROR_REPORTS: "false",
    WRANGLER_HIDE_BANNER: "true",
    CLOUDFLARE_CF_FETCH_ENABLED: "false",
    ...env,
  };
}

// biome-ignore lint/suspicious/noControlCharactersInRegex: ANSI colour codes are control characters.
const ANSI = /\u001b\[[0-9;]*m/g;

/** Lines of `wrangler dev` that the banner replaces, or that repeat what .dev.vars already says. */
const DROPPED = [
  /^\s*⛅️ wrangler /,
  /^─+$/,
  /^Using secrets defined in /,
  /^⎔ Starting local server/,
  /^\[wrangler:info\] Ready on /,
  // worker-configuration.d.ts is generated from .dev.vars.example (npm run types), not .dev.vars, so
  // wrangler always finds it "out of date" here; `npm run check` checks the types for real.
  /Your types might be out of date/,
];

/** wrangler's own line per request: `[wrangler:info] GET /admin/skus 200 OK (12ms)`. */
const WRANGLER_REQUEST = /^\[wrangler:info\] [A-Z]+ \S+ (\d{3})\b.*\((\d+)ms\)\s*$/;
/** The Worker's JSON line per request (src/http/observe.ts). */
const WORKER_REQUEST = /^\{"time":"[^"]*","level":"(\w+)","msg":"request",.*"status":(\d{3}),.*"ms":([\d.]+)/;

/**
 * Miniflare's line per queue batch a consumer took, `QUEUE order-events 1/1 (9ms)`: acked/total
 * messages (wrangler prefixes `[wrangler:info] `).
 */
const QUEUE_BATCH = /^(?:\[wrangler:info\] )?QUEUE \S+ (\d+)\/(\d+)\b/;
/** A JSON line of the Worker's log (durable-objects/shared/log.ts): its level and message. */
const WORKER_LINE = /^\{"time":"[^"]*","level":"(\w+)","msg":"([^"]*)"/;

/** A request taking this long or more is shown in the quiet request log (as the Worker logs it). */
export const SLOW_REQUEST_MS = 1_000;

/**
 * Request lines: `quiet` (the default of `npm run dev`) shows only errors (5xx) and slow requests
 * (1 s or more), and none of the routine lines of queue batches and cron runs ({@link isQuietLine});
 * `all` every line, as wrangler and the Worker write them.
 */
export type RequestLog = "quiet" | "all";

/** Whether a line is a request line the quiet log leaves out (a request answered below 500, quickly). */
export function isQuietRequest(plain: string): boolean {
  const wrangler = WRANGLER_REQUEST.exec(plain);
  // wrangler's time includes the Worker's start-up on the first request: its own line says if it was slow.
  if (wrangler) return Number(wrangler[1]) < 500;
  const worker = WORKER_REQUEST.exec(plain);
  if (worker) return Number(worker[2]) < 500 && Number(worker[3]) < SLOW_REQUEST_MS;
  return false;
}

/**
 * Whether the quiet log leaves a line out: a quiet request ({@link isQuietRequest}); a queue batch
 * whose every message was acked (a batch with retries shows); or one of the Worker's routine lines at
 * level `info` or `debug` (each queue batch's "order events applied", each cron run's
 * "reconciliation finished", which the `[dev] cron:` line already says). Warnings, errors and
 * anything that is not a log line pass.
 */
export function isQuietLine(plain: string): boolean {
  if (isQuietRequest(plain)) return true;
  const batch = QUEUE_BATCH.exec(plain);
  if (batch) return batch[1] === batch[2];
  const worker = WORKER_LINE.exec(plain);
  if (worker && worker[2] !== "request") return worker[1] === "info" || worker[1] === "debug";
  return false;
}
const BINDINGS_TABLE = /^Your Worker has access to the following bindings:/;

/**
 * Copies `wrangler dev`'s output to `out`, line by line, without its banner, its table of
 * bindings (every var of .dev.vars, one per line) and its "Ready on" line; blank lines collapse.
 */
export function filterWranglerDev(from: Readable, out: Writable, requests: RequestLog = "quiet"): void {
  let buffered = "";
  let inTable = false;
  let lastBlank = true;
  const emit = (line: string) => {
    const plain = line.replace(ANSI, "").trimEnd();
    if (inTable) {
      if (plain === "") inTable = false;
      return;
    }
    if (BINDINGS_TABLE.test(plain)) {
      inTable = true;
      return;
    }
    if (DROPPED.some((pattern) => pattern.test(plain))) return;
    if (requests === "quiet" && isQuietLine(plain)) return;
    if (plain === "") {
      if (lastBlank) return;
      lastBlank = true;
    } else {
      lastBlank = false;
    }
    out.write(`${line}\n`);
  };
  from.setEncoding("utf8");
  from.on("data", (chunk: string) => {
    buffered += chunk;
    const lines = buffered.split("\n");
    buffered = lines.pop() ?? "";
    for (const line of lines) emit(line);
  });
  from.on("end", () => {
    if (buffered) emit(buffered);
  });
}

export interface BannerFacts {
  base: string;
  /** The admin token as the next steps may show it: the value when it is .dev.vars.example's, else null. */
  adminToken: string | null;
  requests: RequestLog;
  /** Said once at the end of the banner, e.g. that .dev.vars was just created. */
  notes?: string[];
  /** Where the admin token comes from, e.g. "ADMIN_TOKEN in .dev.vars". */
  adminTokenSource: string;
  mirror: string;
  cron: string;
}

/** The one block that tells a newcomer where everything is. */
export function banner(facts: BannerFacts): string {
  const { base } = facts;
  const rows: [string, string][] = [
    ["Storefront", `${base}/`],
    ["Dashboard", `${base}/dashboard   (asks for the admin token: ${facts.adminTokenSource})`],
    ["OpenAPI", `${base}/openapi.json`],
    ["Shopper JWT", "npm run -s jwt -- alice   (HS256 with AUTH_SECRET from .dev.vars; the storefront mints its own)"],
    ["Redis mirror", facts.mirror],
    ["Cron", facts.cron],
  ];
  const width = Math.max(...rows.map(([name]) => name.length));
  const rule = "─".repeat(72);
  const token = facts.adminToken ?? "$ADMIN_TOKEN";
  return [
    rule,
    `Flashgate is up on ${base}`,
    ...rows.map(([name, value]) => `  ${name.padEnd(width)}  ${value}`),
    'Next: create a SKU, then open the storefront on it (README.md, "A two-minute walkthrough"):',
    `  curl -X PUT ${base}/admin/skus/tee-shirt -H 'Authorization: Bearer ${token}' \\`,
    `    -H 'content-type: application/json' -d '{"name":"Limited tee","totalStock":100,"perUserLimit":2,"price":2500,"currency":"eur"}'`,
    `  ${base}/?sku=tee-shirt`,
    facts.requests === "quiet"
      ? `Request log: errors and requests of ${SLOW_REQUEST_MS / 1000} s or more only; every request: npm run dev -- --log-requests=all`
      : "Request log: every request (--log-requests=all); the default shows only errors and slow requests.",
    ...(facts.notes ?? []),
    "Ctrl-C stops everything (wrangler, redis-server, the bridge).",
    rule,
  ].join("\n");
}
