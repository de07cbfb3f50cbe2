/**
 * Isolate-local memory of sold-out SKUs, the edge's answer to a sold-out storm: once any stock
 * answer shows `available == 0`, this isolate answers `409 SOLD_OUT` on its own until the entry
 * expires (a short TTL, so units released by cancels or expiry can sell again).
 *
 * It is only ever a shortcut to "no": a stale entry can delay a sale by one TTL, never oversell.
 */
const soldOutUntil = new Map<string, number>();

export function isSoldOut(sku: string, now: number): boolean {
  const until = soldOutUntil.get(sku);
  if (until === undefined) return false;
  if (until > now) return true;
  soldOutUntil.delete(sku);
  return false;
}

export function markSoldOut(sku: string, now: number, ttlMs: number): void {
  soldOutUntil.set(sku, now + ttlMs);
}

/** Forgets a SKU at once, when this isolate itself saw units come back (a cancel). */
export function forgetSoldOut(sku: string): void {
  soldOutUntil.delete(sku);
}
