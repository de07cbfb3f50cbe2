import { Log, LogLevel, Miniflare } from "miniflare";
import { childrenNamed } from "../../tools/proc";
import { freePort } from "../../tools/redis-server";

/**
 * The ceiling: a bare Worker (`fetch() → new Response('{"ok":true}')`) in its own workerd, started
 * through Miniflare exactly like Flashgate's (same entry worker in front), so the ratio to it is
 * what Flashgate's own code costs.
 */
export interface BareWorker {
  url: string;
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
  } = {},
): Promise<BareWorker> {
  const port = await freePort();
  const before = new Set(childrenNamed(process.pid, "workerd"));
  const mf = new Miniflare({
    host: "127.0.0.1",
    port,
    cf: false,
    log: new Log(LogLevel.WARN),
    modules: true,
    script,
    compatibilityDate: "2026-04-20",
    ...extra,
  });
  await mf.ready;
  const pid = childrenNamed(process.pid, "workerd").find((p) => !before.has(p));
  if (pid === undefined) throw new Error(`could not find the ${label} Worker's workerd process`);
  return { url: `http://127.0.0.1:${port}`, pid, stop: () => mf.dispose() };
}
