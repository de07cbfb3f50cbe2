import { ApiError } from "../http/errors";
import { hmacKey } from "../http/hmac";

/**
 * Stripe's webhook signature scheme, used by both webhooks (`Payment-Signature` on
 * `/webhooks/payments`, `Stripe-Signature` on `/webhooks/stripe`): `t=<unix seconds>,v1=<hex>`
 * where the hex is HMAC-SHA256(secret, `${t}.${rawBody}`). Several `v1` entries may be present
 * (a rolled secret signs with the old and the new key); one match is enough, and at most
 * {@link MAX_V1_SIGNATURES} are accepted, each an HMAC over up to the whole body, so a header
 * cannot make the Worker hash the body hundreds of times before anything is known. Other entries
 * (Stripe's `v0` test scheme) are ignored. `t` must be within the tolerance of now, either way, so
 * a captured request cannot be replayed later or pre-signed for the future.
 */
const SIGNATURE_TOLERANCE_SECONDS = 300;
/** `v1` entries a header may carry: one per live secret, and a rotation has two. */
export const MAX_V1_SIGNATURES = 4;

const encoder = new TextEncoder();

function fromHex(hex: string): Uint8Array<ArrayBuffer> | null {
  if (!/^(?:[0-9a-f]{2})+$/i.test(hex)) return null;
  return Uint8Array.from(hex.match(/../g) ?? [], (pair) => Number.parseInt(pair, 16));
}

/** Signs a body the way a payment provider does (used by tests and the dev storefront). */
export async function signPayment(rawBody: string, secret: string, unixSeconds: number): Promise<string> {
  const mac = await crypto.subtle.sign("HMAC", await hmacKey(secret), encoder.encode(`${unixSeconds}.${rawBody}`));
  const hex = [...new Uint8Array(mac)].map((b) => b.toString(16).padStart(2, "0")).join("");
  return `t=${unixSeconds},v1=${hex}`;
}

/**
 * Throws `401 SIGNATURE_INVALID` unless the header (named `headerName` in messages) signs
 * `rawBody` with `secret` near `nowMs`.
 */
export async function verifyPaymentSignature(
  header: string | undefined,
  rawBody: string,
  secret: string,
  nowMs: number,
  headerName = "Payment-Signature",
): Promise<void> {
  if (!header) throw new ApiError("SIGNATURE_INVALID", `The ${headerName} header is missing.`);
  let timestamp: string | undefined;
  const signatures: Uint8Array<ArrayBuffer>[] = [];
  for (const part of header.split(",")) {
    const [name, value] = part.trim().split("=", 2);
    if (name === "t") timestamp = value;
    if (name === "v1" && value) {
      if (signatures.length === MAX_V1_SIGNATURES) {
        throw new ApiError(
          "SIGNATURE_INVALID",
          `The ${headerName} header has more than ${MAX_V1_SIGNATURES} v1 signatures.`,
        );
      }
      const bytes = fromHex(value);
      if (bytes) signatures.push(bytes);
    }
  }
  const t = timestamp !== undefined && /^\d{1,12}$/.test(timestamp) ? Number(timestamp) : Number.NaN;
  if (!Number.isFinite(t) || signatures.length === 0) {
    throw new ApiError("SIGNATURE_INVALID", `The ${headerName} header is malformed.`);
  }
  if (Math.abs(nowMs / 1000 - t) > SIGNATURE_TOLERANCE_SECONDS) {
    throw new ApiError("SIGNATURE_INVALID", "The signature timestamp is outside the tolerance.");
  }
  const key = await hmacKey(secret);
  const signed = encoder.encode(`${timestamp}.${rawBody}`);
  for (const signature of signatures) {
    // crypto.subtle.verify compares in constant time.
    if (await crypto.subtle.verify("HMAC", key, signature, signed)) return;
  }
  throw new ApiError("SIGNATURE_INVALID");
}
