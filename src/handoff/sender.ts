import { type PaymentObject, paymentObjectOf } from "../db/payment-records";
import type { Deadlines } from "./deadlines";
import type { Taken, Target } from "./deliveries";
import { type OrderObject, orderObjectOf } from "./order-object";
import { sign } from "./signature";

/** One attempt of one delivery: the signed POST and what came back. */

/** API.md: an answer 2xx within 10 s is delivered. */
export const DELIVERY_TIMEOUT_MS = 10_000;
/** What is kept of an answer's body (or an error's text). */
export const RESPONSE_BYTES = 1024;

export interface Answer {
  ok: boolean;
  code: number | null;
  response: string;
  /** What went wrong, in words (null when delivered): what the delivery log shows as `lastError`. */
  error: string | null;
}

/**
 * A failed attempt in words. workerd's fetch tells little apart: a refused or cut connection is
 * "Network connection lost.", a failed DNS lookup or TLS handshake an "internal error" (the detail
 * stays in workerd's own log); anything else is quoted.
 */
export function failureOf(err: unknown, timedOut: boolean): string {
  if (timedOut) return `timed out after ${DELIVERY_TIMEOUT_MS / 1000} s without an answer`;
  const text = String(err);
  if (text.includes("Network connection lost")) return "connection refused or closed before an answer";
  if (text.includes("internal error")) return "could not connect: DNS lookup or TLS handshake failed";
  return `request failed: ${text.slice(0, 200)}`;
}

/** A non-2xx answer in words; a redirect says where it pointed, since none is followed. */
function refusalOf(response: Response): string {
  if (response.status >= 300 && response.status < 400) {
    const location = response.headers.get("location");
    return `redirect not followed (${response.status}${location ? ` to ${location.slice(0, 200)}` : ""})`;
  }
  return `answered ${response.status}`;
}

export interface WebhookBody {
  type: Taken["type"];
  timestamp: string;
  data: OrderObject | PaymentObject;
}

/** The event a delivery carries: the same on every attempt. */
export function eventOf(delivery: Taken): WebhookBody {
  if (delivery.type === "payment.refund_required") {
    const data = paymentObjectOf(delivery.payment);
    return { type: delivery.type, timestamp: data.receivedAt, data };
  }
  const data = orderObjectOf(delivery);
  return { type: delivery.type, timestamp: data.updatedAt, data };
}

/** The body of a delivery sent alone: the same on every attempt (only the headers' timestamp moves). */
export function bodyOf(delivery: Taken): string {
  return JSON.stringify(eventOf(delivery));
}

const encoder = new TextEncoder();
const decoder = new TextDecoder();

/**
 * Up to {@link RESPONSE_BYTES} of an answer's body. One that says it is no longer (and is not
 * compressed, which could make it longer) is read whole in one call; any other only as far as that
 * (a receiver may answer with megabytes).
 */
function answerText(response: Response): Promise<string> {
  const length = Number(response.headers.get("content-length") ?? Number.NaN);
  if (length <= RESPONSE_BYTES && !response.headers.has("content-encoding")) return response.text().then(clip);
  return head(response.body);
}

/** Up to {@link RESPONSE_BYTES} of a body, read no further. */
async function head(body: ReadableStream<Uint8Array> | null): Promise<string> {
  if (!body) return "";
  const reader = body.getReader();
  const bytes = new Uint8Array(RESPONSE_BYTES);
  let filled = 0;
  try {
    while (filled < RESPONSE_BYTES) {
      const { done, value } = await reader.read();
      if (done) break;
      const part = value.subarray(0, RESPONSE_BYTES - filled);
      bytes.set(part, filled);
      filled += part.length;
    }
  } finally {
    reader.cancel().catch(() => {});
  }
  return clip(decoder.decode(bytes.subarray(0, filled)));
}

/** `text` cut to at most {@link RESPONSE_BYTES} of UTF-8 (a cut character decodes wider). */
export function clip(text: string): string {
  let out = text.length > RESPONSE_BYTES ? text.slice(0, RESPONSE_BYTES) : text;
  while (encoder.encode(out).length > RESPONSE_BYTES) out = out.slice(0, -1);
  return out;
}

/**
 * POSTs one message (one event, or a batch of them) with `webhook-id` `id`, signed for this attempt.
 * Redirects are not followed (a 3xx is an answer that is not 2xx: the endpoint's URL is what the
 * operator set, nowhere else). The timeout is the lane run's {@link Deadlines} (one timer for all its
 * attempts), done once the answer is read, not `AbortSignal.timeout`, whose timer stays set for the
 * full 10 s after the answer came: an invocation may hold at most 10,000 timers, and a sender past
 * 1,000 attempts a second had the rest fail with QuotaExceededError, never sent.
 */
export async function post(
  { url, secret }: Target,
  id: string,
  body: string,
  now: number,
  deadlines: Deadlines,
): Promise<Answer> {
  const timestamp = Math.floor(now / 1000);
  const deadline = deadlines.start();
  try {
    const response = await fetch(url, {
      method: "POST",
      redirect: "manual",
      signal: deadline.signal,
      headers: {
        "content-type": "application/json",
        "user-agent": "Flashgate-Webhooks/1",
        "webhook-id": id,
        "webhook-timestamp": String(timestamp),
        "webhook-signature": await sign(secret, id, timestamp, body),
      },
      body,
    });
    const ok = response.status >= 200 && response.status < 300;
    const error = ok ? null : refusalOf(response);
    return { ok, code: response.status, response: await answerText(response).catch(() => ""), error };
  } catch (err) {
    const timedOut = deadline.signal.aborted || (err instanceof Error && err.name === "TimeoutError");
    const response = clip(timedOut ? "no answer within 10 s" : String(err));
    return { ok: false, code: null, response, error: failureOf(err, timedOut) };
  } finally {
    deadline.done();
  }
}
