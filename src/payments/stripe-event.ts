import { z } from "zod";
import type { PaymentCommand } from "../../durable-objects/stock/stock-model";
import { ApiError } from "../http/errors";
import type { RefundUpdate } from "./refunds";

/**
 * Stripe events (`POST /webhooks/stripe`) as payment commands, per API.md's table. Only the
 * fields used are read; Stripe adds fields to its objects over API versions, which is harmless.
 */

const Metadata = z.record(z.string(), z.string()).nullish();

/** The envelope every Stripe event has (`{"id":"evt_…","object":"event","type",…,"data":{"object":{…}}}`). */
export const StripeEvent = z.object({
  id: z.string().min(1).max(255),
  object: z.literal("event"),
  type: z.string().min(1).max(255),
  data: z.object({ object: z.record(z.string(), z.unknown()) }),
});
export type StripeEvent = z.infer<typeof StripeEvent>;

const CheckoutSession = z.object({
  client_reference_id: z.string().nullish(),
  metadata: Metadata,
  amount_total: z.int().nullish(),
  currency: z.string().nullish(),
  payment_status: z.string().nullish(),
  payment_intent: z.string().nullish(),
});

const PaymentIntent = z.object({
  id: z.string().min(1),
  metadata: Metadata,
  amount_received: z.int().nullish(),
  currency: z.string().nullish(),
});

/** A Refund object (https://docs.stripe.com/api/refunds/object): its status is nullable. */
const StripeRefund = z.object({
  id: z.string().min(1).max(255),
  status: z.string().nullish(),
  metadata: Metadata,
});

/**
 * The events Stripe sends when a refund's status changes: `refund.updated` (and `refund.failed`) for
 * every refund since API version 2024-10-28.acacia, `charge.refund.updated` for a charge's refunds
 * under any version but only for selected payment methods. Each carries the Refund object.
 */
const REFUND_EVENTS = new Set(["refund.updated", "refund.failed", "charge.refund.updated"]);

/**
 * What an event means here: a payment command, a refund's new status, or nothing (the reason is
 * logged and counted; a refund Flashgate did not make is no payment's and is not).
 */
type StripeMapping =
  | { kind: "payment"; command: PaymentCommand }
  | { kind: "refund"; refund: RefundUpdate }
  | { kind: "ignored"; reason: "type" | "unpaid" | "no_reservation" };

/**
 * Maps a verified Stripe event. The idempotency key of a success is the PaymentIntent when there is
 * one, so Stripe's `checkout.session.completed` (or, for a delayed payment method,
 * `checkout.session.async_payment_succeeded`) and `payment_intent.succeeded` for the same money
 * (both are sent when an integration listens to both) pay once and are not taken for a second
 * payment. A failure's key is its event: a PaymentIntent may fail several times, then succeed.
 */
export function mapStripeEvent(event: StripeEvent): StripeMapping {
  const object = event.data.object;
  switch (event.type) {
    case "checkout.session.completed":
    case "checkout.session.async_payment_succeeded":
    case "checkout.session.async_payment_failed": {
      const session = read(CheckoutSession, object);
      // A delayed payment method completes the session before the money arrives ("unpaid"); the
      // money comes with async_payment_succeeded (or never: async_payment_failed).
      if (event.type === "checkout.session.completed" && session.payment_status === "unpaid") {
        return { kind: "ignored", reason: "unpaid" };
      }
      const reservationId = session.client_reference_id || session.metadata?.reservationId;
      if (!reservationId) return { kind: "ignored", reason: "no_reservation" };
      if (event.type === "checkout.session.async_payment_failed") return failed(event, reservationId);
      const paid = { intent: session.payment_intent, amount: session.amount_total, currency: session.currency };
      return succeeded(event, reservationId, paid);
    }
    case "payment_intent.succeeded":
    case "payment_intent.payment_failed": {
      const intent = read(PaymentIntent, object);
      const reservationId = intent.metadata?.reservationId;
      if (!reservationId) return { kind: "ignored", reason: "no_reservation" };
      if (event.type === "payment_intent.payment_failed") return failed(event, reservationId);
      const paid = { intent: intent.id, amount: intent.amount_received, currency: intent.currency };
      return succeeded(event, reservationId, paid);
    }
    default: {
      if (!REFUND_EVENTS.has(event.type)) return { kind: "ignored", reason: "type" };
      const refund = read(StripeRefund, object);
      // Flashgate's refunds name their payment (src/payments/refunds.ts); others are not ours.
      const eventId = refund.metadata?.flashgate_event_id;
      if (!eventId) return { kind: "ignored", reason: "type" };
      return { kind: "refund", refund: { id: refund.id, status: refund.status, eventId } };
    }
  }
}

/** The event's object read as `schema`, or `400 INVALID_REQUEST` naming the first bad field. */
function read<S extends z.ZodType>(schema: S, object: unknown): z.infer<S> {
  const parsed = schema.safeParse(object);
  if (parsed.success) return parsed.data;
  const issue = parsed.error.issues[0];
  throw new ApiError("INVALID_REQUEST", `data.object.${issue?.path.join(".") ?? ""}: ${issue?.message ?? "invalid"}`);
}

/** A failure, keyed by its event. */
function failed(event: StripeEvent, reservationId: string): StripeMapping {
  return { kind: "payment", command: { eventId: `stripe:${event.id}`, type: "payment.failed", reservationId } };
}

/** What a success says was received. */
interface Paid {
  intent: string | null | undefined;
  amount: number | null | undefined;
  currency: string | null | undefined;
}

/** A success, keyed by its PaymentIntent when there is one (else by its event). */
function succeeded(event: StripeEvent, reservationId: string, paid: Paid): StripeMapping {
  return {
    kind: "payment",
    command: {
      eventId: paid.intent ? `stripe:paid:${paid.intent}` : `stripe:${event.id}`,
      type: "payment.succeeded",
      reservationId,
      money: { amount: paid.amount ?? 0, currency: paid.currency ?? undefined },
    },
  };
}
