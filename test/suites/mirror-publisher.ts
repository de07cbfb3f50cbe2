import { describe, expect, it } from "vitest";
import type { SkuState } from "../../durable-objects/engine/types";
import type { RedisMirror } from "../../durable-objects/mirror/redis-mirror";
import type { DueWork } from "../../durable-objects/stock/due-work";
import { MIRROR_MIN_INTERVAL_MS, MirrorPublisher } from "../../durable-objects/stock/mirror-publisher";

/** The mirror publisher against a shard state whose seq moves and a mirror that records writes. */
function harness(onRead?: () => Promise<void>, onReplace?: () => Promise<void>) {
  let seq = 1;
  const writes: number[] = [];
  const replaced: number[] = [];
  const stateAt = (v: number): SkuState => ({
    sku: "mp",
    shard: 0,
    shards: 1,
    name: "mp",
    status: "on_sale",
    perUserLimit: 1,
    holdSeconds: 600,
    startsAt: null,
    endsAt: null,
    stock: { total: 1000, available: 1000 - v, held: v, sold: 0 },
    seq: v,
    price: null,
    currency: "usd",
  });
  // Like lua/mirror.lua: the mirror keeps the newest seq written.
  let stored: number | null = null;
  const mirror = {
    publish: async (state: { seq: number }) => {
      await scheduler.wait(1); // a round trip
      writes.push(state.seq);
      stored = Math.max(stored ?? 0, state.seq);
      return { applied: true, seq: state.seq };
    },
    readShard: async () => {
      await scheduler.wait(1); // a round trip, during which the shard goes on committing
      await onRead?.();
      return stored === null ? null : stateAt(stored);
    },
    replace: async (state: { seq: number }) => {
      replaced.push(state.seq);
      await onReplace?.(); // DEL, then the write: a commit published before the DEL is wiped by it
      stored = state.seq;
    },
  } as unknown as RedisMirror;
  const due = { retryAt: () => undefined, done: () => {}, retry: async () => {} } as unknown as DueWork;
  const publisher = new MirrorPublisher(
    mirror,
    () => stateAt(seq),
    due,
    () => Date.now(),
  );
  const lose = () => {
    stored = null;
  };
  return { publisher, writes, replaced, lose, commit: () => seq++, seq: () => seq, stored: () => stored };
}

describe("mirror publisher", () => {
  it("writes a burst of commits as a few snapshots, one per interval, ending with the newest", async () => {
    const { publisher, writes, commit, seq } = harness();
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
    expect(writes.at(-1)).toBe(seq());
    expect(writes).toEqual([...writes].sort((a, b) => a - b));
    // At most one write per interval (plus the first, made at once), never one per commit.
    expect(writes.length).toBeLessThanOrEqual(Math.ceil(elapsed / MIRROR_MIN_INTERVAL_MS) + 1);
    expect(writes.length).toBeLessThan(20);
  });

  it("checks the mirror during a burst of commits without waiting for it to end or calling the lag drift", async () => {
    const { publisher, replaced, commit } = harness();
    let burning = true;
    const burst = (async () => {
      while (burning) {
        commit();
        publisher.publish();
        await scheduler.wait(1);
      }
    })();
    await scheduler.wait(30);
    const started = Date.now();
    const checks = [];
    for (let i = 0; i < 5; i++) checks.push((await publisher.check()).status);
    const elapsed = Date.now() - started;
    burning = false;
    await burst;
    expect(checks).toEqual(["ok", "ok", "ok", "ok", "ok"]);
    expect(replaced).toEqual([]);
    expect(elapsed).toBeLessThan(5 * 5 * MIRROR_MIN_INTERVAL_MS);
  });

  it("repairs a mirror that lost the shard's hash, once no write is under way", async () => {
    const { publisher, replaced, commit, seq, lose } = harness();
    commit();
    await publisher.publish();
    lose(); // Redis lost the hash; the publisher believes the mirror is current
    const check = await publisher.check();
    expect(check).toMatchObject({ status: "missing", repaired: true });
    expect(replaced).toEqual([seq()]);
    expect((await publisher.check()).status).toBe("ok");
  });

  it("writes at once when idle", async () => {
    const { publisher, writes, commit } = harness();
    commit();
    const started = Date.now();
    await publisher.publish();
    expect(writes).toEqual([2]);
    expect(Date.now() - started).toBeLessThan(MIRROR_MIN_INTERVAL_MS);
  });

  it("never rewinds the mirror when a commit is published while a check reads it", async () => {
    // The shard commits and publishes while check() awaits Redis (an object serves RPCs during a fetch).
    let during: (() => Promise<void>) | undefined;
    const h = harness(() => during?.() ?? Promise.resolve());
    h.commit();
    await h.publisher.publish();
    during = async () => {
      during = undefined;
      h.commit();
      await h.publisher.publish();
    };
    const check = await h.publisher.check();
    // The mirror held the newest snapshot before the check and in step with the object: nothing to repair,
    // and above all not the older state the check began with (a public view showing units sold since).
    expect(h.stored()).toBe(h.seq());
    expect(check.status).toBe("ok");
    expect(h.replaced).toEqual([]);
  });

  it("writes the newest snapshot again when a commit was published while a check rewrote the mirror", async () => {
    let during: (() => Promise<void>) | undefined;
    const h = harness(undefined, () => during?.() ?? Promise.resolve());
    h.commit();
    await h.publisher.publish();
    h.lose(); // the hash is gone: the check rewrites it
    during = async () => {
      during = undefined;
      h.commit();
      await h.publisher.publish();
    };
    expect(await h.publisher.check()).toMatchObject({ status: "missing", repaired: true });
    // No commit follows (the sale is over): the mirror must not keep the state the check wrote.
    await scheduler.wait(3 * MIRROR_MIN_INTERVAL_MS);
    expect(h.stored()).toBe(h.seq());
  });
});
