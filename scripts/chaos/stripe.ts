/**
 * Stripe's side of `POST /webhooks/stripe` for chaos: events shaped like Stripe's (the envelope and
 * the `checkout.session` fields Flashgate reads), pretty-printed as Stripe sends them and signed by
 * the official `stripe` package with the dev server's STRIPE_WEBHOOK_SECRET (Stripe's scheme:
 * `t=…,v1=hex(HMAC-SHA256(secret, t + "." + body))`), as test/support/stripe.ts does for the tests.
 */
import Stripe from "stripe";
import { signPayment } from "../../src/payments/webhook-signature";
import { stripeEnvelope } from "../../tools/stripe-event";
import type { Client, Reply } from "./http";

const stripe = new Stripe("sk_test_flashgate_chaos");

let counter = 0;
/** A Stripe-looking id, unique in this run. */
export const stripeId = (prefix: string, seed: number) =>
  `${prefix}_chaos${seed.toString(36)}${Date.now().toString(36)}${(++counter).toString(36)}`;

/** A Checkout Session for a reservation, `payment_status` as given ("unpaid" for a delayed method). */
export function checkoutSession(
  reservationId: string,
  amount: number,
  paymentIntent: string,
  paymentStatus: "paid" | "unpaid",
): Record<string, unknown> {
  return {
    id: `cs_${paymentIntent.slice(3)}`,
    object: "checkout.session",
    amount_subtotal: amount,
    amount_total: amount,
    client_reference_id: reservationId,
    currency: "usd",
    customer: null,
    livemode: false,
    metadata: { reservationId },
    mode: "payment",
    payment_intent: paymentIntent,
    payment_status: paymentStatus,
    status: "complete",
  };
}

/** A Stripe event envelope around `object`. */
export const stripeEvent = stripeEnvelope;

/** Posts a payment provider's event body to `/webhooks/payments`, signed now with the run's secret. */
export async function sendPayment(client: Client, raw: string): Promise<Reply> {
  const signature = await signPayment(raw, client.secrets.webhookSecret, Math.floor(Date.now() / 1000));
  return client.request("POST", "/webhooks/payments", { body: raw, headers: { "payment-signature": signature } });
}

/** Posts a Stripe event, signed now (the same event again is signed afresh, as Stripe's retries are). */
export async function sendStripe(client: Client, event: Record<string, unknown>): Promise<Reply> {
  const payload = JSON.stringify(event, null, 2);
  const header = await stripe.webhooks.generateTestHeaderStringAsync({ payload, secret: client.secrets.stripeSecret });
  return client.request("POST", "/webhooks/stripe", {
    body: payload,
    headers: { "stripe-signature": header, "content-type": "application/json" },
  });
}
