import { homeShard } from "../../durable-objects/shared/shard-name";
import { issueChallenge } from "../../src/edge/proof-of-work";
import { mintPurchaseToken, newNonce } from "../../src/edge/purchase-token";
import { SECRETS } from "../../tools/dev-vars";
import { shopperJwt } from "../../tools/jwt";
import { solveProofOfWork } from "../../tools/proof-of-work";
import type { WrkRequest } from "./wrk";

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
  variantsOf?: (i: number) => string[],
): Promise<WrkRequest[]> {
  const now = Date.now();
  const issuedAt = Math.floor(now / 1000);
  const one = async (i: number): Promise<WrkRequest> => {
    const userId = `${run}-${i}`;
    const jwt = await shopperJwt(userId, SECRETS.AUTH_SECRET, 3600, issuedAt);
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
      body: JSON.stringify(variantsOf ? { token, quantity, variants: variantsOf(i) } : { token, quantity }),
    };
  };
  return prepared(count, one);
}

/**
 * `count` token requests for a SKU, each from a distinct user (the rate limit never applies); with
 * `powBits`, each carries its user's solved proof of work, made with the dev TOKEN_SECRET as the
 * challenge route makes it; with `codes` (one per request), each carries its user's access code.
 */
export async function tokenRequests(
  run: string,
  sku: string,
  count: number,
  powBits = 0,
  codes?: readonly string[],
): Promise<WrkRequest[]> {
  const now = Date.now();
  const issuedAt = Math.floor(now / 1000);
  const one = async (i: number): Promise<WrkRequest> => {
    const userId = `${run}-${i}`;
    const jwt = await shopperJwt(userId, SECRETS.AUTH_SECRET, 3600, issuedAt);
    const request: WrkRequest = { method: "POST", path: `/api/skus/${sku}/tokens`, authorization: `Bearer ${jwt}` };
    if (powBits > 0) {
      const { challenge } = await issueChallenge(SECRETS.TOKEN_SECRET, userId, sku, powBits, now);
      request.header = `Proof-Of-Work: ${solveProofOfWork(challenge, powBits)}`;
    }
    // Early access: each user its own code (wrk sending a line again is the same user: admitted again).
    if (codes) request.header = `Access-Code: ${codes[i]}`;
    return request;
  };
  return prepared(count, one);
}

/** `count` requests made by `one`, 512 at a time: WebCrypto in Node signs on libuv's thread pool, so many in flight at once mint several times faster. */
async function prepared(count: number, one: (i: number) => Promise<WrkRequest>): Promise<WrkRequest[]> {
  const out: WrkRequest[] = [];
  for (let i = 0; i < count; i += 512) {
    const slice = Array.from({ length: Math.min(512, count - i) }, (_, k) => one(i + k));
    out.push(...(await Promise.all(slice)));
  }
  return out;
}
