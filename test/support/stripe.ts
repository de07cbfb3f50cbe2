import Stripe from "stripe";
import { stripeEnvelope } from "../../tools/stripe-event";
import { type Answer, call } from "./client";

/**
 * Stripe's side of `/webhooks/stripe`: events shaped like the ones Stripe sends (the envelope and
 * the fields of its `checkout.session` and `payment_intent` objects, trimmed of what Flashgate never
 * reads), signed by the official `stripe` package. In workerd the package signs with SubtleCrypto,
 * which is asynchronous: hence `generateTestHeaderStringAsync`.
 */

export const STRIPE_SECRET = "test-stripe-secret";

const stripe = new Stripe("sk_test_flashgate");

let counter = 0;
const stripeId = (prefix: string) => `${prefix}_test${Date.now().toString(36)}${(++counter).toString(36)}`;

/** A Stripe event envelope around `object`, with a fresh event id. */
export function stripeEvent(type: string, object: Record<string, unknown>): Record<string, unknown> {
  return stripeEnvelope(stripeId("evt"), type, object);
}

/** A completed Checkout Session paying `amount` (minor units) for a reservation. */
export function checkoutSession(
  reservationId: string | null,
  amount: number,
  opts: { currency?: string; paymentStatus?: string; metadata?: Record<string, string>; paymentIntent?: string } = {},
): Record<string, unknown> {
  return {
    id: stripeId("cs"),
    object: "checkout.session",
    amount_subtotal: amount,
    amount_total: amount,
    client_reference_id: reservationId,
    currency: opts.currency ?? "usd",
    customer: null,
    customer_details: { email: "shopper@example.com", name: "A Shopper" },
    livemode: false,
    metadata: opts.metadata ?? {},
    mode: "payment",
    payment_intent: opts.paymentIntent ?? stripeId("pi"),
    payment_status: opts.paymentStatus ?? "paid",
    status: "complete",
  };
}

/** A PaymentIntent for a reservation (its id in `metadata.reservationId`). */
export function paymentIntent(
  reservationId: string | undefined,
  amount: number,
  opts: { id?: string; currency?: string; status?: string } = {},
): Record<string, unknown> {
  const status = opts.status ?? "succeeded";
  return {
    id: opts.id ?? stripeId("pi"),
    object: "payment_intent",
    amount,
    amount_capturable: 0,
    amount_received: status === "succeeded" ? amount : 0,
    capture_method: "automatic",
    currency: opts.currency ?? "usd",
    last_payment_error: status === "succeeded" ? null : { code: "card_declined", type: "card_error" },
    livemode: false,
    metadata: reservationId === undefined ? {} : { reservationId },
    status,
  };
}

export interface StripeSendOptions {
  secret?: string;
  /** Unix seconds of the signature. */
  timestamp?: number;
  /** A whole `Stripe-Signature` value instead of the package's. */
  header?: string;
  /** Bindings to hand the Worker instead of the test's own (as `call`'s `env`). */
  env?: Partial<Env>;
}

/** Posts an event to `/webhooks/stripe` as Stripe does. */
export async function sendStripe(event: Record<string, unknown>, opts: StripeSendOptions = {}): Promise<Answer> {
  const payload = JSON.stringify(event, null, 2); // Stripe sends pretty-printed JSON
  const header =
    opts.header ??
    (await stripe.webhooks.generateTestHeaderStringAsync({
      payload,
      secret: opts.secret ?? STRIPE_SECRET,
      ...(opts.timestamp === undefined ? {} : { timestamp: opts.timestamp }),
    }));
  return call("POST", "/webhooks/stripe", {
    raw: payload,
    headers: { "stripe-signature": header },
    ...(opts.env ? { env: opts.env } : {}),
  });
}

export { stripe };
