import { execFile } from "node:child_process";
import { chmodSync, readdirSync, readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { promisify } from "node:util";
import { groupOf } from "./perf-record";

const run = promisify(execFile);

/**
 * Instructions, not seconds: workerd under `valgrind --tool=callgrind`, instrumented only while a
 * point's measured calls run (`callgrind_control -i on/off`), so start-up and warm-up count nothing.
 * An instruction count does not move with the other work of a shared machine, which a CPU time on
 * two cores does; it leaves out the kernel (syscalls) and what a cache miss costs. Under valgrind a
 * call takes ~50× as long, so the stock object's outbox, paced by the wall clock, flushes each call.
 */
export interface CallgrindPoint {
  label: string;
  calls: number;
  /** workerd's instructions per call (or per request), thousands. */
  kInstructions: number;
  /** [group, thousands of instructions per call], largest first (the groups of perf-record.ts). */
  groups: [string, number][];
}

/**
 * Makes Miniflare start workerd under callgrind (its `MINIFLARE_WORKERD_PATH`, for this process and
 * the wrangler commands it runs): a wrapper script in `dir`, where the profiles are written too.
 */
export function useCallgrind(dir: string): void {
  const workerd = join(import.meta.dirname, "../../node_modules/@cloudflare/workerd-linux-64/bin/workerd");
  const wrapper = join(dir, "workerd-callgrind.sh");
  writeFileSync(
    wrapper,
    `#!/bin/sh\nexec valgrind --tool=callgrind --smc-check=all-non-file --instr-atstart=no --callgrind-out-file=${dir}/callgrind.%p.out ${workerd} "$@"\n`,
  );
  chmodSync(wrapper, 0o755);
  process.env.MINIFLARE_WORKERD_PATH = wrapper;
}

/** Counts the instructions workerd `pid` runs during `calls()` (which returns how many calls it made). */
export async function countInstructions(
  label: string,
  pid: number,
  dir: string,
  calls: () => Promise<number>,
): Promise<CallgrindPoint> {
  await run("callgrind_control", ["-z", String(pid)]);
  await run("callgrind_control", ["-i", "on", String(pid)]);
  const n = await calls();
  await run("callgrind_control", ["-i", "off", String(pid)]);
  await run("callgrind_control", ["-d", label, String(pid)]);
  const dumps = readdirSync(dir)
    .filter((f) => f.startsWith(`callgrind.${pid}.out.`))
    .sort((a, b) => Number(a.split(".").pop()) - Number(b.split(".").pop()));
  const dump = join(dir, dumps[dumps.length - 1] ?? "");
  const total = Number(/^totals: (\d+)/m.exec(readFileSync(dump, "utf8"))?.[1] ?? Number.NaN);
  const { stdout } = await run("callgrind_annotate", ["--threshold=100", dump], { maxBuffer: 64 << 20 });
  const byGroup = new Map<string, number>();
  for (const line of stdout.split("\n")) {
    // " 1,234,567 ( 0.58%)  ???:sqlite3VdbeExec [/…/workerd]"
    const m = /^\s*([\d,]+) \(\s*[\d.]+%\)\s+(.*?)(?: \[(.*)\])?$/.exec(line);
    if (!m || m[2]?.includes("PROGRAM TOTALS")) continue;
    const dso = (m[3] ?? "").split("/").pop() ?? "";
    const symbol = (m[2] ?? "").replace(/^[^:]*:/, "");
    const group = groupOf(dso, symbol);
    byGroup.set(group, (byGroup.get(group) ?? 0) + Number(m[1]?.replaceAll(",", "")));
  }
  return {
    label,
    calls: n,
    kInstructions: total / n / 1000,
    groups: [...byGroup].map(([g, i]): [string, number] => [g, +(i / n / 1000).toFixed(1)]).sort((a, b) => b[1] - a[1]),
  };
}
