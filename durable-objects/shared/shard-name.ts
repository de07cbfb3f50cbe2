import { fnv1a } from "./fnv1a";

/** The name of a SKU shard's stock object: `idFromName` of it addresses the object everywhere. */
export function shardName(sku: string, shard: number): string {
  return `${sku}#${shard}`;
}

/** A user's home shard: fixed per user, so the per-user limit is checked in one place. */
export function homeShard(userId: string, shards: number): number {
  return fnv1a(userId) % shards;
}
