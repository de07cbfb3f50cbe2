import { index, integer, sqliteTable, text } from "drizzle-orm/sqlite-core";
import { RESERVATION_STATUSES } from "../orders/events";

/**
 * The SKU catalog: which SKUs exist and over how many shards. Stock itself lives in the stock
 * objects; this table lets the admin list SKUs and the reconciliation walk them.
 */
export const skus = sqliteTable("skus", {
  sku: text("sku").primaryKey(),
  name: text("name").notNull(),
  shards: integer("shards").notNull(),
  createdAt: integer("created_at").notNull(),
  updatedAt: integer("updated_at").notNull(),
});

/**
 * One row per acknowledged reservation (invariant 4), written only by the queue consumer.
 * `last_seq` is the stock object's event sequence number of the status shown: an event applies
 * only when its seq is higher, so duplicates and reordered deliveries converge to the same row.
 */
export const orders = sqliteTable(
  "orders",
  {
    reservationId: text("reservation_id").primaryKey(),
    sku: text("sku").notNull(),
    userId: text("user_id").notNull(),
    quantity: integer("quantity").notNull(),
    status: text("status", { enum: RESERVATION_STATUSES }).notNull(),
    expiresAt: integer("expires_at"),
    createdAt: integer("created_at").notNull(),
    updatedAt: integer("updated_at").notNull(),
    lastSeq: integer("last_seq").notNull(),
  },
  (t) => [index("orders_by_sku_status").on(t.sku, t.status), index("orders_by_user").on(t.userId, t.createdAt)],
);

/** Event ids already applied: the consumer's idempotency record. */
export const processedEvents = sqliteTable("processed_events", {
  eventId: text("event_id").primaryKey(),
  reservationId: text("reservation_id").notNull(),
  processedAt: integer("processed_at").notNull(),
});

/** Messages the order consumer gave up on (after the queue's retries), kept for replay. */
export const deadLetters = sqliteTable("dead_letters", {
  id: text("id").primaryKey(),
  queue: text("queue").notNull(),
  body: text("body").notNull(),
  attempts: integer("attempts").notNull(),
  receivedAt: integer("received_at").notNull(),
  replayedAt: integer("replayed_at"),
});
