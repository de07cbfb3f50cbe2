import type { z } from "zod";
import type { DrawInfo, Reservation, SkuState } from "../../durable-objects/stock/stock-model";
import { opensInSeconds, salePhase } from "../edge/sale-phase";
import type { AdminSku, Draw, PublicSku, Reservation as ReservationBody } from "./contract-schemas";

/**
 * JSON shapes of the contract (API.md), built in one place so every route answers alike, and typed
 * by the contract's answer schemas (./contract-schemas.ts), so the type checker catches a view that drifts.
 */

const iso = (ms: number | null): string | null => (ms === null ? null : new Date(ms).toISOString());

export function reservationView(
  r: Omit<Reservation, "expiresAt"> & { expiresAt: number | null },
): z.infer<typeof ReservationBody> {
  return {
    reservationId: r.id,
    sku: r.sku,
    quantity: r.quantity,
    status: r.status,
    expiresAt: iso(r.expiresAt),
    variant: r.variant ?? null,
    links: { self: `/api/reservations/${r.id}` },
    ...(r.draw ? { draw: r.draw } : {}),
  };
}

/** Price, currency and test flag; a snapshot from before prices existed (an old mirror entry) has none. */
function pricingView(s: SkuState) {
  return { price: s.price ?? null, currency: s.currency ?? "usd", test: s.test === true };
}

/** `phase` and `opensInSeconds` (added to v1.2): a scheduled sale shows as such before startsAt. */
function phaseView(s: SkuState, now: number) {
  return { phase: salePhase(s, now), opensInSeconds: opensInSeconds(s, now) };
}

/** Early access tiers as views show them: names and opening times, never claims (nor codes). */
function accessView(s: SkuState) {
  return { access: (s.access ?? []).map((t) => ({ name: t.name, startsAt: new Date(t.startsAt).toISOString() })) };
}

/**
 * The public view of a display as JSON, rendered once per display object and moment (its phase and
 * countdown): within a display's memo second a GET storm reuses the text instead of building it each time.
 */
const renderedViews = new WeakMap<SkuState, { moment: string; body: string }>();

export function publicSkuJson(s: SkuState, now: number): string {
  if (s.status === "archived") throw new Error("an archived SKU has no public view");
  const { phase, opensInSeconds: opensIn } = phaseView(s, now);
  const moment = `${phase} ${opensIn}`;
  const hit = renderedViews.get(s);
  if (hit?.moment === moment) return hit.body;
  const body = JSON.stringify(publicSkuView({ ...s, status: s.status }, now));
  renderedViews.set(s, { moment, body });
  return body;
}

/** An archived SKU has no public view (its routes answer SKU_NOT_FOUND), so the type leaves it out. */
export function publicSkuView(s: SkuState & { status: "on_sale" | "paused" }, now: number): z.infer<typeof PublicSku> {
  return {
    sku: s.sku,
    name: s.name,
    status: s.status,
    available: s.stock.available,
    startsAt: iso(s.startsAt),
    endsAt: iso(s.endsAt),
    perUserLimit: s.perUserLimit,
    ...pricingView(s),
    openingWindowMs: s.openingWindowMs ?? 0,
    ...phaseView(s, now),
    held: s.stock.held,
    waiting: s.waiting ?? 0,
    ...accessView(s),
    ...(s.variants
      ? {
          variants: s.variants.map((v) => ({
            id: v.id,
            name: v.name,
            available: v.stock.available,
            held: v.stock.held,
          })),
        }
      : {}),
  };
}

/** `GET /api/skus/:sku/draw` (API.md "Fair opening"), plus when the window opens and closes. */
export function drawView(sku: string, d: DrawInfo): z.infer<typeof Draw> {
  return {
    sku,
    openingWindowMs: d.openingWindowMs,
    // Only shard 0 commits a seed, and the draw is always read there.
    seedHash: d.seedHash ?? "",
    seed: d.seed,
    entrants: d.entrants,
    decidedAt: iso(d.decidedAt),
    opensAt: new Date(d.opensAt).toISOString(),
    closesAt: new Date(d.closesAt).toISOString(),
    entryIdPrefix: d.entryIdPrefix,
    stalled: d.stalled,
    openings: d.openings.map((o) => ({
      opensAt: new Date(o.opensAt).toISOString(),
      closesAt: new Date(o.closesAt).toISOString(),
      seedHash: o.seedHash ?? "",
      seed: o.seed,
      entrants: o.entrants,
      decidedAt: iso(o.decidedAt),
      entryIdPrefix: o.entryIdPrefix,
      stalled: o.stalled,
    })),
  };
}

/** The stock object's part of the admin view; the route adds orders, waitlist, payments and mirror. */
export function adminSkuView(
  s: SkuState,
  now: number,
): Omit<z.infer<typeof AdminSku>, "orders" | "revenue" | "waitlist" | "payments" | "mirror"> {
  return {
    sku: s.sku,
    name: s.name,
    status: s.status,
    perUserLimit: s.perUserLimit,
    holdSeconds: s.holdSeconds,
    startsAt: iso(s.startsAt),
    endsAt: iso(s.endsAt),
    shards: s.shards,
    ...pricingView(s),
    openingWindowMs: s.openingWindowMs ?? 0,
    ...phaseView(s, now),
    ...accessView(s),
    stock: s.stock,
    ...(s.variants ? { variants: s.variants.map((v) => ({ id: v.id, name: v.name, stock: v.stock })) } : {}),
    version: s.seq, // the SKU's seq (summed over shards), under the view's name
  };
}
