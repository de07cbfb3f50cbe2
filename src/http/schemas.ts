import { z } from "zod";
import { WEBHOOK_EVENT_TYPES } from "../db/schema";

/** Request bodies of the contract (API.md). Routes validate with these; types are inferred. */

/** A variant (size) id, API.md v1.4 "Sizes (variants)". */
export const VariantId = z.string().regex(/^[A-Za-z0-9._-]{1,32}$/, "1 to 32 of A-Z a-z 0-9 . _ -");

/** A shopper's sizes, in order of preference: 1 to 5 distinct ids. */
export const VariantPreferences = z
  .array(VariantId)
  .min(1, "at least one variant id")
  .max(5, "at most 5 variant ids, in order of preference")
  .refine((ids) => new Set(ids).size === ids.length, "each variant id at most once");

export const ReservationRequest = z.object({
  token: z.string().min(1).max(2048),
  quantity: z.int().min(1),
  /** API.md v1.4: required for a SKU with variants, refused for one without (the stock object knows which). */
  variants: VariantPreferences.optional(),
});

/** Body of `POST /api/reservations/:id/checkout` (API.md v1.4): where Stripe sends the shopper back. */
export const CheckoutRequest = z.object({
  successUrl: z.string().min(1).max(2048),
  cancelUrl: z.string().min(1).max(2048),
});

/** Body of `POST /admin/payments/:eventId/refunded` (strict, as every admin body). */
export const MarkRefundedRequest = z.strictObject({ note: z.string().max(500).optional() });

/** Body of `POST /api/skus/:sku/waitlist`. */
export const WaitlistRequest = z.object({
  quantity: z.int().min(1),
  variants: VariantPreferences.optional(),
});

/** Times the contract accepts (API.md): alarms and dates stay within what the runtime represents. */
const EARLIEST_TIME = Date.parse("2000-01-01T00:00:00Z");
const LATEST_TIME = Date.parse("2100-01-01T00:00:00Z");
/** An example of the form, in every message about a time (issue #50: say what to send). */
const TIME_EXAMPLE = "2026-12-24T18:00:00Z";
const Time = z.iso
  .datetime({
    offset: true,
    error: `an ISO-8601 time with its zone, e.g. ${TIME_EXAMPLE} (UTC) or 2026-12-24T19:00:00+01:00`,
  })
  .refine(
    (text) => {
      const at = Date.parse(text);
      // Not a time at all: the format's own message says so (one message per field).
      return Number.isNaN(at) || (at >= EARLIEST_TIME && at <= LATEST_TIME);
    },
    { message: `a time from 2000-01-01T00:00:00Z to 2100-01-01T00:00:00Z, e.g. ${TIME_EXAMPLE}` },
  );

/**
 * Money in integer minor units of its currency (cents for usd and eur): 25.50 is 2550. A number with
 * a fraction is answered with the figure it most likely meant (issue #50: say what to send).
 */
function minorUnits(max: number) {
  return z
    .int({
      // Only the type's issue: below 0 or above the maximum keep their own messages.
      error: (issue) => {
        if (issue.code !== "invalid_type") return undefined;
        const input = issue.input;
        const example =
          typeof input === "number" && Number.isFinite(input)
            ? `${Math.round(input * 100)} for ${input.toFixed(2)}`
            : "2550 for 25.50";
        return `an integer of minor units of the currency (cents for usd): ${example}`;
      },
    })
    .min(0)
    .max(max);
}

/** ISO 4217 currency code, lower case as payment providers send it (Stripe: "usd"). */
const Currency = z.string().regex(/^[a-z]{3}$/, "an ISO 4217 code in lower case, e.g. usd");

/** An early access tier (API.md "Early access"): a name, when it opens, and the JWT claim it admits by. */
export const TierName = z.string().regex(/^[A-Za-z0-9_-]{1,32}$/, "1 to 32 of A-Z a-z 0-9 _ -");
const AccessTier = z.strictObject({
  name: TierName,
  startsAt: Time,
  claim: z.strictObject({ name: z.string().min(1).max(64), value: z.string().min(1).max(256) }).optional(),
});

/** Body of `POST /admin/skus/:sku/access-codes`. */
export const AccessCodesRequest = z.strictObject({ tier: TierName, count: z.int().min(1).max(10_000) });

// Strict: an operator's typo ("perUserLimt") is an unknown field, answered 400 naming it, never dropped.
export const SkuSettingsRequest = z.strictObject({
  name: z.string().min(1).max(200).optional(),
  /** Required to create a SKU; left out on an existing one, it keeps its value (v1.3). */
  totalStock: z.int().min(0).max(1_000_000_000).optional(),
  perUserLimit: z.int().min(1).max(1_000_000).optional(),
  holdSeconds: z.int().min(10).max(86_400).optional(),
  startsAt: Time.nullable().optional(),
  endsAt: Time.nullable().optional(),
  shards: z.int().min(1).max(64).optional(),
  status: z.enum(["on_sale", "paused"]).optional(),
  /** Minor units of `currency` per unit; null: no price (payment amounts are not checked). */
  price: minorUnits(1_000_000_000).nullable().optional(),
  currency: Currency.optional(),
  /**
   * API.md "Fair opening": reservations in the first `openingWindowMs` after `startsAt` are decided
   * by a draw (0: off). Set before the window opens; it needs a `startsAt`.
   */
  openingWindowMs: z.int().min(0).max(10_000).optional(),
  /**
   * API.md v1.4 "Test sales": a test SKU's orders, events and payments say `test: true`. Set only
   * when the SKU is created: another value on an existing SKU is `409 INVALID_STATE`.
   */
  test: z.boolean().optional(),
  /**
   * API.md v1.4 "Sizes (variants)": 1 to 100 variants with distinct ids, each its own stock; a PUT
   * listing some changes those and keeps the rest. The SKU's totalStock is then their sum.
   */
  variants: z
    .array(
      z.strictObject({
        id: VariantId,
        name: z.string().min(1).max(64).optional(),
        totalStock: z.int().min(0).max(1_000_000_000),
      }),
    )
    .min(1)
    .max(100)
    .refine((vs) => new Set(vs.map((v) => v.id)).size === vs.length, "each variant id at most once")
    .optional(),
  /** API.md "Early access" (v1.3): up to 8 tiers, each opening before `startsAt`; left out: kept. */
  access: z
    .array(AccessTier)
    .max(8)
    .refine((tiers) => new Set(tiers.map((t) => t.name)).size === tiers.length, "each tier name at most once")
    .optional(),
});
// That the sale ends after it starts is checked on the SKU as the PUT leaves it (a partial PUT keeps
// the fields it leaves out), so in src/catalog/configure-sku.ts, not on the body alone.
export type SkuSettingsRequest = z.infer<typeof SkuSettingsRequest>;

/** Body of `POST /webhooks/payments` (the provider's event, signed). */
export const PaymentEvent = z.object({
  id: z.string().min(1).max(255),
  type: z.enum(["payment.succeeded", "payment.failed"]),
  reservationId: z.string().min(1).max(255),
  amount: minorUnits(Number.MAX_SAFE_INTEGER),
  currency: z.string().toLowerCase().pipe(Currency).optional(),
});

/**
 * Body of `PUT /admin/webhooks/:id` (strict, as every admin body). Whether `url` may be used depends
 * on WEBHOOK_ALLOW_HTTP_LOCALHOST, so the route checks it (src/handoff/endpoints.ts).
 */
export const WebhookEndpointRequest = z.strictObject({
  url: z.string().min(1).max(2048),
  events: z
    .array(z.enum(WEBHOOK_EVENT_TYPES))
    .min(1)
    .max(WEBHOOK_EVENT_TYPES.length)
    .refine((events) => new Set(events).size === events.length, "each event type at most once")
    .optional(),
  enabled: z.boolean().optional(),
  /** API.md v1.4 "Webhook batches": up to `maxEvents` events a message; null: one event a message. */
  batch: z
    .strictObject({
      maxEvents: z.int().min(1).max(100),
      maxWaitMs: z.int().min(0).max(10_000),
    })
    .nullable()
    .optional(),
});
