import type { Reservation } from "../../durable-objects/stock/stock-model";
import { findOrder, orderAsReservation } from "./order-store";

/**
 * A finished reservation as D1 recorded it. A stock object forgets its finished reservations once
 * reconciliation found them in D1 (`SkuStock.prune`), so what asks the object about an id
 * it no longer knows reads D1 instead: the owner's view and cancel, and a late payment (which the
 * object decides with this row put back). Null when D1 has no finished row for the id (a held row in
 * D1 only lags the object, which never prunes holds).
 */
export async function finishedReservation(db: D1Database, id: string): Promise<Reservation | null> {
  const row = await findOrder(db, id);
  if (!row || row.status === "held") return null;
  return { ...orderAsReservation(row), expiresAt: row.expiresAt ?? row.createdAt };
}
