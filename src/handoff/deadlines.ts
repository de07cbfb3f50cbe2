/**
 * The attempts' timeouts of one lane run, kept by one timer at a time. Every attempt gets the same
 * timeout and starts later than the one before, so the earliest deadline is always the oldest
 * attempt's: one timer set for it, and set again for the next when it fires, aborts each attempt
 * exactly as a timer of its own would. A timer set and cleared per attempt cost a sender as much
 * CPU as its fetch did.
 */
export class Deadlines {
  /** The attempts in flight and when each times out; insertion order is deadline order. */
  #live = new Map<AbortController, number>();
  #timer: ReturnType<typeof setTimeout> | undefined;

  constructor(readonly timeoutMs: number) {}

  /** An attempt starting now: its signal aborts `timeoutMs` from now unless `done` came first. */
  start(): { signal: AbortSignal; done(): void } {
    const controller = new AbortController();
    this.#live.set(controller, Date.now() + this.timeoutMs);
    this.#arm();
    return { signal: controller.signal, done: () => this.#live.delete(controller) };
  }

  /** Stops the timer: the run is over, nothing is in flight. */
  close(): void {
    clearTimeout(this.#timer);
    this.#timer = undefined;
    this.#live.clear();
  }

  #arm(): void {
    if (this.#timer !== undefined) return;
    const oldest = this.#live.values().next();
    if (oldest.done) return;
    this.#timer = setTimeout(() => this.#fire(), Math.max(0, oldest.value - Date.now()));
  }

  #fire(): void {
    this.#timer = undefined;
    const now = Date.now();
    for (const [controller, at] of this.#live) {
      if (at > now) break;
      this.#live.delete(controller);
      controller.abort();
    }
    this.#arm();
  }
}
