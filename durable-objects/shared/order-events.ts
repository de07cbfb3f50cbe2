import { z } from "zod";

/** Reservation statuses, in the order a reservation may move through them. */
export const RESERVATION_STATUSES = ["held", "paid", "expired", "cancelled", "refund_required"] as const;
export type ReservationStatus = (typeof RESERVATION_STATUSES)[number];

export const ORDER_EVENT_TYPES = [
  "reservation.held",
  "reservation.paid",
  "reservation.expired",
  "reservation.cancelled",
  "reservation.refund_required",
] as const;

/** The `order-events` queue message (API.md, "Queue event"). */
export const OrderEventSchema = z.object({
  id: z.uuid(),
  type: z.enum(ORDER_EVENT_TYPES),
  reservationId: z.string().min(1),
  sku: z.string().min(1),
  userId: z.string().min(1),
  quantity: z.int().min(1),
  occurredAt: z.iso.datetime(),
  /**
   * When the hold lapses. Not in the contract's list of fields, so optional: an event without it
   * (from an older producer) still applies, and the order keeps the expiry it knew.
   */
  expiresAt: z.iso.datetime().optional(),
  /** Grows per stock object; the consumer keeps the highest it applied per order. */
  seq: z.int().min(1),
  /**
   * The money of the order, `quantity × price` in minor units of `currency` (null: the SKU has no
   * price), as the SKU is priced when the event is made. Optional like `expiresAt`: an order whose
   * events lack it keeps what it had.
   */
  amount: z.int().min(0).nullable().optional(),
  currency: z
    .string()
    .regex(/^[a-z]{3}$/)
    .optional(),
  /**
   * A test sale's event (API.md v1.4 "Test sales"): `true`, so the shop's systems can skip it. Left
   * out on a real sale's events (absent means false).
   */
  test: z.literal(true).optional(),
  /**
   * Sizes (API.md v1.4): the variant the reservation holds; left out on a SKU without variants, and
   * read as none when null (what a later release may write: docs/API.md, "Queue event").
   */
  variant: z.string().min(1).max(32).nullable().optional(),
  /**
   * A hold made by a fair opening's draw (API.md v1.4 "The verifiable sale"): the draw's committed
   * seed hash and the entry's position in it, so the log ties the draw's outcomes to its order.
   * Left out on every other event.
   */
  draw: z.object({ seedHash: z.string().regex(/^[0-9a-f]{64}$/), position: z.int().min(1) }).optional(),
  /**
   * Why a late payment left the reservation `refund_required` (API.md v1.4 "The verifiable sale"): no
   * unit left (`too_late`) or the buyer at the limit (`limit_exceeded`). Only on such an event; left
   * out on every other one.
   */
  reason: z.enum(["too_late", "limit_exceeded"]).optional(),
  /**
   * When the reservation was made, on every event but its hold's (whose `occurredAt` it is): the
   * order's `createdAt` whichever event reaches D1 first (a hold's message retried after its payment's).
   * Optional: an event without it (an older producer's) uses `occurredAt`, as before.
   */
  heldAt: z.iso.datetime().optional(),
  /** The request that caused this change (absent for expiries and repairs), so logs can be followed. */
  requestId: z.string().max(200).optional(),
});
export type OrderEvent = z.infer<typeof OrderEventSchema>;
/** Which draw, and which place in it, decided a hold. */
export type DrawTag = NonNullable<OrderEvent["draw"]>;

/** The status an event leaves its reservation in. */
export function statusOf(type: OrderEvent["type"]): ReservationStatus {
  return type.slice("reservation.".length) as ReservationStatus;
}

/** The event type announcing that a reservation reached `status`. */
export function eventTypeOf(status: ReservationStatus): OrderEvent["type"] {
  return `reservation.${status}`;
}

/**
 * A queue message carries many events: `{"events": [event, …]}`, oldest first (the stock objects'
 * outbox packs them, durable-objects/stock/outbox-messages.ts, and sends that JSON as text). Queues bills, limits (5,000 messages/s per
 * queue) and delivers per message, so a message of 32 events moves 32 orders for the price of one.
 * The consumer also accepts a message that is one bare event (the format before, and what chaos
 * and older producers send).
 */
export const MAX_EVENTS_PER_MESSAGE = 32;

const MultiEventBody = z.object({ events: z.array(z.unknown()).min(1).max(MAX_EVENTS_PER_MESSAGE) });

/**
 * The events of a message body, either format. `invalid`: why the body, or one of its events, is not
 * a valid event (the valid ones are still returned: they apply, and the message is retried towards
 * the dead-letter queue for the rest).
 */
export function eventsOfMessage(body: unknown): { events: OrderEvent[]; invalid: string | null } {
  // The stock objects send the body as JSON text (content type `text`, outbox-messages.ts).
  if (typeof body === "string") {
    try {
      body = JSON.parse(body);
    } catch {
      return { events: [], invalid: "the message body is not JSON" };
    }
  }
  const multi = MultiEventBody.safeParse(body);
  const items = multi.success ? multi.data.events : [body];
  const events: OrderEvent[] = [];
  let invalid: string | null = null;
  for (const item of items) {
    const parsed = OrderEventSchema.safeParse(item);
    if (parsed.success) events.push(parsed.data);
    else invalid ??= parsed.error.message;
  }
  return { events, invalid };
}
