import { spawn } from "node:child_process";
import { join } from "node:path";

/**
 * Where a workerd process's CPU goes, C++ and JavaScript alike: `perf record` with the kernel's
 * software clock (no hardware counters needed), then its report by symbol, grouped by what the code
 * is (SQLite, V8 running JavaScript, the JS ⇄ C++ bindings, kj's event loop and HTTP, the kernel…).
 * workerd's binary carries its symbols; JavaScript runs in V8's interpreter and baseline code, whose
 * handlers are V8 builtins (`Builtins_…`).
 */
export interface PerfProfile {
  samples: number;
  /** [group, share of samples %], largest first. */
  groups: [string, number][];
  /** [share %, dso, symbol] of the top symbols. */
  top: [number, string, string][];
}

/** Where a symbol's time belongs, first match wins (tested on "dso symbol"). */
const GROUPS: [string, RegExp][] = [
  ["kernel (syscalls, network, scheduling)", /^\[kernel/],
  ["SQLite", /sqlite|^workerd (wal|pcache|pager|btree|vdbe|json)/i],
  // (callgrind names JIT code by its address: "??? 0x…")
  ["JavaScript running (V8 interpreter, baseline code, builtins)", /Builtins_|^\[(unknown|JIT)|perf-\d+\.map|^\?+ 0x/],
  [
    "V8 garbage collection",
    /v8::internal::(Heap|Scaveng|MarkCompact|Sweeper|Marking|MinorMS|ConcurrentMarking|[A-Za-z]*GC)|cppgc/,
  ],
  ["V8 runtime (handles, objects, strings, compiler)", /v8::/],
  ["workerd jsg (JS ⇄ C++ bindings)", /workerd::jsg/],
  ["workerd api (Request, Response, headers, streams, SQL and RPC bindings)", /workerd::api/],
  ["workerd io and server (isolate entry, subrequests, actors)", /workerd::/],
  ["kj (event loop, promises, HTTP)", /kj::/],
  ["capnp (RPC between isolates and objects)", /capnp::/],
  ["tcmalloc (C++ allocation)", /tcmalloc|TCMalloc/],
  ["libc (copies, locks, syscalls' wrappers)", /^libc|memcpy|memmove|memset/],
];

/** Starts `perf record` on `pid` (scratch files in `dir`); `stop()` ends it and reads the profile. */
export function startPerf(pid: number, dir: string): { stop(): Promise<PerfProfile> } {
  const data = join(dir, `perf-${pid}-${Date.now()}.data`);
  const rec = spawn("perf", ["record", "-q", "-e", "cpu-clock", "-F", "4000", "-p", String(pid), "-o", data], {
    stdio: "ignore",
  });
  const ended = new Promise<void>((resolve, reject) => {
    rec.on("error", reject);
    rec.on("exit", () => resolve());
  });
  return {
    async stop() {
      rec.kill("SIGINT");
      await ended;
      return new Promise((resolve, reject) => {
        const report = spawn(
          "perf",
          ["report", "-i", data, "--no-children", "--percent-limit", "0.01", "--stdio", "--sort", "dso,symbol"],
          { stdio: ["ignore", "pipe", "ignore"] },
        );
        let out = "";
        report.stdout.on("data", (d: Buffer) => {
          out += d.toString();
        });
        report.on("error", reject);
        report.on("exit", () => resolve(parse(out)));
      });
    },
  };
}

/** `perf record` of `pid` for `seconds`, then the profile. */
export async function perfProfile(pid: number, seconds: number, dir: string): Promise<PerfProfile> {
  const perf = startPerf(pid, dir);
  await new Promise((resolve) => setTimeout(resolve, seconds * 1000));
  return perf.stop();
}

/** The group of a symbol of `dso` (perf's and callgrind's alike). */
export function groupOf(dso: string, symbol: string): string {
  return GROUPS.find(([, re]) => re.test(`${dso} ${symbol}`))?.[0] ?? "other";
}

function parse(report: string): PerfProfile {
  // "# Samples: 34K of event 'cpu-clock'"
  const count = /# Samples: ([\d.]+)([KM]?)/.exec(report);
  const samples = Math.round(Number(count?.[1] ?? 0) * (count?.[2] === "M" ? 1e6 : count?.[2] === "K" ? 1e3 : 1));
  const rows = report
    .split("\n")
    .map((line) => /^\s*([\d.]+)%\s+(\S+)\s+\[.\]\s+(.*?)\s*(?:-\s+-\s*)?$/.exec(line))
    .filter((m): m is RegExpExecArray => m !== null)
    .map((m) => ({ pct: Number(m[1]), dso: m[2] ?? "", symbol: (m[3] ?? "").replace(/<.*>/g, "<…>").slice(0, 110) }));
  const byGroup = new Map<string, number>();
  for (const r of rows) {
    const group = groupOf(r.dso, r.symbol);
    byGroup.set(group, (byGroup.get(group) ?? 0) + r.pct);
  }
  return {
    samples,
    groups: [...byGroup].sort((a, b) => b[1] - a[1]).map(([g, p]) => [g, +p.toFixed(2)]),
    top: rows.slice(0, 30).map((r) => [r.pct, r.dso, r.symbol]),
  };
}

/** The profile as text, each group's share also in µs of `cpuUs` (the point's CPU per request). */
export function printPerf(profile: PerfProfile, cpuUs: number): string {
  const top = profile.top.map(([pct, dso, symbol]) => `${pct.toFixed(2).padStart(6)}%  ${dso.padEnd(18)} ${symbol}`);
  const groups = profile.groups.map(
    ([g, p]) => `${p.toFixed(1).padStart(6)}%  ${((p * cpuUs) / 100).toFixed(1).padStart(6)} µs  ${g}`,
  );
  return `${top.join("\n")}\n\nBy group (${profile.samples} samples; share, and µs of ${cpuUs.toFixed(0)} µs per request):\n${groups.join("\n")}`;
}

/** A point's profile beside its CPU per request (or per call, per reservation) in the same run. */
export interface PerfPoint {
  label: string;
  cpuUs: number;
  profile: PerfProfile;
}

/**
 * Runs `load` (a point, warm-up included) with `perf` sampling `pid` throughout: a workerd waiting
 * for the bench to prepare its requests is idle and adds no samples. `cpuUs(result)` is the point's
 * CPU per request (or per call) from its own meter.
 */
export async function profiled<T>(
  label: string,
  pid: number,
  dir: string,
  load: () => Promise<T>,
  cpuUs: (result: T) => number,
): Promise<PerfPoint> {
  const perf = startPerf(pid, dir);
  const result = await load();
  return { label, cpuUs: cpuUs(result), profile: await perf.stop() };
}
