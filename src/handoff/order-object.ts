import type { ReservationStatus } from "../../durable-objects/stock/stock-model";
import type { orders } from "../db/schema";

/**
 * The order object both hand-offs carry (API.md "Order hand-off"): the order as one change left it.
 * `status`, `updatedAt` and the money are the change's (order_changes), the rest is the order's and
 * never changes, so a webhook's body is the same on every attempt and a feed entry says what that
 * change said.
 */
export interface OrderObject {
  reservationId: string;
  sku: string;
  userId: string;
  quantity: number;
  status: ReservationStatus;
  amount: number | null;
  currency: string | null;
  /** An order of a test SKU (API.md v1.4 "Test sales"): the shop's systems can skip it. */
  test: boolean;
  /** Sizes (API.md v1.4): the variant held; null for a SKU without variants. */
  variant: string | null;
  createdAt: string;
  updatedAt: string;
}

/** A row of `order_changes` joined with its `orders` row (the columns both readers select). */
export interface ChangeRow {
  position: number;
  status: ReservationStatus;
  changed_at: number;
  reservation_id: string;
  sku: string;
  user_id: string;
  quantity: number;
  amount: number | null;
  currency: string | null;
  /** 0 or 1 (SQLite). */
  test: number;
  variant: string | null;
  created_at: number;
}

/** The SELECT list of {@link ChangeRow}, for `order_changes c JOIN orders o`. */
export const CHANGE_COLUMNS =
  "c.position, c.status, c.changed_at, c.amount, c.currency, o.reservation_id, o.sku, o.user_id, o.quantity, o.test, o.variant, o.created_at";

export function orderObjectOf(row: ChangeRow): OrderObject {
  // A hold's change is made at the order's creation: one date written for both, as a sender does it per delivery.
  const createdAt = new Date(row.created_at).toISOString();
  return {
    reservationId: row.reservation_id,
    sku: row.sku,
    userId: row.user_id,
    quantity: row.quantity,
    status: row.status,
    amount: row.amount,
    currency: row.currency,
    test: row.test === 1,
    variant: row.variant,
    createdAt,
    updatedAt: row.changed_at === row.created_at ? createdAt : new Date(row.changed_at).toISOString(),
  };
}

/** The order object of an order as its D1 row is now (the admin lookup; a change row has its own). */
export function orderObjectOfRow(row: typeof orders.$inferSelect): OrderObject {
  return {
    reservationId: row.reservationId,
    sku: row.sku,
    userId: row.userId,
    quantity: row.quantity,
    status: row.status,
    amount: row.amount,
    currency: row.currency,
    test: row.test,
    variant: row.variant,
    createdAt: new Date(row.createdAt).toISOString(),
    updatedAt: new Date(row.updatedAt).toISOString(),
  };
}
