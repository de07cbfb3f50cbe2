import { type ReserveAnswer, type ReserveRequest, shardName } from "../../durable-objects/stock/stock-model";
import { callStock, stockShard } from "../stock/stock-client";
import { awaitDraw } from "./draw-client";
import { gathererName, gatherOn } from "./gather-name";
import { sendThroughGatherer } from "./gatherer";
import { reserveGrouped } from "./group-commit";
import { verifyPurchaseToken } from "./purchase-token";
import { explainRefusal, withDrawPlace } from "./refusals";
import { markSoldOut, variantKey } from "./sold-out-cache";

/** A shopper's reservation as the route hands it over: who, which SKU, and the body's fields. */
export interface ReserveAsk {
  sku: string;
  userId: string;
  token: string;
  quantity: number;
  variants?: string[] | undefined;
  requestId: string | undefined;
  /** The colo the request came in at (the gatherer of that colo batches it). */
  colo: string | undefined;
}

/**
 * The reservation path of docs/ARCHITECTURE.md ("The life of a reservation") after the route's
 * checks: the purchase token, then `limit` (the rate limit, spent only by requests that reach a
 * stock object), the shard's answer through group commit or the gatherer, a draw's answer when the
 * window decides it, what the answer teaches the sold-out cache, and a refusal said with its
 * figures (thrown as the contract's error). Callable without HTTP.
 */
export async function reserveUnits(env: Env, ask: ReserveAsk, limit: () => Promise<void>): Promise<ReserveAnswer> {
  const { sku, userId, quantity } = ask;
  const now = Date.now();
  const claims = await verifyPurchaseToken(ask.token, { sku, userId }, env.TOKEN_SECRET, now);
  // The rate limit guards the stock objects: an answer this isolate gives on its own does not
  // spend the shopper's allowance, and costs less than asking the binding.
  await limit();

  const request: ReserveRequest = {
    userId,
    nonce: claims.nonce,
    quantity,
    shards: claims.shards, // a token minted before a change of `shards` may no longer hold
    tokenExpiresAt: claims.expiresAt, // the object keeps its reservation while the token can replay
    requestId: ask.requestId,
    tier: claims.tier, // early access: the object checks that this tier has opened
    variants: ask.variants, // sizes: the object takes the first listed with the quantity
  };
  const stock = shardName(sku, claims.shard);
  // GATHER: through the shard's gatherer for this colo, which batches with other isolates' (issue 44).
  const send = gatherOn(env, claims.shards)
    ? sendThroughGatherer(env, stock, gathererName(stock, ask.colo))
    : (requests: ReserveRequest[]) => callStock(() => stockShard(env, sku, claims.shard).reserve(requests));
  let outcome = env.GROUP_COMMIT === "on" ? await reserveGrouped(stock, request, send) : (await send([request]))[0];
  if (!outcome) throw new Error("stock object returned no answer");
  // Fair opening: not decided on arrival; the answer comes from the draw (or right after it).
  const drawn = !outcome.ok && outcome.code === "DRAW_PENDING";
  if (drawn) outcome = await awaitDraw(env, sku, claims.shard, request);
  // The object says whether its answer shows the SKU sold out (its rule: showsSoldOut), or every
  // listed size. A draw's answers carry no spent-nonce digest: they teach the sold-out cache nothing.
  const ttl = Number(env.SOLD_OUT_CACHE_TTL_MS);
  const learnt = { shard: claims.shard, spent: outcome.spent };
  if (outcome.soldOut && !drawn) markSoldOut(sku, now, ttl, learnt);
  if (outcome.sizesSoldOut && !drawn && !outcome.ok) {
    for (const id of Object.keys(outcome.variants ?? {})) markSoldOut(variantKey(sku, id), now, ttl, learnt);
  }
  const decided = outcome;
  const where = { sku, shard: claims.shard, userId, quantity };
  return explainRefusal(env, where, decided).catch((err) => {
    throw !decided.ok && decided.draw ? withDrawPlace(err, decided.draw) : err;
  });
}
