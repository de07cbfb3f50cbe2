import { execFile } from "node:child_process";
import { writeFileSync } from "node:fs";
import { fileURLToPath } from "node:url";

/**
 * Load from another process: Debian's `wrk` (C, epoll), driven by bench/lib/wrk.lua so that every
 * request can carry its own JWT and purchase token. The harness only waits for it (execFile keeps
 * Node's event loop free, which Miniflare needs to drain workerd's output pipes).
 */
const SCRIPT = fileURLToPath(new URL("./wrk.lua", import.meta.url));

/** One request of a run. */
export interface WrkRequest {
  method: "GET" | "POST";
  path: string;
  authorization?: string;
  body?: string;
  /** One more header, `Name: value` (a bot challenge's answer). */
  header?: string;
}

export interface WrkResult {
  requests: number;
  durationUs: number;
  statuses: Record<string, number>;
  /** Times a thread ran out of prepared requests and started again (replays; 0 expected). */
  wraps: number;
  errors: { connect: number; read: number; write: number; timeout: number; status: number };
  latencyUs: { p50: number; p90: number; p99: number; max: number; mean: number };
  /** Responses per second over the run. */
  rps: number;
}

export interface WrkRun {
  url: string;
  /** Prepared requests: one, repeated, for a plain GET; else at least as many as the run can send. */
  requests: WrkRequest[];
  connections: number;
  seconds: number;
  threads?: number;
  /** Where the request file is written. */
  file: string;
}

function line(r: WrkRequest): string {
  for (const v of [r.path, r.authorization ?? "", r.body ?? "", r.header ?? ""]) {
    if (/[\t\n]/.test(v)) throw new Error("a wrk request field holds a tab or newline");
  }
  return `${r.method}\t${r.path}\t${r.authorization ?? "-"}\t${r.body ?? "-"}\t${r.header ?? "-"}`;
}

/** Runs wrk for `seconds` against 127.0.0.1 (bounded in time), returning what it counted. */
export function runWrk(run: WrkRun): Promise<WrkResult> {
  if (!/^http:\/\/127\.0\.0\.1:\d+$/.test(run.url)) throw new Error(`wrk only loads 127.0.0.1, not ${run.url}`);
  writeFileSync(run.file, `${run.requests.map(line).join("\n")}\n`);
  const threads = run.threads ?? 1;
  const args = [
    `-t${threads}`,
    `-c${run.connections}`,
    `-d${run.seconds}s`,
    "--timeout",
    "10s",
    "--latency",
    "-s",
    SCRIPT,
    run.url,
  ];
  const env = { ...process.env, WRK_REQUESTS: run.file, WRK_THREADS: String(threads) };
  return new Promise((resolve, reject) => {
    execFile("wrk", args, { env, maxBuffer: 16 * 1024 * 1024 }, (err, stdout, stderr) => {
      if (err) return reject(new Error(`wrk failed: ${err.message}\n${stderr}`));
      const json = /^WRK_RESULT (.*)$/m.exec(stdout)?.[1];
      if (!json) return reject(new Error(`wrk printed no result:\n${stdout}\n${stderr}`));
      const r = JSON.parse(json) as Omit<WrkResult, "rps">;
      resolve({ ...r, rps: (r.requests * 1_000_000) / Math.max(1, r.durationUs) });
    });
  });
}
