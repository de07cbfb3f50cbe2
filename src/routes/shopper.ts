import { type Context, Hono } from "hono";
import { createMiddleware } from "hono/factory";
import { tokenLifetimeMs } from "../../durable-objects/shared/token-lifetime";
import {
  homeShard,
  isOnSale,
  type Outcome,
  type Reservation,
  type SkuState,
} from "../../durable-objects/stock/stock-model";
import { catalogHasShard, skuExists } from "../catalog/sku-catalog";
import { readSkuState } from "../catalog/sku-state";
import { checkChallenges, powBits } from "../edge/challenges";
import { cachedDraw, type DrawRead } from "../edge/draw-cache";
import { accessCodeHash, admittedTier } from "../edge/early-access";
import { issueChallenge } from "../edge/proof-of-work";
import { mintPurchaseToken, newNonce, peekPurchaseToken } from "../edge/purchase-token";
import { explainRefusal, sizesShort } from "../edge/refusals";
import { reserveUnits } from "../edge/reserve";
import { saleNotActive } from "../edge/sale-phase";
import {
  digestLists,
  forgetSoldOut,
  hasSizesSoldOut,
  isSoldOut,
  markSoldOut,
  refusesReservation,
  spentHere,
  variantKey,
} from "../edge/sold-out-cache";
import { limitShopper } from "../http/auth";
import type { AppEnv } from "../http/context";
import { ApiError, answerError, busy, type ErrorCode } from "../http/errors";
import { integerQuery } from "../http/query";
import { VariantPreferences } from "../http/schemas";
import { DISPLAY_CACHE_SECONDS, forgetDisplay, skuDisplay } from "../mirror/stock-display";
import { increment } from "../observability/metrics";
import { currentReservation, finishedReservation } from "../orders/finished";
import { findOrder, orderAsReservation, ordersOfUser } from "../orders/order-store";
import { receiptsOf, receiptsOfHeld } from "../sale-log/sale-log";
import { callStock, locateReservation, SKU_ID, stockShard, unwrap } from "../stock/stock-client";
import { ROUTES } from "./contract";
import { register } from "./register";
import { drawView, publicSkuJson, reservationView } from "./views";

export const shopper = new Hono<AppEnv>();

function skuParam(sku: string): string {
  if (!SKU_ID.test(sku)) throw new ApiError("SKU_NOT_FOUND");
  return sku;
}

function soldOutTtl(env: Env): number {
  return Number(env.SOLD_OUT_CACHE_TTL_MS);
}

/** The edge's own SOLD_OUT: the same answer every time, so one error per isolate, its body serialized once. */
const SOLD_OUT_AT_EDGE = new ApiError("SOLD_OUT");

/**
 * Answers `SOLD_OUT` from this isolate's cache (no stock object call), counted as a cache hit. A
 * reservation whose list of sizes is one the contract takes (1 to 5 distinct ids) is told each is
 * gone (`details.variants`, as the stock object says it); any other gets the bare answer.
 */
function soldOutAtEdge(sku: string, body?: ReservationBody): ApiError {
  increment("flashgate_sold_out_cache_hits_total", { sku });
  const listed = body?.variants;
  if (!listed || !VariantPreferences.safeParse(listed).success) return SOLD_OUT_AT_EDGE;
  return sizesShort("SOLD_OUT", Object.fromEntries(listed.map((id) => [id, 0])), body.quantity ?? 1);
}

/**
 * Refusals given before any stock object is asked (credentials, the rate limit, challenges, the
 * token's form): for a sold-out SKU, sold out comes first instead.
 */
const REFUSED_AT_THE_EDGE = new Set<ErrorCode>([
  "UNAUTHENTICATED",
  "RATE_LIMITED",
  "CHALLENGE_REQUIRED",
  "CHALLENGE_FAILED",
  "TOKEN_INVALID",
  "TOKEN_EXPIRED",
  "INVALID_REQUEST",
]);

/**
 * Sold out comes first, whatever the isolate remembers: a request the edge refused on its own is
 * answered `SOLD_OUT` when the SKU is sold out as its display reads it (remembered a second per
 * isolate), so a fresh isolate, whose sold-out cache is empty, answers what a warm one answers from
 * it. The answer is then kept in the cache, which answers the next requests before their JWT. An
 * archived SKU's token route answers `404 SKU_NOT_FOUND`, as it does once asked.
 */
async function soldOutFirst(
  c: Context<AppEnv>,
  sku: string | undefined,
  listed?: () => Promise<ReservationBody>,
): Promise<void> {
  const refused = c.error instanceof ApiError && REFUSED_AT_THE_EDGE.has(c.error.code);
  if (!sku || !refused || !SKU_ID.test(sku)) return;
  const now = Date.now();
  const display = await skuDisplay(c.env, sku, now, (promise) => c.executionCtx.waitUntil(promise)).catch(() => null);
  // An archived SKU is not sold (API.md v1.3): its token route says not found first, not a challenge
  // nobody can get. Its reservation route keeps its refusal: a token there may still hold a reservation
  // (holds keep their course), and its holder is told what to fix, never that the SKU does not exist.
  if (display?.state.status === "archived" && !listed) throw new ApiError("SKU_NOT_FOUND");
  if (!display || !isOnSale(display.state, now)) return;
  if (display.state.stock.available > 0) {
    // Sizes: every size the request lists is sold out (the display knows them all).
    const sizes = display.state.variants;
    const gone = (id: string) => sizes?.find((v) => v.id === id)?.stock.available === 0;
    const body = sizes && listed ? await listed() : undefined;
    if (body?.variants?.length && body.variants.every(gone) && !(await mayHold(c, sku, display.state, body, false)))
      throw soldOutAtEdge(sku, body);
    return;
  }
  const body = listed ? await listed() : undefined;
  // A token that may hold a reservation keeps its own refusal (API.md: never answered SOLD_OUT).
  if (body && (await mayHold(c, sku, display.state, body, true))) return;
  markSoldOut(sku, now, soldOutTtl(c.env));
  const known = body?.variants?.every((id) => display.state.variants?.some((v) => v.id === id));
  throw soldOutAtEdge(sku, known ? body : undefined);
}

/**
 * Whether the reservation body's token may hold a reservation: its nonce is one its shard has spent,
 * by this isolate's digest of that shard (the SKU's, or a listed size's), else by the shard's own,
 * then kept with the sold-out memory (of the SKU when `soldOut`, else of every listed size) so the
 * requests after it are judged here: one read per isolate and TTL, and a fresh isolate answers as a
 * warm one. A shard that does not answer: it may.
 */
async function mayHold(
  c: Context<AppEnv>,
  sku: string,
  state: SkuState,
  body: ReservationBody,
  soldOut: boolean,
): Promise<boolean> {
  const peek = peekPurchaseToken(body.token ?? "");
  // A token of no shard the SKU has: nothing is woken to be asked (nor stored) for it.
  if (!peek || peek.shard < 0 || peek.shard >= state.shards) return false;
  const now = Date.now();
  const ttl = soldOutTtl(c.env);
  const keys = [sku, ...(body.variants ?? []).map((id) => variantKey(sku, id))];
  const known = keys.map((key) => spentHere(key, peek.shard, peek.nonce, now, ttl));
  if (known.includes(true)) return true;
  // This isolate's digests of the keys the refusal rests on (the SKU's, or every listed size's) decide;
  // without them the shard's own does, as a warm isolate would have learnt it, and it is kept here.
  const sizes = known.slice(1);
  if (soldOut ? known[0] !== undefined : sizes.length > 0 && sizes.every((k) => k !== undefined)) return false;
  const spent = await callStock(() => stockShard(c.env, sku, peek.shard).spentDigest()).catch(() => null);
  if (!spent) return true;
  const learnt = { shard: peek.shard, spent };
  if (soldOut) markSoldOut(sku, now, ttl, learnt);
  else for (const id of body.variants ?? []) markSoldOut(variantKey(sku, id), now, ttl, learnt);
  return digestLists(spent, peek.nonce);
}

/** Sold out comes first (API.md): a token request for a SKU this isolate knows is sold out. */
const soldOutToken = createMiddleware<AppEnv>(async (c, next) => {
  const sku = c.req.param("sku");
  if (sku && isSoldOut(sku, Date.now())) return answerError(c, soldOutAtEdge(sku));
  await next();
  await soldOutFirst(c, sku);
});

/**
 * Sold out comes first for reservations too, before the JWT and the token's signature: refused
 * unless the token's nonce is one its shard has spent (a replay, which goes the full way to its
 * reservation). A body that names no token cannot hold a reservation either.
 */
const soldOutReservation = createMiddleware<AppEnv>(async (c, next) => {
  const sku = c.req.param("sku");
  const now = Date.now();
  const ttl = soldOutTtl(c.env);
  // Sizes: a request whose listed variants are all known sold out is refused as a sold-out SKU's.
  // The body is read here only when this isolate knows the SKU, or some of its sizes, sold out.
  const skuOut = sku !== undefined && isSoldOut(sku, now);
  const body = sku && (skuOut || hasSizesSoldOut(sku)) ? bodyOf(await c.req.text()) : null;
  const sizes = body?.variants?.map((id) => variantKey(sku ?? "", id));
  const known = skuOut ? [sku] : sizes?.length && sizes.every((k) => isSoldOut(k, now)) ? sizes : null;
  if (sku && body && known) {
    const peek = peekPurchaseToken(body.token ?? "");
    if (!peek || known.every((key) => refusesReservation(key, peek.shard, peek.nonce, now, ttl))) {
      return answerError(c, soldOutAtEdge(sku, body));
    }
  }
  await next();
  await soldOutFirst(c, sku, async () => body ?? bodyOf(await c.req.text()));
});

/** What the edge reads of a reservation body before its validation (a field absent when not of its type). */
interface ReservationBody {
  token?: string;
  variants?: string[];
  quantity?: number;
}

/** The token, sizes and quantity a reservation body names, read before its validation. */
function bodyOf(text: string): ReservationBody {
  try {
    const body = JSON.parse(text) as { token?: unknown; variants?: unknown; quantity?: unknown } | null;
    const token = typeof body?.token === "string" ? body.token : undefined;
    const variants =
      Array.isArray(body?.variants) && body.variants.every((v) => typeof v === "string") ? body.variants : undefined;
    const quantity =
      Number.isSafeInteger(body?.quantity) && Number(body?.quantity) >= 1 ? Number(body?.quantity) : undefined;
    return {
      ...(token === undefined ? {} : { token }),
      ...(variants === undefined ? {} : { variants }),
      ...(quantity === undefined ? {} : { quantity }),
    };
  } catch {
    return {};
  }
}

/** Answers that say something about a SKU that exists; other answers are counted with `sku=""`. */
const ABOUT_A_SKU = new Set<ErrorCode>([
  "SOLD_OUT",
  "INSUFFICIENT_STOCK",
  "LIMIT_EXCEEDED",
  "SALE_NOT_ACTIVE",
  "IDEMPOTENCY_MISMATCH",
  "TOKEN_EXPIRED",
  "BUSY",
]);

/** Counts each reservation answer in `flashgate_reservations_total{sku,result}`. */
const countReservation = createMiddleware<AppEnv>(async (c, next) => {
  await next();
  const error = c.error instanceof ApiError ? c.error.code : c.res.status >= 500 ? "INTERNAL" : null;
  const result = error?.toLowerCase() ?? (c.res.headers.get("Idempotent-Replayed") ? "replayed" : "held");
  const known = error === null || ABOUT_A_SKU.has(error);
  increment("flashgate_reservations_total", { sku: known ? (c.req.param("sku") ?? "") : "", result });
});

/**
 * Public stock display: from the Redis mirror when it has the SKU (may lag a moment), else the stock
 * object; unknown ids from the D1 catalog. Remembered a second per isolate (see skuDisplay).
 */
register(shopper, ROUTES.publicSku, async (c) => {
  const sku = skuParam(c.req.param("sku"));
  const display = await skuDisplay(c.env, sku, Date.now(), (promise) => c.executionCtx.waitUntil(promise));
  if (!display) throw new ApiError("SKU_NOT_FOUND");
  const { state } = display;
  // Archived: no public view (an isolate's display memo may show the SKU up to a second after).
  if (state.status === "archived") throw new ApiError("SKU_NOT_FOUND");
  // The headers as one record for the Response itself: Hono's c.header() builds a Headers object
  // and sets each one across the runtime's boundary, on a route a storefront polls.
  const headers: Record<string, string> = { "Content-Type": "application/json", "X-Stock-Source": display.source };
  if (display.source === "mirror") headers["Cache-Control"] = MIRROR_CACHE_CONTROL;
  return new Response(publicSkuJson(state, Date.now()), { headers });
});

const MIRROR_CACHE_CONTROL = `public, max-age=${DISPLAY_CACHE_SECONDS}`;

/** What shard 0 says about a SKU's draw (SKU not found vs. no window). */
async function fetchDraw(env: Env, sku: string): Promise<DrawRead> {
  const info = await callStock(() => stockShard(env, sku, 0).drawInfo());
  if (info) return { draw: info };
  const state = await callStock(() => stockShard(env, sku, 0).state());
  return { missing: state ? "NOT_FOUND" : "SKU_NOT_FOUND" };
}

/** The draw of a SKU with an opening window, as this isolate remembers it (src/edge/draw-cache.ts). */
async function readDraw(env: Env, sku: string) {
  // An id the catalog does not know reaches no stock object, nor takes a place in the cache.
  if (!(await skuExists(env, sku))) throw new ApiError("SKU_NOT_FOUND");
  const read = await cachedDraw(sku, Date.now(), () => fetchDraw(env, sku));
  if ("draw" in read) return read.draw;
  if (read.missing === "SKU_NOT_FOUND") throw new ApiError("SKU_NOT_FOUND");
  throw new ApiError("NOT_FOUND", "This SKU has no opening window.");
}

/**
 * The opening draw (API.md "Fair opening"): the seed hash from the moment the window is set, the
 * seed once the draw is decided. Remembered a second per isolate (so the seed shows here up to a
 * second after the decision).
 */
register(shopper, ROUTES.draw, async (c) => {
  const sku = skuParam(c.req.param("sku"));
  return c.json(drawView(sku, await readDraw(c.env, sku)));
});

/**
 * The decided entries in draw order, a page at a time: with the revealed seed, anyone can recompute
 * the order (docs/API.md "Fair opening") and check every position. Empty until the decision (then
 * shard 0 is not asked). Positions are 1..N, so `offset` k is the page after position k: a keyset
 * page, as cheap deep in the draw as at its start.
 */
register(shopper, ROUTES.drawEntries, async (c) => {
  const sku = skuParam(c.req.param("sku"));
  const offset = integerQuery(c.req.query("offset"), "offset", { min: 0, max: Number.MAX_SAFE_INTEGER, fallback: 0 });
  const limit = integerQuery(c.req.query("limit"), "limit", { min: 1, max: 5_000, fallback: 1_000 });
  const named = c.req.query("opensAt");
  // `opensAt`: an opening `/draw` lists (a tier's), by its start (any ISO 8601 form); else the public one.
  const wanted = named === undefined ? undefined : Date.parse(named);
  if (Number.isNaN(wanted)) {
    const message = "a time in ISO 8601, as /draw's openings write it";
    throw new ApiError(
      "INVALID_REQUEST",
      `opensAt must be ${message}.`,
      {},
      { fields: [{ path: "opensAt", message }] },
    );
  }
  const info = await readDraw(c.env, sku);
  const opening = wanted === undefined ? info : info.openings.find((o) => new Date(o.opensAt).getTime() === wanted);
  if (!opening) throw new ApiError("NOT_FOUND", `opensAt: no opening of this SKU opens at ${named}.`);
  const at = wanted === undefined ? undefined : opening.opensAt;
  const entries =
    opening.decidedAt === null ? [] : await callStock(() => stockShard(c.env, sku, 0).drawEntries(offset, limit, at));
  return c.json({ sku, seed: opening.seed, entrants: opening.entrants, offset, entries });
});

/** A proof-of-work challenge bound to this user and SKU (API.md "Bots"); stores nothing. */
register(shopper, ROUTES.challenge, async (c) => {
  const sku = skuParam(c.req.param("sku"));
  const bits = powBits(c.env);
  if (bits === 0) throw new ApiError("NOT_FOUND", "Proof of work is off here (POW_BITS is 0).");
  // The catalog does not tell an archived SKU from a live one; its display does, as cheaply as a GET
  // of the public view (remembered a second per isolate, from the mirror when on).
  const display = await skuDisplay(c.env, sku, Date.now(), (promise) => c.executionCtx.waitUntil(promise));
  if (!display || display.state.status === "archived") throw new ApiError("SKU_NOT_FOUND");
  const issued = await issueChallenge(c.env.TOKEN_SECRET, c.get("userId"), sku, bits, Date.now());
  return c.json({ ...issued, expiresAt: new Date(issued.expiresAt).toISOString() });
});

/**
 * A one-time purchase token for this user and SKU, bound to the user's home shard. Sold out is
 * answered first (soldOutToken), then the JWT, the rate limit, the catalog and the bot challenges,
 * before any stock object is asked.
 */
register(
  shopper,
  ROUTES.purchaseToken,
  async (c) => {
    const sku = skuParam(c.req.param("sku"));
    // The catalog (D1, no stock object) before the challenges: a SKU nobody configured is not found,
    // challenges on or off, and costs no siteverify call.
    if (!(await skuExists(c.env, sku))) throw new ApiError("SKU_NOT_FOUND");
    await checkChallenges(c, sku);
    const now = Date.now();
    const userId = c.get("userId");
    // Early access: a code is hashed once and judged (and taken) by shard 0 in the call that reads
    // its state, so a request with a code makes no more round trips than one without. Shard 0 gets
    // the JWT's claims: a shopper a claim tier admits already does not take the code.
    const code = c.req.header("Access-Code");
    const stub0 = stockShard(c.env, sku, 0);
    const read =
      code === undefined
        ? { state: await callStock(() => stub0.state()), codeTier: null, claimTier: undefined, at: now }
        : await accessCodeHash(code).then((hash) => callStock(() => stub0.tokenState(userId, hash, c.get("claims"))));
    const first = read.state;
    if (!first || first.status === "archived") throw new ApiError("SKU_NOT_FOUND");
    // Its shards are changing: a token minted now could route its buyer to a shard not yet moved.
    if (first.reconfiguring) throw busy("The SKU is being reconfigured by its operator");
    // Shard 0 judged a code by its clock (and took it, or not, by that judgment): the sale's phase is
    // judged at that moment too, whichever clock is ahead, or a code sent as the public sale opens is
    // refused as one that admits nobody (shard 0 ahead), or taken for a token without its tier (behind).
    const at = read.at ?? now;
    const tier = isOnSale(first, at)
      ? undefined
      : admittedTier(first, at, c.get("claims"), {
          given: code !== undefined,
          tier: read.codeTier ?? read.claimTier ?? null,
        });
    const shard = homeShard(userId, first.shards);
    // A code is taken only with a token: shard 0 judged the stock before it took the code, and its
    // judgment stands (a unit sold since then is refused at the reservation, as for any token).
    const soldOut =
      read.codeTier !== null ? read.soldOut === true : (await unitsForToken(c.env, sku, shard, first)) === 0;
    if (soldOut) {
      // Only a sale that is on is sold out (sku-stock.ts): a tier's shopper before the public start
      // is told so, but the isolate does not remember it for the public, who are not admitted yet.
      if (isOnSale(first, at)) markSoldOut(sku, now, soldOutTtl(c.env));
      throw new ApiError("SOLD_OUT");
    }
    const expiresAt = now + tokenLifetimeMs(c.env);
    const claims = { sku, userId, shard, shards: first.shards, nonce: newNonce(), expiresAt, tier };
    const token = await mintPurchaseToken(claims, c.env.TOKEN_SECRET);
    return c.json({ token, expiresAt: new Date(expiresAt).toISOString() }, 201);
  },
  { first: [soldOutToken] },
);

/** The units a token request finds: its home shard's, else (that shard has none) the whole SKU's. */
async function unitsForToken(env: Env, sku: string, shard: number, first: SkuState): Promise<number> {
  const home = shard === 0 ? first : await callStock(() => stockShard(env, sku, shard).state());
  const available = home?.stock.available ?? 0;
  if (available > 0 || first.shards === 1) return available;
  return (await readSkuState(env, sku))?.stock.available ?? 0;
}

/** Holds stock for the user: the reservation path of docs/ARCHITECTURE.md ("The life of a reservation"). */
register(
  shopper,
  ROUTES.reserve,
  async (c, body) => {
    const sku = skuParam(c.req.param("sku"));
    const userId = c.get("userId");
    const answer = await reserveUnits(
      c.env,
      { sku, userId, ...body, requestId: c.get("requestId"), colo: c.req.raw.cf?.colo as string | undefined },
      () => limitShopper(c),
    );
    if (answer.replayed) c.header("Idempotent-Replayed", "true");
    const receipts = await receiptsOfHeld(c.env, c.req.url, answer.reservation, Boolean(answer.replayed)); // src/sale-log/
    const view = { ...reservationView(answer.reservation), ...receipts };
    return c.json(answer.draw ? { ...view, draw: answer.draw } : view, 202);
  },
  { before: [countReservation], first: [soldOutReservation], rateLimit: "handler" },
);

/**
 * Joins the waitlist of a sold-out SKU. A sharded SKU has one line, on shard 0, served across shards
 * in FIFO order; shard 0 decides whether the SKU has units for newcomers (none while buyers wait).
 */
register(shopper, ROUTES.joinWaitlist, async (c, body) => {
  const sku = skuParam(c.req.param("sku"));
  const state = await readSkuState(c.env, sku);
  if (!state || state.status === "archived") throw new ApiError("SKU_NOT_FOUND");
  // A sale not on takes no one into its line (the stock object refuses it too): said first, so the
  // answer is the same on any shard count, and never "buy instead" where nothing can be bought.
  const now = Date.now();
  if (!isOnSale(state, now)) throw saleNotActive(state, now);
  // Sizes: what counts is the best of the listed variants. A list naming an id the SKU does not have
  // goes on to the object, which refuses it (400 naming `variants`), whatever the others have.
  const listed = body.variants && state.variants?.filter((v) => body.variants?.includes(v.id));
  const known = listed?.length === new Set(body.variants).size;
  const best = listed && known ? Math.max(0, ...listed.map((v) => v.stock.available)) : undefined;
  if (best !== undefined && best >= body.quantity) {
    throw new ApiError(
      "STOCK_AVAILABLE",
      `${best} of a size you listed ${best === 1 ? "is" : "are"} available now: buy instead of joining the waitlist (a purchase token, then a reservation).`,
      {},
      { available: best },
    );
  }
  // One shard: its units are known here. A request whose sizes do not fit the SKU goes on to the
  // object, which refuses it (400) as it does on any shard count.
  const fits = !body.variants === !state.variants && (listed === undefined || known);
  if (best === undefined && fits && state.shards === 1 && state.stock.available > 0) {
    const n = state.stock.available;
    throw new ApiError(
      "STOCK_AVAILABLE",
      `${n} ${n === 1 ? "unit is" : "units are"} available now: buy instead of joining the waitlist (a purchase token, then a reservation).`,
      {},
      { available: n },
    );
  }
  const userId = c.get("userId");
  const available = best ?? state.stock.available;
  const stub = stockShard(c.env, sku, 0);
  const joined = await callStock(() =>
    stub.joinWaitlist(userId, body.quantity, c.get("requestId"), available, body.variants),
  );
  const where = { sku, shard: homeShard(userId, state.shards), userId, quantity: body.quantity };
  const entry = await explainRefusal(c.env, where, joined);
  return c.json(entry, 202);
});

/**
 * The caller's place in the SKU's line, read where the line's order is kept (shard 0, one read:
 * the entries before theirs counted and summed), with the SKU's held units from its public display
 * (remembered a second per isolate) less the caller's own (`ownHeld`: shard 0 reads them on the
 * caller's home shard, asking that shard when it is another), so a shopper polling their place
 * costs one stock object call from the edge; one who holds units too, a read of every shard.
 */
register(shopper, ROUTES.waitlistPlace, async (c) => {
  const sku = skuParam(c.req.param("sku"));
  // The catalog is asked first: an id it does not know reaches no stock object (nor creates one).
  if (!(await skuExists(c.env, sku))) throw new ApiError("SKU_NOT_FOUND");
  const [display, place] = await Promise.all([
    skuDisplay(c.env, sku, Date.now(), (promise) => c.executionCtx.waitUntil(promise)),
    callStock(() => stockShard(c.env, sku, 0).waitlistPlace(c.get("userId"))),
  ]);
  if (!display || display.state.status === "archived") throw new ApiError("SKU_NOT_FOUND");
  if (!place) throw notWaiting(sku);
  // The caller's own holds are read fresh: a caller who holds any needs the SKU's read fresh too,
  // else a hold of theirs the remembered display lacks is subtracted from it all the same.
  const skuHeld = place.ownHeld ? ((await readSkuState(c.env, sku))?.stock.held ?? 0) : display.state.stock.held;
  return c.json({
    waitlistId: place.waitlistId,
    position: place.position,
    quantity: place.quantity,
    unitsAhead: place.unitsAhead,
    ...(place.variants ? { variants: place.variants } : {}),
    // Held by others (API.md v1.4 "Clarified"): the SKU's held units less the caller's own.
    held: Math.max(0, skuHeld - (place.ownHeld ?? 0)),
    joinedAt: new Date(place.joinedAt).toISOString(),
  });
});

/** Leaves the SKU's line; a leave after the line served the caller finds nothing, and the hold stands. */
register(shopper, ROUTES.leaveWaitlist, async (c) => {
  const sku = skuParam(c.req.param("sku"));
  if (!(await skuExists(c.env, sku))) throw new ApiError("SKU_NOT_FOUND");
  const left = await callStock(() => stockShard(c.env, sku, 0).leaveWaitlist(c.get("userId"), c.get("requestId")));
  if (!left) {
    // An archive empties the line, so only a leave that found nothing asks whether the SKU is
    // archived, from its display as the place route does (remembered a second per isolate).
    const display = await skuDisplay(c.env, sku, Date.now(), (promise) => c.executionCtx.waitUntil(promise));
    if (!display || display.state.status === "archived") throw new ApiError("SKU_NOT_FOUND");
    throw notWaiting(sku);
  }
  forgetDisplay(sku); // the leaver sees the line without them at once
  return c.json({ waitlistId: left.waitlistId, left: true as const });
});

function notWaiting(sku: string): ApiError {
  return new ApiError(
    "NOT_FOUND",
    `You are not in the waitlist of ${sku}: you never joined, the line already served you (see GET /api/me/reservations), you left, or the sale ended.`,
  );
}

/**
 * The stock object a reservation id names, or null when no configured SKU has that shard (the id is
 * then looked for in D1 only: an unknown SKU's id reaches, and creates, no object).
 */
async function reservationStub(c: { env: Env }, id: string) {
  const where = locateReservation(id);
  if (!where) throw new ApiError("RESERVATION_NOT_FOUND");
  if (!(await catalogHasShard(c.env, where.sku, where.shard))) return { sku: where.sku, stub: null };
  return { sku: where.sku, stub: stockShard(c.env, where.sku, where.shard) };
}

/** The owner's view of a reservation; anyone else's id is simply not found. */
register(shopper, ROUTES.reservation, async (c) => {
  const reservation = await currentReservation(c.env, c.req.param("id"));
  if (!reservation || reservation.userId !== c.get("userId")) throw new ApiError("RESERVATION_NOT_FOUND");
  const order = await findOrder(c.env.DB, reservation.id);
  return c.json({
    ...reservationView(reservation),
    order: { persisted: order !== undefined, status: order?.status ?? null },
    ...(await receiptsOf(c.env, c.req.url, reservation.sku, reservation.id, reservation.userId)), // src/sale-log/
  });
});

/** The user's reservations as persisted in D1, newest first. */
register(shopper, ROUTES.myReservations, async (c) => {
  const rows = await ordersOfUser(c.env.DB, c.get("userId"), null);
  return c.json({ reservations: rows.map((row) => reservationView(orderAsReservation(row))) });
});

/** `409 INVALID_STATE` of a cancel: what the reservation is, and what can be cancelled. */
function notCancellable(id: string, status: string): ApiError {
  return new ApiError(
    "INVALID_STATE",
    `Reservation ${id} is ${status}: only a held reservation can be cancelled.`,
    {},
    { state: status },
  );
}

register(shopper, ROUTES.cancel, async (c) => {
  const { sku, stub } = await reservationStub(c, c.req.param("id"));
  const outcome: Outcome<Reservation> = stub
    ? await callStock(() => stub.cancel(c.req.param("id"), c.get("userId"), c.get("requestId")))
    : { ok: false, code: "RESERVATION_NOT_FOUND" };
  if (!outcome.ok && outcome.code === "RESERVATION_NOT_FOUND") {
    // Finished and forgotten by the object: D1 answers (cancelled again is 200, anything else 409).
    const finished = await finishedReservation(c.env.DB, c.req.param("id"));
    if (!finished || finished.userId !== c.get("userId")) throw new ApiError("RESERVATION_NOT_FOUND");
    if (finished.status !== "cancelled") throw notCancellable(finished.id, finished.status);
    return c.json(reservationView(finished));
  }
  if (!outcome.ok && outcome.code === "INVALID_STATE" && stub) {
    // The object refused because the reservation is no longer held: say what it is now.
    const now = await callStock(() => stub.reservation(c.req.param("id")));
    if (now) throw notCancellable(now.id, now.status);
  }
  const reservation = unwrap(outcome);
  forgetSoldOut(sku);
  return c.json(reservationView(reservation));
});
