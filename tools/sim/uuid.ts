import { v7 as uuidv7 } from "uuid";

/**
 * The simulator's stand-in for `uuid` as the stock object imports it (only there: see
 * vitest.unit.config.ts and tools/sim/resolve-hooks.mjs). `uuid`'s v7 keeps its last time and
 * counter in the module, so ids would depend on what ran before in the process; while a simulation
 * runs, its ids come from the simulation's own seeded source instead, and otherwise from `uuid`.
 */
let simulated: (() => string) | null = null;

/** Ids from `next` until called again with null. */
export function simulateIds(next: (() => string) | null): void {
  simulated = next;
}

export function v7(): string {
  return simulated ? simulated() : uuidv7();
}
