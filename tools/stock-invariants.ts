/**
 * The stock invariants of docs/ARCHITECTURE.md that need only counts, shared by chaos
 * (scripts/chaos/invariants.ts, over the admin view and D1) and the simulator (tools/sim/, over the
 * objects themselves): 1, `available + held + sold == total`, none negative, per SKU and per size,
 * the SKU's counts the sums of its sizes', and held + sold never above what the operator set; 2, a
 * buyer's held + bought within the limit.
 * Each returns its violations as sentences, none when the counts hold.
 */

import type { StockCounts as Counts } from "../durable-objects/engine/types";

/** 1 for one set of counts (a shard's, a SKU's, a size's), named `what` in the sentence. */
export function countsViolation(what: string, c: Counts): string | null {
  const { total, available, held, sold } = c;
  if (available < 0 || held < 0 || sold < 0 || available + held + sold !== total || held + sold > total)
    return `${what}: available ${available} + held ${held} + sold ${sold} != total ${total}`;
  return null;
}

/** 1 for a SKU (or a shard) with sizes: each of its counts the sum of its sizes' (API.md v1.4: `stock` is their sum). */
export function sizesViolations(what: string, stock: Counts, sizes: readonly { stock: Counts }[]): string[] {
  const out: string[] = [];
  for (const key of ["total", "available", "held", "sold"] as const) {
    const sum = sizes.reduce((n, size) => n + size.stock[key], 0);
    if (sum !== stock[key]) out.push(`${what}: its sizes' ${key} sum to ${sum}, its own ${key} is ${stock[key]}`);
  }
  return out;
}

/** 2: each buyer's held + bought (summed over wherever they hold) within `limit`. */
export function limitViolations(active: ReadonlyMap<string, number>, limit: number, where: string): string[] {
  const out: string[] = [];
  for (const [user, quantity] of active)
    if (quantity > limit) out.push(`user ${user} holds or bought ${quantity} of ${where} (perUserLimit ${limit})`);
  return out;
}

/** A shard as the simulator reads it: its state, and each buyer's held + paid units there. */
export interface ShardView {
  shard: number;
  state: ShardState;
  active: { userId: string; quantity: number }[];
}

export interface ShardState {
  stock: Counts;
  variants?: { id: string; stock: Counts }[] | undefined;
}

/**
 * 1 and 2 over a SKU's shards: each shard's counts and each of its sizes'; the SKU's held + sold (and
 * each size's) never above the most the operator may have set (`bound`); each buyer within `limit`
 * over every shard.
 */
export function stockViolations(
  shards: readonly ShardView[],
  limit: number,
  bound: { total: number; variants?: ReadonlyMap<string, number> | undefined },
): string[] {
  const out: string[] = [];
  const push = (v: string | null) => {
    if (v) out.push(v);
  };
  let used = 0;
  const usedBySize = new Map<string, number>();
  const active = new Map<string, number>();
  for (const { shard, state, active: rows } of shards) {
    push(countsViolation(`shard ${shard}`, state.stock));
    used += state.stock.held + state.stock.sold;
    if (state.variants?.length) out.push(...sizesViolations(`shard ${shard}`, state.stock, state.variants));
    for (const v of state.variants ?? []) {
      push(countsViolation(`shard ${shard} size ${v.id}`, v.stock));
      usedBySize.set(v.id, (usedBySize.get(v.id) ?? 0) + v.stock.held + v.stock.sold);
    }
    for (const row of rows) active.set(row.userId, (active.get(row.userId) ?? 0) + row.quantity);
  }
  if (used > bound.total) out.push(`held + sold ${used} over the SKU's total ${bound.total} (oversold)`);
  for (const [id, n] of usedBySize) {
    const most = bound.variants?.get(id);
    if (most !== undefined && n > most) out.push(`size ${id}: held + sold ${n} over its total ${most} (oversold)`);
  }
  out.push(...limitViolations(active, limit, "the SKU"));
  return out;
}
