import { DurableObject } from "cloudflare:workers";
import { MIRROR_WRITE_TIMEOUT_MS, mirrorFromEnv, type RedisMirror } from "../src/mirror/redis-mirror";
import { log, withLogContext } from "../src/observability/log";
import { packOutbox } from "../src/orders/outbox-messages";
import { type DrawInfo, type DrawnEntry, type DrawPlace, type Entrant, rankEntrants } from "./opening-draw";
import { fnv1a, shardName } from "./shard-name";
import {
  type Audit,
  type EngineStorage,
  type Outcome,
  type PaymentAnswer,
  type PaymentMoney,
  type PaymentTotals,
  type PaymentType,
  type PricingChange,
  type Pruned,
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

/**
 * Outbox events read per flush round: packed into multi-event messages and `sendBatch` calls within
 * the Queues limits (src/orders/outbox-messages.ts).
 */
const OUTBOX_BATCH = 1_000;
/** Units a shard pulls from a sibling beyond what it needs right now, to spare the next transfer. */
const PULL_SLACK = 8;
/** How soon the alarm retries an outbox flush (or a stock transfer) that failed. */
const OUTBOX_RETRY_MS = 5_000;
/** First wait before the alarm retries a mirror publish that failed; it doubles up to the maximum. */
const MIRROR_RETRY_MIN_MS = 250;
const MIRROR_RETRY_MAX_MS = 5_000;
/**
 * How long siblings that all gave nothing are not asked again: a sharded SKU answers SOLD_OUT
 * from this shard alone meanwhile (the edge caches a SOLD_OUT for about as long anyway).
 */
const SIBLINGS_EMPTY_MS = 500;
/** Margin for clocks when deciding which tokens may still be replayed (minted within their lifetime). */
const TOKEN_CLOCK_SKEW_MS = 60_000;
/** Settled reservations forgotten per transaction, and transactions per reconciliation visit. */
const PRUNE_BATCH = 500;
const PRUNE_ROUNDS = 40;
/**
 * Fair opening: how long after the window closes a waiting request gives up on the decision (then
 * 503 BUSY; the retry with the same token gets the draw's answer). A decision takes far less (the
 * bench's 50,000-entrant draw: docs/PERFORMANCE.md); this only bounds a lost one.
 */
const DRAW_DECISION_MS = 10_000;
/** A waiting request looks at the draw at least this often (it is also woken by each change). */
const DRAW_POLL_MS = 1_000;

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
  /** Until when this shard's siblings count as empty (they were all asked and gave nothing). */
  #siblingsEmptyUntil = 0;
  /** Shard 0 of a sharded SKU: the pass serving its line, and whether another must follow it. */
  #serving: Promise<void> | null = null;
  #serveAgain = false;
  /** A non-zero shard: a notice to shard 0 that units were freed for the line is on its way. */
  #noticing: Promise<void> | null = null;
  #noticeAgain = false;
  /** The last spent-nonce digest, reused while the shard's seq has not moved. */
  #digest: SpentDigest | null = null;
  /** Fair opening: resolved (and replaced) whenever this shard's draw moves; waiting requests wake. */
  #drawMoved = Promise.withResolvers<void>();
  /** Shard 0: the decision of the draw under way, if any (one at a time). */
  #deciding: Promise<void> | null = null;

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
    return this.engine.state();
  }

  /**
   * Decides a batch of reservations (one or more callers' requests) in one transaction, in order.
   * On a sharded SKU, requests this shard cannot serve pull stock from its siblings first and are
   * decided again, so `SOLD_OUT` means every shard is empty.
   */
  async reserve(requests: ReserveRequest[]): Promise<ReserveOutcome[]> {
    return withLogContext(this.#where(), () => this.#reserve(requests));
  }

  async #reserve(requests: ReserveRequest[]): Promise<ReserveOutcome[]> {
    const answers: ReserveOutcome[] = this.engine.reserve(requests, this.now());
    const short = answers.flatMap((a, i) =>
      !a.ok && (a.code === "SOLD_OUT" || a.code === "INSUFFICIENT_STOCK") ? [i] : [],
    );
    // The state is read only when some request went short: a served batch costs no extra query.
    let state = short.length > 0 ? this.engine.state() : null;
    // Siblings found empty a moment ago are not asked again (each ask writes on both sides): a
    // sold-out storm costs one round of asks per interval, not one per request.
    if (state && state.shards > 1 && !this.engine.lineAhead && this.now() >= this.#siblingsEmptyUntil) {
      const wanted = short.reduce((n, i) => n + (requests[i]?.quantity ?? 0), 0) - state.stock.available;
      const pull = await this.#pull(state, wanted);
      if (pull.pulled > 0) {
        const retried = this.engine.reserve(
          short.map((i) => requests[i] as ReserveRequest),
          this.now(),
        );
        short.forEach((i, k) => {
          const answer = retried[k];
          if (answer) answers[i] = answer;
        });
      } else if (!pull.failed) {
        this.#siblingsEmptyUntil = this.now() + SIBLINGS_EMPTY_MS;
      }
      // A sibling that could not answer may have stock: SOLD_OUT would be a guess, and the edge
      // would cache it. Such answers become BUSY (503, retry).
      if (pull.failed) {
        for (const i of short) {
          const a = answers[i];
          if (a && !a.ok && a.code === "SOLD_OUT") answers[i] = { ok: false, code: "BUSY" };
        }
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
    // No log line per decision: the edge counts every answer in /metrics, and each hold's queue event
    // carries its request id to the consumer's line (a line per reservation cost 4% of the CPU of a
    // reservation, bench profile).
    await this.#afterCommit();
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

  /**
   * Puts a buyer on the waitlist (see {@link StockEngine.joinWaitlist}): a 1-shard SKU's own, or on
   * shard 0 the line of a sharded SKU, given the SKU's available units. Before a sharded line's
   * first buyer is answered, every shard learns that its units are for the line, so no newcomer
   * takes a unit released after the answer; then the line is served in the background.
   */
  async joinWaitlist(
    userId: string,
    quantity: number,
    requestId?: string,
    skuAvailable?: number,
  ): Promise<Outcome<WaitlistEntry>> {
    const outcome = await this.#call(requestId, () =>
      this.engine.joinWaitlist(userId, quantity, this.now(), skuAvailable),
    );
    const state = this.engine.state();
    if (outcome.ok && state && state.shards > 1) {
      if (!this.engine.lineAhead) await this.#tellLine(state, true);
      this.#serveLine();
    }
    return outcome;
  }

  /** Shard 0 tells this shard whether the SKU's line has buyers. */
  setLineAhead(on: boolean): void {
    this.engine.setLineAhead(on);
  }

  /** Shard 0: serves the SKU's line now (a sibling freed units for it). */
  async serveLine(): Promise<void> {
    this.#serveLine();
    await this.#serving;
  }

  /**
   * The buyer's home shard, asked by shard 0 to hold for a waiting buyer: pulls from siblings when
   * this shard is short (whatever they answered a moment ago: the line wants their units).
   */
  async holdForLine(entryId: string, userId: string, quantity: number): Promise<ReserveOutcome> {
    let answer = this.engine.holdForLine(entryId, userId, quantity, this.now());
    const state = this.engine.state();
    if (!answer.ok && (answer.code === "SOLD_OUT" || answer.code === "INSUFFICIENT_STOCK") && state) {
      const pull = await this.#pull(state, quantity - state.stock.available);
      if (pull.pulled > 0) answer = this.engine.holdForLine(entryId, userId, quantity, this.now());
      else if (pull.failed) answer = { ok: false, code: "BUSY" };
    }
    this.engine.takeFreed(); // what this shard had was for this buyer: nothing to tell the line
    await this.#afterCommit();
    return answer;
  }

  /** Sets every shard's "line ahead" flag, this one's last (the record that all were told). */
  async #tellLine(state: SkuState, on: boolean): Promise<void> {
    const others = Array.from({ length: state.shards - 1 }, (_, i) => i + 1);
    await Promise.all(others.map((shard) => this.#sibling(state, shard).setLineAhead(on)));
    this.engine.setLineAhead(on);
  }

  /** Starts a pass over the line unless one is running; then that one goes round once more. */
  #serveLine(): void {
    if (this.#serving) {
      this.#serveAgain = true;
      return;
    }
    this.#serving = this.#serveLinePass()
      .catch((err: unknown) => {
        log("warn", "serving the waitlist failed", { error: String(err) });
        this.#retryAt = this.now() + OUTBOX_RETRY_MS; // the alarm serves again
        return this.#armAlarm();
      })
      .finally(() => {
        this.#serving = null;
        if (this.#serveAgain) {
          this.#serveAgain = false;
          this.#serveLine();
        }
      });
    this.ctx.waitUntil(this.#serving);
  }

  /**
   * Shard 0: hands units to the SKU's line first-fit in FIFO order, each buyer held on their home
   * shard (where their limit is kept), which pulls the units from wherever they are. A pass stops
   * when the SKU has nothing left (SOLD_OUT) or the sale is not on; once the line is empty every
   * shard learns its units are for newcomers again.
   */
  async #serveLinePass(): Promise<void> {
    const state = this.engine.state();
    if (!state || state.shards <= 1 || state.shard !== 0) return;
    for (const entry of this.engine.lineEntries(this.now())) {
      const home = fnv1a(entry.userId) % state.shards;
      const answer =
        home === state.shard
          ? await this.holdForLine(entry.id, entry.userId, entry.quantity)
          : await this.#sibling(state, home).holdForLine(entry.id, entry.userId, entry.quantity);
      if (answer.ok) this.engine.leaveLine(entry.id);
      else if (answer.code !== "INSUFFICIENT_STOCK" && answer.code !== "LIMIT_EXCEEDED") break; // first fit
    }
    const empty = this.engine.waitlistLength() === 0;
    if (empty === this.engine.lineAhead) await this.#tellLine(state, !empty);
  }

  /** Units were freed here while buyers wait: shard 0 serves its line (coalesced, in the background). */
  #noticeLine(state: SkuState): void {
    if (state.shard === 0) {
      this.#serveLine();
      return;
    }
    if (this.#noticing) {
      this.#noticeAgain = true;
      return;
    }
    this.#noticing = this.#sibling(state, 0)
      .serveLine()
      .catch((err: unknown) => {
        log("warn", "waitlist notice failed", { error: String(err) });
        this.#retryAt = this.now() + OUTBOX_RETRY_MS; // the alarm tells shard 0 again
        return this.#armAlarm();
      })
      .finally(() => {
        this.#noticing = null;
        if (this.#noticeAgain) {
          this.#noticeAgain = false;
          this.#noticeLine(state);
        }
      });
    this.ctx.waitUntil(this.#noticing);
  }

  waitlistLength(): number {
    return this.engine.waitlistLength();
  }

  /** Giver side of a transfer to a sibling shard; idempotent by transfer id. */
  async giveStock(transferId: string, toShard: number, requested: number): Promise<number> {
    const granted = this.engine.giveStock(transferId, toShard, requested, this.now());
    await this.#afterCommit();
    return granted;
  }

  /**
   * Shard 0: sets the SKU's total over all shards to `total` (PUT /admin/skus on a sharded SKU).
   * A cut that this shard's available units cannot cover pulls the rest from siblings first, with
   * the usual exactly-once transfers; if the SKU has not enough available, `INVALID_STATE` (units
   * pulled stay here, still counted). See {@link StockEngine.retarget}.
   */
  async setSkuTotal(total: number, assumed: number, requestId?: string): Promise<Outcome<SkuState>> {
    return withLogContext({ requestId, ...this.#where() }, async () => {
      let missing = this.engine.retarget(total, this.now(), assumed);
      let failed = false;
      const state = this.engine.state();
      if (missing > 0 && state && state.shards > 1) {
        failed = (await this.#pull(state, missing)).failed;
        missing = this.engine.retarget(total, this.now(), assumed);
      }
      await this.#afterCommit();
      const after = this.engine.state();
      // A sibling that could not answer may have had the units: BUSY (retry), not a refusal.
      if (missing > 0 || !after) return { ok: false, code: failed ? "BUSY" : "INVALID_STATE" };
      return { ok: true, value: after };
    });
  }

  /**
   * Pulls up to `wanted` (at least one) units from sibling shards, asking each in turn from the
   * next one on. Each transfer's intent is recorded before the sibling is asked, so an interrupted
   * transfer is finished by the alarm (or reconciliation) exactly once. Returns the units added,
   * and whether some sibling could not be asked (its stock unknown).
   */
  async #pull(state: SkuState, wanted: number): Promise<{ pulled: number; failed: boolean }> {
    let pulled = 0;
    let failed = false;
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
        failed = true;
        log("warn", "stock transfer failed", { transferId: id, error: String(err) });
        this.#retryAt = this.now() + OUTBOX_RETRY_MS; // the alarm finishes it
      }
    }
    if (pulled > 0) this.#siblingsEmptyUntil = 0;
    return { pulled, failed };
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

  /** What reconciliation compares (see {@link StockEngine.audit}); it only reads. */
  audit(afterSeq: number, limit: number): Audit | null {
    return this.engine.audit(afterSeq, limit, this.now());
  }

  /**
   * Reconciliation stored `settledSeq` as this shard's watermark: everything at or below it is in D1
   * (what it found missing was re-emitted first, with a newer seq). Finished rows there whose tokens
   * can no longer be replayed are forgotten, in small transactions with a pause between them so that
   * sales are never held up for long. Returns what went, with the rows the deletes read.
   */
  async settle(settledSeq: number): Promise<Pruned> {
    const tokenLifetimeMs = Number(this.env.PURCHASE_TOKEN_TTL_SECONDS) * 1000;
    const total: Pruned = { reservations: 0, quotas: 0, transfers: 0, payments: 0, rowsRead: 0 };
    for (let round = 0; round < PRUNE_ROUNDS; round++) {
      if (round > 0) await scheduler.wait(0); // let waiting requests in between two batches
      const now = this.now();
      const pruned = this.engine.pruneSettled(
        settledSeq,
        now - tokenLifetimeMs - TOKEN_CLOCK_SKEW_MS,
        now,
        PRUNE_BATCH,
      );
      for (const key of Object.keys(total) as (keyof Pruned)[]) total[key] += pruned[key];
      if (pruned.reservations < PRUNE_BATCH) break;
    }
    return total;
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
    return this.engine.reservation(reservationId);
  }

  // ---- Fair opening (durable-objects/opening-draw.ts; docs/ARCHITECTURE.md "Fair opening") ----

  /**
   * The answer to a reservation that got `DRAW_PENDING` from {@link reserve}: waits (on the
   * request's home shard) until its entry is decided, or, for a request that came after the window,
   * until the draw is over and then decides it on arrival. Bounded: past the window's close plus
   * {@link DRAW_DECISION_MS}, `BUSY` (retry with the same token).
   */
  async awaitDraw(request: ReserveRequest): Promise<ReserveOutcome> {
    const deadline = (this.engine.draw.closesAt() ?? this.now()) + DRAW_DECISION_MS;
    for (;;) {
      if (this.#drawNeedsWork()) await this.#decideDraw().catch(() => undefined);
      const moved = this.#drawMoved.promise;
      const [answer] = await this.#reserve([request]);
      if (!answer) throw new Error("stock object returned no answer");
      if (answer.ok || answer.code !== "DRAW_PENDING") {
        // This request waited for it: the first answer of its entry, not a replay.
        return answer.ok && answer.value.draw ? { ...answer, value: { ...answer.value, replayed: false } } : answer;
      }
      const left = deadline - this.now();
      if (left <= 0) return { ok: false, code: "BUSY" };
      await Promise.race([moved, scheduler.wait(Math.min(left, DRAW_POLL_MS))]);
    }
  }

  /** Shard 0: the SKU's draw as `GET /api/skus/:sku/draw` shows it, or null without a window. */
  drawInfo(): DrawInfo | null {
    return this.engine.draw.info();
  }

  /** Shard 0: decided entries in draw order (a page), for anyone checking the order. */
  drawEntries(offset: number, limit: number): DrawnEntry[] {
    return this.engine.draw.entries(offset, limit);
  }

  /** A sibling of a sharded SKU: entries close; shard 0 gets this shard's entrants. */
  closeDraw(): Entrant[] {
    return this.engine.closeDraw(this.now());
  }

  /**
   * The home shard of an entry (sharded SKU), asked by shard 0 in draw order: holds for it, pulling
   * units from siblings when this shard is short (they are all waiting for the draw: none sells).
   * A sibling that could not answer: `BUSY`, nothing recorded, shard 0 asks again later.
   */
  async settleDrawEntry(userId: string, place: DrawPlace): Promise<ReserveOutcome> {
    let answer = this.engine.settleDrawEntry(userId, place, this.now(), false);
    const state = this.engine.state();
    if (!answer.ok && (answer.code === "SOLD_OUT" || answer.code === "INSUFFICIENT_STOCK") && state) {
      const wanted = (this.engine.draw.entrantOf(userId)?.quantity ?? 1) - state.stock.available;
      const pull = await this.#pull(state, wanted);
      if (pull.failed && pull.pulled === 0) answer = { ok: false, code: "BUSY" };
      else answer = this.engine.settleDrawEntry(userId, place, this.now(), true);
    }
    this.engine.takeFreed();
    this.#signalDraw();
    await this.#afterCommit();
    return answer;
  }

  /** A home shard records results shard 0 decided without asking it (the stock ran out first). */
  recordDrawResults(results: { userId: string; place: DrawPlace; code: string }[]): void {
    this.engine.recordDrawResults(results);
    this.#signalDraw();
  }

  /** A sibling learns from shard 0 that the draw is over: reservations are decided on arrival again. */
  drawOver(): void {
    this.engine.finishDraw(this.now());
    this.#signalDraw();
  }

  #signalDraw(): void {
    this.#drawMoved.resolve();
    this.#drawMoved = Promise.withResolvers<void>();
  }

  /** Shard 0: the draw is due (window closed, undecided) or its siblings were not all told yet. */
  #drawNeedsWork(): boolean {
    const state = this.engine.state();
    if (state?.shard !== 0) return false;
    const draw = this.engine.draw;
    return this.engine.drawDue(this.now()) || (draw.decided() && state.shards > 1 && !draw.told());
  }

  /** When shard 0's alarm must decide the draw: the window's close, while undecided. */
  #drawDueAt(): number | null {
    const draw = this.engine.draw;
    return draw.windowMs > 0 && !draw.decided() && this.engine.state()?.shard === 0 ? draw.closesAt() : null;
  }

  /** Shard 0: decides the draw, once at a time; a failure leaves it to the alarm (retried). */
  #decideDraw(): Promise<void> {
    this.#deciding ??= withLogContext(this.#where(), () => this.#decide())
      .catch(async (err: unknown) => {
        log("warn", "deciding the opening draw failed", { error: String(err) });
        this.#retryAt = this.now() + OUTBOX_RETRY_MS;
        await this.#armAlarm();
        throw err;
      })
      .finally(() => {
        this.#deciding = null;
      });
    return this.#deciding;
  }

  async #decide(): Promise<void> {
    const state = this.engine.state();
    if (state?.shard !== 0) return;
    if (!this.engine.draw.decided()) {
      const started = this.now();
      if (state.shards === 1) {
        const ranked = await this.#rank(state, this.engine.closeDraw(started));
        this.engine.decideDraw(ranked, this.now());
      } else {
        await this.#decideSharded(state);
      }
      const info = this.engine.draw.info();
      log("info", "opening draw decided", { entrants: info?.entrants, ms: this.now() - started });
    }
    this.#signalDraw();
    await this.#afterCommit();
    if (state.shards > 1 && !this.engine.draw.told()) {
      const others = Array.from({ length: state.shards - 1 }, (_, i) => i + 1);
      await Promise.all(others.map((shard) => this.#sibling(state, shard).drawOver()));
      this.engine.draw.markTold();
    }
  }

  /**
   * One draw over a sharded SKU: entries close on every shard and come to shard 0, which orders
   * them with the seed; then each entry, in order, is held on its home shard (where its user's limit
   * is kept), which pulls units from the other shards when it lacks them. Once the SKU has nothing
   * left, the rest are SOLD_OUT, one call per shard. Every step is idempotent (results are recorded
   * on both sides, a hold is keyed by the entry's nonce), so a retry after a crash or a failed call
   * finishes the same draw.
   */
  /** The SKU's entrants in draw order: hashes with WebCrypto, outside any transaction. */
  async #rank(state: SkuState, entrants: Entrant[]) {
    const seed = this.engine.draw.seedForDecision();
    if (!seed) throw new Error("shard 0 has no seed for its draw");
    return rankEntrants(seed, state.sku, entrants);
  }

  async #decideSharded(state: SkuState): Promise<void> {
    const others = Array.from({ length: state.shards - 1 }, (_, i) => i + 1);
    const lists = await Promise.all(others.map((shard) => this.#sibling(state, shard).closeDraw()));
    const ranked = await this.#rank(state, [...this.engine.closeDraw(this.now()), ...lists.flat()]);
    const order = this.engine.placeDraw(ranked, this.now());
    const entrants = order.length;
    let soldOut = false;
    const rest = new Map<number, { userId: string; place: DrawPlace; code: string }[]>();
    for (const e of order) {
      const place = { entryId: e.entryId, position: e.position, entrants };
      if (e.code !== null) {
        soldOut ||= e.code === "SOLD_OUT";
        continue;
      }
      if (soldOut) {
        const list = rest.get(e.home) ?? [];
        list.push({ userId: e.userId, place, code: "SOLD_OUT" });
        rest.set(e.home, list);
        continue;
      }
      const answer =
        e.home === 0
          ? await this.settleDrawEntry(e.userId, place)
          : await this.#sibling(state, e.home).settleDrawEntry(e.userId, place);
      if (!answer.ok && answer.code === "BUSY") throw new Error(`shard ${e.home} could not settle a draw entry`);
      const code = answer.ok ? "HELD" : answer.code;
      if (e.home !== 0) this.engine.recordDrawResults([{ userId: e.userId, place, code }]);
      soldOut = code === "SOLD_OUT";
    }
    await Promise.all(
      [...rest].map(async ([home, results]) => {
        if (home === 0) this.engine.recordDrawResults(results);
        else await this.#sibling(state, home).recordDrawResults(results);
        if (home !== 0) this.engine.recordDrawResults(results);
      }),
    );
    this.engine.finishDraw(this.now());
  }

  /**
   * Releases holds past expiry, retries the outbox and the mirror. At-least-once: every step is
   * idempotent.
   */
  override async alarm(): Promise<void> {
    this.#armedAt = null;
    this.engine.expireDue(this.now());
    this.#retryAt = null;
    if (this.#drawNeedsWork()) await this.#decideDraw().catch(() => undefined); // failures re-arm it
    await this.#finishTransfers();
    const state = this.engine.state();
    this.engine.takeFreed();
    if (this.engine.lineAhead && state && state.shards > 1) this.#noticeLine(state); // a lost notice too
    if (state?.shard === 0 && this.engine.waitlistLength() > 0) this.#serveLine();
    this.#scheduleFlush();
    this.#mirrorRetryAt = null;
    this.#schedulePublish();
    await Promise.all([this.#flushing, this.#publishing, this.#serving, this.#noticing]);
    await this.#armAlarm();
  }

  async #afterCommit(): Promise<void> {
    // Units released (or added) on a sharded SKU whose line has buyers are for that line.
    if (this.engine.takeFreed() > 0 && this.engine.lineAhead) {
      const state = this.engine.state();
      if (state && state.shards > 1) this.#noticeLine(state);
    }
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
      // Many events per message; each call's events are forgotten once the queue has them.
      for (const batch of packOutbox(pending)) {
        try {
          await this.env.ORDER_EVENTS.sendBatch(batch.bodies.map((body) => ({ body, contentType: "json" })));
        } catch (err) {
          log("warn", "outbox flush failed", { error: String(err) });
          this.#retryAt = this.now() + OUTBOX_RETRY_MS;
          await this.#armAlarm();
          return;
        }
        this.engine.markSent(batch.items.map((p) => p.seq));
      }
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
    const due = [this.engine.nextExpiry(), this.#retryAt, this.#mirrorRetryAt, this.#drawDueAt()].filter(
      (at) => at !== null,
    );
    const next = due.length === 0 ? null : Math.min(...due);
    if (this.#armedAt === undefined) this.#armedAt = await this.ctx.storage.getAlarm();
    if (next === this.#armedAt) return;
    this.#armedAt = next;
    if (next === null) await this.ctx.storage.deleteAlarm();
    else await this.ctx.storage.setAlarm(next);
  }
}
