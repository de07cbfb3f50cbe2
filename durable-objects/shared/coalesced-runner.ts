/**
 * Runs an asynchronous task one at a time: asked while a run is in flight, it runs once more after
 * it (however often it was asked meanwhile), so the last ask is always covered by a run that started
 * after it. The outbox sender, the mirror publisher, the waitlist passes and the Worker's metrics
 * flush all work this way: each run reads the newest state, so later asks fold into one.
 *
 * The task must not reject (it handles its own failures: log, schedule a retry).
 */
export class CoalescedRunner {
  readonly #task: () => Promise<void>;
  #running: Promise<void> | null = null;
  #next: Promise<void> | null = null;

  constructor(task: () => Promise<void>) {
    this.#task = task;
  }

  /** Starts a run, or books one more after the one in flight; settles when that run is done. */
  run(): Promise<void> {
    if (!this.#running) {
      this.#running = this.#task().finally(() => {
        this.#running = null;
      });
      return this.#running;
    }
    this.#next ??= this.#running.then(() => {
      this.#next = null;
      return this.run();
    });
    return this.#next;
  }

  /** Whether one more run is already booked after the one in flight: asking again adds nothing. */
  get booked(): boolean {
    return this.#next !== null;
  }

  /** Whether no run is in flight nor booked. */
  get idle(): boolean {
    return this.#running === null && this.#next === null;
  }

  /** The run in flight (and the one booked after it), or nothing: for callers that must wait it out. */
  async settled(): Promise<void> {
    while (this.#running || this.#next) await (this.#next ?? this.#running);
  }
}
