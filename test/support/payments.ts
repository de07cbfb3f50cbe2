import { signPayment } from "../../src/payments/webhook-signature";
import { type Answer, call } from "./client";

export const WEBHOOK_SECRET = "test-webhook-secret";

export interface PaymentOptions {
  secret?: string;
  /** Unix seconds of the signature; now by default. */
  at?: number;
  /** Sign this body but send another (tampering). */
  sendInstead?: string;
  /** Minor units; 1999 by default. */
  amount?: number;
  currency?: string;
  /** Bindings to hand the Worker instead of the test's own (as `call`'s `env`). */
  env?: Partial<Env>;
}

/** Posts a payment event to the webhook, signed like a provider would. */
export async function pay(
  reservationId: string,
  type: "payment.succeeded" | "payment.failed" = "payment.succeeded",
  eventId = `evt_${crypto.randomUUID()}`,
  opts: PaymentOptions = {},
): Promise<Answer> {
  const money = { amount: opts.amount ?? 1999, ...(opts.currency === undefined ? {} : { currency: opts.currency }) };
  const raw = JSON.stringify({ id: eventId, type, reservationId, ...money });
  const at = opts.at ?? Math.floor(Date.now() / 1000);
  const signature = await signPayment(raw, opts.secret ?? WEBHOOK_SECRET, at);
  return call("POST", "/webhooks/payments", {
    raw: opts.sendInstead ?? raw,
    headers: { "payment-signature": signature },
    ...(opts.env ? { env: opts.env } : {}),
  });
}
