import { Hono } from "hono";
import { log } from "../../durable-objects/shared/log";
import type { AppEnv } from "../http/context";
import { ApiError } from "../http/errors";
import { increment } from "../observability/metrics";
import { applyPaymentEvent } from "../payments/apply-payment";
import { settleRefundEvent } from "../payments/refunds";
import { mapStripeEvent } from "../payments/stripe-event";
import { ROUTES } from "./contract";
import { register } from "./register";

/** Payment webhooks: the payment provider's and Stripe's signed notices coming in, each applied once by the stock object. */
export const paymentWebhooks = new Hono<AppEnv>();

/**
 * Payment provider webhook. The signature is checked over the raw body before anything is
 * parsed (./register.ts); the stock object applies each event id once (concurrent duplicates
 * serialise there), and D1 keeps what each id said (the same id saying something else is a 422).
 */
register(paymentWebhooks, ROUTES.paymentWebhook, async (c, event) => {
  const answer = await applyPaymentEvent(c.env, "payments", {
    eventId: event.id,
    type: event.type,
    reservationId: event.reservationId,
    // A failure's money is not checked, but it is part of what the event says (one id, one event).
    money: { amount: event.amount, currency: event.currency },
    requestId: c.get("requestId"),
  });
  if (!answer) throw new ApiError("RESERVATION_NOT_FOUND");
  return c.json(answer);
});

/**
 * A Stripe account's webhook endpoint: the same effects from Stripe's own events (see
 * src/payments/stripe-event.ts). Whatever is verified but not for us answers 200, because Stripe
 * disables an endpoint that keeps failing; such events are logged and counted as `ignored`. A
 * refund's status change settles the refund Flashgate recorded (src/payments/refunds.ts).
 */
register(paymentWebhooks, ROUTES.stripeWebhook, async (c, event) => {
  const mapped = mapStripeEvent(event);
  if (mapped.kind === "refund") {
    const payment = await settleRefundEvent(c.env, mapped.refund, Date.now());
    if (payment) return c.json({ received: true as const, payment });
    // One of Flashgate's refunds, but not the one its payment records (an earlier attempt, or one marked
    // since): said in the log, so a refund event that settled nothing can be traced.
    log("info", "stripe refund event ignored", {
      requestId: c.get("requestId"),
      eventId: event.id,
      type: event.type,
      refundId: mapped.refund.id,
      paymentEventId: mapped.refund.eventId,
    });
    return c.json({ received: true, ignored: true });
  }
  const answer =
    mapped.kind === "payment"
      ? await applyPaymentEvent(c.env, "stripe", { ...mapped.command, requestId: c.get("requestId") })
      : null;
  if (answer) return c.json(answer);
  const reason = mapped.kind === "ignored" ? mapped.reason : "unknown_reservation";
  if (reason !== "type") {
    increment("flashgate_payments_total", { outcome: "ignored" });
    log("warn", "stripe event ignored", { requestId: c.get("requestId"), eventId: event.id, type: event.type, reason });
  }
  return c.json({ received: true, ignored: true });
});
