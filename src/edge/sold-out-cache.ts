import { fnv1a } from "../../durable-objects/shared/fnv1a";
import type { SpentDigest } from "../../durable-objects/stock/stock-model";

/**
 * Isolate-local memory of sold-out SKUs, the edge's answer to a sold-out storm: once any stock
 * answer shows `available == 0`, this isolate answers `409 SOLD_OUT` on its own until the entry
 * expires (a short TTL, so units released by cancels or expiry can sell again).
 *
 * A purchase token that already made a reservation must still get that reservation back when it
 * is replayed (invariant 3), so a stock answer that shows "sold out" also carries the digest of
 * the nonces its shard has spent (32-bit hashes; one per reservation, so about as many as the SKU
 * has units, and for a token lifetime after a fair opening's window, one per token that entered its
 * draw). A reservation whose nonce is in the digest goes on to the stock object,
 * which answers the replay; any other is refused here. Without a digest for the token's shard
 * yet, the request goes on too, and its answer brings the digest.
 *
 * It is only ever a shortcut to "no": a stale entry can delay a sale by one TTL, never oversell.
 * The same holds for replays: a unit released and sold again on another isolate within the TTL of
 * this isolate's digest is not in it, so that buyer's replay may be answered SOLD_OUT here until
 * the digest is a TTL old; the reservation itself is untouched and the next try returns it.
 */
interface Digest {
  seq: number;
  /** When this isolate received it: a digest older than the TTL no longer refuses anything. */
  at: number;
  nonces: ReadonlySet<number>;
}

interface Entry {
  until: number;
  /** Spent-nonce digests by shard, the newest (highest seq) each stock object sent. */
  spent: Map<number, Digest>;
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
 * Whether a reservation with this token can be refused here: the SKU is known sold out, and a
 * digest of the token's shard no older than the TTL shows that its nonce is not spent (so it
 * cannot be a replay).
 */
export function refusesReservation(sku: string, shard: number, nonce: string, now: number, ttlMs: number): boolean {
  return spentHere(sku, shard, nonce, now, ttlMs) === false;
}

/**
 * Whether this token's nonce is spent (its token may hold a reservation), by a digest of its shard
 * no older than the TTL; undefined when this isolate has none.
 */
export function spentHere(sku: string, shard: number, nonce: string, now: number, ttlMs: number): boolean | undefined {
  const digest = alive(sku, now)?.spent.get(shard);
  return digest !== undefined && now - digest.at < ttlMs ? digest.nonces.has(fnv1a(nonce)) : undefined;
}

/** Whether a digest a stock object sent lists this nonce. */
export const digestLists = (spent: SpentDigest, nonce: string): boolean => spent.nonces.includes(fnv1a(nonce));

/** The digests already turned into sets, by the array the stock object sent (a batch shares one). */
const sets = new WeakMap<readonly number[], ReadonlySet<number>>();

/** Remembers that a SKU sold out, with the answering shard's spent-nonce digest when it sent one. */
export function markSoldOut(
  sku: string,
  now: number,
  ttlMs: number,
  digest?: { shard: number; spent: SpentDigest | undefined },
): void {
  const entry = alive(sku, now) ?? { until: 0, spent: new Map() };
  entry.until = now + ttlMs;
  const spent = digest?.spent;
  if (digest && spent && spent.seq >= (entry.spent.get(digest.shard)?.seq ?? -1)) {
    let nonces = sets.get(spent.nonces);
    if (!nonces) {
      nonces = new Set(spent.nonces);
      sets.set(spent.nonces, nonces);
    }
    entry.spent.set(digest.shard, { seq: spent.seq, at: now, nonces });
  }
  soldOut.set(sku, entry);
  const slash = sku.indexOf("/");
  if (slash > 0) sized.add(sku.slice(0, slash)); // a size's key: its SKU's requests are read first
}

/**
 * Sizes (API.md v1.4): a variant's key in this cache, beside its SKU's (a SKU id has no `/`). A
 * request whose listed variants are all sold out here is answered as a sold-out SKU's.
 */
export function variantKey(sku: string, variant: string): string {
  return `${sku}/${variant}`;
}

/** SKUs whose sizes this isolate has keyed: only their requests' bodies are read before their JWT. */
const sized = new Set<string>();

/** Whether this isolate may know sizes of this SKU sold out (then a request's sizes are worth reading). */
export function hasSizesSoldOut(sku: string): boolean {
  return sized.has(sku);
}

/** Forgets a SKU (and its sizes) at once, when this isolate itself saw units come back (a cancel). */
export function forgetSoldOut(sku: string): void {
  soldOut.delete(sku);
  if (!sized.delete(sku)) return;
  const sizes = `${sku}/`;
  for (const key of soldOut.keys()) if (key.startsWith(sizes)) soldOut.delete(key);
}
