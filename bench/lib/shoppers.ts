import { sign } from "hono/jwt";
import { mintPurchaseToken, newNonce } from "../../src/edge/purchase-token";
import { homeShard } from "../../src/edge/stock-client";

/** The dev secrets of .dev.vars.example; the bench passes them to the Worker as vars. */
export const SECRETS = {
  AUTH_SECRET: "dev-auth-secret",
  TOKEN_SECRET: "dev-token-secret",
  ADMIN_TOKEN: "dev-admin-token",
} as const;

/** One prepared reservation request: a distinct user with its JWT and its own purchase token. */
export interface Shopper {
  userId: string;
  headers: Record<string, string>;
  body: string;
}

/**
 * Mints `count` shoppers for a SKU, each a distinct user making one request, so the per-user rate
 * limit (20 requests / 10 s) and the per-user limit never come into play. Tokens are minted here
 * with the dev TOKEN_SECRET, bound to the user's home shard as the token route would bind them.
 */
export async function mintShoppers(run: string, sku: string, shards: number, count: number): Promise<Shopper[]> {
  const now = Date.now();
  const exp = Math.floor(now / 1000) + 3600;
  const out: Shopper[] = [];
  for (let i = 0; i < count; i++) {
    const userId = `${run}-${i}`;
    const jwt = await sign({ sub: userId, iat: exp - 3600, exp }, SECRETS.AUTH_SECRET, "HS256");
    const claims = {
      sku,
      userId,
      shard: homeShard(userId, shards),
      shards,
      nonce: newNonce(),
      expiresAt: now + 3_600_000,
    };
    const token = await mintPurchaseToken(claims, SECRETS.TOKEN_SECRET);
    out.push({
      userId,
      headers: { authorization: `Bearer ${jwt}`, "content-type": "application/json" },
      body: JSON.stringify({ token, quantity: 1 }),
    });
  }
  return out;
}
