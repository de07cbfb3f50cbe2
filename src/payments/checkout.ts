import type { SkuState } from "../../durable-objects/stock/stock-model";
import { readSkuState } from "../catalog/sku-state";
import { toBase64Url } from "../edge/base64url";
import { allowedOrigins } from "../http/cors";
import { ApiError, busy } from "../http/errors";
import { currentReservation } from "../orders/finished";
import { StripeRefused, StripeUnavailable, stripeConfigured, stripePost } from "./stripe-api";

/**
 * A Stripe Checkout Session for a hold (API.md v1.4 "Paying and refunding through Stripe"): one
 * line item (the SKU's name and the size held, its unit price, the hold's quantity, the SKU's currency), the
 * reservation id as `client_reference_id` and in the metadata of the session and its payment intent,
 * so the payment comes back on `/webhooks/stripe` as any other and is decided by its rules (a late
 * one included). Asked again while the session is open, the same session is answered; nothing is
 * stored unless Stripe made one.
 */

/** Stripe's earliest expiry of a session: 30 minutes after it is made (a minute more for clocks apart). */
const EARLIEST_EXPIRY_S = 30 * 60 + 60;
/**
 * A session's expiry is the end of the minute it was asked in, plus {@link EARLIEST_EXPIRY_S}: every
 * request for one hold within one minute sends the same parameters under the same key, so Stripe
 * makes one session for all of them (two tabs, a double submit, a retry after a slow answer).
 */
const EXPIRY_STEP_S = 60;

export interface CheckoutAnswer {
  url: string;
  sessionId: string;
  /** A session made before and still open: `200`, not `201`. */
  again: boolean;
}

interface StripeSession {
  id: string;
  url: string;
  expires_at: number;
}

/** `successUrl` and `cancelUrl` lead back to the gateway's own origin or one of `ALLOWED_ORIGINS`. */
function checkReturnUrl(env: Env, requestUrl: string, field: "successUrl" | "cancelUrl", value: string): void {
  let origin: string | null = null;
  try {
    origin = new URL(value).origin;
  } catch {
    origin = null;
  }
  const own = new URL(requestUrl).origin;
  if (origin !== null && (origin === own || allowedOrigins(env.ALLOWED_ORIGINS).has(origin))) return;
  throw new ApiError(
    "INVALID_REQUEST",
    `${field} must be a URL on this gateway's origin (${own}) or on one of ALLOWED_ORIGINS: ${JSON.stringify(value)} is not.`,
    {},
    { fields: [{ path: field, message: "not on this gateway's origin nor an allowed origin" }] },
  );
}

export async function checkout(
  env: Env,
  request: { url: string; userId: string; reservationId: string; successUrl: string; cancelUrl: string },
  now: number,
): Promise<CheckoutAnswer> {
  if (!stripeConfigured(env)) throw new ApiError("NOT_FOUND", "Paying through Stripe is not configured here.");
  checkReturnUrl(env, request.url, "successUrl", request.successUrl);
  checkReturnUrl(env, request.url, "cancelUrl", request.cancelUrl);
  const { reservationId, userId } = request;
  const reservation = await currentReservation(env, reservationId);
  if (!reservation || reservation.userId !== userId) throw new ApiError("RESERVATION_NOT_FOUND");
  if (reservation.status !== "held" || reservation.expiresAt <= now) {
    const status = reservation.status === "held" ? "expired" : reservation.status;
    throw new ApiError(
      "INVALID_STATE",
      `Reservation ${reservationId} is ${status}: only a held reservation is paid through Checkout.`,
      {},
      { state: status },
    );
  }
  const open = await env.DB.prepare(
    "SELECT session_id, url FROM checkout_sessions WHERE reservation_id = ?1 AND expires_at > ?2 ORDER BY created_at DESC LIMIT 1",
  )
    .bind(reservationId, now)
    .first<{ session_id: string; url: string }>();
  if (open) return { url: open.url, sessionId: open.session_id, again: true };

  const sku = await readSkuState(env, reservation.sku);
  if (!sku) throw new ApiError("RESERVATION_NOT_FOUND");
  if (sku.price === null) {
    throw new ApiError(
      "INVALID_STATE",
      `SKU ${reservation.sku} has no price: set one (PUT /admin/skus/${reservation.sku} {"price": …}) before selling it through Checkout.`,
      {},
      { state: "no_price" },
    );
  }
  const params = {
    mode: "payment",
    "line_items[0][price_data][currency]": sku.currency,
    "line_items[0][price_data][unit_amount]": sku.price,
    "line_items[0][price_data][product_data][name]": productName(sku, reservation.variant),
    "line_items[0][quantity]": reservation.quantity,
    success_url: request.successUrl,
    cancel_url: request.cancelUrl,
    client_reference_id: reservationId,
    "metadata[reservationId]": reservationId,
    ...(reservation.variant ? { "metadata[variant]": reservation.variant } : {}),
    "payment_intent_data[metadata][reservationId]": reservationId,
    expires_at: (Math.floor(now / 1000 / EXPIRY_STEP_S) + 1) * EXPIRY_STEP_S + EARLIEST_EXPIRY_S,
  };
  // The key is the parameters': asked again the same way within the minute, the same session (a count
  // of the sessions stored would differ between two requests that raced a store). Stripe refuses a
  // key sent again with other parameters, and the expiry moves each minute: a later retry is a new key.
  const key = `flashgate-checkout:${reservationId}:${await digestOf(params)}`;
  let session: StripeSession;
  try {
    session = await stripePost<StripeSession>(env, "/v1/checkout/sessions", params, key);
  } catch (err) {
    if (err instanceof StripeUnavailable) throw busy("Stripe did not answer; nothing was made");
    if (err instanceof StripeRefused) throw busy(`Stripe refused the session (${err.message}); nothing was made`);
    throw err;
  }
  await env.DB.prepare(
    "INSERT OR IGNORE INTO checkout_sessions (session_id, reservation_id, url, expires_at, created_at) VALUES (?1, ?2, ?3, ?4, ?5)",
  )
    .bind(session.id, reservationId, session.url, session.expires_at * 1000, now)
    .run();
  return { url: session.url, sessionId: session.id, again: false };
}

/** The line item's name: the SKU's, with the size held (its name) for a SKU in sizes. */
function productName(sku: SkuState, variant: string | undefined): string {
  if (variant === undefined) return sku.name;
  const size = sku.variants?.find((v) => v.id === variant);
  return `${sku.name} (${size?.name ?? variant})`;
}

/** A short digest of a call's parameters (SHA-256, base64url), for its idempotency key. */
async function digestOf(params: Record<string, string | number>): Promise<string> {
  const bytes = new TextEncoder().encode(JSON.stringify(Object.entries(params)));
  return toBase64Url(new Uint8Array(await crypto.subtle.digest("SHA-256", bytes)));
}
