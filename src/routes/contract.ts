import { z } from "zod";
import { DELIVERY_STATUSES } from "../db/schema";
import type { ErrorCode } from "../http/errors";
import { SKU_ID } from "../stock/stock-client";
import type { SchemaName } from "./contract-schemas";

/**
 * The HTTP contract of docs/API.md as data: every route, with the named schemas
 * (./contract-schemas.ts) of its request and its answers. The OpenAPI document (./openapi.ts) is
 * generated from this, and the tests check real answers against it, so neither can drift from the
 * code.
 */

export type Access = "public" | "shopper" | "admin" | "paymentWebhook";

interface Parameter {
  name: string;
  description: string;
  schema: z.ZodType;
}

export interface ContractRoute {
  method: "get" | "post" | "put" | "delete";
  /** Hono-style path, as the routes register it (`/api/skus/:sku`). */
  path: string;
  summary: string;
  /** What a client needs to know beyond the summary (the OpenAPI operation's description). */
  description: string;
  access: Access;
  /** For `paymentWebhook` access: the header carrying the signature and the secret it is made with. */
  signature?: {
    header: "Payment-Signature" | "Stripe-Signature";
    secret: "PAYMENT_WEBHOOK_SECRET" | "STRIPE_WEBHOOK_SECRET";
  };
  query?: readonly Parameter[];
  body?: SchemaName;
  ok: {
    status: 200 | 201 | 202;
    description: string;
    schema?: SchemaName;
    text?: true;
    /** Bytes (`application/octet-stream`): the sale log's tiles. */
    binary?: true;
    headers?: readonly string[];
    /** A second success, with the same schema: what was made before, answered again. */
    again?: { status: 200; description: string };
  };
  /** Error codes this route answers besides those its access and body imply. */
  errors: readonly ErrorCode[];
}

export const PATH_PARAMETERS: Record<string, Parameter> = {
  sku: { name: "sku", description: "SKU id: 1 to 64 of A-Z a-z 0-9 _ -", schema: z.string().regex(SKU_ID) },
  id: { name: "id", description: "Reservation, dead-letter or webhook endpoint id", schema: z.string().min(1) },
  deliveryId: { name: "deliveryId", description: "Webhook delivery id (its `webhook-id`)", schema: z.string().min(1) },
  userId: { name: "userId", description: "A shopper's user id (the JWT's `sub`)", schema: z.string().min(1) },
  tile: {
    name: "tile",
    description:
      "A C2SP tlog-tiles path below `tile/`: `<L>/<N>[.p/<W>]` (hash tile) or `entries/<N>[.p/<W>]` (entry bundle), N in three-digit groups, each but the last prefixed `x` (1234067: x001/x234/067)",
    schema: z.string().min(1),
  },
  eventId: {
    name: "eventId",
    description: "A payment's `eventId`, as GET /admin/payments lists it",
    schema: z.string().min(1),
  },
};

/**
 * Every route of API.md, in its order, by name. A route is registered from its entry
 * (./register.ts): `access` decides who may call it, `body` how its body is parsed, so neither is
 * repeated on the route, and the OpenAPI document is generated from the same entries.
 */
/** What a route that reaches a stock object says of one overloaded or restarting (its errors list BUSY). */
const OVERLOADED = "A stock object overloaded or restarting is 503 BUSY with Retry-After: send the same request again.";

export const ROUTES = {
  publicSku: {
    method: "get",
    path: "/api/skus/:sku",
    summary: "Public stock display (from the Redis mirror when configured, else the stock object)",
    description: `No credentials. Read-mostly and cheap: the storefront polls it. \`available\` may lag the stock object by a moment when it comes from the mirror. ${OVERLOADED}`,
    access: "public",
    ok: { status: 200, description: "The SKU", schema: "PublicSku" },
    errors: ["SKU_NOT_FOUND", "BUSY"],
  },
  draw: {
    method: "get",
    path: "/api/skus/:sku/draw",
    summary: "The opening draw of a SKU with a fair-opening window",
    description: `No credentials. For a SKU configured with \`openingWindowMs\` > 0: the committed seed hash (from the moment the window is set), then the revealed seed, the entrants and when the draw was decided. The order: entries sorted by hex HMAC-SHA256(key = seed, message = entryId), entryId = hex SHA-256 of \`<salt>:<userId>\`, the buyer's \`user\` in the sale log (\`entryIdPrefix\`; docs/API.md). A SKU without a window answers 404 NOT_FOUND. ${OVERLOADED}`,
    access: "public",
    ok: { status: 200, description: "The draw", schema: "Draw" },
    errors: ["SKU_NOT_FOUND", "NOT_FOUND", "BUSY"],
  },
  drawEntries: {
    method: "get",
    path: "/api/skus/:sku/draw/entries",
    summary: "The decided entries of the opening draw, in draw order (a page)",
    description: `No credentials. With the revealed seed, anyone can recompute the order and check every position and result (\`HELD\` or the refusal code). Empty until the draw is decided. The public opening's draw, or with \`opensAt\` the one of the opening \`/draw\`'s \`openings\` lists at that start (an early access tier's); an opensAt that is no time answers 400 INVALID_REQUEST, one no opening has 404 NOT_FOUND. ${OVERLOADED}`,
    access: "public",
    query: [
      {
        name: "opensAt",
        description: "An opening's start as `/draw`'s `openings` writes it (default: the public opening)",
        schema: z.string(),
      },
      { name: "offset", description: "Entries to skip (default 0)", schema: z.string().regex(/^\d+$/) },
      { name: "limit", description: "Page size, 1..5000 (default 1000)", schema: z.string().regex(/^\d+$/) },
    ],
    ok: { status: 200, description: "A page of entries", schema: "DrawEntries" },
    errors: ["SKU_NOT_FOUND", "NOT_FOUND", "INVALID_REQUEST", "BUSY"],
  },
  challenge: {
    method: "get",
    path: "/api/skus/:sku/challenge",
    summary: "A proof-of-work challenge for this user and SKU (when POW_BITS > 0)",
    description:
      "Stateless: bound to the user, the SKU and its expiry (10 minutes), and signed. Find a `nonce` (up to 32 characters) such that SHA-256 of the UTF-8 text `<challenge>:<nonce>` begins with `bits` zero bits, then send `Proof-Of-Work: <challenge>:<nonce>` with POST /api/skus/:sku/tokens. With POW_BITS 0 the route answers 404 NOT_FOUND.",
    access: "shopper",
    ok: { status: 200, description: "The challenge", schema: "PowChallenge" },
    errors: ["SKU_NOT_FOUND", "NOT_FOUND"],
  },
  purchaseToken: {
    method: "post",
    path: "/api/skus/:sku/tokens",
    summary: "One-time purchase token for this user and SKU",
    description:
      'Step one of a purchase: the token binds this user to this SKU for a few minutes (PURCHASE_TOKEN_TTL_SECONDS) and is spent by one reservation. Refused when the sale is paused, outside startsAt..endsAt, or sold out. Before startsAt (v1.3 "Early access"), an opened tier admits a JWT whose claim matches it, or a shopper sending one of its codes in `Access-Code`: such a token reserves as on an open sale; a code unknown, of a tier not open yet, or taken by another user is 403 ACCESS_CODE_INVALID. A SKU this isolate knows is sold out is answered 409 SOLD_OUT before the JWT or any challenge is checked. With bot challenges on (API.md "Bots"), the request carries `Proof-Of-Work` and/or `CF-Turnstile-Response`: missing 403 CHALLENGE_REQUIRED, refused 403 CHALLENGE_FAILED, no verdict from Turnstile 503 BUSY with Retry-After. A stock object overloaded or restarting is 503 BUSY with Retry-After too: send the same request again.',
    access: "shopper",
    ok: { status: 201, description: "The token", schema: "PurchaseToken" },
    errors: [
      "SKU_NOT_FOUND",
      "SALE_NOT_ACTIVE",
      "ACCESS_CODE_INVALID",
      "SOLD_OUT",
      "CHALLENGE_REQUIRED",
      "CHALLENGE_FAILED",
      "BUSY",
    ],
  },
  reserve: {
    method: "post",
    path: "/api/skus/:sku/reservations",
    summary: "Hold stock with a purchase token (replaying the token returns the same reservation)",
    description:
      "Holds `quantity` units for this user until `expiresAt`; the order row reaches D1 through the queue shortly after (see `order.persisted` on the reservation). Replaying the same token with the same body, concurrently or later, answers the same 202 with `Idempotent-Replayed: true` and holds nothing more; the same token with another quantity is 422 IDEMPOTENCY_MISMATCH. 503 BUSY carries Retry-After.",
    access: "shopper",
    body: "ReservationRequest",
    ok: {
      status: 202,
      description: "Held until expiresAt; the order row is written asynchronously",
      schema: "ReservationHeld",
      headers: ["Idempotent-Replayed"],
    },
    errors: [
      "TOKEN_INVALID",
      "TOKEN_EXPIRED",
      "SALE_NOT_ACTIVE",
      "SKU_NOT_FOUND",
      "SOLD_OUT",
      "INSUFFICIENT_STOCK",
      "LIMIT_EXCEEDED",
      "IDEMPOTENCY_MISMATCH",
      "BUSY",
    ],
  },
  reservation: {
    method: "get",
    path: "/api/reservations/:id",
    summary: "The owner's view of a reservation and whether its order row is persisted",
    description: `Owner only: another user's reservation id answers 404 RESERVATION_NOT_FOUND. \`order.persisted\` tells whether the queue consumer has written the order row to D1 yet. ${OVERLOADED}`,
    access: "shopper",
    ok: { status: 200, description: "The reservation", schema: "ReservationDetail" },
    errors: ["RESERVATION_NOT_FOUND", "BUSY"],
  },
  checkout: {
    method: "post",
    path: "/api/reservations/:id/checkout",
    summary: "A Stripe Checkout Session to pay for a hold",
    description:
      "Owner only. Makes a Stripe Checkout Session in payment mode for a held reservation: one line item (the SKU's name, its price, the hold's quantity, the SKU's currency), `client_reference_id` the reservation id, expiring as early as Stripe allows (30 minutes). Send the shopper to `url`; the payment arrives on /webhooks/stripe (one after the hold lapsed is a late payment). `successUrl` and `cancelUrl` must be on this gateway's origin or one of ALLOWED_ORIGINS (else 400). Asked again while that session is open: the same session, 200. A hold has at most one open session: its first request fixes what Stripe is sent (expiry, return URLs) and the idempotency key, and every later request sends the same, so Stripe answers the one session it made (an answer lost before, or a store that failed, included); a request while Stripe is still making it is 503 BUSY. Stripe not configured: 404 NOT_FOUND; a SKU without a price, or a reservation not held: 409 INVALID_STATE; Stripe unreachable or refusing: 503 BUSY with Retry-After, nothing stored.",
    access: "shopper",
    body: "CheckoutRequest",
    ok: {
      status: 201,
      description: "The session made",
      schema: "Checkout",
      again: { status: 200, description: "The session made before, still open" },
    },
    errors: ["NOT_FOUND", "RESERVATION_NOT_FOUND", "INVALID_STATE", "BUSY"],
  },
  cancel: {
    method: "post",
    path: "/api/reservations/:id/cancel",
    summary: "Release a held reservation",
    description:
      "Owner only. Releases a held reservation's stock at once. Cancelling a cancelled reservation again answers 200 unchanged; a paid or expired one is 409 INVALID_STATE. A stock object overloaded or restarting is 503 BUSY with Retry-After: send the same cancel again.",
    access: "shopper",
    ok: { status: 200, description: "The reservation, status cancelled", schema: "Reservation" },
    errors: ["RESERVATION_NOT_FOUND", "INVALID_STATE", "BUSY"],
  },
  joinWaitlist: {
    method: "post",
    path: "/api/skus/:sku/waitlist",
    summary: "Join the waitlist of a sold-out SKU",
    description:
      "Only while the SKU is sold out (else 409 STOCK_AVAILABLE). When stock is released, waitlisted users receive holds in FIFO order (first fit); those holds show in GET /api/me/reservations. A buyer who already holds perUserLimit (with the quantity asked) is refused 409 LIMIT_EXCEEDED; a sale not on (scheduled, paused, ended) 403 SALE_NOT_ACTIVE, with why in its details, before anything else is said; 503 BUSY with Retry-After while a change of shards is staged or a stock object is overloaded or restarting (send the same request again).",
    access: "shopper",
    body: "WaitlistRequest",
    ok: { status: 202, description: "On the waitlist", schema: "WaitlistEntry" },
    errors: ["SKU_NOT_FOUND", "SALE_NOT_ACTIVE", "STOCK_AVAILABLE", "LIMIT_EXCEEDED", "BUSY"],
  },
  waitlistPlace: {
    method: "get",
    path: "/api/skus/:sku/waitlist",
    summary: "The caller's place in the SKU's waitlist (v1.3)",
    description: `The caller's waiting entry: \`position\` 1 is next in line, \`unitsAhead\` the units the entries before it want, \`held\` the units other buyers hold now (the caller's own are not in it; they come back to the line if unpaid; it may lag by a second), \`joinedAt\` when the caller joined. First fit may serve a smaller entry behind the caller first. Not waiting (never joined, served, left, or the sale ended): 404 NOT_FOUND. ${OVERLOADED}`,
    access: "shopper",
    ok: { status: 200, description: "Waiting", schema: "WaitlistPlace" },
    errors: ["SKU_NOT_FOUND", "NOT_FOUND", "BUSY"],
  },
  leaveWaitlist: {
    method: "delete",
    path: "/api/skus/:sku/waitlist",
    summary: "Leave the SKU's waitlist (v1.3)",
    description: `Removes the caller's waiting entry; the entries behind it move up one place. A leave that comes after the line served the caller finds no entry (404 NOT_FOUND) and the hold the caller was given stands: cancel it to give the units back. ${OVERLOADED}`,
    access: "shopper",
    ok: { status: 200, description: "Left the line", schema: "WaitlistLeft" },
    errors: ["SKU_NOT_FOUND", "NOT_FOUND", "BUSY"],
  },
  myReservations: {
    method: "get",
    path: "/api/me/reservations",
    summary: "The user's reservations, newest first",
    description: "Every reservation of the JWT's user, including holds granted from the waitlist, newest first.",
    access: "shopper",
    ok: { status: 200, description: "The reservations", schema: "ReservationList" },
    errors: [],
  },
  paymentWebhook: {
    method: "post",
    path: "/webhooks/payments",
    summary: "Payment provider webhook (signed; each event id takes effect once)",
    description:
      "Signed with PAYMENT_WEBHOOK_SECRET in the Payment-Signature header (300 s tolerance). `payment.succeeded` pays a held reservation, `payment.failed` releases it. The same event id again answers the same 200 with no second effect; the same id naming another reservation, type, amount or currency is 422 IDEMPOTENCY_MISMATCH and changes nothing. A stock object overloaded or restarting is 503 BUSY with Retry-After: send the same event again (its id takes effect once).",
    access: "paymentWebhook",
    signature: { header: "Payment-Signature", secret: "PAYMENT_WEBHOOK_SECRET" },
    body: "PaymentEvent",
    ok: { status: 200, description: "Received", schema: "PaymentAck" },
    errors: ["SIGNATURE_INVALID", "RESERVATION_NOT_FOUND", "IDEMPOTENCY_MISMATCH", "BUSY"],
  },
  stripeWebhook: {
    method: "post",
    path: "/webhooks/stripe",
    summary: "Stripe webhook (Stripe-Signature; the same effects as /webhooks/payments)",
    description:
      "Signed by Stripe with STRIPE_WEBHOOK_SECRET in the Stripe-Signature header (300 s tolerance). `checkout.session.completed` (reservation id from `client_reference_id`, else `metadata.reservationId`; an `unpaid` session is ignored), `checkout.session.async_payment_succeeded` and `payment_intent.succeeded` pay, with the amount and currency checked against the SKU's price; `payment_intent.payment_failed` and `checkout.session.async_payment_failed` release the hold. A PaymentIntent's money is one event whichever event announces it: announced for another reservation or amount, it is 422 IDEMPOTENCY_MISMATCH and changes nothing. `refund.updated`, `refund.failed` and `charge.refund.updated` of a refund Flashgate made (its `metadata.flashgate_event_id`) move that payment's recorded refund forward to Stripe's status (pending, then refunded, then failed; a duplicate or late event changes nothing) and answer 200 with the payment; a refund whose creation is still being recorded is 503 BUSY. Other event types, other refunds, and events whose reservation is missing or unknown, answer 200 with `ignored: true`. A stock object overloaded or restarting is 503 BUSY with Retry-After: Stripe sends the same event again (its id takes effect once).",
    access: "paymentWebhook",
    signature: { header: "Stripe-Signature", secret: "STRIPE_WEBHOOK_SECRET" },
    body: "StripeEvent",
    ok: { status: 200, description: "Received (PaymentAck, or {received, ignored})", schema: "StripeAck" },
    errors: ["SIGNATURE_INVALID", "IDEMPOTENCY_MISMATCH", "BUSY"],
  },
  putSku: {
    method: "put",
    path: "/admin/skus/:sku",
    summary: "Create or update a SKU (fields left out keep their value)",
    description:
      'Creates or updates a SKU. On an existing SKU every field left out keeps its value, `totalStock` included (`{"status":"paused"}` pauses a sale and touches nothing else); creating one without `totalStock` is 400 INVALID_REQUEST. A PUT is checked as the whole SKU it leaves (the fields it names over the stored ones): a sale that would end at or before it starts, or an early access tier opening at or after the public start, is 400 INVALID_REQUEST naming the field the body sent. `totalStock` is absolute: after any mix of concurrent PUTs and reservations, the total is the last successful PUT\'s. Lowering it below held + sold, changing `shards` while units are held or sold or buyers wait, any change of an archived SKU, and moving an early access tier while its opening window is open (`details.state` `window_open`) or before its draw is decided (`draw_pending`) are 409 INVALID_STATE (the message says what was found and what is allowed, or what to wait for). A stock object overloaded or restarting, a change of shards left half made, a concurrent change (`totalStock` moved meanwhile), or a cut short only of units moving between shards is 503 BUSY with Retry-After: send the same PUT again. A cut refused because shard 0\'s record of the SKU\'s total disagrees with what its shards hold, nothing moving, is 500 INTERNAL naming the drift (reconciliation reports it), and a refusal of none of the reasons above is 409 INVALID_STATE naming what was refused: neither passes by sending the PUT again.',
    access: "admin",
    body: "SkuSettingsRequest",
    ok: { status: 200, description: "The admin SKU view", schema: "AdminSku" },
    errors: ["INVALID_STATE", "INTERNAL", "BUSY"],
  },
  archiveSku: {
    method: "delete",
    path: "/admin/skus/:sku",
    summary: "Archive a SKU (v1.3): it is no longer sold",
    description: `The SKU's status becomes \`archived\` on every shard: its public view and its token, challenge, reservation and waitlist routes answer 404 SKU_NOT_FOUND, its waitlist is emptied, and it leaves GET /admin/skus (\`?archived=true\` lists it). Holds it has keep their course (paid, cancelled or expired); a late payment is refund_required. Its D1 orders, feed entries and deliveries stay, and its id is not reused (a later PUT is 409 INVALID_STATE). Archiving again answers 200, unchanged. ${OVERLOADED}`,
    access: "admin",
    ok: { status: 200, description: "The admin SKU view, status `archived`", schema: "AdminSku" },
    errors: ["SKU_NOT_FOUND", "BUSY"],
  },
  accessCodes: {
    method: "post",
    path: "/admin/skus/:sku/access-codes",
    summary: "Make one-time access codes for an early access tier (v1.3)",
    description: `Makes \`count\` (1..10000) codes of the SKU's tier \`tier\`, answered this once: only their SHA-256 hashes are stored. Before the public start, a shopper sending one in the \`Access-Code\` header of POST /api/skus/{sku}/tokens gets a token once its tier has opened; a code admits the first user who presents it and no one else (403 ACCESS_CODE_INVALID). A tier the SKU does not have is 400 INVALID_REQUEST. ${OVERLOADED}`,
    access: "admin",
    body: "AccessCodesRequest",
    ok: { status: 201, description: "The codes, shown once", schema: "AccessCodes" },
    errors: ["SKU_NOT_FOUND", "BUSY"],
  },
  getSku: {
    method: "get",
    path: "/admin/skus/:sku",
    summary: "Admin SKU view: stock, D1 order counts, waitlist, mirror",
    description: `\`stock\` comes from the stock object(s), \`orders\` counts D1 rows by status, \`mirror\` is null when the Redis mirror is off. ${OVERLOADED}`,
    access: "admin",
    ok: { status: 200, description: "The admin SKU view", schema: "AdminSku" },
    errors: ["SKU_NOT_FOUND", "BUSY"],
  },
  listSkus: {
    method: "get",
    path: "/admin/skus",
    summary: "Every SKU's admin view",
    description: `The admin view of every SKU, as GET /admin/skus/{sku} answers it, wrapped in \`skus\`. Archived SKUs are left out; \`?archived=true\` lists only them. ${OVERLOADED}`,
    access: "admin",
    query: [
      {
        name: "archived",
        description: "`true`: only archived SKUs; `false` (default): only those not archived (v1.3)",
        schema: z.enum(["true", "false"]),
      },
    ],
    ok: { status: 200, description: "The SKUs", schema: "AdminSkuList" },
    errors: ["INVALID_REQUEST", "BUSY"],
  },
  reconcile: {
    method: "post",
    path: "/admin/reconcile",
    summary: "Run reconciliation now",
    description:
      "Compares the stock objects, D1 and the Redis mirror now (the cron does the same every minute) and repairs what it may; the answer lists each difference found. It takes no body (a JSON body other than `{}` is 400 INVALID_REQUEST, as every admin body is strict).",
    access: "admin",
    query: [
      {
        name: "full",
        description: "`true`: recheck every reservation, not only recent changes (added)",
        schema: z.enum(["true", "false"]),
      },
      {
        name: "sku",
        description: "Check this SKU alone, not the whole catalog (added); an unknown SKU is 404 SKU_NOT_FOUND",
        schema: z.string(),
      },
    ],
    ok: { status: 200, description: "The run", schema: "ReconcileResult" },
    errors: ["INVALID_REQUEST", "SKU_NOT_FOUND"],
  },
  reconcileRuns: {
    method: "get",
    path: "/admin/reconcile/runs",
    summary: "Reconciliation run history",
    description: "The latest reconciliation runs, cron and manual, newest first.",
    access: "admin",
    query: [{ name: "limit", description: "How many runs, 1..50 (default 10)", schema: z.string().regex(/^\d+$/) }],
    ok: { status: 200, description: "The runs", schema: "ReconcileRuns" },
    errors: ["INVALID_REQUEST"],
  },
  deadLetters: {
    method: "get",
    path: "/admin/dead-letters",
    summary: "Stored dead letters, newest first",
    description:
      "Queue events the order consumer gave up on, stored in D1 for inspection and replay, newest stored first. Paged like the order feed (added): `next` is always given, also for an empty page; pass it as `after` for the older ones. A cursor this route did not make, or a bad `limit`, is 400 INVALID_REQUEST.",
    access: "admin",
    query: [
      { name: "pending", description: "`true`: only those not replayed yet", schema: z.enum(["true", "false"]) },
      {
        name: "after",
        description: "A `next` this route gave: the letters stored before that page's last (none: from the newest)",
        schema: z.string(),
      },
      { name: "limit", description: "How many, 1..1000 (default 100)", schema: z.string().regex(/^\d+$/) },
    ],
    ok: { status: 200, description: "The dead letters", schema: "DeadLetterList" },
    errors: ["INVALID_REQUEST"],
  },
  replayDeadLetter: {
    method: "post",
    path: "/admin/dead-letters/:id/replay",
    summary: "Replay one dead letter through the idempotent consumer (idempotent)",
    description:
      "Runs one stored dead letter through the order consumer again. The consumer is idempotent, so replaying twice changes nothing more.",
    access: "admin",
    ok: { status: 200, description: "Replayed", schema: "ReplayAnswer" },
    errors: ["NOT_FOUND", "INVALID_STATE"],
  },
  putWebhook: {
    method: "put",
    path: "/admin/webhooks/:id",
    summary: "Create or update a webhook endpoint (order hand-off)",
    description:
      "`:id` is 1 to 64 of A-Z a-z 0-9 _ -. Creates the endpoint with a new signing `secret` (`whsec_…`) or updates it; fields left out keep their value (on creation: every event type, enabled), and the secret is kept. `url` is https://, not on a private, loopback, link-local, shared, unique-local or unspecified IP literal (10/8, 172.16/12, 192.168/16, 100.64/10, 127/8, 169.254/16, 0.0.0.0/8, ::1, ::, fc00::/7, fe80::/10, and their IPv4-mapped forms, however the literal is spelled: 400 naming url); http:// only to localhost or 127.0.0.1 where WEBHOOK_ALLOW_HTTP_LOCALHOST is true. Every order change after this is POSTed to it, signed the Standard Webhooks way (`webhook-id`, `webhook-timestamp`, `webhook-signature`).",
    access: "admin",
    body: "WebhookEndpointRequest",
    ok: { status: 200, description: "The endpoint", schema: "WebhookEndpoint" },
    errors: [],
  },
  listWebhooks: {
    method: "get",
    path: "/admin/webhooks",
    summary: "Every webhook endpoint",
    description: "The endpoints, oldest first, with their secrets.",
    access: "admin",
    ok: { status: 200, description: "The endpoints", schema: "WebhookEndpointList" },
    errors: [],
  },
  getWebhook: {
    method: "get",
    path: "/admin/webhooks/:id",
    summary: "One webhook endpoint",
    description: "The endpoint as PUT answered it.",
    access: "admin",
    ok: { status: 200, description: "The endpoint", schema: "WebhookEndpoint" },
    errors: ["NOT_FOUND"],
  },
  deleteWebhook: {
    method: "delete",
    path: "/admin/webhooks/:id",
    summary: "Delete a webhook endpoint and drop its pending deliveries",
    description: "Nothing more is sent to it; its delivery log goes with it.",
    access: "admin",
    ok: { status: 200, description: "Deleted", schema: "Deleted" },
    errors: ["NOT_FOUND"],
  },
  webhookDeliveries: {
    method: "get",
    path: "/admin/webhooks/:id/deliveries",
    summary: "The delivery log of an endpoint, newest change first",
    description:
      "Every delivery owed to the endpoint: `pending` (due at `nextAttemptAt`), `delivered` (answered 2xx within 10 s) or `failed` (every attempt of WEBHOOK_RETRY_SCHEDULE refused; retry it by hand). Newest change first; `status=pending` lists the next to go out first. `lastResponse` keeps at most 1 KB of the last answer.",
    access: "admin",
    query: [
      { name: "status", description: "Only deliveries in this status", schema: z.enum(DELIVERY_STATUSES) },
      { name: "limit", description: "How many, 1..1000 (default 100)", schema: z.string().regex(/^\d+$/) },
    ],
    ok: { status: 200, description: "The deliveries", schema: "WebhookDeliveryList" },
    errors: ["NOT_FOUND", "INVALID_REQUEST"],
  },
  retryDelivery: {
    method: "post",
    path: "/admin/webhooks/:id/deliveries/:deliveryId/retry",
    summary: "Try one delivery again now",
    description:
      "Makes the delivery due now, whatever its status, with the same `webhook-id`: a failed one gets one more attempt, a delivered one is sent again. A disabled endpoint's delivery is 409 INVALID_STATE (enable the endpoint first), and so is a delivery of an event type the endpoint no longer subscribes to.",
    access: "admin",
    ok: { status: 202, description: "Due now", schema: "RetryAnswer" },
    errors: ["NOT_FOUND", "INVALID_STATE"],
  },
  retryWebhook: {
    method: "post",
    path: "/admin/webhooks/:id/retry",
    summary: "Try every failed and pending delivery of an endpoint now",
    description:
      "Makes every `failed` and `pending` delivery of the endpoint due now, with their `webhook-id`s; `retried` counts them. Deliveries of an event type the endpoint no longer subscribes to are left out (nothing would send them). A disabled endpoint is 409 INVALID_STATE (enable it first).",
    access: "admin",
    ok: { status: 202, description: "Due now", schema: "BulkRetryAnswer" },
    errors: ["NOT_FOUND", "INVALID_STATE"],
  },
  orderFeed: {
    method: "get",
    path: "/admin/orders",
    summary: "The order change feed: one entry per change of an order after a cursor (held, then paid: two entries)",
    description:
      "Not one row per order: one entry per change of an order row, in the order the changes were written, each the order object as that change left it. An order held then paid appears twice (`status` `held`, then `paid`), and again for each later change; keep the newest entry per `reservationId` (by `updatedAt`, or `status`, which only moves forward from `held`) to have the orders themselves. `next` is always given (also for an empty page): keep it and ask again. A cursor this route did not make is 400 INVALID_REQUEST. A page costs the same at the end of the feed as at its start.",
    access: "admin",
    query: [
      { name: "after", description: "A `next` this route gave (none: from the beginning)", schema: z.string() },
      { name: "limit", description: "How many, 1..1000 (default 100)", schema: z.string().regex(/^\d+$/) },
    ],
    ok: { status: 200, description: "A page of changes", schema: "OrderFeed" },
    errors: ["INVALID_REQUEST"],
  },
  order: {
    method: "get",
    path: "/admin/orders/:id",
    summary: "One order as D1 has it now",
    description:
      "The order object of a reservation, from its D1 row (as the order consumer last wrote it: a hold made a second ago may not be there yet). Unknown: 404 RESERVATION_NOT_FOUND.",
    access: "admin",
    ok: { status: 200, description: "The order", schema: "OrderObject" },
    errors: ["RESERVATION_NOT_FOUND"],
  },
  userOrders: {
    method: "get",
    path: "/admin/users/:userId/orders",
    summary: "A shopper's orders, newest first",
    description:
      "Every SKU's orders of one user id (the JWT's `sub`), newest first, at most 100, from D1. None: an empty list.",
    access: "admin",
    ok: { status: 200, description: "The user's orders", schema: "OrderList" },
    errors: [],
  },
  payments: {
    method: "get",
    path: "/admin/payments",
    summary: "Payments that took effect or were flagged (owed back), in the order received",
    description:
      "Every `payment.succeeded` event (from /webhooks/payments or /webhooks/stripe) as the stock object first decided it: `outcome` `applied`, or `refund_required` with its `reason` (`amount_mismatch`, `currency_mismatch`, `already_paid`, `too_late`, `limit_exceeded`; null when applied). Paged like the order feed: `next` is always given; a cursor this route did not make is 400 INVALID_REQUEST.",
    access: "admin",
    query: [
      {
        name: "outcome",
        description: "Only payments with this outcome",
        schema: z.enum(["applied", "refund_required"]),
      },
      { name: "after", description: "A `next` this route gave (none: from the beginning)", schema: z.string() },
      { name: "limit", description: "How many, 1..1000 (default 100)", schema: z.string().regex(/^\d+$/) },
      {
        name: "refunded",
        description: "true: only payments refunded; false: only those not (no refund, pending or failed)",
        schema: z.enum(["true", "false"]),
      },
    ],
    ok: { status: 200, description: "A page of payments", schema: "PaymentList" },
    errors: ["INVALID_REQUEST"],
  },
  refundPayment: {
    method: "post",
    path: "/admin/payments/:eventId/refund",
    summary: "Refund a payment owed back through Stripe",
    description:
      "A `refund_required` payment that came by /webhooks/stripe with a payment intent is refunded in full through Stripe's refund API (idempotent per attempt: asked again after a lost answer, the same refund; after a failed one, a new refund). Its `refund` becomes `{status: refunded|pending|failed, via: stripe, id: re_…, at}`; a failed refund may be asked again. On a refund pending at Stripe, Stripe is asked where it stands instead: settled, it is recorded and the payment answered (refunded, or failed); still pending, 409 INVALID_STATE. A payment that was applied, or is refunded already, or did not come through Stripe: 409 INVALID_STATE (mark those done with POST …/refunded). Stripe not configured (STRIPE_SECRET_KEY): 404 NOT_FOUND; Stripe unreachable: 503 BUSY with Retry-After, nothing recorded.",
    access: "admin",
    ok: { status: 200, description: "The payment, with its refund", schema: "PaymentObject" },
    errors: ["NOT_FOUND", "INVALID_STATE", "BUSY"],
  },
  markRefunded: {
    method: "post",
    path: "/admin/payments/:eventId/refunded",
    summary: "Record a payment owed back as refunded outside Flashgate",
    description:
      "For money paid back elsewhere (the generic payment provider, Stripe's dashboard): the payment's `refund` becomes `{status: refunded, via: marked, id: null, at}`; `note` is kept. A payment that was applied, or is refunded or pending already: 409 INVALID_STATE.",
    access: "admin",
    body: "MarkRefundedRequest",
    ok: { status: 200, description: "The payment, with its refund", schema: "PaymentObject" },
    errors: ["NOT_FOUND", "INVALID_STATE"],
  },
  logKey: {
    method: "get",
    path: "/api/log/key",
    summary: "The sale log's verifier key",
    description:
      "No credentials. The Ed25519 key that signs every SKU's log checkpoints, in signed-note form (`<name>+<hex key id>+<base64 of 0x01 ‖ public key>`), as `text/plain`. No log kept (LOG_SIGNING_KEY unset): 404 NOT_FOUND.",
    access: "public",
    ok: { status: 200, description: "The verifier key", text: true },
    errors: ["NOT_FOUND"],
  },
  logCheckpoint: {
    method: "get",
    path: "/api/skus/:sku/log/checkpoint",
    summary: "A SKU's log: its latest signed checkpoint",
    description:
      "No credentials. A C2SP tlog-checkpoint (signed note): origin `<LOG_ORIGIN or the request's host>/api/skus/<sku>/log`, tree size, base64 root hash, Ed25519 signature by the key of GET /api/log/key. A new one within LOG_CHECKPOINT_SECONDS of a new entry; each consistent with every earlier one.",
    access: "public",
    ok: { status: 200, description: "The signed checkpoint", text: true },
    errors: ["SKU_NOT_FOUND", "NOT_FOUND"],
  },
  logTile: {
    method: "get",
    path: "/api/skus/:sku/log/tile/:tile{.+}",
    summary: "A SKU's log: a hash tile or an entry bundle (C2SP tlog-tiles)",
    description:
      "No credentials. `tile/<L>/<N>[.p/<W>]`: the hashes (32 bytes each) of level 8·L of the Merkle tree; `tile/entries/<N>[.p/<W>]`: the entries, each a big-endian uint16 length and its UTF-8 JSON. Only tiles of the latest checkpoint's tree; a tile not there (yet) is 404 NOT_FOUND. Immutable once served.",
    access: "public",
    ok: { status: 200, description: "The tile's bytes", binary: true },
    errors: ["SKU_NOT_FOUND", "NOT_FOUND"],
  },
  healthz: {
    method: "get",
    path: "/healthz",
    summary: "Liveness",
    description: "Liveness of the Worker only: it touches no binding, so it answers while a dependency is down.",
    access: "public",
    ok: { status: 200, description: "Up", schema: "Health" },
    errors: [],
  },
  metrics: {
    method: "get",
    path: "/metrics",
    summary: "Prometheus metrics (text exposition format)",
    description:
      "Prometheus text exposition of the counters and histograms of every isolate (totalled by the MetricsTotals object), plus stock and order gauges.",
    access: "admin",
    ok: { status: 200, description: "Metrics", text: true },
    errors: [],
  },
  openapi: {
    method: "get",
    path: "/openapi.json",
    summary: "This document",
    description: "This OpenAPI 3.1 document, generated from the schemas the routes validate with.",
    access: "public",
    ok: { status: 200, description: "OpenAPI 3.1 document" },
    errors: [],
  },
} as const satisfies Record<string, ContractRoute>;

export const CONTRACT_ROUTES: readonly ContractRoute[] = Object.values(ROUTES);

/** The error codes a route may answer: its own, plus those implied by its access and body. */
export function errorCodesOf(route: ContractRoute): ErrorCode[] {
  const codes = new Set<ErrorCode>(route.errors);
  // An admin route that changes something and takes no body refuses one (src/routes/register.ts).
  if (route.body || (route.access === "admin" && route.method !== "get")) codes.add("INVALID_REQUEST");
  // Every route but a GET refuses a body over 16 KiB, one that reads none included (register.ts).
  if (route.method !== "get") codes.add("PAYLOAD_TOO_LARGE");
  if (route.access === "shopper") {
    codes.add("UNAUTHENTICATED");
    codes.add("RATE_LIMITED");
    // A gateway with no shopper sign-in configured (API.md "Configuration"): the operator's to fix.
    codes.add("INTERNAL");
  }
  if (route.access === "admin") codes.add("UNAUTHENTICATED");
  return [...codes];
}
