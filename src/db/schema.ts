import { index, integer, primaryKey, sqliteTable, text } from "drizzle-orm/sqlite-core";
import { RESERVATION_STATUSES } from "../../durable-objects/stock-model";

/**
 * The SKU catalog: which SKUs exist and over how many shards. Stock itself lives in the stock
 * objects; this table lets the admin list SKUs and the reconciliation walk them.
 */
export const skus = sqliteTable("skus", {
  sku: text("sku").primaryKey(),
  name: text("name").notNull(),
  shards: integer("shards").notNull(),
  /** The SKU's total over all shards, as the admin last set it (reconciliation checks the sum). */
  totalStock: integer("total_stock").notNull().default(0),
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

/**
 * Order rows per SKU and status, kept by triggers on `orders` (migration 0003) in the same
 * statement as the row change, so `/metrics` and the admin view read counts without a scan.
 */
export const orderCounts = sqliteTable(
  "order_counts",
  {
    sku: text("sku").notNull(),
    status: text("status", { enum: RESERVATION_STATUSES }).notNull(),
    count: integer("count").notNull(),
  },
  (t) => [primaryKey({ columns: [t.sku, t.status] })],
);

/**
 * Event ids already applied: the consumer's idempotency record, kept for
 * `PROCESSED_EVENTS_RETENTION_MS` (src/db/retention.ts); the index serves that pruning.
 */
export const processedEvents = sqliteTable(
  "processed_events",
  {
    eventId: text("event_id").primaryKey(),
    reservationId: text("reservation_id").notNull(),
    processedAt: integer("processed_at").notNull(),
  },
  (t) => [index("processed_events_by_time").on(t.processedAt)],
);

/** Messages the order consumer gave up on (after the queue's retries), kept for replay. */
export const deadLetters = sqliteTable("dead_letters", {
  id: text("id").primaryKey(),
  queue: text("queue").notNull(),
  body: text("body").notNull(),
  attempts: integer("attempts").notNull(),
  receivedAt: integer("received_at").notNull(),
  replayedAt: integer("replayed_at"),
});

/**
 * One row per reconciliation run (cron or `POST /admin/reconcile`), kept for
 * `RECONCILE_HISTORY_RETENTION_MS` (src/db/retention.ts). The index serves the run history
 * (newest first) and that pruning.
 */
export const reconcileRuns = sqliteTable(
  "reconcile_runs",
  {
    id: text("id").primaryKey(),
    trigger: text("trigger", { enum: ["cron", "admin"] }).notNull(),
    startedAt: integer("started_at").notNull(),
    finishedAt: integer("finished_at"),
    skusChecked: integer("skus_checked").notNull().default(0),
    differences: integer("differences").notNull().default(0),
    /** SKUs whose check failed (the run went on with the others). */
    errors: integer("errors").notNull().default(0),
  },
  (t) => [index("reconcile_runs_by_start").on(t.startedAt)],
);

/**
 * Differences found by kind since the start, kept by a trigger on `reconcile_differences`
 * (migration 0004), so `flashgate_reconcile_differences_total` neither scans the differences nor
 * goes down when old runs are pruned.
 */
export const reconcileDifferenceCounts = sqliteTable("reconcile_difference_counts", {
  kind: text("kind").primaryKey(),
  count: integer("count").notNull(),
});

/** Every difference a run found, and whether it repaired it (pruned with its run). */
export const reconcileDifferences = sqliteTable(
  "reconcile_differences",
  {
    id: integer("id").primaryKey({ autoIncrement: true }),
    runId: text("run_id").notNull(),
    sku: text("sku").notNull(),
    kind: text("kind").notNull(),
    expected: text("expected").notNull(),
    actual: text("actual").notNull(),
    repaired: integer("repaired", { mode: "boolean" }).notNull(),
  },
  (t) => [index("reconcile_differences_by_run").on(t.runId)],
);

/**
 * How far each stock shard has been checked: reservations whose last event `seq` is at or below
 * `seq` were found consistent with D1, so the next run starts after it.
 */
export const reconcileWatermarks = sqliteTable(
  "reconcile_watermarks",
  {
    sku: text("sku").notNull(),
    shard: integer("shard").notNull(),
    seq: integer("seq").notNull(),
    updatedAt: integer("updated_at").notNull(),
  },
  (t) => [primaryKey({ columns: [t.sku, t.shard] })],
);

/**
 * What each payment event id said (reservation, type, money), recorded by the edge before the event
 * is applied: one record for every stock object, so the same id naming another reservation (on any
 * shard), type, amount or currency is refused. Kept for `PAYMENT_EVENT_IDS_RETENTION_MS`
 * (src/db/retention.ts), as long as the stock objects keep their answers.
 */
export const paymentEventIds = sqliteTable(
  "payment_event_ids",
  {
    eventId: text("event_id").primaryKey(),
    reservationId: text("reservation_id").notNull(),
    type: text("type", { enum: ["payment.succeeded", "payment.failed"] }).notNull(),
    /** Minor units; null when the event carries no amount (a Stripe failure). */
    amount: integer("amount"),
    /** Lower case; null when the event names none. */
    currency: text("currency"),
    receivedAt: integer("received_at").notNull(),
  },
  (t) => [index("payment_event_ids_by_time").on(t.receivedAt)],
);
