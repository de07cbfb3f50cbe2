// What `npm run dev` prints: wrangler's own noise filtered out, and one banner that says where
// everything is. (The Worker's log lines, wrangler's warnings, errors and reload notices pass.)
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
];
const BINDINGS_TABLE = /^Your Worker has access to the following bindings:/;

/**
 * Copies `wrangler dev`'s output to `out`, line by line, without its banner, its table of
 * bindings (every var of .dev.vars, one per line) and its "Ready on" line; blank lines collapse.
 */
export function filterWranglerDev(from: Readable, out: Writable): void {
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
  return [
    rule,
    `Flashgate is up on ${base}`,
    ...rows.map(([name, value]) => `  ${name.padEnd(width)}  ${value}`),
    "Ctrl-C stops everything (wrangler, redis-server, the bridge).",
    rule,
  ].join("\n");
}
