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
  /** The request that caused this change (absent for expiries and repairs), so logs can be followed. */
  requestId: z.string().max(200).optional(),
});
export type OrderEvent = z.infer<typeof OrderEventSchema>;

/** The status an event leaves its reservation in. */
export function statusOf(type: OrderEvent["type"]): ReservationStatus {
  return type.slice("reservation.".length) as ReservationStatus;
}

/** The event type announcing that a reservation reached `status`. */
export function eventTypeOf(status: ReservationStatus): OrderEvent["type"] {
  return `reservation.${status}`;
}
