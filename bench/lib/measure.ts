import { join } from "node:path";
import { cpuMeter, rssBytes } from "../../tools/proc";
import { log } from "./log";
import { runWrk, type WrkRequest, type WrkResult } from "./wrk";

/** How long each load point runs: a warm-up (not reported), then the measured run. */
export interface Timing {
  warmSeconds: number;
  seconds: number;
  connections: number;
}

/** One measured load point, as bench/results.json keeps it. */
export interface Point {
  key: string;
  label: string;
  connections: number;
  seconds: number;
  requests: number;
  rps: number;
  p50Ms: number;
  p99Ms: number;
  maxMs: number;
  statuses: Record<string, number>;
  /** The warm-up's answers by status (its reservations count in the stock checks too). */
  warmStatuses: Record<string, number>;
  /** Answers other than the expected statuses, plus socket errors and timeouts. */
  unexpected: number;
  /** CPU time of the processes under test (workerd; for the classic design Node + redis-server) per request, µs. */
  cpuUsPerRequest: number;
  /** Resident memory of the first process under test after the run, MiB. */
  rssMiB: number;
  /** Prepared requests sent twice (a thread ran out), warm-up included: 0 for runs that need fresh tokens. */
  wraps: number;
  /** wrk's socket errors by kind (connect, read, write, timeout) and non-2xx/3xx count (status). */
  errors: WrkResult["errors"];
}

export interface PointSpec {
  key: string;
  label: string;
  url: string;
  /** Processes whose CPU time is the cost of this point. */
  pids: number[];
  /** Requests to prepare; a plain GET returns one request whatever `count` is. */
  requests: (count: number, phase: "warm" | "main") => Promise<WrkRequest[]>;
  /** Whether every request must be fresh (tokens): the main run is sized from the warm-up's rate. */
  fresh: boolean;
  expected: number[];
  timing: Timing;
  dir: string;
}

const statusOk = (r: WrkResult, expected: number[]) =>
  Object.entries(r.statuses).reduce((n, [s, c]) => n + (expected.includes(Number(s)) ? c : 0), 0);

/**
 * Warm-up, then the measured run with the CPU meter of the processes under test around it. Runs that
 * need fresh tokens prepare three times the requests the warm-up's rate would send in the measured run.
 */
export async function measure(spec: PointSpec): Promise<Point> {
  const { timing } = spec;
  const file = join(spec.dir, `${spec.key}.requests`);
  // Generous: a warm-up that ran out would replay tokens, and its answers count in the stock checks.
  // Sized for the fastest point, the sold-out storm answered before the JWT (see the commit that set it).
  const warmCount = spec.fresh ? 25_000 * timing.warmSeconds : 1;
  log(`${spec.label}: warm-up ${timing.warmSeconds} s, c${timing.connections}`);
  const warm = await runWrk({
    url: spec.url,
    requests: await spec.requests(warmCount, "warm"),
    connections: timing.connections,
    seconds: timing.warmSeconds,
    file,
  });
  const mainCount = spec.fresh ? Math.min(400_000, Math.ceil(warm.rps * timing.seconds * 3) + 5_000) : 1;
  const requests = await spec.requests(mainCount, "main");
  log(`${spec.label}: ${timing.seconds} s, c${timing.connections}${spec.fresh ? `, ${mainCount} fresh requests` : ""}`);
  const meter = cpuMeter(spec.pids);
  const r = await runWrk({ url: spec.url, requests, connections: timing.connections, seconds: timing.seconds, file });
  const cpu = meter.stop();
  const socketErrors = r.errors.connect + r.errors.read + r.errors.write + r.errors.timeout;
  const point = {
    key: spec.key,
    label: spec.label,
    connections: timing.connections,
    seconds: timing.seconds,
    requests: r.requests,
    rps: r.rps,
    p50Ms: r.latencyUs.p50 / 1000,
    p99Ms: r.latencyUs.p99 / 1000,
    maxMs: r.latencyUs.max / 1000,
    statuses: r.statuses,
    warmStatuses: warm.statuses,
    unexpected: r.requests - statusOk(r, spec.expected) + socketErrors,
    cpuUsPerRequest: cpu / Math.max(1, r.requests),
    rssMiB: rssBytes(spec.pids[0] ?? 0) / 2 ** 20,
    wraps: spec.fresh ? r.wraps + warm.wraps : 0,
    errors: r.errors,
  };
  log(
    `${spec.label}: ${point.rps.toFixed(0)} req/s, p50 ${point.p50Ms.toFixed(1)} ms, p99 ${point.p99Ms.toFixed(1)} ms, ${point.cpuUsPerRequest.toFixed(0)} µs CPU/request, statuses ${JSON.stringify(r.statuses)}`,
  );
  return point;
}
