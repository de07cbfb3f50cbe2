import { type JWTPayload, SignJWT } from "jose";

/**
 * Shopper JWTs as the Worker accepts them with AUTH_SECRET (HS256, `sub` the user id, `exp`
 * required; src/http/auth.ts), for every tool that plays a shopper: the tests' client, chaos,
 * the soak, the bench and `npm run jwt`. Runs in Node and in workerd alike.
 */

/** HMAC keys by secret, imported once each: jose would import a raw secret again for every token. */
const keys = new Map<string, Promise<CryptoKey>>();

function hmacKey(secret: string): Promise<CryptoKey> {
  let key = keys.get(secret);
  if (!key) {
    key = crypto.subtle.importKey("raw", new TextEncoder().encode(secret), { name: "HMAC", hash: "SHA-256" }, false, [
      "sign",
    ]);
    keys.set(secret, key);
  }
  return key;
}

/** Any claims signed HS256 with `secret`, unchecked: chaos's fuzzer signs wrong ones on purpose. */
export async function signHs256(claims: Record<string, unknown>, secret: string): Promise<string> {
  return new SignJWT(claims as JWTPayload).setProtectedHeader({ alg: "HS256", typ: "JWT" }).sign(await hmacKey(secret));
}

/** A shopper's JWT: issued at `nowSeconds` (default now), valid for `ttlSeconds`. */
export function shopperJwt(
  userId: string,
  secret: string,
  ttlSeconds = 3600,
  nowSeconds = Math.floor(Date.now() / 1000),
): Promise<string> {
  return signHs256({ sub: userId, iat: nowSeconds, exp: nowSeconds + ttlSeconds }, secret);
}
