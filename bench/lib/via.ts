/**
 * The two ways into a Worker's workerd here:
 * - `entry`: through Miniflare's entry worker, as `wrangler dev` serves it. That worker runs in front
 *   of every request, exists only locally, and costs two to three times a bare Worker's own CPU (bench
 *   "What the code costs"), so every ratio to a bare Worker served this way is squeezed toward 1.
 * - `direct`: the Worker's own socket in the same workerd (Miniflare's `unsafeDirectSockets`), nothing
 *   in front: the nearest this machine comes to Cloudflare, where no entry worker runs or is billed.
 * Every edge point runs both ways; a point's key ends in `_direct` when it came in directly.
 */
export type Via = "entry" | "direct";
export const VIAS: readonly Via[] = ["entry", "direct"];

export function viaKey(key: string, via: Via): string {
  return via === "direct" ? `${key}_direct` : key;
}

/** The server as `via` reaches it: its URL and, for a Worker, its label. */
export function through<S extends { url: string; directUrl: string; label?: string }>(server: S, via: Via): S {
  if (via === "entry") return server;
  return {
    ...server,
    url: server.directUrl,
    ...(server.label === undefined ? {} : { label: `${server.label}, direct` }),
  };
}
