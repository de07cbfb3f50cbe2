import { writeFileSync } from "node:fs";
import WebSocket from "ws";

/**
 * The JavaScript heaps of a workerd process through its inspector (Chrome DevTools protocol), to
 * tell what of its resident memory is JavaScript and in which isolate: the Worker's own (which also
 * runs its Durable Objects) or one of Miniflare's simulators (queue broker, D1, cache…).
 * The Worker must have been started with `inspect` (tools/worker.ts). A target that does not
 * answer within 5 s is left out (some of Miniflare's never do while busy).
 */
export interface IsolateHeap {
  target: string;
  usedBytes: number;
  totalBytes: number;
}

interface Target {
  id: string;
  title?: string;
  webSocketDebuggerUrl: string;
}

/** A Chrome DevTools protocol session over an inspector target's WebSocket (bench/lib/profile.ts uses it too). */
export async function session(url: string) {
  const ws = new WebSocket(url, { maxPayload: 2 ** 31 });
  await new Promise((resolve, reject) => {
    ws.once("open", resolve);
    ws.once("error", reject);
  });
  let next = 1;
  const pending = new Map<number, (result: unknown) => void>();
  const listeners: ((msg: { method: string; params: Record<string, unknown> }) => void)[] = [];
  ws.on("message", (data: WebSocket.RawData) => {
    const msg = JSON.parse(String(data)) as { id?: number; result?: unknown; method?: string; params?: never };
    if (msg.id !== undefined) pending.get(msg.id)?.(msg.result);
    else if (msg.method) for (const l of listeners) l({ method: msg.method, params: msg.params ?? {} });
  });
  // Some targets never answer (Miniflare's wrapped bindings without an isolate of their own): a
  // command gives up after a while and answers null.
  const send = (method: string, params: object = {}, timeoutMs = 60_000) =>
    new Promise<unknown>((resolve) => {
      const id = next++;
      const timer = setTimeout(() => resolve(null), timeoutMs);
      pending.set(id, (result) => {
        clearTimeout(timer);
        resolve(result);
      });
      ws.send(JSON.stringify({ id, method, params }));
    });
  return { send, on: (l: (typeof listeners)[number]) => listeners.push(l), close: () => ws.close() };
}

/** The inspector's targets: one per isolate (bench/lib/profile.ts picks the Worker's by title). */
export async function targets(inspectorPort: number): Promise<Target[]> {
  return (await (await fetch(`http://127.0.0.1:${inspectorPort}/json`)).json()) as Target[];
}

/** Every isolate's heap after a collection, largest first. */
export async function isolateHeaps(inspectorPort: number): Promise<IsolateHeap[]> {
  const heaps: IsolateHeap[] = [];
  for (const t of await targets(inspectorPort)) {
    const s = await session(t.webSocketDebuggerUrl);
    try {
      const usage = (await s.send("Runtime.getHeapUsage", {}, 5_000)) as { usedSize: number; totalSize: number } | null;
      if (usage) heaps.push({ target: t.id, usedBytes: usage.usedSize, totalBytes: usage.totalSize });
    } finally {
      s.close();
    }
  }
  return heaps.sort((a, b) => b.usedBytes - a.usedBytes);
}

/** Runs a full garbage collection in every isolate that answers (JS objects that own C++ memory free it then). */
export async function collectGarbage(inspectorPort: number): Promise<void> {
  for (const t of await targets(inspectorPort)) {
    const s = await session(t.webSocketDebuggerUrl);
    try {
      await s.send("HeapProfiler.collectGarbage", {}, 20_000);
    } finally {
      s.close();
    }
  }
}

/** Writes a heap snapshot (.heapsnapshot, for Chrome DevTools' Memory tab) of the isolate titled `target`. */
export async function writeHeapSnapshot(inspectorPort: number, target: string, file: string): Promise<void> {
  const t = (await targets(inspectorPort)).find((x) => x.id.includes(target));
  if (!t) throw new Error(`no inspector target ${target}`);
  const s = await session(t.webSocketDebuggerUrl);
  const chunks: string[] = [];
  s.on((msg) => {
    if (msg.method === "HeapProfiler.addHeapSnapshotChunk") chunks.push(String(msg.params.chunk));
  });
  try {
    await s.send("HeapProfiler.enable");
    await s.send("HeapProfiler.takeHeapSnapshot", { reportProgress: false }, 600_000);
  } finally {
    s.close();
  }
  writeFileSync(file, chunks.join(""));
}
