/** The name of a SKU shard's stock object: `idFromName` of it addresses the object everywhere. */
export function shardName(sku: string, shard: number): string {
  return `${sku}#${shard}`;
}

/** A user's home shard: fixed per user, so the per-user limit is checked in one place. */
export function homeShard(userId: string, shards: number): number {
  return fnv1a(userId) % shards;
}

/** FNV-1a, 32 bits: cheap, stable, and spreads short ids well (home shards, spent-nonce digests). */
export function fnv1a(text: string): number {
  let hash = 0x811c9dc5;
  for (let i = 0; i < text.length; i++) {
    hash ^= text.charCodeAt(i);
    hash = Math.imul(hash, 0x01000193);
  }
  return hash >>> 0;
}
