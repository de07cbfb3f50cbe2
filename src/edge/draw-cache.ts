import type { DrawInfo } from "../../durable-objects/stock/stock-model";

/**
 * Isolate-local memory of what `GET /api/skus/:sku/draw` (and `/draw/entries`) read from a SKU's
 * shard 0, the object a sale is hottest on. A decided draw never changes (its seed, entrants and
 * time are fixed, and an opened window cannot be moved), so it is kept until the isolate goes; an
 * undecided one, or a SKU without a draw, for {@link UNDECIDED_DRAW_TTL_MS}: a storm of reads costs
 * shard 0 about one read a second per isolate. Concurrent misses share one read.
 */

/** What shard 0 says about a SKU's draw: the draw, or why there is none. */
export type DrawRead = { draw: DrawInfo } | { missing: "SKU_NOT_FOUND" | "NOT_FOUND" };

/** How long an undecided draw (its entrant count moves, its seed comes at the decision) is reused. */
const UNDECIDED_DRAW_TTL_MS = 1_000;
/** SKUs remembered at most (the oldest goes first): ids of unknown SKUs must not fill the isolate. */
const MAX_SKUS = 1_000;

interface Entry {
  /** Until when it answers; Infinity while the read is in flight, and for a decided draw. */
  until: number;
  read: Promise<DrawRead>;
}

const draws = new Map<string, Entry>();

/** The SKU's draw as this isolate knows it, `read` from shard 0 when it knows nothing fresh. */
export function cachedDraw(sku: string, now: number, read: () => Promise<DrawRead>): Promise<DrawRead> {
  const known = draws.get(sku);
  if (known && known.until > now) return known.read;
  const entry: Entry = { until: Number.POSITIVE_INFINITY, read: read() };
  draws.delete(sku); // re-inserted last: the Map's order is the eviction order
  draws.set(sku, entry);
  if (draws.size > MAX_SKUS) {
    const oldest = draws.keys().next();
    if (!oldest.done) draws.delete(oldest.value);
  }
  entry.read.then(
    (answer) => {
      // Counted from when the read began: the answer is at least that fresh.
      if (!("draw" in answer) || answer.draw.decidedAt === null) entry.until = now + UNDECIDED_DRAW_TTL_MS;
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
