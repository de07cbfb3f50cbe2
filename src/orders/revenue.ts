/**
 * What a SKU has sold, as D1's paid orders say: units, and the sum of their amounts (each order's
 * `quantity × price` as the stock object announced it). One read of the partial index
 * `orders_paid_by_sku` (migration 0007), which covers the query: no order row is read.
 */

export interface Revenue {
  paidUnits: number;
  /** Minor units in `currency`; null when no paid order in it carries an amount (a SKU without a price). */
  amount: number | null;
  /** The SKU's currency now. */
  currency: string;
  /** Paid orders in another currency (the SKU's was changed during the sale), each summed apart. */
  otherCurrencies: { currency: string; paidUnits: number; amount: number | null }[];
}

export async function revenueOf(db: D1Database, sku: string, currency: string): Promise<Revenue> {
  const { results } = await db
    .prepare(
      `SELECT currency, SUM(quantity) AS units, SUM(amount) AS amount FROM orders
       WHERE sku = ?1 AND status = 'paid' GROUP BY currency`,
    )
    .bind(sku)
    .all<{ currency: string | null; units: number; amount: number | null }>();
  // Orders from before events carried money have no currency: their units count, in the SKU's.
  const own = results.filter((r) => r.currency === currency || r.currency === null);
  const amounts = own.map((r) => r.amount).filter((a) => a !== null);
  return {
    paidUnits: results.reduce((sum, r) => sum + r.units, 0),
    amount: amounts.length === 0 ? null : amounts.reduce((sum, a) => sum + a, 0),
    currency,
    otherCurrencies: results
      .filter((r) => r.currency !== null && r.currency !== currency)
      .map((r) => ({ currency: r.currency as string, paidUnits: r.units, amount: r.amount })),
  };
}
