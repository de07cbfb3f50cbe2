/** The name of a SKU shard's stock object: `idFromName` of it addresses the object everywhere. */
export function shardName(sku: string, shard: number): string {
  return `${sku}#${shard}`;
}
