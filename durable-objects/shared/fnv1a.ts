/** FNV-1a, 32 bits: cheap, stable, and spreads short ids well (home shards, spent-nonce digests, ETags). */
export function fnv1a(text: string): number {
  let hash = 0x811c9dc5;
  for (let i = 0; i < text.length; i++) {
    hash ^= text.charCodeAt(i);
    hash = Math.imul(hash, 0x01000193);
  }
  return hash >>> 0;
}
