import { session, targets } from "../../tools/heap";

/**
 * A CPU profile of one workerd isolate through its inspector (Chrome DevTools protocol), to find
 * where the time goes before changing anything: `start()` begins sampling, `stop()` returns the
 * top functions by self time, `take()` the profile itself (for bench/lib/parts.ts). The Worker must
 * have been started with `inspect` (tools/worker.ts).
 */
export interface ProfileLine {
  selfPct: number;
  fn: string;
  where: string;
}

interface Node {
  id: number;
  callFrame: { functionName: string; url: string; lineNumber: number };
  hitCount?: number;
  children?: number[];
}

/** A V8 CPU profile as the inspector returns it (the parts of it read here). */
export interface CpuProfile {
  nodes: Node[];
}

/** A Chrome DevTools protocol session with one isolate of workerd (the Worker's, by title). */
async function connectInspector(inspectorPort: number, target: string) {
  const list = await targets(inspectorPort);
  const entry = list.find((t) => t.title?.includes(target)) ?? list.find((t) => !t.title?.startsWith("core:"));
  if (!entry) throw new Error(`no inspector target for ${target}: ${JSON.stringify(list.map((t) => t.title))}`);
  return session(entry.webSocketDebuggerUrl);
}

/**
 * The isolate's JS heap after a full garbage collection (the inspector's `Runtime.getHeapUsage`):
 * Workers expose no memory figure to the code itself, and the 128 MB limit is on this heap.
 */
export async function heapUsage(
  inspectorPort: number,
  target = "flashgate",
): Promise<{ usedBytes: number; totalBytes: number }> {
  const { send, close } = await connectInspector(inspectorPort, target);
  try {
    await send("HeapProfiler.enable");
    await send("HeapProfiler.collectGarbage");
    const heap = (await send("Runtime.getHeapUsage")) as { usedSize: number; totalSize: number };
    return { usedBytes: heap.usedSize, totalBytes: heap.totalSize };
  } finally {
    close();
  }
}

export async function startProfile(inspectorPort: number, target = "flashgate") {
  const { send, close } = await connectInspector(inspectorPort, target);
  await send("Profiler.enable");
  await send("Profiler.setSamplingInterval", { interval: 100 });
  await send("Profiler.start");
  const take = async (): Promise<CpuProfile> => {
    const { profile } = (await send("Profiler.stop")) as { profile: CpuProfile };
    close();
    return profile;
  };
  return { take, stop: async (top = 25) => topFunctions(await take(), top) };
}

/** The functions of a profile by self time, the `top` first. */
export function topFunctions(profile: CpuProfile, top: number): ProfileLine[] {
  const total = profile.nodes.reduce((n, node) => n + (node.hitCount ?? 0), 0);
  const bySelf = new Map<string, ProfileLine>();
  for (const node of profile.nodes) {
    const f = node.callFrame;
    const fn = f.functionName || "(anonymous)";
    const where = `${f.url.split("/").pop()}:${f.lineNumber + 1}`;
    const key = `${fn}@${where}`;
    const line = bySelf.get(key) ?? { selfPct: 0, fn, where };
    line.selfPct += ((node.hitCount ?? 0) * 100) / Math.max(1, total);
    bySelf.set(key, line);
  }
  return [...bySelf.values()].sort((a, b) => b.selfPct - a.selfPct).slice(0, top);
}
