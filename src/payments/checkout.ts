import type { SkuState } from "../../durable-objects/stock/stock-model";
import { readSkuState } from "../catalog/sku-state";
import { allowedOrigins } from "../http/cors";
import { ApiError, busy } from "../http/errors";
import { currentReservation } from "../orders/finished";
import { StripeRefused, StripeUnavailable, stripeConfigured, stripePost } from "./stripe-api";

/**
 * A Stripe Checkout Session for a hold (API.md v1.4 "Paying and refunding through Stripe"): one
 * line item (the SKU's name and the size held, its unit price, the hold's quantity, the SKU's currency), the
 * reservation id as `client_reference_id` and in the metadata of the session and its payment intent,
 * so the payment comes back on `/webhooks/stripe` as any other and is decided by its rules (a late
 * one included). Asked again while the session is open, the same session is answered; no session is
 * stored unless Stripe made one (the hold's claim, below, is the request Stripe is sent, not a session).
 */

/** Stripe's earliest expiry of a session: 30 minutes after it is made (a minute more for clocks apart). */
const EARLIEST_EXPIRY_S = 30 * 60 + 60;
/** A claim's expiry is the end of the minute it was made in, plus {@link EARLIEST_EXPIRY_S}. */
const EXPIRY_STEP_S = 60;

/**
 * One session per hold, however its requests are timed (two tabs, a double submit, a retry after an
 * answer lost in a later minute): the hold's first request claims its session in D1
 * (`checkout_claims`) before Stripe is asked, fixing the request Stripe gets (its parameters, the
 * expiry among them) and its idempotency key, `flashgate-checkout:<reservationId>:<attempt>`. Every
 * later request for the hold sends that same request under that same key, so Stripe makes one
 * session and answers it again (its replay) to each, until that session's expiry has passed. The
 * claim moves on to a new attempt (a new key, a new expiry) only when nothing can have been made under
 * its key: the session expired; Stripe refused its request (its expiry as too near, or a price, name
 * or URL it does not take: a key Stripe had executed is replayed, not checked again); or Stripe
 * answered an error (5xx), which it would replay to every retry under that key.
 */
type Params = Record<string, string | number>;
interface Claim {
  attempt: number;
  params: Params;
}

const keyOf = (reservationId: string, attempt: number) => `flashgate-checkout:${reservationId}:${attempt}`;

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
  const open = await openSession(env, reservationId, now);
  if (open) return open;

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
  const params: Params = {
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
  // These parameters are the hold's request only if no claim is live: else the claim's are sent.
  let claim = await claimSession(env, reservationId, params, now);
  for (let renewed = false; ; renewed = true) {
    try {
      const session = await stripePost<StripeSession>(
        env,
        "/v1/checkout/sessions",
        claim.params,
        keyOf(reservationId, claim.attempt),
      );
      return await storeSession(env, reservationId, session, now);
    } catch (err) {
      if (err instanceof StripeRefused && err.type !== "idempotency_error" && !renewed) {
        // Stripe refused the claim's request (its expiry too near now, or a price, name or URL it does not
        // take): under its key it made nothing (it would have replayed that) and never will, so these
        // parameters must not hold the hold for the claim's half hour. A new claim, of this request's
        // parameters (the SKU's price now, say), asked once.
        claim = await renewClaim(env, reservationId, claim, params, now);
        continue;
      }
      if (err instanceof StripeUnavailable) {
        // An error Stripe answered is saved under the key and replayed to every retry: the next request
        // is a new claim. A timeout or a key still in progress (409) keeps the claim: a session Stripe
        // made under it is what the retry gets.
        if (err.status !== null && err.status >= 500) await renewClaim(env, reservationId, claim, params, now);
        throw busy(
          err.status === 409
            ? "Another request for this hold is still with Stripe; nothing was stored"
            : "Stripe did not answer; nothing was stored",
        );
      }
      if (err instanceof StripeRefused) {
        // Refused for the key (its parameters differ from those it was first sent with): the session
        // stored meanwhile, if there is one.
        if (err.type === "idempotency_error") {
          const open = await openSession(env, reservationId, now);
          if (open) return open;
        }
        throw busy(`Stripe refused the session (${err.message}); nothing was stored`);
      }
      throw err;
    }
  }
}

/** The hold's session stored in D1 and still open, answered again (`200`). */
async function openSession(env: Env, reservationId: string, now: number): Promise<CheckoutAnswer | null> {
  const open = await env.DB.prepare(
    "SELECT session_id, url FROM checkout_sessions WHERE reservation_id = ?1 AND expires_at > ?2 ORDER BY created_at DESC LIMIT 1",
  )
    .bind(reservationId, now)
    .first<{ session_id: string; url: string }>();
  return open ? { url: open.url, sessionId: open.session_id, again: true } : null;
}

/**
 * The hold's live claim: `params` claimed now if the hold has none, or only an expired one (its session
 * expired, the attempt moves on); else the claim made before, untouched. One batch, so of two requests
 * at once one claims and the other reads its claim.
 */
async function claimSession(env: Env, reservationId: string, params: Params, now: number): Promise<Claim> {
  const [, read] = await env.DB.batch([
    env.DB.prepare(
      `INSERT INTO checkout_claims (reservation_id, attempt, params, expires_at, claimed_at) VALUES (?1, 0, ?2, ?3, ?4)
       ON CONFLICT (reservation_id) DO UPDATE SET attempt = attempt + 1, params = excluded.params,
         expires_at = excluded.expires_at, claimed_at = excluded.claimed_at
       WHERE checkout_claims.expires_at <= ?4`,
    ).bind(reservationId, JSON.stringify(params), Number(params.expires_at) * 1000, now),
    readClaim(env, reservationId),
  ]);
  return claimOf(read);
}

/**
 * The claim after `stale` (under whose key nothing was made): `params` under the next attempt, unless
 * another request moved the claim on first (then that one's).
 */
async function renewClaim(env: Env, reservationId: string, stale: Claim, params: Params, now: number): Promise<Claim> {
  const [, read] = await env.DB.batch([
    env.DB.prepare(
      "UPDATE checkout_claims SET attempt = attempt + 1, params = ?3, expires_at = ?4, claimed_at = ?5 WHERE reservation_id = ?1 AND attempt = ?2",
    ).bind(reservationId, stale.attempt, JSON.stringify(params), Number(params.expires_at) * 1000, now),
    readClaim(env, reservationId),
  ]);
  return claimOf(read);
}

const readClaim = (env: Env, reservationId: string) =>
  env.DB.prepare("SELECT attempt, params FROM checkout_claims WHERE reservation_id = ?1").bind(reservationId);

function claimOf(read: D1Result | undefined): Claim {
  const row = read?.results[0] as { attempt: number; params: string } | undefined;
  if (!row) throw new Error("the hold's checkout claim was not read back");
  return { attempt: row.attempt, params: JSON.parse(row.params) as Params };
}

/** The session Stripe answered, stored for the hold: `201`, or `200` if a request at once stored it first. */
async function storeSession(
  env: Env,
  reservationId: string,
  session: StripeSession,
  now: number,
): Promise<CheckoutAnswer> {
  const stored = await env.DB.prepare(
    "INSERT OR IGNORE INTO checkout_sessions (session_id, reservation_id, url, expires_at, created_at) VALUES (?1, ?2, ?3, ?4, ?5)",
  )
    .bind(session.id, reservationId, session.url, session.expires_at * 1000, now)
    .run();
  return { url: session.url, sessionId: session.id, again: stored.meta.changes === 0 };
}

/** The line item's name: the SKU's, with the size held (its name) for a SKU in sizes. */
function productName(sku: SkuState, variant: string | undefined): string {
  if (variant === undefined) return sku.name;
  const size = sku.variants?.find((v) => v.id === variant);
  return `${sku.name} (${size?.name ?? variant})`;
}
