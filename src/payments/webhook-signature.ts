import { ApiError } from "../http/errors";
import { hmacKey } from "../http/hmac";

/**
 * Stripe-style webhook signatures: `Payment-Signature: t=<unix seconds>,v1=<hex>` where the
 * hex is HMAC-SHA256(secret, `${t}.${rawBody}`). Several `v1` entries may be present (key
 * rotation); one match is enough. `t` must be within the tolerance of now, either way, so a
 * captured request cannot be replayed later or pre-signed for the future.
 */
export const SIGNATURE_TOLERANCE_SECONDS = 300;

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

/** Throws `401 SIGNATURE_INVALID` unless the header signs `rawBody` with `secret` near `nowMs`. */
export async function verifyPaymentSignature(
  header: string | undefined,
  rawBody: string,
  secret: string,
  nowMs: number,
): Promise<void> {
  if (!header) throw new ApiError("SIGNATURE_INVALID", "The Payment-Signature header is missing.");
  let timestamp: string | undefined;
  const signatures: Uint8Array<ArrayBuffer>[] = [];
  for (const part of header.split(",")) {
    const [name, value] = part.trim().split("=", 2);
    if (name === "t") timestamp = value;
    if (name === "v1" && value) {
      const bytes = fromHex(value);
      if (bytes) signatures.push(bytes);
    }
  }
  const t = timestamp !== undefined && /^\d{1,12}$/.test(timestamp) ? Number(timestamp) : Number.NaN;
  if (!Number.isFinite(t) || signatures.length === 0) {
    throw new ApiError("SIGNATURE_INVALID", "The Payment-Signature header is malformed.");
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
