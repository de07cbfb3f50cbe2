import { DurableObject } from "cloudflare:workers";
import {
  type Outcome,
  type PaymentAnswer,
  type PaymentType,
  type Reservation,
  type ReserveAnswer,
  type ReserveRequest,
  type SkuSettings,
  type SkuState,
  StockEngine,
} from "./stock-engine";

/** Outbox events sent per `sendBatch` (the Queues limit is 100 messages). */
const OUTBOX_BATCH = 100;
/** How soon the alarm retries an outbox flush that failed. */
const OUTBOX_RETRY_MS = 5_000;

/**
 * One SKU shard's stock: the RPC shell around the synchronous {@link StockEngine}.
 *
 * Each RPC runs one engine transaction, then does the asynchronous follow-up outside it:
 * the outbox flush to the `order-events` queue (in the background, so a sale never waits on
 * the queue) and the single alarm, kept on the earliest of the next hold expiry and a pending
 * outbox retry. Durable Objects run one request's synchronous code at a time and the engine
 * never awaits, so decisions are serial, like a Redis script.
 */
export class SkuStock extends DurableObject<Env> {
  readonly engine: StockEngine;
  /** RPC calls served by this instance; lets tests prove that the edge answered on its own. */
  rpcCalls = 0;
  /** The object's clock. A seam for tests, which move time forward instead of sleeping. */
  now: () => number = () => Date.now();
  /** The alarm time last set, so most requests skip the storage call (undefined: not read yet). */
  #armedAt: number | null | undefined;
  /** When the outbox must be retried (a flush failed), or null. */
  #retryAt: number | null = null;
  #flushing: Promise<void> | null = null;
  #flushAgain = false;

  constructor(ctx: DurableObjectState, env: Env) {
    super(ctx, env);
    this.engine = new StockEngine(ctx.storage, () => crypto.randomUUID());
    // Events committed before a restart but never sent go out now.
    if (this.engine.pendingEvents(1).length > 0) this.#scheduleFlush();
  }

  async configure(settings: SkuSettings): Promise<Outcome<SkuState>> {
    this.rpcCalls++;
    return this.engine.configure(settings);
  }

  state(): SkuState | null {
    this.rpcCalls++;
    return this.engine.state();
  }

  /** Decides a batch of reservations (one or more callers' requests) in one transaction. */
  async reserve(requests: ReserveRequest[]): Promise<Outcome<ReserveAnswer>[]> {
    this.rpcCalls++;
    const answers = this.engine.reserve(requests, this.now());
    await this.#afterCommit();
    return answers;
  }

  async cancel(reservationId: string, userId: string): Promise<Outcome<Reservation>> {
    this.rpcCalls++;
    const outcome = this.engine.cancel(reservationId, userId, this.now());
    await this.#afterCommit();
    return outcome;
  }

  async applyPayment(eventId: string, type: PaymentType, reservationId: string): Promise<Outcome<PaymentAnswer>> {
    this.rpcCalls++;
    const outcome = this.engine.applyPayment(eventId, type, reservationId, this.now());
    await this.#afterCommit();
    return outcome;
  }

  reservation(reservationId: string): Reservation | null {
    this.rpcCalls++;
    return this.engine.reservation(reservationId);
  }

  /** Releases holds past expiry and retries the outbox. At-least-once: both steps are idempotent. */
  override async alarm(): Promise<void> {
    this.#armedAt = null;
    this.engine.expireDue(this.now());
    this.#retryAt = null;
    this.#scheduleFlush();
    await this.#flushing;
    await this.#armAlarm();
  }

  async #afterCommit(): Promise<void> {
    this.#scheduleFlush();
    await this.#armAlarm();
  }

  /** Starts an outbox flush unless one is running; then that one goes round once more. */
  #scheduleFlush(): void {
    if (this.#flushing) {
      this.#flushAgain = true;
      return;
    }
    this.#flushing = this.#flush().finally(() => {
      this.#flushing = null;
      if (this.#flushAgain) {
        this.#flushAgain = false;
        this.#scheduleFlush();
      }
    });
    this.ctx.waitUntil(this.#flushing);
  }

  /** Sends pending events oldest first and forgets each batch once the queue has it. */
  async #flush(): Promise<void> {
    for (;;) {
      const pending = this.engine.pendingEvents(OUTBOX_BATCH);
      if (pending.length === 0) return;
      try {
        await this.env.ORDER_EVENTS.sendBatch(pending.map((p) => ({ body: p.event, contentType: "json" })));
      } catch (err) {
        console.warn(JSON.stringify({ level: "warn", msg: "outbox flush failed", error: String(err) }));
        this.#retryAt = this.now() + OUTBOX_RETRY_MS;
        await this.#armAlarm();
        return;
      }
      this.engine.markSent(pending.map((p) => p.seq));
      if (pending.length < OUTBOX_BATCH) return;
    }
  }

  /** Keeps the one alarm on the earliest due work: a hold expiry or an outbox retry. */
  async #armAlarm(): Promise<void> {
    const expiry = this.engine.nextExpiry();
    const next = expiry === null ? this.#retryAt : this.#retryAt === null ? expiry : Math.min(expiry, this.#retryAt);
    if (this.#armedAt === undefined) this.#armedAt = await this.ctx.storage.getAlarm();
    if (next === this.#armedAt) return;
    this.#armedAt = next;
    if (next === null) await this.ctx.storage.deleteAlarm();
    else await this.ctx.storage.setAlarm(next);
  }
}
