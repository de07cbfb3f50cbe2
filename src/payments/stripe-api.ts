import { log } from "../../durable-objects/shared/log";

/**
 * The Stripe API calls Flashgate makes (a Checkout Session for a hold, a refund of a payment owed
 * back, and that refund read again while it is pending), with `fetch`: form-encoded bodies, `Authorization: Bearer STRIPE_SECRET_KEY`, and an
 * `Idempotency-Key` on every POST, so a retried call is the same call at Stripe
 * (https://docs.stripe.com/api/idempotent_requests). The `stripe` package's request shapes, without
 * its Node runtime in the Worker. Tested against tools/stripe-api.ts, a stand-in that follows the
 * same documented contract.
 */

/** How long a call may take before the caller is told Stripe is unavailable (nothing stored). */
const TIMEOUT_MS = 5_000;

/**
 * Stripe could not be reached, timed out, failed (5xx), limited the rate (429) or was still executing
 * another request under the same idempotency key (409): try again later. Whether anything was made is
 * not known (a timed-out call, a key in progress); `status` is Stripe's answer, `null` when none came.
 */
export class StripeUnavailable extends Error {
  constructor(
    message: string,
    readonly status: number | null = null,
  ) {
    super(message);
  }
}

/** Stripe refused the call (4xx but 409 and 429): its error, as Stripe describes it. */
export class StripeRefused extends Error {
  constructor(
    readonly status: number,
    readonly type: string,
    readonly code: string | undefined,
    message: string,
    /** The parameter Stripe named as the wrong one, if any. */
    readonly param?: string,
  ) {
    super(message);
  }
}

/** Whether calls to Stripe's API are configured (`STRIPE_SECRET_KEY`). */
export function stripeConfigured(env: Env): boolean {
  return typeof env.STRIPE_SECRET_KEY === "string" && env.STRIPE_SECRET_KEY !== "";
}

/** POSTs `params` to `path` of Stripe's API; the parsed object, or one of the two errors above. */
export async function stripePost<T>(
  env: Env,
  path: string,
  params: Record<string, string | number>,
  idempotencyKey: string,
): Promise<T> {
  return (await stripePostAnswer<T>(env, path, params, idempotencyKey)).object;
}

/**
 * {@link stripePost}, saying whether the answer is Stripe's replay of an earlier request under the same
 * key (`Idempotent-Replayed: true`): the object as it was then, not as it is now.
 */
export async function stripePostAnswer<T>(
  env: Env,
  path: string,
  params: Record<string, string | number>,
  idempotencyKey: string,
): Promise<{ object: T; replayed: boolean }> {
  const body = new URLSearchParams(Object.entries(params).map(([k, v]) => [k, String(v)]));
  let replayed = false;
  const object = await stripeCall<T>(
    env,
    path,
    {
      method: "POST",
      headers: { "content-type": "application/x-www-form-urlencoded", "idempotency-key": idempotencyKey },
      body,
    },
    (response) => {
      replayed = response.headers.get("idempotent-replayed") === "true";
    },
  );
  return { object, replayed };
}

/** GETs `path` of Stripe's API (an object retrieved by id); the parsed object, or one of the two errors above. */
export function stripeGet<T>(env: Env, path: string): Promise<T> {
  return stripeCall<T>(env, path, { method: "GET", headers: {} });
}

async function stripeCall<T>(
  env: Env,
  path: string,
  init: { method: "GET" | "POST"; headers: Record<string, string>; body?: URLSearchParams },
  answered?: (response: Response) => void,
): Promise<T> {
  const base = (env.STRIPE_API_URL || "https://api.stripe.com").replace(/\/+$/, "");
  let response: Response;
  try {
    response = await fetch(`${base}${path}`, {
      ...init,
      headers: { authorization: `Bearer ${env.STRIPE_SECRET_KEY}`, ...init.headers },
      signal: AbortSignal.timeout(TIMEOUT_MS),
    });
  } catch (err) {
    log("warn", "stripe unreachable", { path, error: String(err) });
    throw new StripeUnavailable(`Stripe did not answer ${path}: ${String(err)}`);
  }
  answered?.(response);
  const text = await response.text();
  let json: unknown = null;
  try {
    json = JSON.parse(text);
  } catch {
    // not JSON: judged by its status below
  }
  if (response.ok && json && typeof json === "object") return json as T;
  const error = (json as { error?: { type?: string; code?: string; message?: string; param?: string } } | null)?.error;
  // 409: another request under the same idempotency key is still executing at Stripe (which saves no
  // answer for this one): not a refusal, since that request may yet make the object. 429: rate limited.
  if (response.status >= 400 && response.status < 500 && response.status !== 409 && response.status !== 429) {
    throw new StripeRefused(
      response.status,
      error?.type ?? "invalid_request_error",
      error?.code,
      error?.message ?? `Stripe answered ${response.status}`,
      error?.param,
    );
  }
  log("warn", "stripe failed", { path, status: response.status, error: error?.message ?? text.slice(0, 200) });
  throw new StripeUnavailable(`Stripe answered ${path} with ${response.status}`, response.status);
}
