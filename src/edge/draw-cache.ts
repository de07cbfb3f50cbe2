import type { DrawInfo } from "../../durable-objects/stock/stock-model";
import { sharedRead } from "../http/shared-read";

/**
 * Isolate-local memory of what `GET /api/skus/:sku/draw` (and `/draw/entries`) read from a SKU's
 * shard 0, the object a sale is hottest on, kept {@link DRAW_TTL_MS}: a storm of reads costs shard 0
 * about one read a second per isolate. Even a decided draw is only kept that long: shard 0 takes a
 * later opening after a decision (the edge's own rule refuses to move an opened start, by its clock),
 * and what this memory holds must not depend on which rule judged it.
 * Concurrent misses share one read, for a bounded time (src/http/shared-read.ts).
 */

/** What shard 0 says about a SKU's draw: the draw, or why there is none. */
export type DrawRead = { draw: DrawInfo } | { missing: "SKU_NOT_FOUND" | "NOT_FOUND" };

/** How long an answer is reused (an undecided draw's entrant count moves, its seed comes at the decision). */
const DRAW_TTL_MS = 1_000;
/** SKUs remembered at most (the oldest goes first): ids of unknown SKUs must not fill the isolate. */
const MAX_SKUS = 1_000;

interface Entry {
  /** Until when it answers; Infinity while the read is in flight. */
  until: number;
  read: Promise<DrawRead>;
  /** When the read began (a read in flight is shared for a bounded time: src/http/shared-read.ts). */
  startedAt: number;
}

const draws = new Map<string, Entry>();

/** The SKU's draw as this isolate knows it, `read` from shard 0 when it knows nothing fresh. */
export function cachedDraw(sku: string, now: number, read: () => Promise<DrawRead>): Promise<DrawRead> {
  const known = draws.get(sku);
  if (known && known.until === Number.POSITIVE_INFINITY) {
    return sharedRead(known.read, known.startedAt, () => readNow(sku, Date.now(), read));
  }
  if (known && known.until > now) return known.read;
  return readNow(sku, now, read);
}

/** Reads the draw now, in this request, and keeps the read for the requests after it. */
function readNow(sku: string, now: number, read: () => Promise<DrawRead>): Promise<DrawRead> {
  const entry: Entry = { until: Number.POSITIVE_INFINITY, read: read(), startedAt: now };
  draws.delete(sku); // re-inserted last: the Map's order is the eviction order
  draws.set(sku, entry);
  if (draws.size > MAX_SKUS) {
    const oldest = draws.keys().next();
    if (!oldest.done) draws.delete(oldest.value);
  }
  entry.read.then(
    () => {
      // Counted from when the read began: the answer is at least that fresh.
      entry.until = now + DRAW_TTL_MS;
    },
    () => {
      // A failed read (the object busy or restarting) is not an answer: the next request reads again.
      if (draws.get(sku) === entry) draws.delete(sku);
    },
  );
  return entry.read;
}

/** Forgets a SKU's draw (its window was just set or changed by an admin PUT in this isolate). */
export function forgetDraw(sku: string): void {
  draws.delete(sku);
}
