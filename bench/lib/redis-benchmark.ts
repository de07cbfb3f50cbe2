import { execFile } from "node:child_process";
import { cpuMeter } from "../../tools/proc";

/** One `redis-benchmark` run of a command: its throughput, latency and redis-server's CPU per call. */
export interface RedisBenchResult {
  label: string;
  pipeline: number;
  clients: number;
  calls: number;
  perSec: number;
  p50Ms: number;
  p99Ms: number;
  cpuUsPerCall: number;
}

/**
 * Runs Debian's `redis-benchmark` (its own process, C) against 127.0.0.1:`port`: `calls` commands
 * from `clients` connections, `pipeline` in flight per connection. `__rand_int__` in the command is
 * replaced by a random number per call (`-r`), so users, ids and nonces are fresh.
 */
export function redisBenchmark(opts: {
  label: string;
  port: number;
  pid: number;
  command: string[];
  calls: number;
  clients: number;
  pipeline: number;
}): Promise<RedisBenchResult> {
  const args = ["-h", "127.0.0.1", "-p", String(opts.port), "-c", String(opts.clients), "-n", String(opts.calls)];
  args.push("-P", String(opts.pipeline), "-r", "1000000000", "--csv", ...opts.command);
  const meter = cpuMeter([opts.pid]);
  return new Promise((resolve, reject) => {
    execFile("redis-benchmark", args, { maxBuffer: 1 << 20 }, (err, stdout, stderr) => {
      if (err) return reject(new Error(`redis-benchmark failed: ${err.message}\n${stderr}`));
      const cpu = meter.stop();
      // --csv: a header line, then "test","rps","avg_latency_ms","min_latency_ms","p50_latency_ms","p95…","p99…","max…"
      const row = stdout
        .trim()
        .split("\n")
        .pop()
        ?.split(",")
        .map((v) => v.replace(/"/g, ""));
      const perSec = Number(row?.[1]);
      if (!row || !(perSec > 0)) return reject(new Error(`redis-benchmark printed no figures:\n${stdout}\n${stderr}`));
      resolve({
        label: opts.label,
        pipeline: opts.pipeline,
        clients: opts.clients,
        calls: opts.calls,
        perSec,
        p50Ms: Number(row[4]),
        p99Ms: Number(row[6]),
        cpuUsPerCall: cpu / opts.calls,
      });
    });
  });
}
