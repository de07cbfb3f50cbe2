import { env } from "cloudflare:workers";

/** A SKU's sale log entries as stored, read from the entry bundles of its last head (workerd tests). */
export async function logEntriesOf(sku: string): Promise<Record<string, unknown>[]> {
  const log = env.SALE_LOG.getByName(sku);
  await log.recordHead();
  const size = (await log.head()).size;
  const out: Record<string, unknown>[] = [];
  for (let n = 0; n * 256 < size; n++) {
    const width = Math.min(256, size - n * 256);
    const bundle = await log.entryBundle(n, width);
    if (!bundle) throw new Error(`no bundle ${n}`);
    for (let at = 0; at < bundle.length; ) {
      const length = ((bundle[at] ?? 0) << 8) | (bundle[at + 1] ?? 0);
      out.push(JSON.parse(new TextDecoder().decode(bundle.slice(at + 2, at + 2 + length))));
      at += 2 + length;
    }
  }
  return out;
}
