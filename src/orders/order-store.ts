import { desc, eq, sql } from "drizzle-orm";
import { drizzle } from "drizzle-orm/d1";
import { orderCounts as orderCountsTable, orders, processedEvents } from "../db/schema";
import { type OrderEvent, RESERVATION_STATUSES, type ReservationStatus, statusOf } from "./events";

/** D1 side of the order pipeline: applying events to `orders`, and reading orders back. */

/**
 * Applies one event in one `db.batch` (one transaction): record its id, upsert its order.
 * The upsert only moves a row to a higher `seq`, so a duplicate, a replay or an event that
 * arrives after a newer one changes nothing. Returns whether the order row changed.
 */
export async function applyOrderEvent(db: D1Database, event: OrderEvent, now: number): Promise<boolean> {
  const d1 = drizzle(db);
  const occurredAt = Date.parse(event.occurredAt);
  const [, upserted] = await d1.batch([
    d1
      .insert(processedEvents)
      .values({ eventId: event.id, reservationId: event.reservationId, processedAt: now })
      .onConflictDoNothing(),
    d1
      .insert(orders)
      .values({
        reservationId: event.reservationId,
        sku: event.sku,
        userId: event.userId,
        quantity: event.quantity,
        status: statusOf(event.type),
        expiresAt: event.expiresAt === undefined ? null : Date.parse(event.expiresAt),
        createdAt: occurredAt,
        updatedAt: occurredAt,
        lastSeq: event.seq,
      })
      .onConflictDoUpdate({
        target: orders.reservationId,
        set: {
          status: sql`excluded.status`,
          expiresAt: sql`coalesce(excluded.expires_at, ${orders.expiresAt})`,
          updatedAt: sql`excluded.updated_at`,
          lastSeq: sql`excluded.last_seq`,
          createdAt: sql`min(${orders.createdAt}, excluded.created_at)`,
        },
        setWhere: sql`excluded.last_seq > ${orders.lastSeq}`,
      }),
  ]);
  return upserted.meta.changes > 0;
}

export type OrderRow = typeof orders.$inferSelect;

export async function findOrder(db: D1Database, reservationId: string): Promise<OrderRow | undefined> {
  return drizzle(db).select().from(orders).where(eq(orders.reservationId, reservationId)).get();
}

/** A user's orders, newest first (bounded: a shopper has few). */
export async function ordersOfUser(db: D1Database, userId: string, limit = 100): Promise<OrderRow[]> {
  return drizzle(db)
    .select()
    .from(orders)
    .where(eq(orders.userId, userId))
    .orderBy(desc(orders.createdAt))
    .limit(limit);
}

/** Order rows of a SKU by status, from the counts the triggers keep (no scan of orders). */
export async function orderCounts(db: D1Database, sku: string): Promise<Record<ReservationStatus, number>> {
  const rows = await drizzle(db).select().from(orderCountsTable).where(eq(orderCountsTable.sku, sku));
  const counts = Object.fromEntries(RESERVATION_STATUSES.map((s) => [s, 0])) as Record<ReservationStatus, number>;
  for (const row of rows) counts[row.status] = row.count;
  return counts;
}

/** Order rows of every SKU by status (for `/metrics`). */
export async function allOrderCounts(db: D1Database) {
  return drizzle(db).select().from(orderCountsTable);
}
