import { afterEach, beforeEach, describe, expect, it, vi } from "vitest";
import { Deadlines } from "../src/handoff/deadlines";

/**
 * A lane run's attempt timeouts (src/handoff/deadlines.ts): one timer at a time, yet each attempt
 * aborted exactly its timeout after it started, and never once it is done.
 */
describe("attempt deadlines", () => {
  beforeEach(() => vi.useFakeTimers({ now: 0 }));
  afterEach(() => vi.useRealTimers());

  it("aborts each attempt its timeout after it started, one timer pending at a time", () => {
    const deadlines = new Deadlines(10_000);
    const first = deadlines.start();
    vi.advanceTimersByTime(3_000);
    const second = deadlines.start();
    const third = deadlines.start();
    expect(vi.getTimerCount()).toBe(1);
    vi.advanceTimersByTime(6_999);
    expect([first, second, third].map((d) => d.signal.aborted)).toEqual([false, false, false]);
    vi.advanceTimersByTime(1);
    expect([first, second, third].map((d) => d.signal.aborted)).toEqual([true, false, false]);
    expect(vi.getTimerCount()).toBe(1);
    vi.advanceTimersByTime(2_999);
    expect(second.signal.aborted).toBe(false);
    vi.advanceTimersByTime(1);
    expect([second.signal.aborted, third.signal.aborted]).toEqual([true, true]);
    expect(vi.getTimerCount()).toBe(0);
  });

  it("leaves an attempt that is done alone, and the next one still times out on time", () => {
    const deadlines = new Deadlines(10_000);
    const answered = deadlines.start();
    vi.advanceTimersByTime(5_000);
    const hanging = deadlines.start();
    answered.done();
    vi.advanceTimersByTime(5_000);
    expect(answered.signal.aborted).toBe(false);
    expect(hanging.signal.aborted).toBe(false);
    vi.advanceTimersByTime(5_000);
    expect(hanging.signal.aborted).toBe(true);
  });

  it("sets no timer once closed", () => {
    const deadlines = new Deadlines(10_000);
    const attempt = deadlines.start();
    deadlines.close();
    expect(vi.getTimerCount()).toBe(0);
    vi.advanceTimersByTime(20_000);
    expect(attempt.signal.aborted).toBe(false);
  });
});
