import type { ReservationStatus } from "../shared/order-events";
import type { DrawPlace } from "./opening-draw";

/**
 * What every unit of the stock engine speaks: answers (`Outcome`), the SKU's state, reservations and
 * the rows they are stored in. A unit's own types live beside it (payments.ts, waitlist.ts, …).
 */

export type StockErrorCode =
  | "SKU_NOT_FOUND"
  | "SALE_NOT_ACTIVE"
  | "IDEMPOTENCY_MISMATCH"
  | "LIMIT_EXCEEDED"
  | "SOLD_OUT"
  | "INSUFFICIENT_STOCK"
  | "RESERVATION_NOT_FOUND"
  | "INVALID_STATE"
  | "STOCK_AVAILABLE"
  /** A purchase token minted for another shard layout (before `shards` changed). */
  | "TOKEN_INVALID"
  /**
   * Sizes: the request's `variants` do not fit the SKU (listed on a SKU without variants, missing on
   * one with them, or an id it does not have): 400 naming the field.
   */
  | "VARIANT_INVALID"
  /** A sibling shard that could not answer: the outcome is unknown, retry (503). */
  | "BUSY"
  /**
   * Fair opening: not decided on arrival. The request is an entry of the draw (or came after the
   * window, before the decision); the edge waits for its answer (`SkuStock.awaitDraw`). Never sent
   * to a client.
   */
  | "DRAW_PENDING";

export type Outcome<T> =
  | { ok: true; value: T }
  | {
      ok: false;
      code: StockErrorCode;
      available?: number;
      draw?: DrawPlace | undefined;
      /** A cut of a sharded SKU's total: the units shard 0 lacks (it pulls them, then asks again). */
      missing?: number;
      /** `LIMIT_EXCEEDED`: the limit and what the user held or bought when refused (the edge explains with them). */
      limit?: { perUserLimit: number; held: number };
      /** `SALE_NOT_ACTIVE`: the sale's status and window when refused. */
      sale?: { status: SaleStatus; startsAt: number | null; endsAt: number | null };
      /** Sizes: units available now of each variant the request listed (`SOLD_OUT`, `INSUFFICIENT_STOCK`). */
      variants?: Record<string, number>;
      /** Sizes: the variant a refused configure names (a cut below held + sold, or `missing` units of it). */
      variant?: string;
      /**
       * `BUSY` to a SKU change: a field it leaves out changed since the edge checked the SKU it leaves
       * (another PUT came first); the edge reads the SKU and checks again.
       */
      stale?: true;
    };

export const ok = <T>(value: T): Outcome<T> => ({ ok: true, value });

/** A failed outcome, whatever its value would have been. */
export type Refusal = Extract<Outcome<never>, { ok: false }>;

const refusal = (code: StockErrorCode, available?: number): Refusal =>
  available === undefined ? { ok: false, code } : { ok: false, code, available };

export const fail = <T>(code: StockErrorCode, available?: number): Outcome<T> => refusal(code, available);

/** `LIMIT_EXCEEDED`, with what the edge needs to say why without asking again. */
export const overLimit = <T>(row: SkuRow, held: number, available?: number): Outcome<T> => ({
  ...refusal("LIMIT_EXCEEDED", available),
  limit: { perUserLimit: row.per_user_limit, held },
});

/** `SALE_NOT_ACTIVE`, with the status and window the edge explains it by. */
export const notOnSale = <T>(row: SkuRow, available?: number): Outcome<T> => ({
  ...refusal("SALE_NOT_ACTIVE", available),
  sale: { status: row.status as SaleStatus, startsAt: row.starts_at, endsAt: row.ends_at },
});

/** A short answer: the shard lacks the units (a sharded SKU then pulls from its siblings). */
export function isShort(outcome: Outcome<unknown>): boolean {
  return !outcome.ok && (outcome.code === "SOLD_OUT" || outcome.code === "INSUFFICIENT_STOCK");
}

/**
 * `archived` (DELETE /admin/skus/:sku): the SKU is no longer sold, for good. It is a sale status so
 * that the stock object, the authority, refuses it in the reserve transaction itself, and so that it
 * reaches every shard through the same all-or-nothing change as a PUT.
 */
export type SaleStatus = "on_sale" | "paused" | "archived";

export interface StockCounts {
  total: number;
  available: number;
  held: number;
  sold: number;
}

export interface SkuState {
  sku: string;
  shard: number;
  shards: number;
  name: string;
  status: SaleStatus;
  perUserLimit: number;
  holdSeconds: number;
  startsAt: number | null;
  endsAt: number | null;
  stock: StockCounts;
  /** The shard's seq (summed over shards for a SKU): grows with every change; the Redis mirror keeps the newest snapshot by it. */
  seq: number;
  /** Price of one unit in minor units of `currency`; null: no price, payment amounts are not checked. */
  price: number | null;
  /** ISO 4217, lower case. */
  currency: string;
  /**
   * A test sale (API.md v1.4 "Test sales", set when the SKU is created): its order events, orders and
   * payments say `test: true`. Left out for a real sale, so such a SKU answers as the Lua script does.
   */
  test?: true;
  /** Fair opening window in ms after `startsAt` (0: none). */
  openingWindowMs?: number;
  /** Early access tiers (API.md "Early access"), each opening before `startsAt`; left out: none. */
  access?: AccessTier[];
  /**
   * Shard 0: a change of the SKU's shards is being applied (for moments): no purchase token is minted
   * until every shard has it, so none routes a buyer to a shard that has not.
   */
  reconfiguring?: true;
  /** Buyers in the SKU's line (kept on shard 0); left out when nobody waits. */
  waiting?: number;
  /**
   * Shard 0: the most shards the SKU has ever had, when a cut left some out (they keep reservations
   * a late payment or a read still reaches); left out when it is `shards`.
   */
  shardsEver?: number;
  /** Sizes (API.md v1.4): each variant's stock, in the order they were added; left out: none. */
  variants?: VariantState[];
}

/** A variant of a SKU as a state shows it: `stock` is its counts (summed over shards for a SKU). */
export interface VariantState {
  id: string;
  name: string;
  stock: StockCounts;
}

/** A variant as a configure sets it: a new one needs `totalStock` (this shard's); left out, kept. */
export interface VariantSetting {
  id: string;
  name?: string | undefined;
  totalStock?: number | undefined;
}

/** A variant's stock on this shard (table `variant_stock`): the SKU row's counts are the sums. */
export type VariantRow = {
  id: string;
  name: string;
  position: number;
  total: number;
  held: number;
  sold: number;
};

/**
 * An early access tier: from `startsAt` (before the public start) it admits a JWT whose claim `name`
 * is `value` (or an array holding it), and anyone presenting one of its access codes.
 */
export interface AccessTier {
  name: string;
  startsAt: number;
  claim?: { name: string; value: string } | undefined;
}

/** What a SKU costs (set by `configure`), and whether its sale is a test (see {@link SkuState.test}). */
export interface Pricing {
  price: number | null;
  currency: string;
  test: boolean;
}

export interface Reservation {
  id: string;
  sku: string;
  userId: string;
  quantity: number;
  status: ReservationStatus;
  createdAt: number;
  expiresAt: number;
  updatedAt: number;
  /** Sizes: the variant the hold took; left out on a SKU without variants. */
  variant?: string;
  /**
   * Fair opening: where a reservation the draw made came in it (API.md: "a reservation decided by a
   * draw carries `draw` in its body"), as the owner's reads show it; left out otherwise.
   */
  draw?: DrawPlace | undefined;
}

export interface ReserveRequest {
  userId: string;
  nonce: string;
  quantity: number;
  /**
   * The SKU's shard count the purchase token was minted for. A token from before a change of
   * `shards` routes its user by the old count and would let them hold on two shards, so a new hold
   * needs the current count (replays of the token's own reservation still answer).
   */
  shards?: number | undefined;
  /**
   * When the purchase token expires (epoch ms). Its reservation and its nonce in the spent-nonce
   * digest are kept until then (plus a clock margin), whatever the token lifetime is now. Left out
   * (holds of the waitlist, tokens from before), the token lifetime of now is assumed.
   */
  tokenExpiresAt?: number | undefined;
  /** The edge request asking (for logs and the events it causes). */
  requestId?: string | undefined;
  /**
   * The early access tier the edge admitted the token's user by (signed into the token): before the
   * public start the shard takes the reservation only if that tier has opened by its own clock.
   */
  tier?: string | undefined;
  /** Sizes: the variants the buyer takes, in order of preference (required on a SKU with variants). */
  variants?: readonly string[] | undefined;
  /**
   * Sizes on a sharded SKU: the shell pulled the listed variants from the siblings already, so a
   * later choice this shard has may serve (before that, a first choice it lacks is pulled first).
   */
  pulled?: boolean | undefined;
}

export interface ReserveAnswer {
  reservation: Reservation;
  /** True when the nonce had been used: this is the first answer again, nothing new was held. */
  replayed: boolean;
  /** Units still available after this request, so the edge can learn "sold out" at once. */
  available: number;
  /** Fair opening: where this reservation came in the draw that decided it. */
  draw?: DrawPlace | undefined;
}

/**
 * A reservation answer as the stock object sends it. `soldOut` says the answer shows the whole SKU
 * sold out (the object decides it, see `showsSoldOut`), and such an answer carries the shard's
 * spent-nonce digest, so the edge's sold-out cache can tell a replayed token (which must get its
 * reservation back) from a new one (see src/edge/sold-out-cache.ts).
 */
export type ReserveOutcome = Outcome<ReserveAnswer> & {
  soldOut?: true;
  spent?: SpentDigest;
  /** Sizes: a SOLD_OUT that shows every listed variant sold out over the SKU (with the digest). */
  sizesSoldOut?: true;
};

/** FNV-1a hashes of the nonces a shard has taken recently, read at the shard's `seq`. */
export interface SpentDigest {
  seq: number;
  nonces: readonly number[];
}

/** The part of `DurableObjectStorage` the engine needs (kept narrow so the contract is clear). */
export interface EngineStorage {
  sql: SqlStorage;
  transactionSync<T>(fn: () => T): T;
}

export const DEFAULT_CURRENCY = "usd";

export type SkuRow = {
  sku: string;
  shard: number;
  shards: number;
  name: string;
  status: string;
  per_user_limit: number;
  hold_seconds: number;
  starts_at: number | null;
  ends_at: number | null;
  total: number;
  held: number;
  sold: number;
  seq: number;
  /** Reservations this shard ever created (rows may be pruned since; see retention.ts). */
  created: number;
  /** The most shards the SKU has had (schema step 9; what shard 0 says is the truth). */
  shards_ever: number;
};

export type ReservationRow = {
  id: string;
  user_id: string;
  quantity: number;
  status: string;
  nonce: string | null;
  created_at: number;
  expires_at: number;
  updated_at: number;
  /** The purchase token's own expiry, when the request said it (see {@link ReserveRequest}). */
  token_expires_at: number | null;
  /** Sizes: the variant held (schema step 10); null on a SKU without variants. */
  variant?: string | null;
  /**
   * Sizes: the list a token's hold was asked with (JSON), while the hold is in this transaction's
   * working set; kept in `hold_lists` (schema step 13), not in this table.
   */
  listed?: string | null;
};

/** Units a shard (or a variant of it) can still hold or give: its total less what is held and sold. */
export function availableOf(row: { total: number; held: number; sold: number }): number {
  return row.total - row.held - row.sold;
}

/** Whether the sale takes reservations at `now`: on sale and inside its window (end excluded). */
export function isOnSale(sale: Pick<SkuState, "startsAt" | "endsAt"> & { status: string }, now: number): boolean {
  return (
    sale.status === "on_sale" &&
    (sale.startsAt === null || now >= sale.startsAt) &&
    (sale.endsAt === null || now < sale.endsAt)
  );
}

/** Whether the sale is on and before its public start: early access admits by tier then (API.md "Early access"). */
export function isScheduled(sale: Pick<SkuState, "startsAt"> & { status: string }, now: number): boolean {
  return sale.status === "on_sale" && sale.startsAt !== null && now < sale.startsAt;
}

/** {@link isOnSale} of a SKU row. */
export function rowOnSale(row: SkuRow, now: number): boolean {
  return isOnSale({ status: row.status, startsAt: row.starts_at, endsAt: row.ends_at }, now);
}

export function toState(row: SkuRow, pricing: Pricing): SkuState {
  return {
    sku: row.sku,
    shard: row.shard,
    shards: row.shards,
    name: row.name,
    status: row.status as SaleStatus,
    perUserLimit: row.per_user_limit,
    holdSeconds: row.hold_seconds,
    startsAt: row.starts_at,
    endsAt: row.ends_at,
    stock: { total: row.total, available: availableOf(row), held: row.held, sold: row.sold },
    seq: row.seq,
    price: pricing.price,
    currency: pricing.currency,
    ...(pricing.test ? { test: true as const } : {}),
    // Only when a cut left shards out: a SKU never cut answers exactly as the Lua script does (lua-parity).
    ...(row.shards_ever > row.shards ? { shardsEver: row.shards_ever } : {}),
  };
}

/**
 * Whether a shard's reservation answer shows the whole SKU sold out. A shard's "available 0" speaks
 * for the SKU only when it is the only shard; a sharded SKU answers SOLD_OUT only once its siblings
 * had nothing to give either.
 */
export function showsSoldOut(answer: Outcome<ReserveAnswer>, shards: number): boolean {
  if (shards === 1) return (answer.ok ? answer.value.available : answer.available) === 0;
  // Sizes: a shard out of the listed variants says nothing of the others.
  return !answer.ok && answer.code === "SOLD_OUT" && answer.variants === undefined;
}

/** Shard states summed into one SKU: the configuration of shard 0, the stock of all. */
export function sumShards(states: readonly SkuState[]): SkuState {
  const [first, ...rest] = states;
  if (!first) throw new Error("a SKU has at least one shard");
  const stock = { ...first.stock };
  let seq = first.seq;
  let waiting = first.waiting ?? 0;
  for (const shard of rest) {
    waiting += shard.waiting ?? 0;
    stock.total += shard.stock.total;
    stock.available += shard.stock.available;
    stock.held += shard.stock.held;
    stock.sold += shard.stock.sold;
    seq += shard.seq;
  }
  const summed: SkuState = { ...first, stock, seq };
  if (waiting > 0) summed.waiting = waiting;
  const variants = sumVariants(states);
  if (variants) summed.variants = variants;
  return summed;
}

/** The variants of a SKU's shards summed per id, in shard 0's order (a sibling may lag on new ones). */
function sumVariants(states: readonly SkuState[]): VariantState[] | undefined {
  const byId = new Map<string, VariantState>();
  for (const state of states) {
    for (const v of state.variants ?? []) {
      const seen = byId.get(v.id);
      if (!seen) byId.set(v.id, { id: v.id, name: v.name, stock: { ...v.stock } });
      else {
        seen.stock.total += v.stock.total;
        seen.stock.available += v.stock.available;
        seen.stock.held += v.stock.held;
        seen.stock.sold += v.stock.sold;
      }
    }
  }
  return byId.size > 0 ? [...byId.values()] : undefined;
}
