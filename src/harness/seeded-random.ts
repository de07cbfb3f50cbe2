/**
 * A seeded PRNG (mulberry32): small, fast, and the same seed gives the same sequence, so fault
 * schedules replay exactly. Used by the chaos fault switch, the chaos harness and the tests.
 */
export function seededRandom(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4_294_967_296;
  };
}
