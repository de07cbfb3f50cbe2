import { hmacKey } from "../http/hmac";
import { fromBase64Url, payloadOf, toBase64Url } from "./base64url";

/**
 * Proof of work before a purchase token (API.md "Bots"). A challenge is `<payload>.<signature>`,
 * base64url, binding one user, one SKU, the difficulty and an expiry, signed with TOKEN_SECRET under
 * a label of its own (so it can never pass for a purchase token): the Worker stores nothing. The
 * shopper finds a nonce such that SHA-256 of `<challenge>:<nonce>` begins with `bits` zero bits and
 * sends `Proof-Of-Work: <challenge>:<nonce>`. Checking costs one HMAC and one hash; solving costs
 * 2^bits hashes on average, once per account and SKU.
 */

/** How long a challenge may be used: long enough to solve it and wait for a sale to open. */
const CHALLENGE_TTL_MS = 10 * 60 * 1000;
const MAX_NONCE_LENGTH = 32;
const LABEL = "flashgate-pow.";

const encoder = new TextEncoder();

type Wire = { u: string; s: string; b: number; e: number };

export interface Challenge {
  challenge: string;
  bits: number;
  expiresAt: number;
}

export async function issueChallenge(
  secret: string,
  userId: string,
  sku: string,
  bits: number,
  now: number,
): Promise<Challenge> {
  const expiresAt = now + CHALLENGE_TTL_MS;
  const wire: Wire = { u: userId, s: sku, b: bits, e: expiresAt };
  const payload = toBase64Url(encoder.encode(JSON.stringify(wire)));
  const signature = await crypto.subtle.sign("HMAC", await hmacKey(secret), encoder.encode(LABEL + payload));
  return { challenge: `${payload}.${toBase64Url(new Uint8Array(signature))}`, bits, expiresAt };
}

/**
 * Whether `header` is a solved challenge of this user and SKU, still valid, of at least `bits`
 * (a challenge issued before the difficulty was raised is refused).
 */
export async function checkProofOfWork(
  header: string,
  secret: string,
  expected: { userId: string; sku: string; bits: number },
  now: number,
): Promise<boolean> {
  const colon = header.indexOf(":"); // a challenge has none; a nonce may
  const challenge = header.slice(0, colon);
  const nonce = header.slice(colon + 1);
  if (colon < 0 || nonce.length === 0 || nonce.length > MAX_NONCE_LENGTH) return false;
  const [payload, signature, extra] = challenge.split(".");
  const signatureBytes = signature === undefined ? null : fromBase64Url(signature);
  if (!payload || !signatureBytes || extra !== undefined) return false;
  const wire = parseWire(payload);
  if (!wire || wire.u !== expected.userId || wire.s !== expected.sku || wire.e <= now || wire.b < expected.bits) {
    return false;
  }
  // crypto.subtle.verify compares in constant time.
  const key = await hmacKey(secret);
  if (!(await crypto.subtle.verify("HMAC", key, signatureBytes, encoder.encode(LABEL + payload)))) return false;
  const digest = new Uint8Array(await crypto.subtle.digest("SHA-256", encoder.encode(header)));
  return leadingZeroBits(digest) >= wire.b;
}

/** A challenge's claims are all there, of their types. */
const isWire = (wire: Partial<Wire>): boolean =>
  typeof wire.u === "string" &&
  typeof wire.s === "string" &&
  Number.isSafeInteger(wire.b) &&
  Number.isSafeInteger(wire.e);

function parseWire(payload: string): Wire | null {
  return payloadOf<Wire>(payload, isWire);
}

/** How many zero bits the digest begins with. */
export function leadingZeroBits(digest: Uint8Array): number {
  let bits = 0;
  for (const byte of digest) {
    if (byte === 0) {
      bits += 8;
      continue;
    }
    return bits + Math.clz32(byte) - 24;
  }
  return bits;
}
