import { Hono } from "hono";
import { z } from "zod";
import { callStock, locateReservation, stockShard, unwrap } from "../edge/stock-client";
import { parseJson } from "../http/body";
import type { AppEnv } from "../http/context";
import { ApiError } from "../http/errors";
import { currentRequestId } from "../observability/log";
import { verifyPaymentSignature } from "../payments/webhook-signature";

export const webhooks = new Hono<AppEnv>();

export const PaymentEvent = z.object({
  id: z.string().min(1).max(255),
  type: z.enum(["payment.succeeded", "payment.failed"]),
  reservationId: z.string().min(1).max(255),
  amount: z.int().min(0),
});

/**
 * Payment provider webhook. The signature is checked over the raw body before anything is
 * parsed; the stock object applies each event id once (concurrent duplicates serialise there).
 */
webhooks.post("/webhooks/payments", async (c) => {
  const raw = await c.req.text();
  await verifyPaymentSignature(c.req.header("payment-signature"), raw, c.env.PAYMENT_WEBHOOK_SECRET, Date.now());
  const event = parseJson(raw, PaymentEvent);
  const where = locateReservation(event.reservationId);
  if (!where) throw new ApiError("RESERVATION_NOT_FOUND");
  const stub = stockShard(c.env, where.sku, where.shard);
  const answer = unwrap(
    await callStock(() => stub.applyPayment(event.id, event.type, event.reservationId, currentRequestId())),
  );
  return c.json({ received: true, reservationStatus: answer.outcome });
});
