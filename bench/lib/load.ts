import type { IncomingHttpHeaders } from "node:http";
import autocannon from "autocannon";
import { log } from "./log";
import type { Shopper } from "./shoppers";

/** What one load run measured, every request accounted for. */
export interface LoadResult {
  label: string;
  connections: number;
  /** Responses received. */
  responses: number;
  /** From the start of the run to the last response (autocannon itself reports only on its next 1 s tick). */
  elapsedMs: number;
  /** When the last response arrived (epoch ms). */
  endedAt: number;
  /** Responses per second over the whole run. */
  rps: number;
  p50Ms: number;
  p99Ms: number;
  /** HTTP status → count. */
  statuses: Record<string, number>;
  /** Error codes of the JSON bodies of non-2xx answers → count. */
  codes: Record<string, number>;
  /** Socket errors and timeouts (autocannon's `errors` + `timeouts`). */
  transportErrors: number;
  /** Reservation ids of the 202 answers, with the time each answer arrived (epoch ms). */
  accepted: Map<string, number>;
  /** The first few bodies of unexpected (non-JSON) answers, for the report. */
  samples: string[];
  /** 202 answers that said `Idempotent-Replayed: true` (none expected: every token is fresh). */
  replayed: number;
}

export interface LoadSpec {
  label: string;
  url: string;
  path: string;
  method: "GET" | "POST";
  connections: number;
  /** Requests to send; with `shoppers`, at most one per shopper. */
  amount: number;
  shoppers?: Shopper[];
}

/**
 * Runs autocannon against 127.0.0.1 with a fixed number of requests (bounded in count and time),
 * printing a progress line every second. With `shoppers`, request i carries shopper i's JWT and
 * purchase token, so every request is a distinct user with a fresh token.
 */
export function runLoad(spec: LoadSpec): Promise<LoadResult> {
  const shoppers = spec.shoppers;
  if (shoppers && shoppers.length < spec.amount) throw new Error(`${spec.label}: fewer shoppers than requests`);
  const statuses: Record<string, number> = {};
  const codes: Record<string, number> = {};
  const accepted = new Map<string, number>();
  let replayed = 0;
  const samples: string[] = [];
  let next = 0;
  let done = 0;
  let endedAt = Date.now();
  const onResponse = (status: number, body: string, _context: object, headers: IncomingHttpHeaders | undefined) => {
    done++;
    endedAt = Date.now();
    statuses[status] = (statuses[status] ?? 0) + 1;
    if (!shoppers) return;
    try {
      const parsed = JSON.parse(body) as { reservationId?: unknown; error?: { code?: unknown } };
      if (status === 202 && typeof parsed.reservationId === "string") accepted.set(parsed.reservationId, Date.now());
      else if (typeof parsed.error?.code === "string") codes[parsed.error.code] = (codes[parsed.error.code] ?? 0) + 1;
    } catch {
      codes.UNPARSABLE_BODY = (codes.UNPARSABLE_BODY ?? 0) + 1;
      if (samples.length < 3) samples.push(`${status}: ${body.slice(0, 200)}`);
    }
    if (headers?.["idempotent-replayed"] === "true") replayed++;
  };
  const request: autocannon.Request = {
    method: spec.method,
    path: spec.path,
    onResponse,
  };
  if (shoppers) {
    request.setupRequest = (req) => {
      const shopper = shoppers[next++ % shoppers.length];
      return shopper ? { ...req, headers: shopper.headers, body: shopper.body } : req;
    };
  }
  return new Promise((resolve, reject) => {
    const started = Date.now();
    const instance = autocannon(
      {
        url: spec.url,
        connections: spec.connections,
        amount: spec.amount,
        timeout: 30,
        requests: [request],
      },
      (err, result) => {
        clearInterval(ticker);
        if (err) return reject(err);
        // Not Date.now(): autocannon calls back on its next sampling tick, up to a second after the
        // last response, which would round every short run up to whole seconds.
        const elapsedMs = Math.max(1, endedAt - started);
        resolve({
          label: spec.label,
          connections: spec.connections,
          responses: done,
          elapsedMs,
          endedAt,
          rps: (done * 1000) / elapsedMs,
          p50Ms: result.latency.p50,
          p99Ms: result.latency.p99,
          statuses,
          codes,
          transportErrors: result.errors + result.timeouts,
          accepted,
          replayed,
          samples,
        });
      },
    );
    let last = 0;
    const ticker = setInterval(() => {
      log(`  ${spec.label}: ${done}/${spec.amount} answers, ${done - last}/s`);
      last = done;
    }, 1000);
    instance.on("error", reject);
  });
}

/** Statuses other than the ones expected, as "503×3, 500×1" ("" when none). */
export function unexpected(result: LoadResult, expected: number[]): string {
  const bad = Object.entries(result.statuses).filter(([s]) => !expected.includes(Number(s)));
  const parts = bad.map(([s, n]) => `${s}×${n}`);
  if (result.transportErrors > 0) parts.push(`transport×${result.transportErrors}`);
  return parts.join(", ");
}
