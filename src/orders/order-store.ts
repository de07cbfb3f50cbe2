import { desc, eq, sql } from "drizzle-orm";
import { type DrizzleD1Database, drizzle } from "drizzle-orm/d1";
import {
  type OrderEvent,
  RESERVATION_STATUSES,
  type ReservationStatus,
  statusOf,
} from "../../durable-objects/stock-model";
import { orderCounts as orderCountsTable, orders, processedEvents } from "../db/schema";

/** D1 side of the order pipeline: applying events to `orders`, and reading orders back. */

/**
 * Applies one event in one `db.batch` (one transaction): record its id, upsert its order.
 * The upsert only moves a row to a higher `seq`, so a duplicate, a replay or an event that
 * arrives after a newer one changes nothing. Returns whether the order row changed.
 */
export async function applyOrderEvent(db: D1Database, event: OrderEvent, now: number): Promise<boolean> {
  const [changed] = await applyOrderEvents(db, [event], now);
  return changed === true;
}

/**
 * Applies events in the order given, each as {@link applyOrderEvent} does, in one `db.batch`: one
 * round trip and one transaction for all of them, which either applies all or none. Returns, per
 * event, whether its order row changed.
 */
export async function applyOrderEvents(db: D1Database, events: readonly OrderEvent[], now: number): Promise<boolean[]> {
  const d1 = drizzle(db);
  const [first, ...rest] = events.flatMap((event) => eventStatements(d1, event, now));
  if (!first) return [];
  const results = await d1.batch([first, ...rest]);
  return events.map((_, i) => (results[2 * i + 1]?.meta.changes ?? 0) > 0);
}

/** One event's two statements: record its id, upsert its order (only to a higher `seq`). */
function eventStatements(d1: DrizzleD1Database, event: OrderEvent, now: number) {
  const occurredAt = Date.parse(event.occurredAt);
  return [
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
  ] as const;
}

export type OrderRow = typeof orders.$inferSelect;

/** An order row read back as the reservation it records. */
export function orderAsReservation(row: OrderRow) {
  return {
    id: row.reservationId,
    sku: row.sku,
    userId: row.userId,
    quantity: row.quantity,
    status: row.status,
    createdAt: row.createdAt,
    expiresAt: row.expiresAt,
    updatedAt: row.updatedAt,
  };
}

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
