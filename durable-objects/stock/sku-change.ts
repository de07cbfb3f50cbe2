import type { SkuSettings } from "../engine/configuration";
import type { AccessTier, SaleStatus, SkuState, VariantSetting } from "../engine/types";

/**
 * An operator's change of a SKU (`PUT /admin/skus/:sku`) as its shard 0 applies it, all or nothing
 * (API.md: a PUT that answers an error has changed nothing, on any shard):
 *
 * - one shard: one transaction (settings, total, price);
 * - the same shard count: shard 0 decides it in one transaction (the total as a difference from the
 *   total it recorded, see `retarget`), then hands its settings to the siblings, which cannot refuse
 *   them and apply only a newer settings revision than they have;
 * - a new shard count (a resize, or a new sharded SKU), or sizes given to a sharded SKU that has
 *   none (its units held or sold have no size, so no shard may hold any): two phases. Every shard
 *   it reaches is fenced first, each only if it is idle (no new hold meanwhile); one refusal lifts
 *   every fence and the PUT answers it. Then shard 0 commits (recording the plan), every sibling commits, and the plan is
 *   ended. Shard 0's alarm undoes a plan left `preparing` and finishes one left `committing`.
 */
export interface SkuChange {
  sku: string;
  /**
   * The shard count; left out, the one in force (a new SKU: 1), decided by shard 0 in the change's
   * turn: a count the edge read before a resize committed would undo it.
   */
  shards?: number | undefined;
  /** The SKU's total over all shards; left out, the total in force (shard 0 decides it in the change's turn). */
  totalStock?: number | undefined;
  /** Shard 0's record of the total is missing (a SKU configured before it kept one): the shards' sum. */
  assumedTotal: number;
  name?: string | undefined;
  perUserLimit?: number | undefined;
  holdSeconds?: number | undefined;
  startsAt?: number | null | undefined;
  endsAt?: number | null | undefined;
  status?: SaleStatus | undefined;
  openingWindowMs?: number | undefined;
  price?: number | null | undefined;
  currency?: string | undefined;
  /** A test sale (API.md "Test sales"); left out: kept. The edge sends it only for a SKU it just created. */
  test?: boolean | undefined;
  /** Early access tiers; left out: kept. */
  access?: AccessTier[] | undefined;
  /**
   * Sizes: variants added or changed, each `totalStock` the variant's over all shards (left out:
   * kept). For a resize shard 0 makes this the whole list, every variant's total decided.
   */
  variants?: VariantSetting[] | undefined;
  /**
   * The stored settings the edge checked this change against (the SKU it leaves: a window that ends
   * after it starts, tiers before the start, openings apart; whether the SKU existed, and its test
   * flag). Shard 0 applies the change only if they are still in force for every one of them the
   * change leaves out: two partial PUTs, each sound alone, cannot leave a SKU that neither check saw,
   * and a create that finds the SKU created meanwhile is checked again as the update it now is.
   */
  checked?: CheckedSettings | undefined;
}

/** The settings a change was checked against ({@link SkuChange.checked}). */
export interface CheckedSettings {
  /**
   * Whether the SKU existed: a create (false) is checked against no SKU, and one that finds it made
   * by another PUT since must be checked against it (its `test`, its window): it is stale.
   */
  exists: boolean;
  /** The SKU's test flag as read (false for no SKU): set only at creation, never changed by an update. */
  test: boolean;
  startsAt: number | null;
  endsAt: number | null;
  openingWindowMs: number;
  access: AccessTier[];
  /**
   * Sizes: the SKU's variant ids as read. A change that names `variants` or `totalStock` was checked
   * against them (at most 100 in all, a total that is their sum): another PUT's sizes make it stale.
   * Left out by an edge of an older deploy.
   */
  variants?: string[] | undefined;
}

/**
 * Whether the settings a change was checked against still hold, for each field the change leaves
 * out; and whether the SKU is still as it was read: there or not (`state` null: no SKU on shard 0),
 * with the same test flag (whatever the change says of it: it is set only by the change that
 * creates the SKU); and, for a change naming `variants` or `totalStock`, with the same sizes.
 */
export function stillChecked(change: SkuChange, state: SkuState | null): boolean {
  const { checked } = change;
  if (!checked) return true;
  // Left out by an edge of an older deploy: judged by the settings alone, as it was then.
  if (checked.exists !== undefined && checked.exists !== (state !== null)) return false;
  if (!state) return true;
  if (checked.test !== undefined && checked.test !== (state.test === true)) return false;
  const same = (asked: unknown, stored: unknown, seen: unknown) =>
    asked !== undefined || JSON.stringify(stored) === JSON.stringify(seen);
  const stock = change.variants !== undefined || change.totalStock !== undefined;
  const sizes = (state.variants ?? []).map((v) => v.id);
  return (
    (!stock || checked.variants === undefined || JSON.stringify(sizes) === JSON.stringify(checked.variants)) &&
    same(change.startsAt, state.startsAt ?? null, checked.startsAt) &&
    same(change.endsAt, state.endsAt ?? null, checked.endsAt) &&
    same(change.openingWindowMs, state.openingWindowMs ?? 0, checked.openingWindowMs) &&
    same(change.access, state.access ?? [], checked.access)
  );
}

/** A change with its total and shard count decided by shard 0 (the plans below need them). */
export type DecidedChange = SkuChange & { totalStock: number; shards: number };

/** A resize as shard 0 records it: from `from` shards (0: a new SKU) to `to`. */
export interface ResizePlan {
  changeId: string;
  from: number;
  to: number;
  change: DecidedChange;
}

/** A change of settings shard 0 decided and its siblings have not all taken yet. */
interface FollowPlan {
  changeId: string;
  follow: true;
}

/** What shard 0 records while a change is being applied (`Configuration.resizePlan`). */
export type ChangePlan = ResizePlan | FollowPlan;

export function isFollowPlan(plan: ChangePlan): plan is FollowPlan {
  return "follow" in plan;
}

/** Shard i's part of `total` over `shards` shards (the first ones take the remainder). */
export function share(total: number, shards: number, i: number): number {
  return Math.floor(total / shards) + (i < total % shards ? 1 : 0);
}

/** The shards a resize reaches: every shard of the old layout and of the new. */
export function reachOf(plan: ResizePlan): number[] {
  return Array.from({ length: Math.max(plan.from, plan.to) }, (_, i) => i);
}

/** The settings of a change that every shard gets alike (fields left out keep their value). */
function common(change: SkuChange): Omit<SkuSettings, "shard" | "shards"> {
  return {
    sku: change.sku,
    name: change.name,
    perUserLimit: change.perUserLimit,
    holdSeconds: change.holdSeconds,
    startsAt: change.startsAt,
    endsAt: change.endsAt,
    status: change.status,
    openingWindowMs: change.openingWindowMs,
    price: change.price,
    currency: change.currency,
    test: change.test,
    access: change.access,
  };
}

/** Each variant's total a change sets, by id (those it leaves out keep theirs). */
function variantTotals(change: SkuChange): Record<string, number> | undefined {
  const totals = (change.variants ?? []).flatMap((v) => (v.totalStock === undefined ? [] : [[v.id, v.totalStock]]));
  return totals.length > 0 ? Object.fromEntries(totals) : undefined;
}

/** A change on a one-shard SKU: everything in shard 0's one transaction. */
export function soleSettings(change: DecidedChange): SkuSettings {
  return {
    ...common(change),
    shard: 0,
    shards: 1,
    totalStock: change.totalStock,
    variants: change.variants,
    skuVariantTotals: variantTotals(change),
  };
}

/** A change of a sharded SKU that keeps its shard count, as shard 0 decides it. */
export function leadSettings(change: DecidedChange, changeId: string): SkuSettings {
  const plan: FollowPlan = { changeId, follow: true };
  return {
    ...common(change),
    shard: 0,
    shards: change.shards,
    retarget: { total: change.totalStock, assumed: change.assumedTotal },
    variants: change.variants,
    skuVariantTotals: variantTotals(change),
    plan: JSON.stringify(plan),
  };
}

/**
 * What a sibling gets once shard 0 decided: shard 0's settings, absolute, their revision shard 0's
 * seq, with the openings whose draws shard 0 has not decided (`undecided`, a copy may come late).
 */
export function followerSettings(lead: SkuState, shard: number, undecided: readonly number[]): SkuSettings {
  return {
    sku: lead.sku,
    shard,
    shards: lead.shards,
    name: lead.name,
    perUserLimit: lead.perUserLimit,
    holdSeconds: lead.holdSeconds,
    startsAt: lead.startsAt,
    endsAt: lead.endsAt,
    status: lead.status,
    openingWindowMs: lead.openingWindowMs ?? 0,
    price: lead.price,
    currency: lead.currency,
    test: lead.test === true,
    access: lead.access ?? [],
    // Sizes: a sibling knows every variant (a new one at 0 units here; transfers bring it units).
    variants: lead.variants?.map((v) => ({ id: v.id, name: v.name })),
    revision: lead.seq,
    undecidedOpenings: [...undecided],
  };
}

/**
 * What shard `shard` commits for a resize: the new count, its even share of the total. Shard 0
 * commits the change itself (fields left out keep its values); a sibling commits shard 0's settings
 * as committed (`lead`), whatever it had before (a new shard has nothing to keep).
 */
export function resizeSettings(
  plan: ResizePlan,
  shard: number,
  lead?: SkuState,
  undecided: readonly number[] = [],
): SkuSettings {
  const { change, to } = plan;
  const totalStock = shard < to ? share(change.totalStock, to, shard) : 0;
  // Sizes: each variant split as the total is (a resize finds nothing held or sold).
  const variants = change.variants?.map((v) => ({
    id: v.id,
    name: v.name,
    totalStock: shard < to ? share(v.totalStock ?? 0, to, shard) : 0,
  }));
  if (shard === 0) {
    return {
      ...common(change),
      shard,
      shards: to,
      totalStock,
      variants,
      changeId: plan.changeId,
      skuTotal: change.totalStock,
      skuVariantTotals: variantTotals(change),
      plan: JSON.stringify(plan),
    };
  }
  if (!lead) throw new Error("a sibling commits shard 0's settings");
  const { revision: _revision, ...settings } = followerSettings(lead, shard, undecided);
  // A shard a cut leaves out takes no entry (its tokens are stale) and no draw is closed there: an
  // opening kept would stay pending for good and refuse every later resize that reaches the shard.
  const out = shard >= to ? { openingWindowMs: 0, undecidedOpenings: [] } : {};
  return { ...settings, ...out, shards: to, totalStock, variants, changeId: plan.changeId };
}
