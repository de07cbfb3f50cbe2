import { createHash, createHmac } from "node:crypto";
import { type DrawTag, ORDER_EVENT_TYPES, type OrderEvent } from "./order-events";

/**
 * The entries of a SKU's public log (API.md v1.4 "The verifiable sale"): UTF-8 JSON, one decision
 * each, in the order the log took them. What the Worker (receipts, a buyer's salt) and the log
 * object (durable-objects/log/sale-log.ts) share. Types:
 *
 * - `hold`, `paid`, `refund_required`, `cancelled`, `expired`: a reservation's status change, from
 *   the stock shard's outbox (`reservation` id, `quantity`, `shard`, the shard's `seq`, `user`,
 *   `variant` when the reservation has one, `expires` for a hold, `amount`/`currency` when priced;
 *   a hold a fair opening's draw made: `draw`, its seed hash and the entry's position in it);
 * - `config`: a configuration applied (`PUT /admin/skus/:sku`): the SKU's stock, limit, window,
 *   tiers (names and times only, never codes or claim values), shards, status, price;
 * - `archive`: the SKU archived;
 * - `draw-reveal`: a fair opening's draw decided: its seed, whose hash a `config` entry committed to
 *   (`draws`) before the opening opened;
 * - `payment`: a payment answered `refund_required` that changed no reservation (`reason`
 *   `amount_mismatch`, `currency_mismatch` or `already_paid`), with the money it said (`amount`,
 *   `currency`); one whose reservation became `refund_required` is that entry, with its `reason`.
 *
 * Every entry of a test SKU carries `test: true` (API.md v1.4 "Test sales").
 *
 * A buyer is `user`: hex SHA-256 of `<salt>:<userId>`, the salt 32 hex digits derived with a secret
 * from the SKU and the user id ({@link userSalt}), shown only to that buyer. No user id, IP, JWT,
 * token, code or claim value is in any entry.
 */

export const RESERVATION_ENTRY_TYPES = ["hold", "paid", "refund_required", "cancelled", "expired"] as const;
export type ReservationEntryType = (typeof RESERVATION_ENTRY_TYPES)[number];

export interface ReservationEntry {
  type: ReservationEntryType;
  time: string;
  reservation: string;
  quantity: number;
  shard: number;
  seq: number;
  user: string;
  variant?: string;
  expires?: string;
  /** A hold made by a draw: which (its committed seed hash) and at which position. */
  draw?: DrawTag;
  amount?: number | null;
  currency?: string;
  /** A `refund_required` entry: why the late payment found nothing (`too_late`, `limit_exceeded`). */
  reason?: string;
  test?: true;
}

export interface ConfigEntry {
  type: "config" | "archive" | "draw-reveal";
  time: string;
  [field: string]: unknown;
}

/**
 * A payment answered `refund_required` that changed no reservation, as the stock shard hands it to
 * the log (its `log_payments` row): the log turns the buyer into `user` ({@link paymentEntry}).
 */
export interface RefundEntryEvent {
  reservationId: string;
  userId: string;
  reason: "amount_mismatch" | "currency_mismatch" | "already_paid";
  /** The money the event said (minor units), null when it gave none. */
  amount: number | null;
  /** The event's currency, else the SKU's it was judged in; null when it gave no money. */
  currency: string | null;
  test?: true;
}

/** The log entry of a payment that changed no reservation (`payment`): no event id, no user id. */
export interface PaymentEntry {
  type: "payment";
  time: string;
  reservation: string;
  user: string;
  outcome: "refund_required";
  reason: RefundEntryEvent["reason"];
  amount: number | null;
  currency: string | null;
  test?: true;
}

/** The entry of {@link RefundEntryEvent}, decided at `time` (ms), its buyer already turned into `user`. */
export function paymentEntry(event: RefundEntryEvent, time: number, user: string): PaymentEntry {
  const entry: PaymentEntry = {
    type: "payment",
    time: new Date(time).toISOString(),
    reservation: event.reservationId,
    user,
    outcome: "refund_required",
    reason: event.reason,
    amount: event.amount,
    currency: event.currency,
  };
  if (event.test) entry.test = true;
  return entry;
}

export type SaleEntry = ReservationEntry | ConfigEntry | PaymentEntry;

const encoder = new TextEncoder();

/** The entry type of an order event's status. */
export function entryTypeOf(type: OrderEvent["type"]): ReservationEntryType {
  const status = type.slice("reservation.".length);
  return status === "held" ? "hold" : (status as ReservationEntryType);
}

/**
 * The secret behind every buyer's salt: derived from the log's signing key (`LOG_SIGNING_KEY`), so
 * no second secret is needed; a new signing key gives new salts for the entries made after it.
 */
export function saltSecret(signingKey: string): Uint8Array {
  return new Uint8Array(createHash("sha256").update(`flashgate sale-log salt\n${signingKey}`).digest());
}

const HEX = Array.from({ length: 256 }, (_, b) => b.toString(16).padStart(2, "0"));
function hex(bytes: Uint8Array): string {
  let out = "";
  for (const b of bytes) out += HEX[b];
  return out;
}

/** The salts' HMAC key, imported once per secret (WebCrypto keeps it keyed; node:crypto keys each HMAC again). */
const saltKeys = new WeakMap<Uint8Array, Promise<CryptoKey>>();

/** A buyer's salt on one SKU: the first 16 bytes of HMAC-SHA-256(secret, `<sku>:<userId>`), in hex. */
export async function userSalt(secret: Uint8Array, sku: string, userId: string): Promise<string> {
  let key = saltKeys.get(secret);
  if (!key) {
    key = crypto.subtle.importKey("raw", secret, { name: "HMAC", hash: "SHA-256" }, false, ["sign"]);
    saltKeys.set(secret, key);
  }
  const mac = await crypto.subtle.sign("HMAC", await key, encoder.encode(`${sku}:${userId}`));
  return hex(new Uint8Array(mac, 0, 16));
}

/**
 * A buyer as the log shows them: hex SHA-256 of `<salt>:<userId>` (node:crypto: the log makes one
 * for every new buyer, and the runtime's native hash costs less than one written in JavaScript).
 */
export function userCommitment(salt: string, userId: string): string {
  return createHash("sha256").update(`${salt}:${userId}`).digest("hex");
}

/**
 * A buyer's `user` on one SKU at once, salt included (node:crypto, the same HMAC as {@link userSalt}):
 * how a fair opening's draw names its entrants (engine/opening-draw.ts), outside the log.
 */
export function userOf(secret: Uint8Array, sku: string, userId: string): string {
  return userCommitment(createHmac("sha256", secret).update(`${sku}:${userId}`).digest("hex").slice(0, 32), userId);
}

/** The fields of an order event that its entry takes. */
export type EntryEvent = Pick<
  OrderEvent,
  | "type"
  | "reservationId"
  | "sku"
  | "userId"
  | "quantity"
  | "occurredAt"
  | "expiresAt"
  | "seq"
  | "amount"
  | "currency"
  | "test"
  | "variant"
  | "draw"
  | "reason"
>;

const isText = (v: unknown): v is string => typeof v === "string" && v.length > 0;
const isCount = (v: unknown): v is number => Number.isSafeInteger(v) && (v as number) >= 1;
const optional = (v: unknown, check: (v: unknown) => boolean) => v === undefined || check(v);
const isDrawTag = (v: unknown): boolean => {
  const tag = v as Record<string, unknown> | null;
  return typeof tag === "object" && tag !== null && isText(tag.seedHash) && isCount(tag.position);
};

/**
 * Whether an outbox event has what its entry takes, of the right kinds: lighter than the queue's
 * full schema (order-events.ts, regular expressions per field), since the log's events come only
 * from its SKU's own stock shards, whose engine made them.
 */
function isEntryEvent(item: unknown): item is EntryEvent {
  const e = item as Record<string, unknown> | null;
  return (
    typeof e === "object" &&
    e !== null &&
    (ORDER_EVENT_TYPES as readonly unknown[]).includes(e.type) &&
    isText(e.reservationId) &&
    isText(e.sku) &&
    isText(e.userId) &&
    isCount(e.quantity) &&
    isCount(e.seq) &&
    isText(e.occurredAt) &&
    optional(e.expiresAt, isText) &&
    optional(e.amount, (v) => v === null || (Number.isSafeInteger(v) && (v as number) >= 0)) &&
    optional(e.currency, isText) &&
    optional(e.test, (v) => v === true) &&
    optional(e.variant, (v) => v === null || isText(v)) &&
    optional(e.draw, isDrawTag) &&
    optional(e.reason, isText)
  );
}

/**
 * The events of an outbox message body (`{"events":[…]}`, or one bare event) that make entries.
 * `invalid`: why one did not (the others still do), as the queue's reader has it.
 */
export function entryEventsOf(body: string): { events: EntryEvent[]; invalid: string | null } {
  let parsed: unknown;
  try {
    parsed = JSON.parse(body);
  } catch {
    return { events: [], invalid: "the message body is not JSON" };
  }
  const many = (parsed as { events?: unknown } | null)?.events;
  const items = Array.isArray(many) ? many : [parsed];
  const events = items.filter(isEntryEvent);
  return { events, invalid: events.length === items.length ? null : "an event lacks a field its entry takes" };
}

/** The log entry of an order event made by `shard`, its buyer already turned into `user`. */
export function reservationEntry(event: EntryEvent, shard: number, user: string): ReservationEntry {
  const type = entryTypeOf(event.type);
  const entry: ReservationEntry = {
    type,
    time: event.occurredAt,
    reservation: event.reservationId,
    quantity: event.quantity,
    shard,
    seq: event.seq,
    user,
  };
  if (event.variant != null) entry.variant = event.variant;
  if (type === "hold" && event.expiresAt !== undefined) entry.expires = event.expiresAt;
  if (type === "hold" && event.draw !== undefined)
    entry.draw = { seedHash: event.draw.seedHash, position: event.draw.position };
  if ((type === "paid" || type === "refund_required") && event.amount !== undefined) {
    entry.amount = event.amount;
    if (event.currency !== undefined) entry.currency = event.currency;
  }
  if (type === "refund_required" && event.reason !== undefined) entry.reason = event.reason;
  if (event.test) entry.test = true;
  return entry;
}

/** What a configuration entry says of a SKU: shard 0's settings, with the totals the operator set. */
export interface ConfiguredSku {
  shards: number;
  status: string;
  perUserLimit: number;
  holdSeconds: number;
  startsAt: number | null;
  endsAt: number | null;
  stock: { total: number };
  price: number | null;
  currency: string;
  test?: true | undefined;
  openingWindowMs?: number | undefined;
  access?: { name: string; startsAt: number; claim?: { name: string; value: string } | undefined }[] | undefined;
  variants?: { id: string; name: string; stock: { total: number } }[] | undefined;
}

/** An opening's draw as committed: its window and the hash of its secret seed. */
export interface DrawCommitment {
  opensAt: number;
  closesAt: number;
  seedHash: string;
  /** `salt`: its entry ids will be its buyers' `user` in this log (left out by a shard 0 from before). */
  entryIdPrefix?: "salt" | "sku" | undefined;
}

/** An opening's draw as revealed (shard 0's `drawInfo`): the seed, once decided. */
export interface DrawReveal extends DrawCommitment {
  seed: string;
  entrants: number;
  decidedAt: number;
}

/**
 * The entry of a draw's reveal (`draw-reveal`): anyone checks SHA-256(seed) against the committed hash.
 * `test`: the SKU's, as the configuration that committed to the draw said it (API.md v1.4 "Test sales").
 */
export function drawRevealEntry(draw: DrawReveal, test: boolean): ConfigEntry {
  const entry: ConfigEntry = {
    type: "draw-reveal",
    time: new Date(draw.decidedAt).toISOString(),
    opensAt: new Date(draw.opensAt).toISOString(),
    closesAt: new Date(draw.closesAt).toISOString(),
    seedHash: draw.seedHash,
    seed: draw.seed,
    entrants: draw.entrants,
  };
  if (test) entry.test = true;
  return entry;
}

const iso = (ms: number | null) => (ms === null ? null : new Date(ms).toISOString());

/**
 * The entry of a configuration applied (`config`) or of the archive (`archive`): the figures the
 * sale's rules need, tiers by name, time and kind only (never a code or a claim's value). `time`:
 * when the change began (shard 0 takes it first); `until`: when every shard had it. In between a
 * sibling may still decide under the configuration before (API.md v1.4 "The verifiable sale").
 */
export function configEntry(
  type: "config" | "archive",
  state: ConfiguredSku,
  time: number,
  draws: readonly DrawCommitment[] = [],
  until = time,
): ConfigEntry {
  const entry: ConfigEntry = {
    type,
    time: new Date(time).toISOString(),
    ...(until > time ? { until: new Date(until).toISOString() } : {}),
    status: state.status,
    total: state.stock.total,
    perUserLimit: state.perUserLimit,
    holdSeconds: state.holdSeconds,
    startsAt: iso(state.startsAt),
    endsAt: iso(state.endsAt),
    openingWindowMs: state.openingWindowMs ?? 0,
    shards: state.shards,
    price: state.price,
    currency: state.currency,
    tiers: (state.access ?? []).map((tier) => ({
      name: tier.name,
      startsAt: new Date(tier.startsAt).toISOString(),
      ...(tier.claim ? { claim: tier.claim.name } : { by: "code" }),
    })),
  };
  // The fair opening's commitments: each opening's seed hash, fixed when its window is set, and the
  // promises that each hold its draw makes names its place (`holdsNamed`) and, salted, that its entry
  // ids are its buyers' `user` here (`entryIdPrefix`), logged before it opens.
  if (draws.length > 0)
    entry.draws = draws.map((d) => ({
      opensAt: new Date(d.opensAt).toISOString(),
      closesAt: new Date(d.closesAt).toISOString(),
      seedHash: d.seedHash,
      holdsNamed: true,
      ...(d.entryIdPrefix === "salt" ? { entryIdPrefix: "salt" } : {}),
    }));
  if (state.variants) entry.variants = state.variants.map((v) => ({ id: v.id, name: v.name, total: v.stock.total }));
  if (state.test) entry.test = true;
  return entry;
}
