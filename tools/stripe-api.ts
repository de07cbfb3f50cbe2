import { randomBytes } from "node:crypto";
import { createServer, type IncomingMessage, type ServerResponse } from "node:http";
import { listenLocal } from "./listen";
import { stripeEnvelope } from "./stripe-event";

/**
 * A local stand-in for the Stripe API calls Flashgate makes, following Stripe's documented
 * contract (https://docs.stripe.com/api), so the Worker is tested against the other side of the wire:
 *
 *   POST /v1/checkout/sessions   form: mode=payment, line_items[0][price_data][currency|unit_amount],
 *                                line_items[0][price_data][product_data][name], line_items[0][quantity],
 *                                success_url, cancel_url, client_reference_id?, metadata[…]?, expires_at?
 *     -> 200 a Checkout Session: {"id":"cs_test_…","object":"checkout.session","url","status":"open",
 *            "payment_status":"unpaid","expires_at","amount_total","currency","client_reference_id","metadata"}
 *   GET  /v1/checkout/sessions/:id -> 200 the session
 *   POST /v1/refunds             form: payment_intent, amount?, metadata[…]?
 *     -> 200 a Refund: {"id":"re_…","object":"refund","amount","currency","payment_intent","metadata",
 *            "status":"succeeded"}
 *   GET  /v1/refunds/:id         -> 200 the refund as it now is
 *
 * As Stripe does: `Authorization: Bearer sk_…` (else 401 `authentication_error`); an `Idempotency-Key`
 * sent again with the same parameters replays the first answer (header `Idempotent-Replayed: true`),
 * with other parameters is 400 `idempotency_error`; a missing parameter is 400
 * `invalid_request_error` naming it in `param`; `expires_at` under 30 minutes or over 24 hours from
 * now is 400; a second refund of a payment intent refunded in full is 400 `charge_already_refunded`.
 * Errors are `{"error":{"type","code"?,"message","param"?}}`.
 *
 * `GET /__standin/requests` (the stand-in's own) lists every request received, for tests in workerd.
 * `POST /__standin/refunds/:id` (its own too) form `status=succeeded|failed|canceled` settles a refund as
 * Stripe's bank would, and answers `{"refund","events"}`: the events Stripe sends for that change, to sign
 * and post to the webhook (`refund.updated` and `charge.refund.updated`, with `data.previous_attributes`,
 * and `refund.failed` for a failure). A failed or canceled refund gives its amount back to the charge,
 * which may be refunded again.
 * A request sent under a key whose first request is still executing is answered 409
 * `idempotency_key_in_use` (Stripe saves no answer for it: the same request may be sent again).
 * Fault keys: `sk_test_slow` executes the request at once (the object is made, its answer saved under
 * the key) and answers after 6 s, an answer lost to a caller that gave up; `sk_test_stalled` executes it
 * after 6 s, its key in progress meanwhile; `sk_test_down` answers 500 `api_error` before any request
 * begins executing (nothing saved under the key); `sk_test_failing` begins executing a POST and fails,
 * 500 `api_error`, making nothing, and that answer is saved under its key as Stripe saves it (replayed to
 * every retry of the key, whatever the secret key); `sk_test_pending`
 * makes refunds `pending`; `sk_test_disputed` refuses them, 400 `charge_disputed` (a charge disputed).
 */

export const STRIPE_TEST_KEY = "sk_test_flashgate_standin";
export const STRIPE_FAULT_KEYS = {
  slow: "sk_test_slow",
  stalled: "sk_test_stalled",
  down: "sk_test_down",
  failing: "sk_test_failing",
  pending: "sk_test_pending",
  disputed: "sk_test_disputed",
} as const;
const SLOW_MS = 6_000;
const MIN_EXPIRY_S = 30 * 60;
const MAX_EXPIRY_S = 24 * 60 * 60;

export interface StripeStandIn {
  /** What STRIPE_API_URL would be. */
  url: string;
  /** Every request received: method, path, form parameters and idempotency key. */
  requests: { method: string; path: string; params: Record<string, string>; key: string | null }[];
  sessions: Map<string, Record<string, unknown>>;
  refunds: Map<string, Record<string, unknown>>;
  /** A test's switch: refunds made from now on are answered `pending` whatever the key, until set back. */
  pendingRefunds: boolean;
  close(): Promise<void>;
}

type Answer = { status: number; body: Record<string, unknown> };

/** The `metadata[…]` parameters of a form, as the object's `metadata`. */
const metadataOf = (params: Record<string, string>) =>
  Object.fromEntries(
    Object.entries(params).flatMap(([k, v]) => {
      const m = /^metadata\[(.+)\]$/.exec(k);
      return m?.[1] ? [[m[1], v]] : [];
    }),
  );
const id = (prefix: string) => `${prefix}_test_${randomBytes(12).toString("hex")}`;
const error = (status: number, type: string, message: string, extra: Record<string, string> = {}): Answer => ({
  status,
  body: { error: { type, message, ...extra } },
});

export async function startStripe(): Promise<StripeStandIn> {
  const requests: StripeStandIn["requests"] = [];
  const sessions = new Map<string, Record<string, unknown>>();
  const refunds = new Map<string, Record<string, unknown>>();
  /** Refunded amount per payment intent. */
  const refunded = new Map<string, number>();
  /** Answers by idempotency key, with the parameters they were first made with. */
  const idempotent = new Map<string, { params: string; answer: Answer }>();
  /** Keys whose first request is still executing. */
  const inProgress = new Set<string>();
  const switches = { pendingRefunds: false };
  let url = "";

  function createSession(params: Record<string, string>, now: number): Answer {
    for (const name of ["mode", "success_url", "line_items[0][quantity]", "line_items[0][price_data][currency]"]) {
      if (!params[name])
        return error(400, "invalid_request_error", `Missing required param: ${name}.`, { param: name });
    }
    if (params.mode !== "payment") return error(400, "invalid_request_error", "Invalid mode.", { param: "mode" });
    const unit = Number(params["line_items[0][price_data][unit_amount]"]);
    const quantity = Number(params["line_items[0][quantity]"]);
    if (!Number.isInteger(unit) || unit < 0) {
      return error(400, "invalid_request_error", "Invalid integer.", {
        param: "line_items[0][price_data][unit_amount]",
      });
    }
    if (!params["line_items[0][price_data][product_data][name]"]) {
      return error(400, "invalid_request_error", "Missing required param: product_data[name].", {
        param: "line_items[0][price_data][product_data][name]",
      });
    }
    const nowS = Math.floor(now / 1000);
    const expiresAt = params.expires_at ? Number(params.expires_at) : nowS + MAX_EXPIRY_S;
    if (expiresAt < nowS + MIN_EXPIRY_S || expiresAt > nowS + MAX_EXPIRY_S) {
      return error(
        400,
        "invalid_request_error",
        "The `expires_at` timestamp must be between 30 minutes and 24 hours from Checkout Session creation.",
        { param: "expires_at" },
      );
    }
    const metadata = metadataOf(params);
    const sessionId = id("cs");
    const session = {
      id: sessionId,
      object: "checkout.session",
      mode: "payment",
      status: "open",
      payment_status: "unpaid",
      url: `${url}/c/pay/${sessionId}`,
      success_url: params.success_url,
      cancel_url: params.cancel_url ?? null,
      client_reference_id: params.client_reference_id ?? null,
      metadata,
      currency: params["line_items[0][price_data][currency]"],
      amount_total: unit * quantity,
      expires_at: expiresAt,
      created: nowS,
      livemode: false,
    };
    sessions.set(sessionId, session);
    return { status: 200, body: session };
  }

  function createRefund(params: Record<string, string>, key: string): Answer {
    const intent = params.payment_intent;
    if (key === STRIPE_FAULT_KEYS.disputed) {
      return error(400, "invalid_request_error", `The charge of ${intent} was disputed: it cannot be refunded.`, {
        code: "charge_disputed",
      });
    }
    if (!intent)
      return error(400, "invalid_request_error", "Missing required param: payment_intent.", {
        param: "payment_intent",
      });
    if (!intent.startsWith("pi_")) {
      return error(400, "invalid_request_error", `No such payment_intent: '${intent}'`, {
        code: "resource_missing",
        param: "payment_intent",
      });
    }
    if (refunded.has(intent)) {
      return error(400, "invalid_request_error", `Charge for ${intent} has already been refunded.`, {
        code: "charge_already_refunded",
      });
    }
    const amount = params.amount ? Number(params.amount) : 0;
    refunded.set(intent, amount);
    const refund = {
      id: id("re"),
      object: "refund",
      amount,
      currency: "usd",
      failure_reason: null,
      metadata: metadataOf(params),
      payment_intent: intent,
      status: key === STRIPE_FAULT_KEYS.pending || switches.pendingRefunds ? "pending" : "succeeded",
      created: Math.floor(Date.now() / 1000),
    };
    refunds.set(refund.id as string, refund);
    // A copy: an idempotent replay answers what the first request did, not the refund as it is now.
    return { status: 200, body: { ...refund } };
  }

  /** Stripe's side settling a refund: the refund changed, and the events Stripe sends for it. */
  function settleRefund(refundId: string, status: string | undefined): Answer {
    const refund = refunds.get(refundId);
    if (!refund)
      return error(404, "invalid_request_error", `No such refund: '${refundId}'`, { code: "resource_missing" });
    if (status !== "succeeded" && status !== "failed" && status !== "canceled") {
      return error(400, "invalid_request_error", "status must be succeeded, failed or canceled.", { param: "status" });
    }
    const previous = { status: refund.status, failure_reason: refund.failure_reason };
    refund.status = status;
    if (status === "failed") refund.failure_reason = "expired_or_canceled_card";
    // The money of a refund that did not happen can be refunded again.
    if (status !== "succeeded") refunded.delete(refund.payment_intent as string);
    const event = (type: string) => {
      const envelope = stripeEnvelope(id("evt"), type, { ...refund });
      return { ...envelope, data: { object: { ...refund }, previous_attributes: previous } };
    };
    const types = ["refund.updated", "charge.refund.updated", ...(status === "failed" ? ["refund.failed"] : [])];
    return { status: 200, body: { refund, events: types.map(event) } };
  }

  function handle(method: string, path: string, params: Record<string, string>, key: string | null, secret: string) {
    const answerOf = (): Answer => {
      // Began executing, then failed: the 500 is saved under the key below, as Stripe saves it.
      if (method === "POST" && secret === STRIPE_FAULT_KEYS.failing) {
        return error(500, "api_error", "An unknown error occurred.");
      }
      if (method === "POST" && path === "/v1/checkout/sessions") return createSession(params, Date.now());
      if (method === "POST" && path === "/v1/refunds") return createRefund(params, secret);
      const refund = /^\/v1\/refunds\/([^/]+)$/.exec(path);
      if (method === "GET" && refund?.[1]) {
        const found = refunds.get(refund[1]);
        return found
          ? { status: 200, body: found }
          : error(404, "invalid_request_error", `No such refund: '${refund[1]}'`, { code: "resource_missing" });
      }
      const session = /^\/v1\/checkout\/sessions\/([^/]+)$/.exec(path);
      if (method === "GET" && session?.[1]) {
        const found = sessions.get(session[1]);
        return found
          ? { status: 200, body: found }
          : error(404, "invalid_request_error", `No such checkout.session: '${session[1]}'`, {
              code: "resource_missing",
            });
      }
      return error(404, "invalid_request_error", `Unrecognized request URL (${method}: ${path}).`);
    };
    if (method !== "POST" || key === null) return { answer: answerOf(), replayed: false };
    if (inProgress.has(key)) {
      return {
        answer: error(
          409,
          "invalid_request_error",
          `There is currently another in-progress request using this Idempotency-Key (that probably means you submitted twice, and the other request is still going through): '${key}'. Please try again later.`,
          { code: "idempotency_key_in_use" },
        ),
        replayed: false,
      };
    }
    const signature = JSON.stringify({ path, params });
    const earlier = idempotent.get(key);
    if (earlier) {
      if (earlier.params !== signature) {
        return {
          answer: error(
            400,
            "idempotency_error",
            `Keys for idempotent requests can only be used with the same parameters they were first used with. Try using a key other than '${key}' if you meant to execute a different request.`,
          ),
          replayed: false,
        };
      }
      return { answer: earlier.answer, replayed: true };
    }
    const answer = answerOf();
    // Stripe keeps the answers of requests that began executing, errors of validation excepted.
    if (answer.status === 200 || answer.status >= 500) idempotent.set(key, { params: signature, answer });
    return { answer, replayed: false };
  }

  const server = createServer((req: IncomingMessage, res: ServerResponse) => {
    let raw = "";
    req.on("data", (chunk: Buffer) => {
      raw += chunk.toString();
    });
    req.on("end", () => {
      void (async () => {
        const path = (req.url ?? "/").split("?")[0] ?? "/";
        const params = Object.fromEntries(new URLSearchParams(raw));
        const key = (req.headers["idempotency-key"] as string | undefined) ?? null;
        requests.push({ method: req.method ?? "GET", path, params, key });
        const secret = /^Bearer (sk_\S+)$/.exec(req.headers.authorization ?? "")?.[1];
        const reply = (answer: Answer, replayed = false) => {
          res.writeHead(answer.status, {
            "content-type": "application/json",
            "request-id": `req_${randomBytes(7).toString("hex")}`,
            ...(replayed ? { "idempotent-replayed": "true" } : {}),
          });
          res.end(JSON.stringify(answer.body));
        };
        if (path === "/__standin/requests") {
          reply({ status: 200, body: { requests } });
          return;
        }
        const settle = /^\/__standin\/refunds\/([^/]+)$/.exec(path);
        if (req.method === "POST" && settle?.[1]) {
          reply(settleRefund(settle[1], params.status));
          return;
        }
        if (!secret) {
          reply(
            error(
              401,
              "authentication_error",
              "You did not provide an API key. Provide it in the Authorization header.",
            ),
          );
          return;
        }
        if (secret === STRIPE_FAULT_KEYS.down) {
          reply(error(500, "api_error", "An unknown error occurred."));
          return;
        }
        const method = req.method ?? "GET";
        if (secret === STRIPE_FAULT_KEYS.stalled && method === "POST" && key !== null && !inProgress.has(key)) {
          inProgress.add(key);
          await new Promise((resolve) => setTimeout(resolve, SLOW_MS));
          inProgress.delete(key);
        }
        const { answer, replayed } = handle(method, path, params, key, secret);
        if (secret === STRIPE_FAULT_KEYS.slow) await new Promise((resolve) => setTimeout(resolve, SLOW_MS));
        reply(answer, replayed);
      })();
    });
  });
  const { port, close } = await listenLocal(server);
  url = `http://127.0.0.1:${port}`;
  return Object.assign(switches, { url, requests, sessions, refunds, close });
}
