import { afterEach, beforeEach, expect, it, vi } from "vitest";
import { cachedDraw, type DrawRead, forgetDraw } from "../src/edge/draw-cache";
import { SHARED_READ_MS, sharedRead } from "../src/http/shared-read";

// Found by a helper comparing a warm isolate with a fresh one: concurrent requests shared one read of a
// SKU (its draw, its display, the catalog) with no bound, and on workerd a promise that a cancelled
// request started never settles (src/http/jwks.ts), so every later request of that isolate waited on
// it for good while a fresh isolate answered. A request now waits on another's read at most
// SHARED_READ_MS after it began, then reads for itself.

const never = <T>() => new Promise<T>(() => {});
const drawOf = (entrants: number): DrawRead => ({ draw: { entrants } }) as unknown as DrawRead;

beforeEach(() => {
  vi.useFakeTimers();
});
afterEach(() => {
  vi.useRealTimers();
  forgetDraw("sku");
});

it("a request waits on another's read that never settles only until it is SHARED_READ_MS old", async () => {
  const started = Date.now();
  const own = vi.fn(async () => "own");
  const waiting = sharedRead(never<string>(), started, own);
  await vi.advanceTimersByTimeAsync(SHARED_READ_MS - 1);
  expect(own).not.toHaveBeenCalled();
  await vi.advanceTimersByTimeAsync(1);
  expect(await waiting).toBe("own");
  // One that settles in time is shared, and no read of its own is made.
  const shared = vi.fn(async () => "own");
  expect(await sharedRead(Promise.resolve("shared"), Date.now(), shared)).toBe("shared");
  expect(shared).not.toHaveBeenCalled();
});

it("a draw read that a cancelled request left hanging does not hang the isolate's later reads", async () => {
  const hung = cachedDraw("sku", Date.now(), never);
  void hung;
  const reads = vi.fn(async () => drawOf(7));
  const joined = cachedDraw("sku", Date.now(), reads); // shares the read in flight
  await vi.advanceTimersByTimeAsync(SHARED_READ_MS);
  expect(await joined).toEqual(drawOf(7));
  // The read it made is the one the next requests share, while it is fresh.
  expect(await cachedDraw("sku", Date.now(), async () => drawOf(9))).toEqual(drawOf(7));
  expect(reads).toHaveBeenCalledTimes(1);
});
