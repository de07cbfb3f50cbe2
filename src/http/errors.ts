import type { Context } from "hono";
import { HTTPException } from "hono/http-exception";
import type { ContentfulStatusCode } from "hono/utils/http-status";
import { log } from "../../durable-objects/shared/log";

/**
 * Why a shopper JWT was refused, in `error.details.reason` of its `401 UNAUTHENTICATED` (and in
 * words in `message`), so a shopper's client or an operator can tell a stale token from a
 * misconfigured identity provider. Nothing secret is said: no key, no signature, no claim value.
 */
export const JWT_REFUSALS = [
  "missing_token",
  "malformed",
  "algorithm_not_allowed",
  "unknown_key",
  "bad_signature",
  "expired",
  "not_yet_valid",
  "missing_claim",
  "invalid_claim",
] as const;
export type JwtRefusal = (typeof JWT_REFUSALS)[number];

/** Every error code of the contract (API.md) with its HTTP status and a default message. */
export const ERRORS = {
  INVALID_REQUEST: [400, "The request is malformed or failed validation."],
  UNAUTHENTICATED: [401, "Missing or invalid credentials."],
  TOKEN_INVALID: [401, "The purchase token is not valid for this user and SKU."],
  TOKEN_EXPIRED: [401, "The purchase token has expired."],
  SIGNATURE_INVALID: [401, "The webhook signature is missing, wrong or stale."],
  SALE_NOT_ACTIVE: [403, "The sale is not active."],
  CHALLENGE_REQUIRED: [403, "A bot challenge must be answered before a purchase token is issued."],
  CHALLENGE_FAILED: [403, "The bot challenge's answer was not accepted."],
  ACCESS_CODE_INVALID: [403, "The access code is unknown, of a tier not open yet, or taken by another shopper."],
  NOT_FOUND: [404, "No such route."],
  SKU_NOT_FOUND: [404, "No such SKU."],
  RESERVATION_NOT_FOUND: [404, "No such reservation."],
  METHOD_NOT_ALLOWED: [405, "Method not allowed on this route."],
  SOLD_OUT: [409, "Sold out."],
  INSUFFICIENT_STOCK: [409, "Fewer units are available than asked for."],
  LIMIT_EXCEEDED: [409, "This would exceed the per-user limit."],
  INVALID_STATE: [409, "The resource is not in a state that allows this."],
  STOCK_AVAILABLE: [409, "Stock is available: reserve instead of joining the waitlist."],
  PAYLOAD_TOO_LARGE: [413, "The body is larger than 16 KiB."],
  IDEMPOTENCY_MISMATCH: [422, "This purchase token was already used with a different request."],
  RATE_LIMITED: [429, "Too many requests; retry later."],
  INTERNAL: [500, "Internal error."],
  BUSY: [503, "The stock service is busy; retry shortly."],
} as const satisfies Record<string, readonly [ContentfulStatusCode, string]>;

export type ErrorCode = keyof typeof ERRORS;

/**
 * Figures a client may act on, beside the message (added to the v1.2 body as `error.details`; every
 * key is optional, and each code carries the ones that apply, see ErrorDetails in src/routes/contract-schemas.ts).
 */
export interface ErrorDetails {
  /** LIMIT_EXCEEDED: the SKU's per-user limit, the units this user holds or bought, and asked for. */
  perUserLimit?: number;
  held?: number;
  requested?: number;
  /** INSUFFICIENT_STOCK: the units available when the request was decided. */
  available?: number;
  /** SALE_NOT_ACTIVE: why (`scheduled`, `ended`, `paused`) and when it opens or closed. */
  phase?: "scheduled" | "ended" | "paused";
  opensAt?: string;
  opensInSeconds?: number;
  endedAt?: string;
  /** UNAUTHENTICATED of a shopper JWT: why it was refused, and the claim at fault for the claim reasons. */
  reason?: JwtRefusal;
  claim?: string;
  /** 429 and 503: the seconds to wait before the same request (as `Retry-After`). */
  retryAfterSeconds?: number;
  /** INVALID_STATE: the state found (a reservation's status, a SKU's `archived`, an opening window's). */
  state?: string;
  /** INVALID_STATE of a SKU change: the total asked, the units held or sold, the shard count, buyers waiting. */
  totalStock?: number;
  heldOrSold?: number;
  shards?: number;
  waiting?: number;
  /** INVALID_REQUEST: the fields at fault, and those a strict (admin) body does not know. */
  fields?: { path: string; message: string }[];
  unknownFields?: string[];
  /** A reservation refused by the opening draw: where its entry came (as a winner's `draw`). */
  draw?: { entryId: string; position: number; entrants: number };
  /** Sizes: SOLD_OUT / INSUFFICIENT_STOCK: units of each listed variant; INVALID_STATE: the variant at fault. */
  variants?: Record<string, number>;
  variant?: string;
}

/** The contract's error body: `{"error": {"code", "message"}}`, plus `details` when there are figures. */
export function errorBody(code: ErrorCode, message: string = ERRORS[code][1], details?: ErrorDetails) {
  return { error: details ? { code, message, details } : { code, message } };
}

/** An expected failure with a contract code; the one `onError` turns it into the error body. */
export class ApiError extends HTTPException {
  readonly code: ErrorCode;
  readonly headers: Record<string, string>;
  readonly details: ErrorDetails | undefined;
  /** The answer's body, serialized on first use: an error is never changed once made. */
  #json: string | undefined;

  constructor(
    code: ErrorCode,
    message: string = ERRORS[code][1],
    headers: Record<string, string> = {},
    details?: ErrorDetails,
  ) {
    // An ApiError is an answer, not a fault: nobody reads its stack, and capturing one showed high in
    // the sold-out storm's CPU profile. V8 captures no frames while `stackTraceLimit` is 0.
    const limit = Error.stackTraceLimit;
    Error.stackTraceLimit = 0;
    super(ERRORS[code][0], { message });
    Error.stackTraceLimit = limit;
    this.code = code;
    this.headers = headers;
    this.details = details;
  }

  /** The contract's error body of this error, as JSON text. */
  json(): string {
    this.#json ??= JSON.stringify(errorBody(this.code, this.message, this.details));
    return this.#json;
  }
}

/**
 * Answers `err` as `onError` would, without throwing it: the middleware above still sees it in
 * `c.error`. For an answer given thousands of times a second (the edge's SOLD_OUT), where a throw
 * and its rejected promises cost more than the answer.
 */
export function answerError(c: Context, err: ApiError): Response {
  c.error = err;
  return errorResponse(err, c);
}

/** `503 BUSY` with `Retry-After: 1`: nothing was decided, and the same request may come again in a second. */
export function busy(message = "The stock service is busy and decided nothing"): ApiError {
  const seconds = 1;
  return new ApiError(
    "BUSY",
    `${message.replace(/[.;]\s*$/, "")}: send the same request again in ${seconds} s.`,
    { "Retry-After": String(seconds) },
    { retryAfterSeconds: seconds },
  );
}

/** `429 RATE_LIMITED`: too many requests from this shopper; the same request may come again after the wait. */
export function rateLimited(seconds: number): ApiError {
  return new ApiError(
    "RATE_LIMITED",
    `Too many requests from you in a short time: wait ${seconds} s, then send the same request again.`,
    { "Retry-After": String(seconds) },
    { retryAfterSeconds: seconds },
  );
}

/** Codes for the statuses Hono's own middleware may throw. */
const CODE_BY_STATUS: Partial<Record<number, ErrorCode>> = {
  400: "INVALID_REQUEST",
  401: "UNAUTHENTICATED",
  404: "NOT_FOUND",
  405: "METHOD_NOT_ALLOWED",
  413: "PAYLOAD_TOO_LARGE",
};

/** The app's single error mapper: known errors keep their status, anything else is a logged 500. */
export function errorResponse(err: Error, c: Context): Response {
  if (err instanceof ApiError) {
    return c.body(err.json(), ERRORS[err.code][0], { "Content-Type": "application/json", ...err.headers });
  }
  if (err instanceof HTTPException) {
    const code = CODE_BY_STATUS[err.status] ?? (err.status >= 500 ? "INTERNAL" : "INVALID_REQUEST");
    return c.json(errorBody(code), ERRORS[code][0]);
  }
  log("error", "unhandled error", {
    requestId: (c.var as { requestId?: string }).requestId,
    path: c.req.path,
    error: String(err),
    stack: err.stack,
  });
  return c.json(errorBody("INTERNAL"), 500);
}
