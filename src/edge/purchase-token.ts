import { v7 as uuidv7 } from "uuid";
import { ApiError } from "../http/errors";
import { hmacKey } from "../http/hmac";
import { fromBase64Url, payloadOf, toBase64Url } from "./base64url";

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
  /**
   * The early access tier that admitted the user before the public start: signed here, so the stock
   * object takes the reservation before `startsAt` once that tier has opened by its clock.
   */
  tier?: string | undefined;
}

type Wire = { s: string; u: string; h: number; k: number; n: string; e: number; a?: string };

const encoder = new TextEncoder();

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
  if (claims.tier !== undefined) wire.a = claims.tier;
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
  const claims = { sku: wire.s, userId: wire.u, shard: wire.h, shards: wire.k, nonce: wire.n, expiresAt: wire.e };
  return wire.a === undefined ? claims : { ...claims, tier: wire.a };
}

/**
 * The shard and nonce a token names, read without checking its signature: only for an answer that
 * needs no proof (a sold-out SKU refuses any token whose nonce its shard has not spent).
 */
export function peekPurchaseToken(token: string): { shard: number; nonce: string } | null {
  const wire = decodeWire(token.slice(0, Math.max(0, token.indexOf("."))));
  return wire ? { shard: wire.h, nonce: wire.n } : null;
}

/** A token's claims are all there, of their types (one function, not one per reservation). */
const isWire = (wire: Partial<Wire>): boolean =>
  typeof wire.s === "string" &&
  typeof wire.u === "string" &&
  Number.isSafeInteger(wire.h) &&
  Number.isSafeInteger(wire.k) &&
  typeof wire.n === "string" &&
  Number.isSafeInteger(wire.e) &&
  (wire.a === undefined || typeof wire.a === "string");

function decodeWire(payload: string): Wire | null {
  return payloadOf<Wire>(payload, isWire);
}
