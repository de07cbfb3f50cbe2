import type { ChildProcess } from "node:child_process";
import { readdirSync, readFileSync } from "node:fs";

/**
 * CPU time of a process from `/proc/<pid>/stat` (utime + stime of all its threads), in µs. Workers
 * bills CPU time, and on a shared, noisy machine CPU per request barely moves while wall-clock
 * throughput swings: the bench reports both.
 */
const TICKS_PER_SECOND = 100; // USER_HZ: 100 on Linux x86_64 and arm64 (`getconf CLK_TCK`)

function statFields(pid: number): string[] {
  const stat = readFileSync(`/proc/${pid}/stat`, "utf8");
  // The command name (field 2) is in parentheses and may hold spaces: split after its closing one.
  return stat.slice(stat.lastIndexOf(")") + 2).split(" ");
}

/** utime + stime of the process, µs. */
export function cpuMicros(pid: number): number {
  const f = statFields(pid);
  // After the name: state is index 0, so utime (field 14) is index 11 and stime (15) index 12.
  return ((Number(f[11]) + Number(f[12])) * 1_000_000) / TICKS_PER_SECOND;
}

/** Resident memory of the process, bytes. */
export function rssBytes(pid: number): number {
  const m = /VmRSS:\s+(\d+) kB/.exec(readFileSync(`/proc/${pid}/status`, "utf8"));
  return m ? Number(m[1]) * 1024 : Number.NaN;
}

/** Pids of the running processes `keep` holds for (read from /proc/<pid>; one that ends meanwhile is left out). */
export function processes(keep: (pid: string) => boolean): number[] {
  return readdirSync("/proc").flatMap((entry) => {
    try {
      return /^\d+$/.test(entry) && keep(entry) ? [Number(entry)] : [];
    } catch {
      return []; // the process ended while we looked
    }
  });
}

/** Child processes of `parent` whose command name is `comm` (for example the workerd Miniflare spawned). */
export function childrenNamed(parent: number, comm: string): number[] {
  return processes((pid) => {
    const status = readFileSync(`/proc/${pid}/status`, "utf8");
    return /^Name:\s+(.*)$/m.exec(status)?.[1] === comm && Number(/^PPid:\s+(\d+)$/m.exec(status)?.[1]) === parent;
  });
}

/**
 * The workerd processes Miniflare spawned under `parent`: named `workerd`, or a valgrind tool running
 * it (`npm run bench:perf -- <point> --callgrind` starts workerd under callgrind).
 */
export function workerdChildren(parent: number): number[] {
  return [
    ...childrenNamed(parent, "workerd"),
    ...childrenNamed(parent, "callgrind-amd64").filter((pid) => {
      try {
        return readFileSync(`/proc/${pid}/cmdline`, "utf8").includes("workerd");
      } catch {
        return false;
      }
    }),
  ];
}

/** A CPU meter over a set of processes: `stop()` gives the µs they used since `start`. */
export function cpuMeter(pids: number[]): { stop(): number } {
  const total = () => pids.reduce((sum, pid) => sum + cpuMicros(pid), 0);
  const before = total();
  return { stop: () => total() - before };
}

/**
 * Resolves once the child has printed `marker` (stdout or stderr), then lets its output run on unread;
 * rejects with what it printed when it exits first or `ms` pass.
 */
export function untilPrinted(child: ChildProcess, marker: string, what: string, ms: number): Promise<void> {
  let out = "";
  return new Promise<void>((resolve, reject) => {
    const done = (err?: Error) => {
      clearTimeout(timer);
      child.stdout?.removeListener("data", onData).resume();
      child.stderr?.removeListener("data", onData).resume();
      child.removeListener("exit", onExit);
      if (err) reject(err);
      else resolve();
    };
    const timer = setTimeout(() => done(new Error(`${what} did not start:\n${out}`)), ms);
    const onData = (chunk: Buffer) => {
      out += chunk.toString();
      if (out.includes(marker)) done();
    };
    const onExit = (code: number | null) => done(new Error(`${what} exited with ${code}:\n${out}`));
    child.stdout?.on("data", onData);
    child.stderr?.on("data", onData);
    child.once("exit", onExit);
  });
}

/** Sends SIGTERM and waits for the exit; SIGKILL after `killAfterMs` when given. A child already gone is left. */
export async function stopChild(child: ChildProcess, killAfterMs?: number): Promise<void> {
  if (child.exitCode !== null || child.signalCode !== null) return;
  const exited = new Promise((resolve) => child.once("exit", resolve));
  child.kill("SIGTERM");
  const timer = killAfterMs === undefined ? undefined : setTimeout(() => child.kill("SIGKILL"), killAfterMs);
  await exited;
  clearTimeout(timer);
}

/** What {@link atExit} undoes when the process exits, and whether its one listener is on. */
const cleanUps = new Set<() => void>();
let listening = false;

/**
 * Runs `cleanUp` when this process exits, however it exits, unless the returned function is called
 * first (a clean stop that did it). Miniflare answers SIGINT and SIGTERM by calling `process.exit` at
 * once, so a stop that awaits anything after a signal never finishes: what must not outlive the
 * process (a child server, a temporary directory) is undone here, synchronously.
 */
export function atExit(cleanUp: () => void): () => void {
  if (!listening) {
    listening = true;
    // One listener for all of them: a bench holds a dozen servers, past Node's warning at ten.
    process.once("exit", () => {
      for (const each of cleanUps) {
        try {
          each();
        } catch {
          // The next one still runs: the process is going away either way.
        }
      }
    });
  }
  cleanUps.add(cleanUp);
  return () => cleanUps.delete(cleanUp);
}
