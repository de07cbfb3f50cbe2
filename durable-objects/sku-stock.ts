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

/**
 * One SKU shard's stock: the RPC shell around the synchronous {@link StockEngine}.
 *
 * Each RPC runs one engine transaction, then does the asynchronous follow-up outside it:
 * re-arming the single alarm to the earliest hold expiry. Durable Objects run one request's
 * synchronous code at a time, and the engine never awaits, so decisions are serial like Redis.
 */
export class SkuStock extends DurableObject<Env> {
  readonly engine: StockEngine;
  /** RPC calls served by this instance; lets tests prove that the edge answered on its own. */
  rpcCalls = 0;
  /** The object's clock. A seam for tests, which move time forward instead of sleeping. */
  now: () => number = () => Date.now();
  /** The alarm time last set, so most requests skip the storage call (undefined: not read yet). */
  #armedAt: number | null | undefined;

  constructor(ctx: DurableObjectState, env: Env) {
    super(ctx, env);
    this.engine = new StockEngine(ctx.storage, () => crypto.randomUUID());
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

  /** Releases every hold past its expiry. Alarms are at-least-once; the engine is idempotent. */
  override async alarm(): Promise<void> {
    this.#armedAt = null;
    this.engine.expireDue(this.now());
    await this.#afterCommit();
  }

  /** Keeps the one alarm on the earliest hold expiry. */
  async #afterCommit(): Promise<void> {
    const next = this.engine.nextExpiry();
    if (this.#armedAt === undefined) this.#armedAt = await this.ctx.storage.getAlarm();
    if (next === this.#armedAt) return;
    this.#armedAt = next;
    if (next === null) await this.ctx.storage.deleteAlarm();
    else await this.ctx.storage.setAlarm(next);
  }
}
