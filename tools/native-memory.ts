import { execFile } from "node:child_process";
import { writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { promisify } from "node:util";

/**
 * What workerd's native heap holds, read from the process with gdb (workerd links tcmalloc and
 * SQLite and exports their statistics functions): how much of its resident memory is C++ allocations
 * that are live (`allocatedBytes`, SQLite's page caches among them: `sqliteBytes`), how much is freed
 * memory tcmalloc keeps for reuse (`freeBytes`), and so, by difference from `RssAnon`, what V8 maps
 * for its isolates' heaps. gdb stops workerd for a few seconds while it reads. For diagnosis only
 * (`scripts/soak.ts --native`); needs gdb and ptrace rights over the process.
 */
export interface NativeMemory {
  /** Bytes the program has allocated through malloc and not freed. */
  allocatedBytes: number;
  /** Bytes tcmalloc holds in physical memory (allocated + its free lists and metadata). */
  physicalBytes: number;
  /** Freed bytes tcmalloc keeps (page heap, central, transfer and per-CPU caches). */
  freeBytes: number;
  /** Bytes SQLite has allocated (all databases: page caches, schemas, statements), and its high-water mark. */
  sqliteBytes: number;
  sqliteHighwaterBytes: number;
}

const run = promisify(execFile);

const PROPERTIES = {
  allocated: "generic.current_allocated_bytes",
  physical: "generic.physical_memory_used",
  pageheap: "tcmalloc.pageheap_free_bytes",
  central: "tcmalloc.central_cache_free",
  transfer: "tcmalloc.transfer_cache_free",
  cpu: "tcmalloc.cpu_free",
} as const;

export async function nativeMemory(pid: number): Promise<NativeMemory> {
  const lines = [
    "set pagination off",
    "set confirm off",
    "set $buf = (unsigned long*) malloc(8)",
    "set $get = (char(*)(const char*, unsigned long, unsigned long*)) MallocExtension_Internal_GetNumericProperty",
    ...Object.entries(PROPERTIES).flatMap(([key, name]) => [
      `call (void) $get("${name}", ${name.length}, $buf)`,
      `printf "=${key} %lu\\n", *$buf`,
    ]),
    'printf "=sqlite %lld\\n", ((long long(*)(void)) sqlite3_memory_used)()',
    'printf "=sqliteHigh %lld\\n", ((long long(*)(int)) sqlite3_memory_highwater)(0)',
    "detach",
    "quit",
  ];
  const script = join(tmpdir(), `native-memory-${process.pid}.gdb`);
  writeFileSync(script, `${lines.join("\n")}\n`);
  const { stdout } = await run("gdb", ["-q", "-batch", "-p", String(pid), "-x", script], {
    maxBuffer: 64 * 2 ** 20,
    timeout: 120_000,
  });
  const value = (key: string) => {
    const m = new RegExp(`^=${key} (\\d+)$`, "m").exec(stdout);
    if (!m) throw new Error(`gdb gave no ${key} for workerd ${pid}:\n${stdout.slice(-2000)}`);
    return Number(m[1]);
  };
  return {
    allocatedBytes: value("allocated"),
    physicalBytes: value("physical"),
    freeBytes: value("pageheap") + value("central") + value("transfer") + value("cpu"),
    sqliteBytes: value("sqlite"),
    sqliteHighwaterBytes: value("sqliteHigh"),
  };
}

/**
 * Asks workerd's tcmalloc to hand its free memory back to the OS (what a long-running allocator
 * does on its own only slowly): the RSS it drops is freed memory, not live data.
 */
export async function releaseFreeMemory(pid: number): Promise<void> {
  const script = join(tmpdir(), `native-release-${process.pid}.gdb`);
  writeFileSync(
    script,
    [
      "set pagination off",
      "set confirm off",
      "call ((void(*)(unsigned long)) MallocExtension_Internal_ReleaseMemoryToSystem)(~0UL)",
      "detach",
      "quit",
    ].join("\n"),
  );
  await run("gdb", ["-q", "-batch", "-p", String(pid), "-x", script], { maxBuffer: 64 * 2 ** 20, timeout: 120_000 });
}

// `npx tsx tools/native-memory.ts <pid>`: the figures of a running workerd, in MiB.
if (process.argv[1]?.endsWith("native-memory.ts")) {
  const m = await nativeMemory(Number(process.argv[2]));
  console.log(JSON.stringify(Object.fromEntries(Object.entries(m).map(([k, v]) => [k, +(v / 2 ** 20).toFixed(1)]))));
}
