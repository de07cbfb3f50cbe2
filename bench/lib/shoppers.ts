import { SignJWT } from "jose";
import { homeShard } from "../../durable-objects/shard-name";
import { mintPurchaseToken, newNonce } from "../../src/edge/purchase-token";
import type { WrkRequest } from "./wrk";

/** The dev secrets of .dev.vars.example; the bench passes them to the Worker as vars. */
export const SECRETS = {
  AUTH_SECRET: "dev-auth-secret",
  TOKEN_SECRET: "dev-token-secret",
  ADMIN_TOKEN: "dev-admin-token",
} as const;

/** Imported once: jose would import a raw secret again for every token. */
const authKey = crypto.subtle.importKey(
  "raw",
  new TextEncoder().encode(SECRETS.AUTH_SECRET),
  { name: "HMAC", hash: "SHA-256" },
  false,
  ["sign"],
);

/**
 * `count` reservation requests for a SKU, each from a distinct user with its own JWT and a fresh
 * purchase token, so neither the per-user rate limit (20 requests / 10 s) nor the per-user limit
 * ever applies and no request is a replay. Tokens are minted here with the dev TOKEN_SECRET, bound
 * to the user's home shard as the token route binds them.
 */
export async function reservationRequests(
  run: string,
  sku: string,
  shards: number,
  count: number,
  quantity = 1,
): Promise<WrkRequest[]> {
  const now = Date.now();
  const exp = Math.floor(now / 1000) + 3600;
  const one = async (i: number): Promise<WrkRequest> => {
    const userId = `${run}-${i}`;
    const jwt = await new SignJWT({ sub: userId })
      .setProtectedHeader({ alg: "HS256", typ: "JWT" })
      .setIssuedAt(exp - 3600)
      .setExpirationTime(exp)
      .sign(await authKey);
    const claims = {
      sku,
      userId,
      shard: homeShard(userId, shards),
      shards,
      nonce: newNonce(),
      expiresAt: now + 3_600_000,
    };
    const token = await mintPurchaseToken(claims, SECRETS.TOKEN_SECRET);
    return {
      method: "POST",
      path: `/api/skus/${sku}/reservations`,
      authorization: `Bearer ${jwt}`,
      body: JSON.stringify({ token, quantity }),
    };
  };
  // WebCrypto in Node signs on libuv's thread pool: many in flight at once mint several times faster.
  const out: WrkRequest[] = [];
  for (let i = 0; i < count; i += 512) {
    const slice = Array.from({ length: Math.min(512, count - i) }, (_, k) => one(i + k));
    out.push(...(await Promise.all(slice)));
  }
  return out;
}
