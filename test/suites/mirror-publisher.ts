import { Redis } from "@upstash/redis/cloudflare";
import { describe, expect, inject, it } from "vitest";
import type { SkuState } from "../../durable-objects/engine/types";
import { mirrorKey, RedisMirror } from "../../durable-objects/mirror/redis-mirror";
import type { DueWork } from "../../durable-objects/stock/due-work";
import { MIRROR_MIN_INTERVAL_MS, MirrorPublisher } from "../../durable-objects/stock/mirror-publisher";

const noRetries = { retryAt: () => undefined, done: () => {}, retry: async () => {} } as unknown as DueWork;

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
  // Like lua/mirror.lua: a publish keeps the newest seq written, a repair writes only over the seq it read.
  let stored: number | null = null;
  const mirror = {
    publish: async (state: { seq: number }) => {
      await scheduler.wait(1); // a round trip
      writes.push(state.seq);
      if (stored !== null && stored > state.seq) return { applied: false, seq: stored }; // a mirror ahead
      stored = Math.max(stored ?? 0, state.seq);
      return { applied: true, seq: state.seq };
    },
    inspect: async () => {
      await scheduler.wait(1); // a round trip, during which the shard goes on committing
      await onRead?.();
      return { snapshot: stored === null ? null : stateAt(stored), seq: stored };
    },
    replace: async (state: { seq: number }, _at: number, read: number | null) => {
      replaced.push(state.seq);
      await onReplace?.(); // the shard may publish before the repair's write reaches Redis
      if (stored !== read) return { applied: false, seq: stored ?? -1 };
      stored = state.seq;
      return { applied: true, seq: state.seq };
    },
  } as unknown as RedisMirror;
  const publisher = new MirrorPublisher(
    mirror,
    () => stateAt(seq),
    noRetries,
    () => Date.now(),
  );
  const lose = () => {
    stored = null;
  };
  // Redis holds a newer snapshot than the shard has: the shard's storage was reset.
  const ahead = (by: number) => {
    stored = seq + by;
  };
  return { publisher, writes, replaced, lose, ahead, commit: () => seq++, seq: () => seq, stored: () => stored };
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

  it("asks a mirror ahead of the shard once per commit, not on every request, until a repair", async () => {
    const { publisher, writes, commit, ahead } = harness();
    ahead(50);
    await publisher.publish(); // refused: Redis keeps the newer seq
    // Requests that commit nothing (a sold-out rush) each ask for a publish.
    for (let i = 0; i < 5; i++) await publisher.publish();
    expect(writes).toEqual([1]);
    commit();
    await publisher.publish();
    expect(writes).toEqual([1, 2]);
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

  it("keeps the snapshot a commit published while a check rewrote the mirror", async () => {
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

describe("mirror publisher against Redis", () => {
  const { bridgeUrl, token } = inject("redis");

  it("never puts an older snapshot back when the shard publishes while a check repairs the mirror", async () => {
    const real = new RedisMirror({ url: bridgeUrl, token, timeoutMs: 2_000 });
    const sku = `mp-race-${crypto.randomUUID()}`;
    // One unit: on sale at seq 1, sold at seq 2.
    let seq = 1;
    const state = (): SkuState => ({
      sku,
      shard: 0,
      shards: 1,
      name: sku,
      status: "on_sale",
      perUserLimit: 1,
      holdSeconds: 600,
      startsAt: null,
      endsAt: null,
      stock: seq === 1 ? { total: 1, available: 1, held: 0, sold: 0 } : { total: 1, available: 0, held: 0, sold: 1 },
      seq,
      price: null,
      currency: "usd",
    });
    // The real client, with two seams: the shard's publish lands in Redis but its answer waits for
    // `answer`; the check's repair runs `beforeRepair` first (after the check read Redis and the state).
    let landed = () => {};
    const written = new Promise<void>((resolve) => {
      landed = resolve;
    });
    let release = () => {};
    const answer = new Promise<void>((resolve) => {
      release = resolve;
    });
    let holding = false;
    let beforeRepair: (() => Promise<void>) | undefined;
    const mirror = new Proxy(real, {
      get(target, name) {
        if (name === "publish")
          return async (...args: Parameters<RedisMirror["publish"]>) => {
            const result = await target.publish(...args);
            if (holding) {
              landed();
              await answer;
            }
            return result;
          };
        if (name === "replace")
          return async (...args: Parameters<RedisMirror["replace"]>) => {
            const hook = beforeRepair;
            beforeRepair = undefined;
            await hook?.();
            return target.replace(...args);
          };
        const value: unknown = Reflect.get(target, name);
        return typeof value === "function" ? value.bind(target) : value;
      },
    });
    const publisher = new MirrorPublisher(mirror, state, noRetries, () => Date.now());
    await publisher.publish();
    expect(await real.read(sku)).toMatchObject({ seq: 1, stock: { available: 1 } });

    // Redis lost the hash: the check will rewrite it from seq 1. Between its read and its write the
    // last unit sells and the shard publishes seq 2 (its answer still on the way).
    await new Redis({ url: bridgeUrl, token, retry: false, enableTelemetry: false }).del(mirrorKey(sku, 0));
    holding = true;
    let publishing: Promise<void> = Promise.resolve();
    beforeRepair = async () => {
      seq = 2;
      publishing = publisher.publish();
      await written;
    };
    const check = await publisher.check();
    release();
    await publishing;
    await publisher.publish(); // and whatever the check booked

    // What the public view reads: sold out, not the unit the repair began with.
    expect(await real.read(sku)).toMatchObject({ seq: 2, stock: { total: 1, available: 0, held: 0, sold: 1 } });
    expect(check).toMatchObject({ status: "missing", repaired: true });
  });
});
