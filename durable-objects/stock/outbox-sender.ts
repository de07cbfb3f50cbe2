import type { Outbox } from "../engine/outbox";
import type { SaleLogHook } from "../log/sale-log-client";
import { CoalescedRunner } from "../shared/coalesced-runner";
import { log } from "../shared/log";
import { configEntry } from "../shared/sale-entries";
import type { DueWork } from "./due-work";
import { packOutbox } from "./outbox-messages";

/**
 * Outbox events read per flush round: packed into multi-event messages and `sendBatch` calls within
 * the Queues limits (outbox-messages.ts).
 */
const OUTBOX_BATCH = 1_000;
/** How soon the alarm retries an outbox flush that failed. */
const OUTBOX_RETRY_MS = 5_000;
/**
 * The least time between two flushes. An idle object sends at once; under load, the commits of the
 * next few milliseconds go out together, so a hot SKU makes one `sendBatch` (and one read and one
 * delete of its outbox) per interval, not per transaction.
 */
const OUTBOX_MIN_INTERVAL_MS = 20;

/**
 * Sends a stock object's outbox to the `order-events` queue: pending events oldest first, many to a
 * message, each `sendBatch` call's events forgotten once the queue has them. Runs in the background after commits (a sale never waits on the
 * queue), one flush at a time; a failed flush is retried by the alarm.
 */
export class OutboxSender {
  readonly #outbox: Outbox;
  readonly #queue: Queue;
  readonly #due: DueWork;
  readonly #now: () => number;
  /** The SKU's public log (durable-objects/log/): each batch is appended there as the queue takes it. */
  readonly #log: SaleLogHook | undefined;
  readonly #runner = new CoalescedRunner(() => this.#flush());
  #lastSentAt = 0;

  constructor(outbox: Outbox, queue: Queue, due: DueWork, now: () => number, saleLog?: SaleLogHook) {
    this.#log = saleLog;
    this.#outbox = outbox;
    this.#queue = queue;
    this.#due = due;
    this.#now = now;
  }

  /** Starts a flush (or books one more after the one in flight); settles when it is done. */
  send(): Promise<void> {
    return this.#runner.run();
  }

  async #flush(): Promise<void> {
    // Wall-clock time (not the object's decision clock, which tests move): it only paces the sends.
    // Only a flush that sent something starts the interval: one that found the outbox empty does not
    // hold back the next (a reconciliation's repair, say) for events written since.
    if (!this.#outbox.hasPending()) return;
    const wait = this.#lastSentAt + OUTBOX_MIN_INTERVAL_MS - Date.now();
    if (wait > 0) await scheduler.wait(wait);
    // Shard 0's configuration entries, for the log alone; without a log they are only forgotten.
    for (const row of this.#outbox.entriesDue()) {
      try {
        await this.#log?.appendConfig(configEntry(row.type, row.sku, row.time, row.draws, row.until), row.id);
      } catch (err) {
        log("warn", "sale log: a configuration entry not appended yet", { error: String(err) });
        await this.#due.retry("outbox", this.#now() + OUTBOX_RETRY_MS);
        return;
      }
      this.#outbox.markEntrySent(row.id);
    }
    // Payments answered refund_required that changed no reservation, for the log alone: read before
    // the events are sent and appended after them, so each follows in the log every entry of its
    // reservation decided before it (the payment that paid it, for `already_paid`). Without a log
    // they are only forgotten.
    const payments = this.#outbox.paymentsDue();
    if (!(await this.#sendEvents())) return;
    for (const row of payments) {
      try {
        await this.#log?.appendPayment(row.payment, row.time, row.id);
      } catch (err) {
        log("warn", "sale log: a payment entry not appended yet", { error: String(err) });
        await this.#due.retry("outbox", this.#now() + OUTBOX_RETRY_MS);
        return;
      }
      this.#outbox.markPaymentSent(row.id);
    }
  }

  /** Sends the outbox's events to the log and the queue; false when a send failed (the alarm retries). */
  async #sendEvents(): Promise<boolean> {
    for (;;) {
      const rows = this.#outbox.pendingRows(OUTBOX_BATCH);
      if (rows.length === 0) return true;
      this.#lastSentAt = Date.now();
      for (const batch of packOutbox(rows)) {
        try {
          // The log and the queue at once: an event is forgotten (markSent) only once both have it; a
          // failure of either sends the batch to both again (each keeps an event once).
          await Promise.all([
            this.#log?.append(batch.bodies),
            this.#queue.sendBatch(batch.bodies.map((body) => ({ body, contentType: "text" }))),
          ]);
        } catch (err) {
          log("warn", "outbox flush failed", { error: String(err) });
          await this.#due.retry("outbox", this.#now() + OUTBOX_RETRY_MS);
          return false;
        }
        this.#outbox.markSent(batch.lastSeq);
      }
      if (rows.reduce((n, row) => n + row.count, 0) < OUTBOX_BATCH) return true;
    }
  }
}
