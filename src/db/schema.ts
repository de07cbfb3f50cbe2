import { sql } from "drizzle-orm";
import { index, integer, primaryKey, sqliteTable, text, uniqueIndex } from "drizzle-orm/sqlite-core";
import { PAYMENT_REASONS, RESERVATION_STATUSES } from "../../durable-objects/stock/stock-model";

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
    /** `quantity × price` in minor units as the stock object last announced it; null: no price. */
    amount: integer("amount"),
    /** ISO 4217, lower case; null only for rows written before events carried money. */
    currency: text("currency"),
    /** An order of a test SKU (API.md v1.4 "Test sales"), as its first event said. */
    test: integer("test", { mode: "boolean" }).notNull().default(false),
    /** Sizes (API.md v1.4): the variant held, as its events said; null for a SKU without variants. */
    variant: text("variant"),
  },
  (t) => [
    index("orders_by_sku_status").on(t.sku, t.status),
    index("orders_by_user").on(t.userId, t.createdAt),
    // The admin view's revenue (paid units and amounts per SKU) read from the index alone.
    index("orders_paid_by_sku").on(t.sku, t.currency, t.quantity, t.amount).where(sql`status = 'paid'`),
  ],
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

/**
 * The order change feed (API.md "Order hand-off"): one row per change of an order's status, written by
 * triggers on `orders` (migration 0006) in the same statement as the change, with the money as it
 * stood then, so a change reads the same however late it is delivered. `position` is the one
 * sequence every change takes (AUTOINCREMENT: never reused), so a page after a cursor is a range
 * read of the primary key, as cheap at the end of the feed as at its start.
 */
export const orderChanges = sqliteTable(
  "order_changes",
  {
    position: integer("position").primaryKey({ autoIncrement: true }),
    reservationId: text("reservation_id").notNull(),
    status: text("status", { enum: RESERVATION_STATUSES }).notNull(),
    amount: integer("amount"),
    currency: text("currency"),
    changedAt: integer("changed_at").notNull(),
  },
  // No index on changed_at: it does not rise with position, so retention (src/db/retention.ts) cuts by
  // the key, and an index would be one more write per change for nothing (dropped by migration 0014).
);

/**
 * Every payment event that took effect or was flagged (API.md "Payments owed back"), as the stock
 * object first answered it, in the order received: `position` is the list's cursor (AUTOINCREMENT:
 * never reused). Written by the edge after the answer, keyed by event id, so a provider's retry of an
 * event whose record failed writes it then, and never twice. A `refund_required` one is owed to the
 * endpoints subscribed to `payment.refund_required` (a trigger, migration 0007).
 */
export const REFUND_STATUSES = ["refunded", "pending", "failed"] as const;

export const payments = sqliteTable(
  "payments",
  {
    position: integer("position").primaryKey({ autoIncrement: true }),
    eventId: text("event_id").notNull(),
    /** The webhook it came by: `payments` (/webhooks/payments) or `stripe`. */
    source: text("source", { enum: ["payments", "stripe"] }).notNull(),
    reservationId: text("reservation_id").notNull(),
    sku: text("sku").notNull(),
    userId: text("user_id").notNull(),
    /** Minor units, as the event said. */
    amount: integer("amount").notNull(),
    /** Lower case: the event's, else the SKU's. */
    currency: text("currency").notNull(),
    outcome: text("outcome", { enum: ["applied", "refund_required"] }).notNull(),
    /** Null for `applied`. */
    reason: text("reason", { enum: PAYMENT_REASONS }),
    /** A payment of a test SKU's order (API.md v1.4 "Test sales"). */
    test: integer("test", { mode: "boolean" }).notNull().default(false),
    /** Sizes (API.md v1.4): the variant of the reservation paid; null for a SKU without variants. */
    variant: text("variant"),
    receivedAt: integer("received_at").notNull(),
    /**
     * A refund of a `refund_required` payment (API.md v1.4 "Paying and refunding through Stripe"):
     * `refunded`, `pending` or `failed`; null while none was issued or marked.
     */
    refundStatus: text("refund_status", { enum: REFUND_STATUSES }),
    /** `stripe` (issued through Stripe's refund API) or `marked` (refunded outside Flashgate). */
    refundVia: text("refund_via", { enum: ["stripe", "marked"] }),
    /** Stripe's refund id (`re_…`); null when marked. */
    refundId: text("refund_id"),
    refundAt: integer("refund_at"),
    /** The operator's note of a refund marked done. */
    refundNote: text("refund_note"),
    /**
     * Refund attempts that failed (refunds Stripe answered `failed`, and requests it answered `5xx`, a
     * key it replays that error to): the next one is asked under a new idempotency key.
     */
    refundAttempts: integer("refund_attempts").notNull().default(0),
    /**
     * The reservation's status the event left it in, as its webhook answered: the event sent again
     * after the stock object forgot it is answered the same from here. Null in rows from before.
     */
    reservationStatus: text("reservation_status"),
  },
  (t) => [
    uniqueIndex("payments_by_event").on(t.eventId),
    // `?outcome=` pages: a range of this index from the cursor on.
    index("payments_by_outcome").on(t.outcome, t.position),
  ],
);

export const ORDER_EVENT_TYPES = RESERVATION_STATUSES.map((s) => `order.${s}` as const);
export const WEBHOOK_EVENT_TYPES = [...ORDER_EVENT_TYPES, "payment.refund_required"] as const;
export type WebhookEventType = (typeof WEBHOOK_EVENT_TYPES)[number];

/** The shop's webhook endpoints; `events` is a JSON array of event types. */
export const webhookEndpoints = sqliteTable("webhook_endpoints", {
  id: text("id").primaryKey(),
  url: text("url").notNull(),
  events: text("events", { mode: "json" }).$type<WebhookEventType[]>().notNull(),
  enabled: integer("enabled", { mode: "boolean" }).notNull(),
  /** `whsec_` + base64 of 32 random bytes, made when the endpoint is created. */
  secret: text("secret").notNull(),
  createdAt: integer("created_at").notNull(),
  updatedAt: integer("updated_at").notNull(),
  /** API.md v1.4 "Webhook batches": events per message and the oldest's longest wait; null: one event a message. */
  batch: text("batch", { mode: "json" }).$type<WebhookBatch | null>(),
  /**
   * A sender's hold on the endpoint's due rows while its attempts are out (src/handoff/deliveries.ts
   * `takeDuePage`): the sender's name and when the hold lapses (D1's clock); null when
   * no sender holds it.
   */
  lease: text("lease"),
  leaseUntil: integer("lease_until"),
});

/** An endpoint's batch setting (API.md v1.4 "Webhook batches"). */
export interface WebhookBatch {
  /** 1 to 100 events a message. */
  maxEvents: number;
  /** 0 to 10,000 ms: a message goes once `maxEvents` are due or its oldest event waited this long. */
  maxWaitMs: number;
}

/**
 * The `next_attempt_at` of a pending delivery parked by a PUT that dropped its type (the latest time a
 * Date can show): past the due range of every query, so no take, check or wake-up walks it, and none
 * counts it in a lag; a PUT that subscribes to the type again makes it due now (src/handoff/endpoints.ts).
 */
export const PARKED = 8_640_000_000_000_000;

export const DELIVERY_STATUSES = ["pending", "delivered", "failed"] as const;
export type DeliveryStatus = (typeof DELIVERY_STATUSES)[number];

/**
 * One row per order change and subscribed endpoint, written by a trigger on `order_changes` in the
 * order's own transaction, so no change can be written without its deliveries. Its key is the
 * endpoint and the change's position (the `webhook-id` is `msg_<position>_<endpoint>`, the same
 * on every attempt); a flagged payment's deliveries (trigger on `payments`) take the negative of
 * the payment's position, so the two never share a key (`webhook-id` `msg_pay_<position>_<endpoint>`); the table is WITHOUT ROWID (hand-written in migration 0006: drizzle does not
 * model it), so that key is the table itself and a delivery costs one B-tree entry and, while
 * pending, one in the due index. A pending row is due at `next_attempt_at`; a sender takes an
 * endpoint's due rows by holding the endpoint (its `lease`), not by writing them, so a row is sent by
 * one sender at a time, written once an attempt, and, if that sender dies, taken again when its hold
 * lapses.
 */
export const webhookDeliveries = sqliteTable(
  "webhook_deliveries",
  {
    endpointId: text("endpoint_id").notNull(),
    position: integer("position").notNull(),
    type: text("type").$type<WebhookEventType>().notNull(),
    reservationId: text("reservation_id").notNull(),
    status: text("status", { enum: DELIVERY_STATUSES }).notNull(),
    /** Attempts answered (or timed out); a sender that died holding the row counts none. */
    attempts: integer("attempts").notNull().default(0),
    lastStatusCode: integer("last_status_code"),
    /** The last answer's body or the error, at most 1 KB. */
    lastResponse: text("last_response"),
    /** What went wrong with the last attempt, in words ("answered 500", "timed out after 10 s…"); null once delivered. */
    lastError: text("last_error"),
    nextAttemptAt: integer("next_attempt_at"),
    /**
     * When a PUT that dropped its type parked it (D1's clock; null while not parked): retention drops a
     * row parked longer than HANDOFF_RETENTION_DAYS (src/db/retention.ts), as its type was never taken back.
     */
    parkedAt: integer("parked_at"),
    /**
     * Written by no release since the endpoint's lease replaced it (a sender held each row it took);
     * kept, with its index, for the release still running while this one rolls out (docs/DEPLOY.md
     * §12: a column is dropped only once no deployed code uses it), and dropped in the next.
     */
    lease: text("lease"),
    /**
     * The `webhook-id` of the batch message that last carried it (API.md v1.4 "Webhook batches"):
     * a batch not delivered is retried whole, with this id, from the rows that share it. Null when
     * last attempted alone, or not attempted yet.
     */
    batchId: text("batch_id"),
    createdAt: integer("created_at").notNull(),
    updatedAt: integer("updated_at").notNull(),
  },
  (t) => [
    primaryKey({ columns: [t.endpointId, t.position] }),
    // A sender takes an endpoint's due rows, oldest due first; "is anything due?" probes it per endpoint.
    index("webhook_deliveries_due").on(t.endpointId, t.nextAttemptAt).where(sql`status = 'pending'`),
    index("webhook_deliveries_by_lease").on(t.lease).where(sql`lease IS NOT NULL`),
    // The delivery log's failed ones (few), without reading the delivered.
    index("webhook_deliveries_failed").on(t.endpointId, t.position).where(sql`status = 'failed'`),
    // Retention's parked rows by the time they were parked (src/db/retention.ts): those parked past
    // retention, and those parked by a release that wrote no time (null), a seek each, not a walk of
    // every parked row every minute.
    index("webhook_deliveries_parked")
      .on(t.endpointId, t.parkedAt)
      .where(sql.raw(`status = 'pending' AND next_attempt_at >= ${PARKED}`)),
  ],
);

/**
 * The Stripe Checkout Session made for a hold (`POST /api/reservations/:id/checkout`): asked again
 * while it is open, the same session is answered. One row per session; the newest counts.
 */
export const checkoutSessions = sqliteTable(
  "checkout_sessions",
  {
    sessionId: text("session_id").primaryKey(),
    reservationId: text("reservation_id").notNull(),
    url: text("url").notNull(),
    /** When Stripe expires it (ms). */
    expiresAt: integer("expires_at").notNull(),
    createdAt: integer("created_at").notNull(),
  },
  (t) => [
    index("checkout_sessions_by_reservation").on(t.reservationId, t.createdAt),
    // Retention (src/db/retention.ts): the sessions expired past it, a range, not a walk of the table.
    index("checkout_sessions_by_expiry").on(t.expiresAt),
  ],
);

/**
 * A hold's claim on its Checkout Session (src/payments/checkout.ts), written before Stripe is asked:
 * the one request every checkout for the hold sends to Stripe (its form parameters, the expiry among
 * them) under the one idempotency key `flashgate-checkout:<reservationId>:<attempt>`, so Stripe makes
 * at most one session for it however the requests are timed, and one whose answer was lost is
 * answered again. Replaced (the attempt moves on) only once its session has expired, or when Stripe
 * said that nothing was made under its key.
 */
export const checkoutClaims = sqliteTable(
  "checkout_claims",
  {
    reservationId: text("reservation_id").primaryKey(),
    /** How many claims came before this one for the hold: the idempotency key's last part. */
    attempt: integer("attempt").notNull(),
    /** The request's form parameters (JSON), as sent to Stripe each time. */
    params: text("params").notNull(),
    /** When the claim's session expires at Stripe (ms): its `expires_at`. */
    expiresAt: integer("expires_at").notNull(),
    claimedAt: integer("claimed_at").notNull(),
  },
  // Retention (src/db/retention.ts): the claims expired past it, a range, not a walk of the table.
  (t) => [index("checkout_claims_by_expiry").on(t.expiresAt)],
);
