/**
 * Work a stock object retries from its alarm when the first attempt failed; `inherited`: whatever the
 * alarm a previous instance of the object set was for.
 */
export type Retry = "outbox" | "mirror" | "transfer" | "payment" | "waitlist" | "draw" | "config" | "inherited";

/**
 * The one alarm of a stock object, kept on the earliest due work: what the engine has scheduled (the
 * next hold expiry, a draw's close), or a retry that is pending (an outbox flush, a mirror publish, a
 * stock transfer, a late payment's claim, a waitlist notice or a draw decision that failed). The alarm time last set is remembered, so most requests skip the storage call.
 */
export class DueWork {
  readonly #storage: DurableObjectStorage;
  readonly #scheduled: (() => number | null)[];
  readonly #retries = new Map<Retry, number>();
  /** The alarm time last set (undefined: not read yet). */
  #armedAt: number | null | undefined;

  /** `scheduled`: the times the engine's own state makes due (each null when nothing is). */
  constructor(storage: DurableObjectStorage, ...scheduled: (() => number | null)[]) {
    this.#storage = storage;
    this.#scheduled = scheduled;
  }

  /** When `work` is to be retried, if it is pending. */
  retryAt(work: Retry): number | undefined {
    return this.#retries.get(work);
  }

  /** Books a retry of `work` at `at` and keeps the alarm on the earliest due time. */
  async retry(work: Retry, at: number): Promise<void> {
    this.#retries.set(work, at);
    await this.arm();
  }

  /** `work` was done (or is being retried now): nothing of it is due any more. */
  done(work: Retry): void {
    this.#retries.delete(work);
  }

  /** The alarm fired: it is no longer set, and every retry is due now (a failing one books itself again). */
  fired(): void {
    this.#armedAt = null;
    this.#retries.clear();
  }

  /** Reads the alarm from storage on the next `arm` (it may have been lost). */
  forget(): void {
    this.#armedAt = undefined;
  }

  /** Sets, moves or deletes the alarm so that it fires at the earliest due time. */
  async arm(): Promise<void> {
    if (this.#armedAt === undefined) {
      this.#armedAt = await this.#storage.getAlarm();
      // Retries are booked in memory: one a previous instance booked (a transfer, a line's grant) is
      // known here only by the alarm it set, so that alarm stays until it fires and its work is run.
      if (this.#armedAt !== null) this.#retries.set("inherited", this.#armedAt);
    }
    let next: number | null = null;
    const due = [...this.#scheduled.map((at) => at()), ...this.#retries.values()];
    for (const at of due) if (at !== null) next = next === null ? at : Math.min(next, at);
    if (next === this.#armedAt) return;
    this.#armedAt = next;
    if (next === null) await this.#storage.deleteAlarm();
    else await this.#storage.setAlarm(next);
  }
}
