import type { SkuState } from "../../durable-objects/stock/stock-model";
import { ApiError } from "../http/errors";

/**
 * Where a SKU's sale stands at `now`, beside its configured `status` (API.md v1.2 keeps `status` to
 * `on_sale | paused`): `scheduled` before `startsAt`, `open` inside the window, `ended` from `endsAt`,
 * `paused` whatever the times say, and `ended` for good once archived. Added to the SKU views as `phase`
 * and `opensInSeconds`.
 */
export type SalePhase = "scheduled" | "open" | "ended" | "paused";

type Sale = Pick<SkuState, "status" | "startsAt" | "endsAt">;

export function salePhase(sale: Sale, now: number): SalePhase {
  if (sale.status === "archived") return "ended";
  if (sale.status !== "on_sale") return "paused";
  if (sale.startsAt !== null && now < sale.startsAt) return "scheduled";
  if (sale.endsAt !== null && now >= sale.endsAt) return "ended";
  return "open";
}

/** Whole seconds until a scheduled sale opens (at least 1 while it has not), else null. */
export function opensInSeconds(sale: Sale, now: number): number | null {
  return salePhase(sale, now) === "scheduled" && sale.startsAt !== null
    ? Math.max(1, Math.ceil((sale.startsAt - now) / 1000))
    : null;
}

const iso = (ms: number) => new Date(ms).toISOString();

/**
 * `403 SALE_NOT_ACTIVE` that says why and what to do: when a scheduled sale opens (and in how many
 * seconds), when an ended one closed, or that the shop paused it. The figures are in `error.details`.
 */
export function saleNotActive(sale: Sale, now: number): ApiError {
  const phase = salePhase(sale, now);
  if (phase === "scheduled" && sale.startsAt !== null) {
    const seconds = opensInSeconds(sale, now) ?? 1;
    return new ApiError(
      "SALE_NOT_ACTIVE",
      `The sale has not opened yet: it opens at ${iso(sale.startsAt)}, in ${seconds} s. Ask for a purchase token then.`,
      {},
      { phase, opensAt: iso(sale.startsAt), opensInSeconds: seconds },
    );
  }
  if (phase === "ended") {
    return sale.endsAt !== null && sale.status !== "archived"
      ? new ApiError(
          "SALE_NOT_ACTIVE",
          `The sale closed at ${iso(sale.endsAt)}: nothing more is sold.`,
          {},
          { phase, endedAt: iso(sale.endsAt) },
        )
      : new ApiError("SALE_NOT_ACTIVE", "The sale has ended: nothing more is sold.", {}, { phase });
  }
  return new ApiError(
    "SALE_NOT_ACTIVE",
    "The shop has paused this sale: nothing is sold until it resumes. Watch the SKU's status (GET /api/skus/{sku}) and try again when it is on_sale.",
    {},
    { phase: "paused" },
  );
}
