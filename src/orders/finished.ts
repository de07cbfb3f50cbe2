import type { Reservation } from "../../durable-objects/stock/stock-model";
import { catalogHasShard } from "../catalog/sku-catalog";
import { callStock, locateReservation, stockShard } from "../stock/stock-client";
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

/**
 * A reservation as it is now: its stock object's, or D1's finished row once the object forgot it.
 * Null when neither has it; an id naming no shard the SKU ever had reaches no object.
 */
export async function currentReservation(env: Env, id: string): Promise<Reservation | null> {
  const where = locateReservation(id);
  if (!where) return null;
  const live = (await catalogHasShard(env, where.sku, where.shard))
    ? await callStock(() => stockShard(env, where.sku, where.shard).reservation(id))
    : null;
  return live ?? (await finishedReservation(env.DB, id));
}
