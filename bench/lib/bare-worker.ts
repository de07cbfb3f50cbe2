import { Log, LogLevel, Miniflare } from "miniflare";
import { workerdChildren } from "../../tools/proc";
import { freePort } from "../../tools/redis-server";

/**
 * The ceiling: a bare Worker (`fetch() → new Response('{"ok":true}')`) in its own workerd, started
 * through Miniflare exactly like Flashgate's and reached the same two ways (through Miniflare's entry
 * worker, and directly), so the ratio to it is what Flashgate's own code costs.
 */
export interface BareWorker {
  /** Through Miniflare's entry worker. */
  url: string;
  /** The Worker's own socket in the same workerd (bench/lib/via.ts). */
  directUrl: string;
  pid: number;
  stop(): Promise<void>;
}

const SCRIPT = `export default {
  fetch() {
    return new Response('{"ok":true}', { headers: { "content-type": "application/json" } });
  },
};`;

export function startBareWorker(): Promise<BareWorker> {
  return startScriptWorker("bare", SCRIPT);
}

/** A one-module Worker in a workerd of its own, found as the new child process (for /proc). */
export async function startScriptWorker(
  label: string,
  script: string,
  extra: {
    bindings?: Record<string, string>;
    ratelimits?: Record<string, { simple: { limit: number; period: number } }>;
    /** For a script that imports modules from disk: where it is taken to be, and what Miniflare may load. */
    scriptPath?: string;
    modulesRoot?: string;
    modulesRules?: { type: "ESModule"; include: string[] }[];
    durableObjects?: Record<string, { className: string; useSQLite: boolean }>;
    durableObjectsPersist?: string;
    d1Databases?: Record<string, string>;
    d1Persist?: string;
  } = {},
): Promise<BareWorker> {
  const port = await freePort();
  const before = new Set(workerdChildren(process.pid));
  const mf = new Miniflare({
    host: "127.0.0.1",
    port,
    cf: false,
    log: new Log(LogLevel.WARN),
    modules: true,
    unsafeDirectSockets: [{ host: "127.0.0.1" }],
    script,
    compatibilityDate: "2026-04-20",
    ...extra,
  });
  await mf.ready;
  const pid = workerdChildren(process.pid).find((p) => !before.has(p));
  if (pid === undefined) throw new Error(`could not find the ${label} Worker's workerd process`);
  const directUrl = (await mf.unsafeGetDirectURL()).origin;
  return { url: `http://127.0.0.1:${port}`, directUrl, pid, stop: () => mf.dispose() };
}
