import { z } from "zod";
import { PAYMENT_REASONS, RESERVATION_STATUSES } from "../../durable-objects/stock/stock-model";
import { DELIVERY_STATUSES, ORDER_EVENT_TYPES, WEBHOOK_EVENT_TYPES } from "../db/schema";
import { ERRORS, type ErrorCode, type ErrorDetails as ErrorDetailsOfCode, JWT_REFUSALS } from "../http/errors";
import {
  AccessCodesRequest,
  CheckoutRequest,
  MarkRefundedRequest,
  PaymentEvent,
  ReservationRequest,
  SkuSettingsRequest,
  WaitlistRequest,
  WebhookEndpointRequest,
} from "../http/schemas";
import { StripeEvent } from "../payments/stripe-event";

/**
 * The named schemas of the HTTP contract (docs/API.md): the request bodies the routes validate
 * with (../http/schemas.ts, the very objects the routes import) and the shapes of the answers.
 * ./contract.ts names them on its routes; the OpenAPI document (./openapi.ts) lists them as its
 * `components.schemas`, and the tests check real answers against them.
 *
 * Answer schemas are plain (non-strict) objects: the contract allows fields to be added.
 */
const Time = z.iso.datetime({ offset: true });
const Count = z.int().min(0);
const ReservationStatus = z.enum(RESERVATION_STATUSES);
const SaleStatus = z.enum(["on_sale", "paused"]);
/** Added to v1.3: `archived` (DELETE /admin/skus/:sku), shown by the admin view only (its public routes answer 404). */
const AdminSaleStatus = z.enum(["on_sale", "paused", "archived"]);
/** Added: where the sale stands now, beside `status` (src/edge/sale-phase.ts). */
const SalePhase = z
  .enum(["scheduled", "open", "ended", "paused"])
  .describe(
    "Added: `scheduled` before startsAt (no token is issued yet), `open` within startsAt..endsAt, `ended` from endsAt, `paused` when status is paused",
  );
const OpensInSeconds = z
  .int()
  .min(1)
  .nullable()
  .describe("Added: for a scheduled sale, whole seconds until startsAt; else null");

/**
 * Added to v1.2: the figures behind an error, for a client to act on without parsing the message.
 * Every key is optional; each code carries those that apply.
 */
export const ErrorDetails = z
  .object({
    perUserLimit: z.int().min(1).optional().describe("LIMIT_EXCEEDED: the SKU's per-user limit"),
    held: Count.optional().describe("LIMIT_EXCEEDED: units this user already holds or bought (held + sold)"),
    requested: z.int().min(1).optional().describe("LIMIT_EXCEEDED, INSUFFICIENT_STOCK: the quantity asked for"),
    available: Count.optional().describe("INSUFFICIENT_STOCK, STOCK_AVAILABLE: units available when decided"),
    phase: z
      .enum(["scheduled", "ended", "paused"])
      .optional()
      .describe("SALE_NOT_ACTIVE: not open yet, closed, or paused by the shop"),
    opensAt: Time.optional().describe("SALE_NOT_ACTIVE (scheduled): when the sale opens"),
    opensInSeconds: z.int().min(1).optional().describe("SALE_NOT_ACTIVE (scheduled): seconds until it opens"),
    endedAt: Time.optional().describe("SALE_NOT_ACTIVE (ended): when the sale closed"),
    reason: z
      .enum(JWT_REFUSALS)
      .optional()
      .describe(
        "UNAUTHENTICATED (shopper JWT): why the token was refused: `missing_token`, `malformed`, `algorithm_not_allowed`, `unknown_key` (no key of the identity provider matches its `kid`), `bad_signature`, `expired`, `not_yet_valid` (`nbf` or `iat` in the future), `missing_claim`, `invalid_claim`",
      ),
    claim: z
      .string()
      .optional()
      .describe("UNAUTHENTICATED (shopper JWT): the claim at fault (`exp`, `sub`, `iss`, `aud`, `nbf`, `iat`)"),
    retryAfterSeconds: z
      .int()
      .min(1)
      .optional()
      .describe("RATE_LIMITED, BUSY: seconds to wait before sending the same request again (as Retry-After)"),
    state: z
      .string()
      .optional()
      .describe(
        "INVALID_STATE: the state found: a reservation's status (`paid`, `expired`, …), `archived` for a SKU, `window_open` / `window_past` for an opening window (`window_open` also for a tier moved while its window is open), `draw_pending` for a resize or a tier moved before its draw is decided, `invalid_event` for a dead letter; for a payment's refund `applied`, `refunded`, `pending`, `not_stripe` or `stripe_refused`; `no_price` for a Checkout of a SKU without a price",
      ),
    totalStock: Count.optional().describe("INVALID_STATE: the totalStock asked for"),
    heldOrSold: Count.optional().describe("INVALID_STATE: the SKU's units held or sold, the least totalStock can be"),
    shards: z.int().min(1).optional().describe("INVALID_STATE: the SKU's shard count, kept"),
    waiting: Count.optional().describe(
      "INVALID_STATE: buyers on the SKU's waitlist (a new shard count, and sizes for a SKU without them, need none)",
    ),
    variants: z
      .record(z.string(), Count)
      .optional()
      .describe(
        'Added to v1.4 ("Sizes"): SOLD_OUT, INSUFFICIENT_STOCK: units available of each variant the request listed',
      ),
    variant: z
      .string()
      .optional()
      .describe(
        'Added to v1.4 ("Sizes"): INVALID_STATE: the variant whose totalStock would fall below its held + sold',
      ),
    fields: z
      .array(z.object({ path: z.string(), message: z.string() }))
      .optional()
      .describe("INVALID_REQUEST: each field at fault; INVALID_STATE: a field that cannot change (`test`)"),
    unknownFields: z
      .array(z.string())
      .optional()
      .describe("INVALID_REQUEST: fields a strict (admin) body does not take; nothing was changed"),
    draw: z
      .object({ entryId: z.string(), position: z.int().min(1), entrants: z.int().min(1) })
      .optional()
      .describe(
        "A reservation refused by the opening draw (SOLD_OUT, INSUFFICIENT_STOCK, LIMIT_EXCEEDED, …): where its entry came in the draw, as a winner's reservation shows it",
      ),
  })
  .describe("Added: the figures behind the error (each code carries those that apply)");

// What the code builds (src/http/errors.ts) is what the document says.
({}) as ErrorDetailsOfCode satisfies z.infer<typeof ErrorDetails>;

export const ErrorBody = z.object({
  error: z.object({
    code: z.enum(Object.keys(ERRORS) as ErrorCode[]),
    message: z.string(),
    details: ErrorDetails.optional(),
  }),
});

/** Added to v1.3 ("Early access"): the tiers and when each opens; never their claims or codes. */
const AccessView = z
  .array(z.object({ name: z.string(), startsAt: Time }))
  .describe("Added (v1.3): early access tiers, earliest first, each opening before startsAt");

/** `POST /admin/skus/:sku/access-codes`: the codes, shown this once (only their hashes are kept). */
const AccessCodes = z.object({ tier: z.string(), codes: z.array(z.string()) });

export const PublicSku = z.object({
  sku: z.string(),
  name: z.string(),
  status: SaleStatus,
  available: Count,
  startsAt: Time.nullable(),
  endsAt: Time.nullable(),
  perUserLimit: z.int().min(1),
  price: Count.nullable(),
  currency: z.string(),
  test: z
    .boolean()
    .describe(
      'Added to v1.4 ("Test sales"): set when the SKU was created, never changed; a test SKU\'s orders, events and payments say `test: true`',
    ),
  /** Added: the fair-opening window (0: none). */
  openingWindowMs: Count.optional(),
  phase: SalePhase.optional(),
  opensInSeconds: OpensInSeconds.optional(),
  /** Added to v1.3: units held now (they may come back) and buyers in the waitlist. */
  held: Count,
  waiting: Count,
  access: AccessView.optional(),
  variants: z
    .array(z.object({ id: z.string(), name: z.string(), available: Count, held: Count }))
    .optional()
    .describe('Added to v1.4 ("Sizes"): each variant, in the order they were added; left out for a SKU without them'),
});

export const PurchaseToken = z.object({ token: z.string(), expiresAt: Time });

export const Reservation = z.object({
  reservationId: z.string(),
  sku: z.string(),
  quantity: z.int().min(1),
  status: ReservationStatus,
  /** Null only for an order recorded by an older producer that did not send it. */
  expiresAt: Time.nullable(),
  variant: z.string().nullable().describe('Added to v1.4 ("Sizes"): the variant held; null for a SKU without variants'),
  links: z.object({ self: z.string() }),
  /** A reservation decided by the opening draw: where it came (API.md "Fair opening"). */
  draw: z.object({ entryId: z.string(), position: z.int().min(1), entrants: z.int().min(1) }).optional(),
});

/**
 * The verifiable sale (API.md v1.4): the reservation's entries already in a signed checkpoint of its
 * SKU's log, each a C2SP tlog-proof whose `extra` line carries the entry; and the buyer's salt (their
 * `user` in the log is hex SHA-256 of `<salt>:<userId>`). Left out when the gateway keeps no log.
 */
const Receipts = {
  receipts: z
    .array(
      z.object({
        entry: z.enum(["hold", "paid", "refund_required", "cancelled", "expired"]),
        index: z.int().min(0),
        proof: z.string(),
      }),
    )
    .optional(),
  salt: z
    .string()
    .regex(/^[0-9a-f]{32}$/)
    .optional(),
};

/** The `202` of a reservation: the reservation and its receipts (none yet for a hold just made). */
export const ReservationHeld = Reservation.extend(Receipts);

export const ReservationDetail = Reservation.extend({
  order: z.object({ persisted: z.boolean(), status: ReservationStatus.nullable() }),
  ...Receipts,
});

export const ReservationList = z.object({ reservations: z.array(Reservation) });

export const PowChallenge = z.object({ challenge: z.string(), bits: z.int().min(1).max(28), expiresAt: Time });

export const WaitlistEntry = z.object({ waitlistId: z.string(), position: z.int().min(0) });

/** `GET /api/skus/:sku/waitlist` (v1.3 "The line, visible"): the caller's place, exact when read. */
export const WaitlistPlace = z.object({
  waitlistId: z.string(),
  position: z.int().min(1).describe("1: next in line (FIFO; first fit may serve a smaller entry behind first)"),
  quantity: z.int().min(1),
  unitsAhead: Count.describe(
    "Units the entries before this one want (sizes: those ahead that list any of the same variants)",
  ),
  variants: z
    .array(z.string())
    .optional()
    .describe('Added to v1.4 ("Sizes"): the entry\'s variants in order of preference'),
  held: Count.describe(
    "The SKU's units held now by other buyers (the caller's own holds left out): unpaid, they may come back to the line",
  ),
  joinedAt: Time,
});

/** `DELETE /api/skus/:sku/waitlist`: the entry that left. */
export const WaitlistLeft = z.object({ waitlistId: z.string(), left: z.literal(true) });

export const PaymentAck = z.object({
  received: z.literal(true),
  reservationStatus: z.string(),
  outcome: z.enum(["applied", "refund_required"]),
  expected: z
    .object({
      amount: Count.describe("Minor units: the reservation's quantity × the SKU's price"),
      currency: z.string(),
    })
    .optional()
    .describe(
      "Added: on a payment refused for its money (refund_required: wrong amount or currency) of a SKU with a price, what was due, at the price now",
    ),
});

const StockCounts = z.object({ total: Count, available: Count, held: Count, sold: Count });
const OrderCounts = z.object({ held: Count, paid: Count, expired: Count, cancelled: Count, refund_required: Count });
const MirrorCounts = z.object({ available: Count, held: Count, sold: Count, version: z.int() });

/** `GET /api/skus/:sku/draw` (API.md "Fair opening"), plus when the window opens and closes. */
/** What a draw's entry ids hash with the user id (docs/API.md "Fair opening, as built"). */
const EntryIdPrefix = z
  .enum(["salt", "sku"])
  .describe(
    "entryId = hex SHA-256 of `<prefix>:<userId>`: `salt`, the buyer's salt (so the id is their `user` in the sale log); `sku`, the SKU's id (a draw made with no sale log kept, or before salted ids)",
  );

/** Why a closed draw is not being decided (docs/API.md "Fair opening, as built"). */
const DrawStalled = z
  .enum(["log_key_missing"])
  .nullable()
  .describe(
    "null, or why the draw, its window closed, is not decided: `log_key_missing`, a salted draw (`entryIdPrefix` `salt`) while the gateway runs without LOG_SIGNING_KEY; it is decided once the key is back, and its requests answer 503 BUSY meanwhile",
  );

export const Draw = z.object({
  sku: z.string(),
  openingWindowMs: Count,
  seedHash: z.string(),
  seed: z.string().nullable(),
  entrants: Count,
  decidedAt: Time.nullable(),
  opensAt: Time,
  closesAt: Time,
  entryIdPrefix: EntryIdPrefix,
  stalled: DrawStalled,
  openings: z
    .array(
      z.object({
        opensAt: Time,
        closesAt: Time,
        seedHash: z.string(),
        seed: z.string().nullable(),
        entrants: Count,
        decidedAt: Time.nullable(),
        entryIdPrefix: EntryIdPrefix,
        stalled: DrawStalled,
      }),
    )
    .describe(
      "Every opening's draw, earliest first: each early access tier's start, then the public one (the fields above)",
    ),
});

/** `GET /api/skus/:sku/draw/entries`: decided entries in draw order, to recompute the order. */
const DrawEntries = z.object({
  sku: z.string(),
  seed: z.string().nullable(),
  entrants: Count,
  offset: Count,
  entries: z.array(
    z.object({ entryId: z.string(), position: z.int().min(1), quantity: z.int().min(1), result: z.string() }),
  ),
});

export const AdminSku = z.object({
  sku: z.string(),
  name: z.string(),
  status: AdminSaleStatus,
  perUserLimit: z.int().min(1),
  holdSeconds: z.int().min(1),
  startsAt: Time.nullable(),
  endsAt: Time.nullable(),
  shards: z.int().min(1),
  price: Count.nullable(),
  currency: z.string(),
  test: z
    .boolean()
    .describe(
      'Added to v1.4 ("Test sales"): set when the SKU was created, never changed; a test SKU\'s orders, events and payments say `test: true`',
    ),
  stock: StockCounts,
  variants: z
    .array(z.object({ id: z.string(), name: z.string(), stock: StockCounts }))
    .optional()
    .describe(
      "Added to v1.4 (\"Sizes\"): each variant's stock (`stock` stays the SKU's sum); left out without variants",
    ),
  orders: OrderCounts,
  revenue: z
    .object({
      paidUnits: Count,
      amount: Count.nullable(),
      currency: z.string(),
      otherCurrencies: z.array(z.object({ currency: z.string(), paidUnits: Count, amount: Count.nullable() })),
    })
    .describe(
      "Added: what the SKU sold, from D1's paid orders: their units, and the sum of their amounts (quantity × price) in the SKU's currency (null without a price); paid orders in a currency the SKU had before are summed apart in `otherCurrencies`",
    ),
  waitlist: Count,
  payments: z.object({ refund_required: Count }),
  mirror: MirrorCounts.nullable(),
  version: z.int(),
  openingWindowMs: Count.optional(),
  phase: SalePhase.optional(),
  opensInSeconds: OpensInSeconds.optional(),
  draw: Draw.nullable().optional(),
  access: AccessView.optional(),
});

export const AdminSkuList = z.object({ skus: z.array(AdminSku) });

const Difference = z.object({
  sku: z.string(),
  kind: z.string(),
  expected: z.unknown(),
  actual: z.unknown(),
  repaired: z.boolean(),
});

const ReconcileResult = z.object({
  runId: z.string(),
  skusChecked: Count,
  differences: z.array(Difference),
  /** Added: rows the run read from D1 and the stock objects (its cost). */
  rowsRead: Count,
});

/** API.md "Additions": the latest runs, newest first. */
const ReconcileRuns = z.object({
  runs: z.array(
    z.object({
      runId: z.string(),
      trigger: z.enum(["cron", "admin"]),
      startedAt: Time,
      finishedAt: Time.nullable(),
      skusChecked: Count,
      errors: Count,
      differences: z.array(Difference),
    }),
  ),
});

export const DeadLetter = z.object({
  id: z.string(),
  queue: z.string(),
  body: z.unknown(),
  attempts: Count,
  receivedAt: Time,
  replayedAt: Time.nullable(),
});
export const DeadLetterList = z.object({ deadLetters: z.array(DeadLetter), next: z.string() });
const ReplayAnswer = z.object({ id: z.string(), replayed: z.literal(true), replayedAt: Time });

export const Health = z.object({ ok: z.literal(true) });

/** API.md "Order hand-off": what both the webhooks and the change feed carry. */
const OrderObject = z.object({
  reservationId: z.string(),
  sku: z.string(),
  userId: z.string(),
  quantity: z.int().min(1),
  status: ReservationStatus,
  /** `quantity × price` in minor units; null for a SKU without a price. */
  amount: Count.nullable(),
  /** Null only for an order recorded before events carried money. */
  currency: z.string().nullable(),
  test: z
    .boolean()
    .describe(
      "Added to v1.4 (\"Test sales\"): true for an order of a test SKU, which the shop's systems can skip; false for a real sale's",
    ),
  variant: z.string().nullable().describe('Added to v1.4 ("Sizes"): the variant held; null for a SKU without variants'),
  createdAt: Time,
  updatedAt: Time,
});
const WebhookEventType = z.enum(WEBHOOK_EVENT_TYPES);

export const WebhookEndpoint = z.object({
  id: z.string(),
  url: z.string(),
  events: z.array(WebhookEventType),
  enabled: z.boolean(),
  secret: z.string().startsWith("whsec_"),
  createdAt: Time,
  updatedAt: Time,
  /** Age in whole seconds of the endpoint's oldest pending delivery; 0 when none is pending. */
  lagSeconds: z.number().int().min(0),
  batch: z
    .object({ maxEvents: z.int().min(1).max(100), maxWaitMs: z.int().min(0).max(10_000) })
    .nullable()
    .describe(
      'Added to v1.4 ("Webhook batches"): messages of up to maxEvents events, sent once that many are due or the oldest waited maxWaitMs; null: one event a message',
    ),
});
const WebhookEndpointList = z.object({ webhooks: z.array(WebhookEndpoint) });
const Deleted = z.object({ id: z.string(), deleted: z.literal(true) });

const WebhookDelivery = z.object({
  id: z.string(),
  type: WebhookEventType,
  reservationId: z.string(),
  status: z.enum(DELIVERY_STATUSES),
  attempts: Count,
  lastStatusCode: z.int().nullable(),
  lastResponse: z.string().nullable(),
  lastError: z
    .string()
    .nullable()
    .describe(
      "Added: what went wrong with the last attempt, in words (`answered 500`, `redirect not followed (302 to …)`, `timed out after 10 s without an answer`, `connection refused or closed before an answer`, `could not connect: DNS lookup or TLS handshake failed`); null when delivered or not tried yet",
    ),
  nextAttemptAt: Time.nullable(),
  createdAt: Time,
  updatedAt: Time,
  batchId: z
    .string()
    .nullable()
    .describe(
      'Added to v1.4 ("Webhook batches"): the `webhook-id` of the batch message that last carried the event; null when it went alone or was not sent yet',
    ),
});
const WebhookDeliveryList = z.object({ deliveries: z.array(WebhookDelivery) });
const RetryAnswer = z.object({ id: z.string(), status: z.literal("pending") });
const BulkRetryAnswer = z.object({ retried: Count });

/** API.md "Payments owed back": a payment as `GET /admin/payments` lists it and `payment.refund_required` carries it. */
const PaymentObject = z.object({
  eventId: z.string(),
  source: z.enum(["payments", "stripe"]),
  reservationId: z.string(),
  sku: z.string(),
  userId: z.string(),
  /** Minor units, as the event said. */
  amount: Count,
  /** The event's currency, else the SKU's. */
  currency: z.string(),
  outcome: z.enum(["applied", "refund_required"]),
  reason: z.enum(PAYMENT_REASONS).nullable().describe("Why it is owed back; null when applied"),
  test: z.boolean().describe('Added to v1.4 ("Test sales"): true for a payment of a test SKU\'s order'),
  variant: z
    .string()
    .nullable()
    .describe('Added to v1.4 ("Sizes"): the variant of the reservation paid; null for a SKU without variants'),
  receivedAt: Time,
  refund: z
    .object({
      status: z.enum(["refunded", "pending", "failed"]),
      via: z.enum(["stripe", "marked"]),
      id: z.string().nullable().describe("Stripe's refund id (`re_…`); null when marked"),
      at: Time,
    })
    .nullable()
    .describe(
      'Added to v1.4 ("Paying and refunding through Stripe"): its refund, issued through Stripe or marked done; null while none was',
    ),
});
/**
 * What `/webhooks/stripe` answers: a handled event's PaymentAck, a refund event's payment with its
 * refund as now recorded, or an ignored event's acknowledgement.
 */
const StripeAck = z.union([
  PaymentAck,
  z.object({
    received: z.literal(true),
    payment: PaymentObject.describe("Added: a refund event's payment, with its refund as now recorded"),
  }),
  z.object({ received: z.literal(true), ignored: z.literal(true) }),
]);
const Checkout = z.object({
  url: z.string().describe("Stripe's hosted Checkout page: send the shopper there"),
  sessionId: z.string().describe("The Checkout Session's id (`cs_…`)"),
});
const PaymentList = z.object({ payments: z.array(PaymentObject), next: z.string() });

/** `POST` to an endpoint: the body every delivery carries (Standard Webhooks' `type`, `timestamp`, `data`). */
export const WebhookEvent = z.union([
  z.object({ type: z.enum(ORDER_EVENT_TYPES), timestamp: Time, data: OrderObject }),
  z.object({ type: z.literal("payment.refund_required"), timestamp: Time, data: PaymentObject }),
]);

/** `POST` to a batched endpoint (API.md v1.4 "Webhook batches"): events in feed order, each with the `webhook-id` it would have had alone. */
export const WebhookBatchMessage = z.object({
  type: z.literal("batch"),
  timestamp: Time.describe("The newest event's timestamp: the same on every attempt"),
  data: z.object({
    events: z
      .array(z.intersection(z.object({ id: z.string().describe("The event's own webhook-id") }), WebhookEvent))
      .min(1)
      .max(100),
  }),
});

const OrderFeed = z.object({ orders: z.array(OrderObject), next: z.string() });
const OrderList = z.object({ orders: z.array(OrderObject) });

/** Named schemas: the document's `components.schemas`. */
export const CONTRACT_SCHEMAS = {
  ErrorBody,
  ErrorDetails,
  PublicSku,
  PurchaseToken,
  ReservationRequest,
  Reservation,
  ReservationDetail,
  ReservationHeld,
  ReservationList,
  WaitlistRequest,
  WaitlistEntry,
  WaitlistPlace,
  WaitlistLeft,
  PaymentEvent,
  PaymentAck,
  StripeEvent,
  StripeAck,
  SkuSettingsRequest,
  AdminSku,
  AdminSkuList,
  AccessCodesRequest,
  AccessCodes,
  ReconcileResult,
  ReconcileRuns,
  DeadLetter,
  DeadLetterList,
  ReplayAnswer,
  Health,
  Draw,
  DrawEntries,
  PowChallenge,
  WebhookEndpointRequest,
  WebhookEndpoint,
  WebhookEndpointList,
  Deleted,
  WebhookDelivery,
  WebhookDeliveryList,
  RetryAnswer,
  BulkRetryAnswer,
  WebhookEvent,
  WebhookBatchMessage,
  OrderFeed,
  OrderObject,
  OrderList,
  PaymentObject,
  PaymentList,
  CheckoutRequest,
  Checkout,
  MarkRefundedRequest,
} as const;
export type SchemaName = keyof typeof CONTRACT_SCHEMAS;
