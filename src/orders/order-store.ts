import { desc, eq } from "drizzle-orm";
import { drizzle } from "drizzle-orm/d1";
import {
  type OrderEvent,
  RESERVATION_STATUSES,
  type ReservationStatus,
  statusOf,
} from "../../durable-objects/stock/stock-model";
import { orderCounts as orderCountsTable, orders } from "../db/schema";
import { ENDPOINTS_DUE_SQL } from "../handoff/deliveries";

/** D1 side of the order pipeline: applying events to `orders`, and reading orders back. */

/** D1 binds at most 100 parameters per statement (https://developers.cloudflare.com/d1/platform/limits/). */
export const D1_MAX_BOUND_PARAMETERS = 100;

const PROCESSED_COLUMNS = ["event_id", "reservation_id", "processed_at"] as const;
const ORDER_COLUMNS = [
  "reservation_id",
  "sku",
  "user_id",
  "quantity",
  "status",
  "expires_at",
  "created_at",
  "updated_at",
  "last_seq",
  "amount",
  "currency",
] as const;

/** Rows per multi-row statement so that it binds at most {@link D1_MAX_BOUND_PARAMETERS}. */
function rowsPerStatement(columns: number): number {
  return Math.floor(D1_MAX_BOUND_PARAMETERS / columns);
}

/** `(?, ?, ?), (?, ?, ?)`: the VALUES list of `rows` rows of `columns` parameters. */
function valuesList(rows: number, columns: number): string {
  const row = `(${Array(columns).fill("?").join(", ")})`;
  return Array(rows).fill(row).join(", ");
}

/** Splits `items` into runs of at most `size`. */
function chunks<T>(items: readonly T[], size: number): T[][] {
  const out: T[][] = [];
  for (let i = 0; i < items.length; i += size) out.push(items.slice(i, i + size));
  return out;
}

/**
 * Record the event ids (idempotency, kept for retention's window); a duplicate id changes nothing.
 * SQL text per row count is built once (at most two shapes in use: full chunks and one remainder).
 */
const processedSql = (rows: number) =>
  `INSERT INTO processed_events (${PROCESSED_COLUMNS.join(", ")}) VALUES ${valuesList(rows, PROCESSED_COLUMNS.length)}
   ON CONFLICT (event_id) DO NOTHING`;

/**
 * The seq guard: a row only moves to a higher `last_seq`, so a duplicate, a replay or an event that
 * arrives after a newer one changes nothing, whatever the order of rows within one statement (SQLite
 * applies them one after another). RETURNING names the rows that changed, to tell applied from duplicate.
 */
const ordersSql = (rows: number) =>
  `INSERT INTO orders (${ORDER_COLUMNS.join(", ")}) VALUES ${valuesList(rows, ORDER_COLUMNS.length)}
   ON CONFLICT (reservation_id) DO UPDATE SET
     status = excluded.status,
     expires_at = coalesce(excluded.expires_at, orders.expires_at),
     updated_at = excluded.updated_at,
     last_seq = excluded.last_seq,
     created_at = min(orders.created_at, excluded.created_at),
     amount = CASE WHEN excluded.currency IS NULL THEN orders.amount ELSE excluded.amount END,
     currency = coalesce(excluded.currency, orders.currency)
   WHERE excluded.last_seq > orders.last_seq
   RETURNING reservation_id, last_seq`;

const sqlCache = new Map<string, string>();
function cachedSql(kind: "processed" | "orders", rows: number): string {
  const key = `${kind}:${rows}`;
  let text = sqlCache.get(key);
  if (text === undefined) {
    text = kind === "processed" ? processedSql(rows) : ordersSql(rows);
    sqlCache.set(key, text);
  }
  return text;
}

/**
 * The statements that apply `events` (in the order given): multi-row inserts of their ids into
 * `processed_events`, then multi-row upserts of their orders, each statement within D1's bound
 * parameter limit (33 ids or 9 orders per statement). Built on D1's own prepared statements rather
 * than drizzle's query builder: on this path the builder cost more CPU than D1 itself (profile in
 * src/orders/README.md, "Persist").
 */
function applyStatements(db: D1Database, events: readonly OrderEvent[], now: number) {
  const processed = chunks(events, rowsPerStatement(PROCESSED_COLUMNS.length)).map((run) =>
    db.prepare(cachedSql("processed", run.length)).bind(...run.flatMap((e) => [e.id, e.reservationId, now])),
  );
  const upserts = chunks(events, rowsPerStatement(ORDER_COLUMNS.length)).map((run) =>
    db.prepare(cachedSql("orders", run.length)).bind(
      ...run.flatMap((e) => {
        const occurredAt = Date.parse(e.occurredAt);
        return [
          e.reservationId,
          e.sku,
          e.userId,
          e.quantity,
          statusOf(e.type),
          e.expiresAt === undefined ? null : Date.parse(e.expiresAt),
          e.heldAt === undefined ? occurredAt : Date.parse(e.heldAt),
          occurredAt,
          e.seq,
          e.amount ?? null,
          e.currency ?? null,
        ];
      }),
    ),
  );
  // A test sale's orders (API.md "Test sales") are marked after their upserts, in the same batch: a
  // real sale's events, nearly all of them, bind no column more (the feed and the webhooks read the
  // flag from the row when they are read or sent, and no trigger watches it).
  const tests = [...new Set(events.filter((e) => e.test === true).map((e) => e.reservationId))];
  const marks = chunks(tests, D1_MAX_BOUND_PARAMETERS).map((run) =>
    db
      .prepare(`UPDATE orders SET test = 1 WHERE test = 0 AND reservation_id IN (${run.map(() => "?").join(", ")})`)
      .bind(...run),
  );
  // Sizes: each order's variant, set once by the first event that carries it (grouped by variant).
  const byVariant = new Map<string, Set<string>>();
  for (const e of events) {
    if (e.variant != null) byVariant.set(e.variant, (byVariant.get(e.variant) ?? new Set()).add(e.reservationId));
  }
  for (const [variant, ids] of byVariant) {
    for (const run of chunks([...ids], D1_MAX_BOUND_PARAMETERS - 1)) {
      marks.push(
        db
          .prepare(
            `UPDATE orders SET variant = ? WHERE variant IS NULL AND reservation_id IN (${run.map(() => "?").join(", ")})`,
          )
          .bind(variant, ...run),
      );
    }
  }
  return { processed, upserts, marks };
}

/** What {@link applyOrderEvents} did. */
export interface Applied {
  /**
   * Per event, whether it changed its order row (an event that a later one in the same call
   * overtook still counts as applied: it was, then the later one moved the row on).
   */
  changed: boolean[];
  /** The enabled endpoints with a delivery due (its changes' among them): whose sender objects to wake. */
  dueEndpoints: string[];
}

/**
 * Applies events in the order given in one `db.batch`: one round trip and one transaction for all of
 * them, which either applies all or none. The triggers of `orders` give each change its feed
 * position and its webhook deliveries in the same transaction (migration 0006); the batch's last
 * statement asks which endpoints have deliveries due, so waking their senders costs no round trip.
 */
export async function applyOrderEvents(db: D1Database, events: readonly OrderEvent[], now: number): Promise<Applied> {
  if (events.length === 0) return { changed: [], dueEndpoints: [] };
  const { processed, upserts, marks } = applyStatements(db, events, now);
  const due = db.prepare(ENDPOINTS_DUE_SQL);
  const results = await db.batch<{ reservation_id: string; last_seq: number; id?: string }>([
    ...processed,
    ...upserts,
    ...marks,
    due,
  ]);
  // Each row the upserts inserted or moved, once per time it did: (reservation, seq) names one event.
  const changed = new Map<string, number>();
  for (const result of results.slice(processed.length, processed.length + upserts.length)) {
    for (const row of result.results) {
      const key = `${row.reservation_id}\u0000${row.last_seq}`;
      changed.set(key, (changed.get(key) ?? 0) + 1);
    }
  }
  const dueEndpoints = (results.at(-1)?.results ?? []).flatMap((row) => (row.id === undefined ? [] : [row.id]));
  return {
    changed: events.map((e) => {
      const key = `${e.reservationId}\u0000${e.seq}`;
      const left = changed.get(key) ?? 0;
      if (left === 0) return false;
      changed.set(key, left - 1);
      return true;
    }),
    dueEndpoints,
  };
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
    ...(row.variant === null ? {} : { variant: row.variant }),
  };
}

export async function findOrder(db: D1Database, reservationId: string): Promise<OrderRow | undefined> {
  return drizzle(db).select().from(orders).where(eq(orders.reservationId, reservationId)).get();
}

/**
 * A user's orders, newest first (index `orders_by_user`). `limit` null: every one, as
 * `GET /api/me/reservations` lists them (a cap there silently dropped a shopper's older orders, paid ones too).
 */
export async function ordersOfUser(db: D1Database, userId: string, limit: number | null = 100): Promise<OrderRow[]> {
  const query = drizzle(db).select().from(orders).where(eq(orders.userId, userId)).orderBy(desc(orders.createdAt));
  return limit === null ? query : query.limit(limit);
}

/** Order rows of a SKU by status, from the counts the triggers keep (no scan of orders). */
export async function orderCounts(db: D1Database, sku: string): Promise<Record<ReservationStatus, number>> {
  const rows = await drizzle(db).select().from(orderCountsTable).where(eq(orderCountsTable.sku, sku));
  const counts = Object.fromEntries(RESERVATION_STATUSES.map((s) => [s, 0])) as Record<ReservationStatus, number>;
  for (const row of rows) counts[row.status] = row.count;
  return counts;
}
