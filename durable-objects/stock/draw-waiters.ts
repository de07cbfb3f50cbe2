/**
 * Fair opening: the requests waiting on one stock object for the draw's answer (`SkuStock.awaitDraw`).
 * Each is woken by its own news only: its entry was decided (by user id: a user's tokens share one
 * entry), or the draw is over here (everyone, and the requests that are no entry). A decided entry
 * therefore costs one wake, not one per waiting request.
 *
 * One timer for all of them, ticking while any waits: it wakes those whose deadline passed and runs
 * `onTick` (the object's check for a draw that is due, should its alarm be lost); when `onTick`
 * throws (the object is broken), every waiting request fails with that error. A timer per request
 * would not do: an isolate allows 10,000 active timeouts, and a draw has more waiting requests.
 */
export class DrawWaiters {
  readonly #pollMs: number;
  readonly #now: () => number;
  readonly #onTick: () => void;
  /** Waiting requests of entries, by user id. */
  readonly #entries = new Map<string, Waiter[]>();
  /** Waiting requests that are no entry (they came after the window): woken when the draw is over. */
  #others: Waiter[] = [];
  #count = 0;
  #ticking = false;

  constructor(pollMs: number, now: () => number, onTick: () => void) {
    this.#pollMs = pollMs;
    this.#now = now;
    this.#onTick = onTick;
  }

  /**
   * Resolves when `userId`'s entry is decided here (`null`: a request that is no entry), when the
   * draw is over here, or on the first tick at or after `deadline` (the object's clock).
   */
  wait(userId: string | null, deadline: number): Promise<void> {
    const { promise, resolve, reject } = Promise.withResolvers<void>();
    const waiter: Waiter = { resolve, reject, deadline };
    if (userId === null) this.#others.push(waiter);
    else {
      const list = this.#entries.get(userId);
      if (list) list.push(waiter);
      else this.#entries.set(userId, [waiter]);
    }
    this.#count++;
    if (!this.#ticking) void this.#tick();
    return promise;
  }

  /** These users' entries were decided here: their requests wake (and read their answer). */
  decided(userIds: Iterable<string>): void {
    for (const userId of userIds) {
      const list = this.#entries.get(userId);
      if (!list) continue;
      this.#entries.delete(userId);
      this.#wake(list);
    }
  }

  /** The draw is over here: every waiting request wakes. */
  over(): void {
    for (const list of this.#takeAll()) this.#wake(list);
  }

  #takeAll(): Waiter[][] {
    const lists = [...this.#entries.values(), this.#others];
    this.#entries.clear();
    this.#others = [];
    return lists;
  }

  #wake(list: readonly Waiter[], error?: unknown): void {
    this.#count -= list.length;
    for (const waiter of list) {
      if (error === undefined) waiter.resolve();
      else waiter.reject(error);
    }
  }

  async #tick(): Promise<void> {
    this.#ticking = true;
    try {
      while (this.#count > 0) {
        await scheduler.wait(this.#pollMs);
        try {
          this.#onTick();
        } catch (err) {
          for (const list of this.#takeAll()) this.#wake(list, err);
          continue;
        }
        const now = this.#now();
        for (const [userId, list] of this.#entries) {
          const late = list.filter((w) => w.deadline <= now);
          if (late.length === 0) continue;
          const left = list.filter((w) => w.deadline > now);
          if (left.length > 0) this.#entries.set(userId, left);
          else this.#entries.delete(userId);
          this.#wake(late);
        }
        const late = this.#others.filter((w) => w.deadline <= now);
        if (late.length > 0) {
          this.#others = this.#others.filter((w) => w.deadline > now);
          this.#wake(late);
        }
      }
    } finally {
      this.#ticking = false;
    }
  }
}

interface Waiter {
  resolve: () => void;
  reject: (error: unknown) => void;
  deadline: number;
}
