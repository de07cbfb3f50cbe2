import { describe, expect, it } from "vitest";
import type { DueWork } from "../durable-objects/due-work";
import { MIRROR_MIN_INTERVAL_MS, MirrorPublisher } from "../durable-objects/mirror-publisher";
import type { RedisMirror } from "../durable-objects/redis-mirror";
import type { StockEngine } from "../durable-objects/stock-engine";

/** The mirror publisher against a stock engine whose version moves and a mirror that records writes. */
function harness() {
  let version = 1;
  const writes: number[] = [];
  const engine = { state: () => ({ version }) } as unknown as StockEngine;
  const mirror = {
    publish: async (state: { version: number }) => {
      writes.push(state.version);
      return { applied: true, version: state.version };
    },
  } as unknown as RedisMirror;
  const due = { retryAt: () => undefined, done: () => {}, retry: async () => {} } as unknown as DueWork;
  const publisher = new MirrorPublisher(mirror, engine, due, () => Date.now());
  return { publisher, writes, commit: () => version++, version: () => version };
}

describe("mirror publisher", () => {
  it("writes a burst of commits as a few snapshots, one per interval, ending with the newest", async () => {
    const { publisher, writes, commit, version } = harness();
    const started = Date.now();
    let last: Promise<void> = Promise.resolve();
    // 100 commits, a millisecond apart, each asking for a publish (as every reserve batch does).
    for (let i = 0; i < 100; i++) {
      commit();
      last = publisher.publish();
      await scheduler.wait(1);
    }
    await last;
    await publisher.publish(); // settles whatever the last request booked
    const elapsed = Date.now() - started;
    expect(writes.at(-1)).toBe(version());
    expect(writes).toEqual([...writes].sort((a, b) => a - b));
    // At most one write per interval (plus the first, made at once), never one per commit.
    expect(writes.length).toBeLessThanOrEqual(Math.ceil(elapsed / MIRROR_MIN_INTERVAL_MS) + 1);
    expect(writes.length).toBeLessThan(20);
  });

  it("writes at once when idle", async () => {
    const { publisher, writes, commit } = harness();
    commit();
    const started = Date.now();
    await publisher.publish();
    expect(writes).toEqual([2]);
    expect(Date.now() - started).toBeLessThan(MIRROR_MIN_INTERVAL_MS);
  });
});
