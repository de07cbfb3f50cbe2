/**
 * Sizes (API.md v1.4 "Sizes (variants)"): a buyer's list of variants, as the units that take one
 * (holds, the line, the draw) check and store it.
 */

/** Whether `variants` fit a SKU's: required (every id known) when it has variants, absent else. */
export function variantsFit(stock: ReadonlyMap<string, unknown>, variants: readonly string[] | undefined): boolean {
  if (stock.size === 0) return variants === undefined || variants.length === 0;
  return variants !== undefined && variants.length > 0 && variants.every((id) => stock.has(id));
}

/** An entry's variants as the line's and the draw's JSON column keeps them (null: none listed). */
export function variantsColumn(variants: readonly string[] | undefined): string | null {
  return variants && variants.length > 0 ? JSON.stringify(variants) : null;
}

/**
 * An entry's variants in order of preference, from the JSON column the line and the draw keep them
 * in (undefined: a SKU without variants).
 */
export function listedVariants(row: { variants?: string | null }): string[] | undefined {
  return row.variants == null ? undefined : (JSON.parse(row.variants) as string[]);
}
