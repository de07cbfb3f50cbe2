import { v7 as uuidv7 } from "uuid";
import { ApiError } from "../http/errors";
import { hmacKey } from "../http/hmac";

/**
 * One-time purchase tokens: `<payload>.<signature>`, both base64url, where the payload binds
 * the token to one SKU, one user, one home shard and an expiry, and carries a unique nonce.
 * The edge checks all of it without a round trip; the stock object consumes the nonce inside
 * its transaction, so a token creates at most one reservation (invariant 3).
 */
interface PurchaseClaims {
  sku: string;
  userId: string;
  /** The stock shard the reservation goes to (the user's home shard). */
  shard: number;
  /** How many shards the SKU had when the token was minted. */
  shards: number;
  nonce: string;
  /** Expiry, epoch milliseconds. */
  expiresAt: number;
}

type Wire = { s: string; u: string; h: number; k: number; n: string; e: number };

const encoder = new TextEncoder();
const decoder = new TextDecoder();

function toBase64Url(bytes: Uint8Array): string {
  let binary = "";
  for (const byte of bytes) binary += String.fromCharCode(byte);
  return btoa(binary).replaceAll("+", "-").replaceAll("/", "_").replace(/=+$/, "");
}

const BASE64URL = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";

/**
 * Only the canonical encoding: the bits of the last character that fall past the last byte must be
 * zero. Otherwise several texts decode to the same bytes, and a token whose signature was altered in
 * those bits would still verify (the same HMAC), so "a changed token is refused" would not hold.
 */
function canonical(text: string): boolean {
  const spare = [0, -1, 4, 2][text.length % 4] as number; // unused low bits of the last character
  if (spare < 0) return false;
  return spare === 0 || (BASE64URL.indexOf(text.charAt(text.length - 1)) & ((1 << spare) - 1)) === 0;
}

function fromBase64Url(text: string): Uint8Array<ArrayBuffer> | null {
  if (!/^[A-Za-z0-9_-]*$/.test(text) || !canonical(text)) return null;
  try {
    const binary = atob(text.replaceAll("-", "+").replaceAll("_", "/"));
    // A plain loop: `Uint8Array.from(binary, fn)` calls a function per byte, on every reservation (commit 41774cc).
    const bytes = new Uint8Array(binary.length);
    for (let i = 0; i < binary.length; i++) bytes[i] = binary.charCodeAt(i);
    return bytes;
  } catch {
    return null;
  }
}

/**
 * A fresh nonce: a UUIDv7 in hex, so nonces sort by the time they were minted and the stock
 * object's nonce index grows at its right edge instead of at a random page (its uniqueness is
 * what counts; the token's signature, not the nonce, makes a token unforgeable).
 */
export function newNonce(): string {
  return uuidv7().replaceAll("-", "");
}

export async function mintPurchaseToken(claims: PurchaseClaims, secret: string): Promise<string> {
  const wire: Wire = {
    s: claims.sku,
    u: claims.userId,
    h: claims.shard,
    k: claims.shards,
    n: claims.nonce,
    e: claims.expiresAt,
  };
  const payload = toBase64Url(encoder.encode(JSON.stringify(wire)));
  const signature = await crypto.subtle.sign("HMAC", await hmacKey(secret), encoder.encode(payload));
  return `${payload}.${toBase64Url(new Uint8Array(signature))}`;
}

/**
 * Verifies a token for this user and SKU at `now`. Any forgery, or a token of another user or
 * SKU, is `401 TOKEN_INVALID`; a genuine but stale one is `401 TOKEN_EXPIRED`.
 */
export async function verifyPurchaseToken(
  token: string,
  expected: { sku: string; userId: string },
  secret: string,
  now: number,
): Promise<PurchaseClaims> {
  const [payload, signature, extra] = token.split(".");
  const signatureBytes = signature === undefined ? null : fromBase64Url(signature);
  if (!payload || !signatureBytes || extra !== undefined) throw new ApiError("TOKEN_INVALID");
  // crypto.subtle.verify compares in constant time.
  const genuine = await crypto.subtle.verify("HMAC", await hmacKey(secret), signatureBytes, encoder.encode(payload));
  if (!genuine) throw new ApiError("TOKEN_INVALID");
  const wire = decodeWire(payload);
  if (!wire || wire.s !== expected.sku || wire.u !== expected.userId) throw new ApiError("TOKEN_INVALID");
  if (wire.e <= now) throw new ApiError("TOKEN_EXPIRED");
  return { sku: wire.s, userId: wire.u, shard: wire.h, shards: wire.k, nonce: wire.n, expiresAt: wire.e };
}

function decodeWire(payload: string): Wire | null {
  const bytes = fromBase64Url(payload);
  if (!bytes) return null;
  try {
    const wire = JSON.parse(decoder.decode(bytes)) as Partial<Wire>;
    const wellFormed =
      typeof wire.s === "string" &&
      typeof wire.u === "string" &&
      Number.isSafeInteger(wire.h) &&
      Number.isSafeInteger(wire.k) &&
      typeof wire.n === "string" &&
      Number.isSafeInteger(wire.e);
    return wellFormed ? (wire as Wire) : null;
  } catch {
    return null;
  }
}
