import { Hono } from "hono";
import { z } from "zod";
import { parseJson } from "../http/body";
import type { AppEnv } from "../http/context";
import { ApiError } from "../http/errors";
import { Currency } from "../http/schemas";
import { log } from "../observability/log";
import { increment } from "../observability/metrics";
import { applyPaymentEvent, paymentAck } from "../payments/apply-payment";
import { mapStripeEvent, StripeEvent } from "../payments/stripe-event";
import { verifyPaymentSignature } from "../payments/webhook-signature";

export const webhooks = new Hono<AppEnv>();

export const PaymentEvent = z.object({
  id: z.string().min(1).max(255),
  type: z.enum(["payment.succeeded", "payment.failed"]),
  reservationId: z.string().min(1).max(255),
  amount: z.int().min(0).max(Number.MAX_SAFE_INTEGER),
  currency: z.string().toLowerCase().pipe(Currency).optional(),
});

/**
 * Payment provider webhook. The signature is checked over the raw body before anything is
 * parsed; the stock object applies each event id once (concurrent duplicates serialise there).
 */
webhooks.post("/webhooks/payments", async (c) => {
  const raw = await c.req.text();
  await verifyPaymentSignature(c.req.header("payment-signature"), raw, c.env.PAYMENT_WEBHOOK_SECRET, Date.now());
  const event = parseJson(raw, PaymentEvent);
  const answer = await applyPaymentEvent(c.env, {
    eventId: event.id,
    type: event.type,
    reservationId: event.reservationId,
    money: event.type === "payment.succeeded" ? { amount: event.amount, currency: event.currency } : undefined,
  });
  if (!answer) throw new ApiError("RESERVATION_NOT_FOUND");
  return c.json(paymentAck(answer));
});

/**
 * A Stripe account's webhook endpoint: the same effects from Stripe's own events (see
 * src/payments/stripe-event.ts). Whatever is verified but not for us answers 200, because Stripe
 * disables an endpoint that keeps failing; such events are logged and counted as `ignored`.
 */
webhooks.post("/webhooks/stripe", async (c) => {
  const raw = await c.req.text();
  const secret = c.env.STRIPE_WEBHOOK_SECRET;
  if (!secret) throw new ApiError("SIGNATURE_INVALID", "No STRIPE_WEBHOOK_SECRET is configured.");
  await verifyPaymentSignature(c.req.header("stripe-signature"), raw, secret, Date.now(), "Stripe-Signature");
  const event = parseJson(raw, StripeEvent);
  const mapped = mapStripeEvent(event);
  const answer = mapped.kind === "payment" ? await applyPaymentEvent(c.env, mapped.command) : null;
  if (answer) return c.json(paymentAck(answer));
  const reason = mapped.kind === "ignored" ? mapped.reason : "unknown_reservation";
  if (reason !== "type") {
    increment("flashgate_payments_total", { outcome: "ignored" });
    log("warn", "stripe event ignored", { eventId: event.id, type: event.type, reason });
  }
  return c.json({ received: true, ignored: true });
});
