import type { SkuState } from "../engine/types";
import type { RedisMirror, ShardRead } from "../mirror/redis-mirror";
import { CoalescedRunner } from "../shared/coalesced-runner";
import { log } from "../shared/log";
import type { DueWork } from "./due-work";

/** First wait before the alarm retries a mirror publish that failed; it doubles up to the maximum. */
const MIRROR_RETRY_MIN_MS = 250;
const MIRROR_RETRY_MAX_MS = 5_000;
/** Publishes failed in a row before the shard's snapshot is taken away (the first retry failed too). */
const FORGET_AFTER_FAILURES = 2;
/**
 * The least time between two writes. An idle object writes at once; under load, the commits of the
 * next few milliseconds go in one write of the newest snapshot. The mirror is a display (API.md: it
 * may lag up to a second), and each write is a subrequest and an Upstash command: a write per
 * group-commit batch was a sizeable part of the stock object's CPU per reservation,
 * and would bill hundreds of commands a second per hot shard.
 */
export const MIRROR_MIN_INTERVAL_MS = 50;
/** How long a check waits for the write in flight before it compares. */
const MIRROR_CHECK_WAIT_MS = 4 * MIRROR_MIN_INTERVAL_MS;
/** Repairs a check tries when each is refused because the shard published meanwhile (it reads again). */
const MIRROR_REPAIR_ATTEMPTS = 3;

type MirrorSnapshot = {
  seq: number;
  total: number;
  available: number;
  held: number;
  sold: number;
  status: string;
  /** Sizes: each variant's counts (the displays read them from the mirror too); left out without. */
  variants?: { id: string; total: number; available: number; held: number; sold: number }[];
};

export type MirrorCheck =
  | { status: "ok" }
  | { status: "unreachable"; error: string }
  | { status: "missing"; expected: MirrorSnapshot; repaired: boolean }
  | { status: "drift"; expected: MirrorSnapshot; actual: MirrorSnapshot; repaired: boolean };

function snapshotOf(state: SkuState): MirrorSnapshot {
  const snapshot: MirrorSnapshot = { seq: state.seq, ...state.stock, status: state.status };
  if (state.variants) snapshot.variants = state.variants.map((v) => ({ id: v.id, ...v.stock }));
  return snapshot;
}

/**
 * Publishes a stock object's newest snapshot to the Redis mirror after commits: in the background,
 * one write in flight, later commits folded into the next write (which reads the state then), never
 * inside a transaction nor awaited by a sale. A failed write backs off (commits stop trying) and the
 * alarm retries it until Redis answers; `lua/mirror.lua` keeps only the newest seq, so late or
 * repeated writes are harmless.
 */
export class MirrorPublisher {
  readonly #mirror: RedisMirror;
  /** The shard's state now (the engine's configuration), read when a write is made. */
  readonly #state: () => SkuState | null;
  readonly #due: DueWork;
  readonly #now: () => number;
  readonly #runner = new CoalescedRunner(() => this.#publish());
  /** The newest seq the mirror is known to hold (0 after a restart: publish once to be sure). */
  #mirroredSeq = 0;
  /** A seq Redis refused as older than its own (a reset object): not asked again until the seq moves. */
  #refusedSeq = -1;
  /** Publishes failed in a row (sets the backoff). */
  #failures = 0;
  /** Wall-clock time of the last write (paces the writes, {@link MIRROR_MIN_INTERVAL_MS}). */
  #lastWriteAt = 0;

  constructor(mirror: RedisMirror, state: () => SkuState | null, due: DueWork, now: () => number) {
    this.#mirror = mirror;
    this.#state = state;
    this.#due = due;
    this.#now = now;
  }

  /** Starts a publish unless a failed one is backing off (then the alarm publishes); settles when done. */
  async publish(): Promise<void> {
    const retryAt = this.#due.retryAt("mirror");
    if (retryAt !== undefined) {
      if (this.#now() < retryAt) return;
      this.#due.done("mirror");
    }
    await this.#runner.run();
  }

  /** Writes the current snapshot if the mirror may lack it; on failure, books the alarm to retry. */
  async #publish(): Promise<void> {
    if (!this.#behind()) return;
    // Wall-clock time (not the object's decision clock, which tests move): it only paces the writes.
    const wait = this.#lastWriteAt + MIRROR_MIN_INTERVAL_MS - Date.now();
    if (wait > 0) await scheduler.wait(wait);
    // Read after the wait: the write carries every commit made meanwhile.
    const state = this.#state();
    if (!state || state.seq <= this.#mirroredSeq) return;
    this.#lastWriteAt = Date.now();
    try {
      const result = await this.#mirror.publish(state, this.#now());
      if (!result.applied && result.seq > state.seq) {
        // Only a stock object whose storage was reset can be behind its own mirror; reconciliation
        // rewrites such a mirror. The mirror does not hold this state: the next commit's publish writes
        // again (over the repair, which may land before this answer), but no request before it does.
        log("warn", "mirror is ahead of the stock object", { ...result });
        this.#refusedSeq = state.seq;
      } else this.#mirroredSeq = Math.max(this.#mirroredSeq, state.seq);
      if (this.#failures > 0) {
        log("info", "mirror caught up", { failures: this.#failures });
        this.#failures = 0;
      }
    } catch (err) {
      this.#failures++;
      const backoff = Math.min(MIRROR_RETRY_MIN_MS * 2 ** (this.#failures - 1), MIRROR_RETRY_MAX_MS);
      log("warn", "mirror publish failed", { failures: this.#failures, retryInMs: backoff, error: String(err) });
      // Failing again after its first retry (not one slow answer): the snapshot Redis holds is older than
      // the shard and stays so until a write goes through, so take it away and let displays read the
      // stock object meanwhile (API.md: the mirror lags a moment only). Whatever Redis held is then
      // unknown here (the DEL may have taken a newer write of check()): the next publish writes again.
      if (this.#failures >= FORGET_AFTER_FAILURES) {
        await this.#mirror.forget(state.sku, state.shard).catch(() => undefined);
        this.#mirroredSeq = 0;
        this.#refusedSeq = -1;
      }
      await this.#due.retry("mirror", this.#now() + backoff);
    }
  }

  /** Whether the mirror may lack the shard's current state. */
  #behind(): boolean {
    const state = this.#state();
    return state !== null && state.seq > this.#mirroredSeq && state.seq !== this.#refusedSeq;
  }

  /**
   * Compares the mirror with the shard's state and rewrites it when it is missing or wrong. Waits
   * for the write in flight first, but not for the sale to end (under steady load a write is always
   * booked); a mirror behind only by commits that a write in flight or booked will carry is lagging,
   * not drifting, and is left to that write. The rewrite names the seq it read and is refused if the
   * shard published since (lua/mirror.lua): it then reads again, and never puts an older state back.
   */
  async check(): Promise<MirrorCheck> {
    await Promise.race([this.#runner.settled(), scheduler.wait(MIRROR_CHECK_WAIT_MS)]);
    let found: { expected: MirrorSnapshot; actual: MirrorSnapshot | null } | null = null;
    let repaired = false;
    for (let attempt = 0; attempt < MIRROR_REPAIR_ATTEMPTS && !repaired; attempt++) {
      const shard = this.#state();
      if (!shard) return { status: "ok" };
      let stored: ShardRead;
      try {
        stored = await this.#mirror.inspect(shard.sku, shard.shard);
      } catch (err) {
        if (!found) return { status: "unreachable", error: String(err) };
        log("warn", "mirror repair failed", { error: String(err) });
        break;
      }
      // Read after the mirror, not before: the object serves commits (and publishes them) while Redis is
      // read, so a state read first may be older than the mirror, which would look "ahead" and be rewound.
      const state = this.#state();
      if (!state) return { status: "ok" };
      const expected = snapshotOf(state);
      const actual = stored.snapshot ? snapshotOf(stored.snapshot) : null;
      // In step, or lagging behind a write under way: nothing (more) to repair.
      const inStep =
        (actual && JSON.stringify(actual) === JSON.stringify(expected)) ||
        (actual && actual.seq < expected.seq && !this.#runner.idle);
      if (inStep) {
        if (!found) return { status: "ok" };
        repaired = true;
        break;
      }
      found ??= { expected, actual };
      try {
        const result = await this.#mirror.replace(state, this.#now(), stored.seq);
        if (result.applied) {
          this.#mirroredSeq = state.seq;
          repaired = true;
        }
      } catch (err) {
        log("warn", "mirror repair failed", { error: String(err) });
        break;
      }
    }
    // Commits made while the mirror was rewritten are newer than the repair: publish them now rather than
    // leave the repaired snapshot until the next commit.
    if (this.#behind()) void this.publish();
    if (!found) return { status: "ok" };
    const { expected, actual } = found;
    return actual ? { status: "drift", expected, actual, repaired } : { status: "missing", expected, repaired };
  }
}
