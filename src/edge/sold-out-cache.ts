import { fnv1a } from "../../durable-objects/shard-name";

/**
 * Isolate-local memory of sold-out SKUs, the edge's answer to a sold-out storm: once any stock
 * answer shows `available == 0`, this isolate answers `409 SOLD_OUT` on its own until the entry
 * expires (a short TTL, so units released by cancels or expiry can sell again).
 *
 * A purchase token that already made a reservation must still get that reservation back when it
 * is replayed (invariant 3), so a stock answer that shows "sold out" also carries the digest of
 * the nonces its shard has spent (32-bit hashes; at most one per reservation, so about as many
 * as the SKU has units). A reservation whose nonce is in the digest goes on to the stock object,
 * which answers the replay; any other is refused here. Without a digest for the token's shard
 * yet, the request goes on too, and its answer brings the digest.
 *
 * It is only ever a shortcut to "no": a stale entry can delay a sale by one TTL, never oversell.
 */
interface Entry {
  until: number;
  /** Spent-nonce digests by shard, as the stock objects last sent them. */
  spent: Map<number, ReadonlySet<number>>;
}

const soldOut = new Map<string, Entry>();

function alive(sku: string, now: number): Entry | undefined {
  const entry = soldOut.get(sku);
  if (entry === undefined) return undefined;
  if (entry.until > now) return entry;
  soldOut.delete(sku);
  return undefined;
}

/** Whether this isolate knows the SKU is sold out (no purchase token is minted then). */
export function isSoldOut(sku: string, now: number): boolean {
  return alive(sku, now) !== undefined;
}

/**
 * Whether a reservation with this token can be refused here: the SKU is known sold out and the
 * token's nonce is not among those its shard has spent (so it cannot be a replay).
 */
export function refusesReservation(sku: string, shard: number, nonce: string, now: number): boolean {
  const spent = alive(sku, now)?.spent.get(shard);
  return spent !== undefined && !spent.has(fnv1a(nonce));
}

/** Remembers that a SKU sold out, with the answering shard's spent-nonce digest when it sent one. */
export function markSoldOut(
  sku: string,
  now: number,
  ttlMs: number,
  digest?: { shard: number; spentNonces: readonly number[] | undefined },
): void {
  const entry = alive(sku, now) ?? { until: 0, spent: new Map() };
  entry.until = now + ttlMs;
  if (digest?.spentNonces) entry.spent.set(digest.shard, new Set(digest.spentNonces));
  soldOut.set(sku, entry);
}

/** Forgets a SKU at once, when this isolate itself saw units come back (a cancel). */
export function forgetSoldOut(sku: string): void {
  soldOut.delete(sku);
}
