import { DurableObject } from "cloudflare:workers";
import { MIRROR_WRITE_TIMEOUT_MS, mirrorFromEnv, type RedisMirror } from "../src/mirror/redis-mirror";
import { log, withLogContext } from "../src/observability/log";
import { shardName } from "./shard-name";
import {
  type Audit,
  type EngineStorage,
  type Outcome,
  type PaymentAnswer,
  type PaymentMoney,
  type PaymentTotals,
  type PaymentType,
  type PricingChange,
  type Reservation,
  type ReserveOutcome,
  type ReserveRequest,
  type SkuSettings,
  type SkuState,
  type SpentDigest,
  StockEngine,
  type WaitlistEntry,
} from "./stock-engine";

export interface RepairDone {
  reemitted: number;
  released: number;
  transfersCompleted: number;
  flushed: boolean;
}

type MirrorSnapshot = { version: number; total: number; available: number; held: number; sold: number; status: string };

export type MirrorCheck =
  | { status: "ok" }
  | { status: "unreachable"; error: string }
  | { status: "missing"; expected: MirrorSnapshot; repaired: boolean }
  | { status: "drift"; expected: MirrorSnapshot; actual: MirrorSnapshot; repaired: boolean };

function snapshotOf(state: SkuState): MirrorSnapshot {
  return { version: state.version, ...state.stock, status: state.status };
}

/** Outbox events sent per `sendBatch` (the Queues limit is 100 messages). */
const OUTBOX_BATCH = 100;
/** Units a shard pulls from a sibling beyond what it needs right now, to spare the next transfer. */
const PULL_SLACK = 8;
/** How soon the alarm retries an outbox flush (or a stock transfer) that failed. */
const OUTBOX_RETRY_MS = 5_000;
/** First wait before the alarm retries a mirror publish that failed; it doubles up to the maximum. */
const MIRROR_RETRY_MIN_MS = 250;
const MIRROR_RETRY_MAX_MS = 5_000;
/** Margin for clocks when deciding which tokens may still be replayed (minted within their lifetime). */
const TOKEN_CLOCK_SKEW_MS = 60_000;
/** Settled reservations forgotten per transaction, and transactions per reconciliation visit. */
const PRUNE_BATCH = 500;
const PRUNE_ROUNDS = 40;

/**
 * One SKU shard's stock: the RPC shell around the synchronous {@link StockEngine}.
 *
 * Each RPC runs one engine transaction, then does the asynchronous follow-up outside it:
 * the outbox flush to the `order-events` queue (in the background, so a sale never waits on
 * the queue) and the single alarm, kept on the earliest of the next hold expiry and a pending
 * outbox retry. Durable Objects run one request's synchronous code at a time and the engine
 * never awaits, so decisions are serial, like a Redis script.
 *
 * When the Redis mirror is configured, the newest snapshot is published after commits the same way:
 * in the background, one write in flight, later commits coalesced into the next write (which reads
 * the state then), never inside a transaction nor awaited by a sale. A failed write backs off
 * (commits stop trying) and the alarm retries it until Redis answers; `lua/mirror.lua` keeps only
 * the newest version, so late or repeated writes are harmless.
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
  /** The Redis mirror client, or null when the mirror is off. */
  readonly #mirror: RedisMirror | null;
  /** The newest version the mirror is known to hold (0 after a restart: publish once to be sure). */
  #mirroredVersion = 0;
  /** When the alarm retries a failed mirror publish, or null; commits do not publish before then. */
  #mirrorRetryAt: number | null = null;
  /** Mirror publishes failed in a row (sets the backoff). */
  #mirrorFailures = 0;
  #publishing: Promise<void> | null = null;
  #publishAgain = false;
  /** The last spent-nonce digest, reused while the shard's seq has not moved. */
  #digest: SpentDigest | null = null;

  constructor(ctx: DurableObjectState, env: Env) {
    super(ctx, env);
    this.engine = new StockEngine(this.engineStorage(ctx.storage), () => crypto.randomUUID());
    this.#mirror = mirrorFromEnv(env, MIRROR_WRITE_TIMEOUT_MS);
    // Events committed before a restart but never sent go out now.
    if (this.engine.pendingEvents(1).length > 0) this.#scheduleFlush();
    // A transfer interrupted by a restart is finished by the alarm, which its intent armed.
    // The mirror may have missed the last commits before a restart: publish the current snapshot.
    this.#schedulePublish();
  }

  /** The storage the engine runs on: the object's own (the harness counts its reads, src/harness/). */
  protected engineStorage(storage: DurableObjectStorage): EngineStorage {
    return storage;
  }

  async configure(settings: SkuSettings, requestId?: string): Promise<Outcome<SkuState>> {
    return this.#call(requestId, () => this.engine.configure(settings, this.now()));
  }

  state(): SkuState | null {
    this.rpcCalls++;
    return this.engine.state();
  }

  /**
   * Decides a batch of reservations (one or more callers' requests) in one transaction, in order.
   * On a sharded SKU, requests this shard cannot serve pull stock from its siblings first and are
   * decided again, so `SOLD_OUT` means every shard is empty.
   */
  async reserve(requests: ReserveRequest[]): Promise<ReserveOutcome[]> {
    this.rpcCalls++;
    return withLogContext(this.#where(), () => this.#reserve(requests));
  }

  async #reserve(requests: ReserveRequest[]): Promise<ReserveOutcome[]> {
    const answers: ReserveOutcome[] = this.engine.reserve(requests, this.now());
    const short = answers.flatMap((a, i) =>
      !a.ok && (a.code === "SOLD_OUT" || a.code === "INSUFFICIENT_STOCK") ? [i] : [],
    );
    // The state is read only when some request went short: a served batch costs no extra query.
    let state = short.length > 0 ? this.engine.state() : null;
    if (state && state.shards > 1) {
      const wanted = short.reduce((n, i) => n + (requests[i]?.quantity ?? 0), 0) - state.stock.available;
      if ((await this.#pull(state, wanted)) > 0) {
        const retried = this.engine.reserve(
          short.map((i) => requests[i] as ReserveRequest),
          this.now(),
        );
        short.forEach((i, k) => {
          const answer = retried[k];
          if (answer) answers[i] = answer;
        });
      }
    }
    // Answers from which the edge learns "sold out" carry the spent-nonce digest (one, shared by all).
    const empty = answers.flatMap((a, i) => ((a.ok ? a.value.available : a.available) === 0 ? [i] : []));
    if (empty.length > 0) {
      state ??= this.engine.state();
      const soldOut = empty.filter((i) => {
        const a = answers[i];
        return state?.shards === 1 || (a !== undefined && !a.ok && a.code === "SOLD_OUT");
      });
      if (soldOut.length > 0) {
        const spent = this.#spentDigest();
        for (const i of soldOut) answers[i] = { ...(answers[i] as ReserveOutcome), spent };
      }
    }
    await this.#afterCommit();
    requests.forEach((request, i) => {
      const a = answers[i];
      log("info", "reservation decided", {
        requestId: request.requestId,
        result: a?.ok ? (a.value.replayed ? "replayed" : "held") : a?.code,
        batch: requests.length,
      });
    });
    return answers;
  }

  /**
   * The spent-nonce digest of the tokens that can still be replayed (minted within one token
   * lifetime), read again only after the shard changed: a sold-out storm costs one read per change.
   */
  #spentDigest(): SpentDigest {
    const seq = this.engine.state()?.version ?? 0;
    if (this.#digest?.seq !== seq) {
      const tokenLifetimeMs = Number(this.env.PURCHASE_TOKEN_TTL_SECONDS) * 1000;
      this.#digest = this.engine.spentNonces(this.now() - tokenLifetimeMs - TOKEN_CLOCK_SKEW_MS);
    }
    return this.#digest;
  }

  /** Puts a buyer on this shard's waitlist (see {@link StockEngine.joinWaitlist}). */
  async joinWaitlist(userId: string, quantity: number, requestId?: string): Promise<Outcome<WaitlistEntry>> {
    return this.#call(requestId, () => this.engine.joinWaitlist(userId, quantity, this.now()));
  }

  waitlistLength(): number {
    return this.engine.waitlistLength();
  }

  /** Giver side of a transfer to a sibling shard; idempotent by transfer id. */
  async giveStock(transferId: string, toShard: number, requested: number): Promise<number> {
    this.rpcCalls++;
    const granted = this.engine.giveStock(transferId, toShard, requested, this.now());
    await this.#afterCommit();
    return granted;
  }

  /** Changes this shard's total (admin resizing of a sharded SKU); returns the change made. */
  async adjustTotal(delta: number): Promise<number> {
    this.rpcCalls++;
    const change = this.engine.adjustTotal(delta, this.now());
    await this.#afterCommit();
    return change;
  }

  /**
   * Pulls up to `wanted` (at least one) units from sibling shards, asking each in turn from the
   * next one on. Each transfer's intent is recorded before the sibling is asked, so an interrupted
   * transfer is finished by the alarm (or reconciliation) exactly once. Returns the units added.
   */
  async #pull(state: SkuState, wanted: number): Promise<number> {
    let pulled = 0;
    for (let step = 1; step < state.shards && pulled < Math.max(1, wanted); step++) {
      const from = (state.shard + step) % state.shards;
      const ask = Math.max(1, wanted - pulled) + PULL_SLACK;
      const id = crypto.randomUUID();
      this.engine.beginTransfer(id, from, ask, this.now());
      // Durably armed before the sibling is asked: if this object dies now, the alarm finishes it.
      this.#retryAt = this.now() + OUTBOX_RETRY_MS;
      await this.#armAlarm();
      try {
        const granted = await this.#sibling(state, from).giveStock(id, state.shard, ask);
        this.engine.completeTransfer(id, granted, this.now());
        pulled += granted;
      } catch (err) {
        log("warn", "stock transfer failed", { transferId: id, error: String(err) });
        this.#retryAt = this.now() + OUTBOX_RETRY_MS; // the alarm finishes it
      }
    }
    return pulled;
  }

  #sibling(state: SkuState, shard: number): DurableObjectStub<SkuStock> {
    return this.env.SKU_STOCK.getByName(shardName(state.sku, shard));
  }

  /** Finishes transfers whose answer was never recorded: asking again returns the first grant. */
  async #finishTransfers(): Promise<number> {
    const state = this.engine.state();
    let finished = 0;
    for (const transfer of this.engine.pendingTransfers()) {
      if (!state) break;
      try {
        const granted = await this.#sibling(state, transfer.from).giveStock(
          transfer.id,
          state.shard,
          transfer.requested,
        );
        this.engine.completeTransfer(transfer.id, granted, this.now());
        finished++;
      } catch (err) {
        log("warn", "stock transfer retry failed", { transferId: transfer.id, error: String(err) });
        this.#retryAt = this.now() + OUTBOX_RETRY_MS;
      }
    }
    return finished;
  }

  /**
   * What reconciliation compares (see {@link StockEngine.audit}). `afterSeq` is the shard's
   * watermark: everything at or below it was found in D1, so finished rows there are pruned first,
   * in small transactions with a pause between them so that sales are never held up for long.
   */
  async audit(afterSeq: number, limit: number): Promise<Audit | null> {
    if (afterSeq > 0) await this.#pruneSettled(afterSeq);
    return this.engine.audit(afterSeq, limit, this.now());
  }

  async #pruneSettled(settledSeq: number): Promise<void> {
    const tokenLifetimeMs = Number(this.env.PURCHASE_TOKEN_TTL_SECONDS) * 1000;
    for (let round = 0; round < PRUNE_ROUNDS; round++) {
      const now = this.now();
      const pruned = this.engine.pruneSettled(
        settledSeq,
        now - tokenLifetimeMs - TOKEN_CLOCK_SKEW_MS,
        now,
        PRUNE_BATCH,
      );
      if (pruned.reservations < PRUNE_BATCH) return;
      await scheduler.wait(0); // let waiting requests in between two batches
    }
  }

  /**
   * Reconciliation's repairs, all idempotent: re-emit reservations D1 lacks, release holds no alarm
   * released (and re-arm the alarm), send a stuck outbox, finish interrupted transfers.
   */
  async repair(actions: { reemit: string[]; sweep: boolean; flush: boolean; transfers: boolean }): Promise<RepairDone> {
    const now = this.now();
    const reemitted = actions.reemit.length > 0 ? this.engine.reemit(actions.reemit, now) : 0;
    const released = actions.sweep ? this.engine.expireDue(now) : 0;
    const transfersCompleted = actions.transfers ? await this.#finishTransfers() : 0;
    this.#armedAt = undefined; // read the alarm again: it may have been lost
    this.#scheduleFlush();
    await this.#flushing;
    await this.#armAlarm();
    return { reemitted, released, transfersCompleted, flushed: this.engine.pendingEvents(1).length === 0 };
  }

  /** Compares the mirror with this shard's state and rewrites it when it is missing or wrong. */
  async checkMirror(): Promise<MirrorCheck> {
    const mirror = this.#mirror;
    const state = this.engine.state();
    if (!mirror || !state) return { status: "ok" };
    await this.#publishing;
    const expected = snapshotOf(state);
    let stored: SkuState | null;
    try {
      stored = await mirror.readShard(state.sku, state.shard);
    } catch (err) {
      return { status: "unreachable", error: String(err) };
    }
    const actual = stored ? snapshotOf(stored) : null;
    if (actual && JSON.stringify(actual) === JSON.stringify(expected)) return { status: "ok" };
    let repaired = false;
    try {
      await mirror.replace(state, this.now());
      this.#mirroredVersion = state.version;
      repaired = true;
    } catch (err) {
      log("warn", "mirror repair failed", { error: String(err) });
    }
    return actual ? { status: "drift", expected, actual, repaired } : { status: "missing", expected, repaired };
  }

  async cancel(reservationId: string, userId: string, requestId?: string): Promise<Outcome<Reservation>> {
    return this.#call(requestId, () => this.engine.cancel(reservationId, userId, this.now()));
  }

  async applyPayment(
    eventId: string,
    type: PaymentType,
    reservationId: string,
    money: PaymentMoney | undefined,
    requestId?: string,
    settled?: Reservation,
  ): Promise<Outcome<PaymentAnswer>> {
    return this.#call(requestId, () =>
      this.engine.applyPayment(eventId, type, reservationId, this.now(), money, settled),
    );
  }

  /** Sets the SKU's price and currency on this shard (see {@link StockEngine.setPricing}). */
  async setPricing(pricing: PricingChange, requestId?: string): Promise<Outcome<SkuState>> {
    return this.#call(requestId, () => this.engine.setPricing(pricing));
  }

  paymentTotals(): PaymentTotals {
    return this.engine.paymentTotals();
  }

  /**
   * One engine transaction for an edge request, then the follow-up; its log lines (and the events
   * it emits) carry the request id. Failed outcomes are logged with their code.
   */
  async #call<T>(requestId: string | undefined, decide: () => Outcome<T>): Promise<Outcome<T>> {
    this.rpcCalls++;
    return withLogContext({ requestId, ...this.#where() }, async () => {
      const outcome = this.engine.onBehalfOf(requestId, decide);
      await this.#afterCommit();
      if (!outcome.ok) log("info", "stock request refused", { code: outcome.code });
      return outcome;
    });
  }

  /** This object's SKU and shard, for log lines (its name is `<sku>#<shard>`, see shard-name.ts). */
  #where(): { object: string | undefined } {
    return { object: this.ctx.id.name };
  }

  reservation(reservationId: string): Reservation | null {
    this.rpcCalls++;
    return this.engine.reservation(reservationId);
  }

  /**
   * Releases holds past expiry, retries the outbox and the mirror. At-least-once: every step is
   * idempotent.
   */
  override async alarm(): Promise<void> {
    this.#armedAt = null;
    this.engine.expireDue(this.now());
    this.#retryAt = null;
    await this.#finishTransfers();
    this.#scheduleFlush();
    this.#mirrorRetryAt = null;
    this.#schedulePublish();
    await Promise.all([this.#flushing, this.#publishing]);
    await this.#armAlarm();
  }

  async #afterCommit(): Promise<void> {
    this.#scheduleFlush();
    this.#schedulePublish();
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
        log("warn", "outbox flush failed", { error: String(err) });
        this.#retryAt = this.now() + OUTBOX_RETRY_MS;
        await this.#armAlarm();
        return;
      }
      this.engine.markSent(pending.map((p) => p.seq));
      if (pending.length < OUTBOX_BATCH) return;
    }
  }

  /**
   * Starts publishing the newest snapshot to the mirror unless one publish is running (then that one
   * goes round once more) or a failed one is backing off (then the alarm publishes).
   */
  #schedulePublish(): void {
    const mirror = this.#mirror;
    if (!mirror) return;
    if (this.#mirrorRetryAt !== null) {
      if (this.now() < this.#mirrorRetryAt) return;
      this.#mirrorRetryAt = null;
    }
    if (this.#publishing) {
      this.#publishAgain = true;
      return;
    }
    this.#publishing = this.#publish(mirror).finally(() => {
      this.#publishing = null;
      if (this.#publishAgain) {
        this.#publishAgain = false;
        this.#schedulePublish();
      }
    });
    this.ctx.waitUntil(this.#publishing);
  }

  /** Writes the current snapshot if the mirror may lack it; on failure, arms the alarm to retry. */
  async #publish(mirror: RedisMirror): Promise<void> {
    const state = this.engine.state();
    if (!state || state.version <= this.#mirroredVersion) return;
    try {
      const result = await mirror.publish(state, this.now());
      if (!result.applied && result.version > state.version) {
        // Only a stock object whose storage was reset can be behind its own mirror; reconciliation
        // rewrites such a mirror. Publishing again would not help.
        log("warn", "mirror is ahead of the stock object", { ...result });
      }
      this.#mirroredVersion = Math.max(this.#mirroredVersion, state.version);
      if (this.#mirrorFailures > 0) {
        log("info", "mirror caught up", { failures: this.#mirrorFailures });
        this.#mirrorFailures = 0;
      }
    } catch (err) {
      this.#mirrorFailures++;
      const backoff = Math.min(MIRROR_RETRY_MIN_MS * 2 ** (this.#mirrorFailures - 1), MIRROR_RETRY_MAX_MS);
      this.#mirrorRetryAt = this.now() + backoff;
      log("warn", "mirror publish failed", { failures: this.#mirrorFailures, retryInMs: backoff, error: String(err) });
      await this.#armAlarm();
    }
  }

  /** Keeps the one alarm on the earliest due work: a hold expiry, an outbox or a mirror retry. */
  async #armAlarm(): Promise<void> {
    const due = [this.engine.nextExpiry(), this.#retryAt, this.#mirrorRetryAt].filter((at) => at !== null);
    const next = due.length === 0 ? null : Math.min(...due);
    if (this.#armedAt === undefined) this.#armedAt = await this.ctx.storage.getAlarm();
    if (next === this.#armedAt) return;
    this.#armedAt = next;
    if (next === null) await this.ctx.storage.deleteAlarm();
    else await this.ctx.storage.setAlarm(next);
  }
}
