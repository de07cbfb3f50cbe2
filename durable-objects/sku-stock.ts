import { DurableObject } from "cloudflare:workers";
import { v7 as uuidv7 } from "uuid";
import { CoalescedRunner } from "./coalesced-runner";
import { DrawWaiters } from "./draw-waiters";
import { DueWork } from "./due-work";
import { log, withLogContext } from "./log";
import type { MirrorCheck } from "./mirror-publisher";
import { MirrorPublisher } from "./mirror-publisher";
import { type DrawInfo, type DrawnEntry, type DrawPlace, type Entrant, rankEntrants } from "./opening-draw";
import { OutboxSender } from "./outbox-sender";
import { MIRROR_WRITE_TIMEOUT_MS, mirrorFromEnv } from "./redis-mirror";
import { homeShard, shardName } from "./shard-name";
import {
  type ChangePlan,
  followerSettings,
  isFollowPlan,
  leadSettings,
  type ResizePlan,
  reachOf,
  resizeSettings,
  type SkuChange,
  soleSettings,
} from "./sku-change";
import {
  type Audit,
  type EngineStorage,
  type LineMode,
  type Outcome,
  type PaymentAnswer,
  type PaymentMoney,
  type PaymentTotals,
  type PaymentType,
  type Pruned,
  type Reservation,
  type ReserveOutcome,
  type ReserveRequest,
  type SkuSettings,
  type SkuState,
  type SpentDigest,
  StockEngine,
  showsSoldOut,
  type WaitlistEntry,
} from "./stock-engine";

export type { MirrorCheck } from "./mirror-publisher";

export interface RepairDone {
  reemitted: number;
  released: number;
  transfersCompleted: number;
  flushed: boolean;
}

/** Units a shard pulls from a sibling beyond what it needs right now, to spare the next transfer. */
const PULL_SLACK = 8;
/** How soon the alarm retries a stock transfer or a waitlist notice that failed. */
const RETRY_MS = 5_000;
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
/**
 * While requests wait for the draw, how often the object checks their deadlines and whether its draw
 * is due (should the alarm be lost). A request is woken when its own entry is settled, not by this.
 */
const DRAW_POLL_MS = 1_000;

/** A waiting request's answer: the first of its entry (this request waited for it), not a replay. */
function firstDrawAnswer(answer: ReserveOutcome): ReserveOutcome {
  return answer.ok && answer.value.draw ? { ...answer, value: { ...answer.value, replayed: false } } : answer;
}

/** An opening draw's secret seed: 32 random bytes in hex. */
function randomSeed(): string {
  return Array.from(crypto.getRandomValues(new Uint8Array(32)), (b) => b.toString(16).padStart(2, "0")).join("");
}

/**
 * One SKU shard's stock: the RPC shell around the synchronous {@link StockEngine}.
 *
 * Each RPC runs one engine transaction, then starts the asynchronous follow-up outside it, in the
 * background so a sale never waits on it: the outbox flush to the `order-events` queue
 * ({@link OutboxSender}), the Redis mirror publish ({@link MirrorPublisher}), and the single alarm,
 * kept on the earliest due work ({@link DueWork}). Durable Objects run one request's synchronous
 * code at a time and the engine never awaits, so decisions are serial, like a Redis script.
 */
export class SkuStock extends DurableObject<Env> {
  readonly engine: StockEngine;
  /** The object's clock. A seam for tests, which move time forward instead of sleeping. */
  now: () => number = () => Date.now();
  readonly #due: DueWork;
  readonly #outbox: OutboxSender;
  /** Null when the mirror is off. */
  readonly #mirror: MirrorPublisher | null;
  /** Shard 0 of a sharded SKU: passes serving its line. */
  readonly #serving = new CoalescedRunner(() => this.#serveLinePass());
  /** A non-zero shard: notices to shard 0 that units were freed for the line. */
  readonly #noticing = new CoalescedRunner(() => this.#noticeShardZero());
  /** Until when this shard's siblings count as empty (they were all asked and gave nothing). */
  #siblingsEmptyUntil = 0;
  /** The last spent-nonce digest, reused while the shard's seq has not moved. */
  #digest: SpentDigest | null = null;
  /** Fair opening: the requests waiting here for the draw, each woken when its own entry is settled. */
  readonly #drawWaiters = new DrawWaiters(
    DRAW_POLL_MS,
    () => this.now(),
    () => this.#drawTick(),
  );
  /** Shard 0: the decision of the draw under way, if any (one at a time). */
  #deciding: Promise<void> | null = null;
  /** Shard 0: the changes of the SKU (PUTs), one after another. */
  #changes: Promise<unknown> = Promise.resolve();
  /** Shard 0: a change is being applied now (the alarm leaves its plan alone). */
  #changing = false;

  constructor(ctx: DurableObjectState, env: Env) {
    super(ctx, env);
    // Time-ordered ids (UUIDv7) for reservations and events: each lands at the right edge of the
    // b-trees keyed by it (the object's reservations, D1's orders and processed events), where a
    // random UUID touched a page anywhere in them and the commit wrote each such page again.
    // The draw's seed is secret: 32 random bytes, not time-ordered ids.
    this.engine = new StockEngine(this.engineStorage(ctx.storage), () => uuidv7(), randomSeed);
    const now = () => this.now();
    this.#due = new DueWork(
      ctx.storage,
      () => this.engine.nextExpiry(),
      () => this.#drawDueAt(),
    );
    this.#outbox = new OutboxSender(this.engine, env.ORDER_EVENTS, this.#due, now);
    const mirror = mirrorFromEnv(env, MIRROR_WRITE_TIMEOUT_MS);
    this.#mirror = mirror && new MirrorPublisher(mirror, this.engine, this.#due, now);
    // Events committed before a restart but never sent go out now.
    if (this.engine.hasPendingEvents()) this.#background(this.#outbox.send());
    // A transfer interrupted by a restart is finished by the alarm, which its intent armed.
    // The mirror may have missed the last commits before a restart: publish the current snapshot.
    if (this.#mirror) this.#background(this.#mirror.publish());
    // A change of the SKU left half done by a restart: the alarm undoes or finishes it.
    if (this.engine.resizePlan()) this.#background(this.#due.retry("config", this.now()));
  }

  /** Keeps the object alive until `work` is done, without making the caller wait. */
  #background(work: Promise<void>): void {
    this.ctx.waitUntil(work);
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
    const state = short.length > 0 ? this.engine.state() : null;
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
    // Answers that show the SKU sold out say so, with the spent-nonce digest (one, shared by all).
    if (answers.some((a) => (a.ok ? a.value.available : a.available) === 0)) {
      const shards = (state ?? this.engine.state())?.shards ?? 1;
      let spent: SpentDigest | undefined;
      answers.forEach((a, i) => {
        if (!showsSoldOut(a, shards)) return;
        spent ??= this.#spentDigest();
        answers[i] = { ...a, soldOut: true, spent };
      });
    }
    // No log line per decision: the edge counts every answer in /metrics, and each hold's queue event
    // carries its request id to the consumer's line (a line per reservation cost 4% of the CPU of a
    // reservation, bench profile).
    await this.#afterCommit();
    return answers;
  }

  /**
   * The spent-nonce digest of the tokens that can still be replayed (not expired by their own expiry,
   * or for rows without one, minted within one token lifetime of now), read again only after the
   * shard changed: a sold-out storm costs one read per change.
   */
  #spentDigest(): SpentDigest {
    const seq = this.engine.state()?.version ?? 0;
    if (this.#digest?.seq !== seq) {
      const tokenLifetimeMs = Number(this.env.PURCHASE_TOKEN_TTL_SECONDS) * 1000;
      const now = this.now();
      this.#digest = this.engine.spentNonces(now - tokenLifetimeMs - TOKEN_CLOCK_SKEW_MS, now - TOKEN_CLOCK_SKEW_MS);
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
    let state = this.engine.state();
    // The limit is kept on the buyer's home shard: a buyer already at it never joins the line.
    const home = state && state.shards > 1 ? homeShard(userId, state.shards) : 0;
    const homeQuota = state && home !== 0 ? await this.#sibling(state, home).quotaOf(userId) : undefined;
    const outcome = await this.#call(requestId, () =>
      this.engine.joinWaitlist(userId, quantity, this.now(), skuAvailable, homeQuota),
    );
    state = this.engine.state();
    if (outcome.ok && state && state.shards > 1) {
      if (!this.engine.lineAhead) await this.#tellLine(state, 1);
      this.#serveLine();
    }
    return outcome;
  }

  /** Shard 0 tells this shard what the SKU's line is now (see {@link LineMode}). */
  setLine(mode: LineMode): void {
    this.engine.setLine(mode);
  }

  /** A user's held + sold on this shard (their home shard: where their limit is kept). */
  quotaOf(userId: string): number {
    return this.engine.quotaOf(userId);
  }

  /** Shard 0: serves the SKU's line now (a sibling freed units for it). */
  async serveLine(): Promise<void> {
    await this.#serveLine();
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

  /** Tells every shard what the SKU's line is, this one last (the record that all were told). */
  async #tellLine(state: SkuState, mode: LineMode): Promise<void> {
    const others = Array.from({ length: state.shards - 1 }, (_, i) => i + 1);
    await Promise.all(others.map((shard) => this.#sibling(state, shard).setLine(mode)));
    this.engine.setLine(mode);
  }

  /** Starts a pass over the line unless one is running; then that one goes round once more. */
  #serveLine(): Promise<void> {
    const pass = this.#serving.run();
    this.#background(pass);
    return pass;
  }

  /**
   * Shard 0: hands units to the SKU's line first-fit in FIFO order, each buyer held on their home
   * shard (where their limit is kept), which pulls the units from wherever they are. A pass stops
   * when the SKU has nothing left (SOLD_OUT) or the sale is not on. An entry its home shard answers
   * `LIMIT_EXCEEDED` can never be served as it stands (the buyer holds their limit): it leaves the
   * line. Then every shard learns what the line is: empty (units for newcomers), waiting for the units
   * (newcomers refused), or waiting for more than the SKU has (newcomers may buy what there is).
   */
  async #serveLinePass(): Promise<void> {
    try {
      await this.#serveLineOnce();
    } catch (err) {
      log("warn", "serving the waitlist failed", { error: String(err) });
      await this.#due.retry("line", this.now() + RETRY_MS); // the alarm serves again
    }
  }

  async #serveLineOnce(): Promise<void> {
    const state = this.engine.state();
    if (!state || state.shards <= 1 || state.shard !== 0) return;
    let stopped: string | null = null;
    for (const entry of this.engine.lineEntries(this.now())) {
      const home = homeShard(entry.userId, state.shards);
      const answer =
        home === state.shard
          ? await this.holdForLine(entry.id, entry.userId, entry.quantity)
          : await this.#sibling(state, home).holdForLine(entry.id, entry.userId, entry.quantity);
      if (answer.ok || answer.code === "LIMIT_EXCEEDED") this.engine.leaveLine(entry.id);
      else if (answer.code !== "INSUFFICIENT_STOCK") {
        stopped = answer.code; // first fit: nothing left (SOLD_OUT), or the sale is not on
        break;
      }
    }
    let mode: LineMode;
    if (this.engine.waitlistLength() === 0) mode = 0;
    else if (stopped !== null) mode = stopped === "SOLD_OUT" ? 1 : this.engine.line;
    else mode = (await this.#skuAvailable(state)) === 0 ? 1 : 2; // every entry wants more than there is
    if (mode !== this.engine.line) await this.#tellLine(state, mode);
  }

  /** The units available over all of the SKU's shards. */
  async #skuAvailable(state: SkuState): Promise<number> {
    const others = Array.from({ length: state.shards - 1 }, (_, i) => i + 1);
    const states = await Promise.all(others.map((shard) => this.#sibling(state, shard).state()));
    return states.reduce((n, s) => n + (s?.stock.available ?? 0), this.engine.state()?.stock.available ?? 0);
  }

  /** Units were freed here while buyers wait: shard 0 serves its line (coalesced, in the background). */
  #noticeLine(state: SkuState): void {
    if (state.shard === 0) this.#serveLine();
    else this.#background(this.#noticing.run());
  }

  async #noticeShardZero(): Promise<void> {
    const state = this.engine.state();
    if (!state) return;
    try {
      await this.#sibling(state, 0).serveLine();
    } catch (err) {
      log("warn", "waitlist notice failed", { error: String(err) });
      await this.#due.retry("line", this.now() + RETRY_MS); // the alarm tells shard 0 again
    }
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
   * Shard 0: applies `PUT /admin/skus/:sku`, all or nothing (see durable-objects/sku-change.ts). A cut
   * of a sharded SKU that shard 0's available units cannot cover pulls the rest from siblings first,
   * with the usual exactly-once transfers (units pulled stay here, still counted); if the SKU has not
   * enough available, `INVALID_STATE` and nothing changed.
   */
  async putSku(change: SkuChange, requestId?: string): Promise<Outcome<SkuState>> {
    return withLogContext({ requestId, ...this.#where() }, async () => {
      // One change of the SKU at a time, in arrival order: each starts from what the last one left.
      const run = this.#changes.then(() => this.#change(change));
      this.#changes = run.catch(() => undefined);
      const outcome = await run;
      await this.#afterCommit();
      return outcome;
    });
  }

  async #change(change: SkuChange): Promise<Outcome<SkuState>> {
    this.#changing = true;
    try {
      // A change left half done by a restart is finished (or undone) before the next one starts.
      if (this.engine.resizePlan()) await this.#recoverPlan(true);
      if (this.engine.resizePlan()) return { ok: false, code: "BUSY" };
      return await this.#changeNow(change);
    } finally {
      this.#changing = false;
    }
  }

  async #changeNow(change: SkuChange): Promise<Outcome<SkuState>> {
    const state = this.engine.state();
    if (!state && change.shards === 1) return this.engine.configure(soleSettings(change), this.now());
    if (!state || state.shards !== change.shards) {
      return this.#resize({ changeId: crypto.randomUUID(), from: state?.shards ?? 0, to: change.shards, change });
    }
    if (state.shards === 1) return this.engine.configure(soleSettings(change), this.now());
    let pullFailed = false;
    const changeId = crypto.randomUUID();
    for (let attempt = 0; ; attempt++) {
      const outcome = this.engine.configure(leadSettings(change, changeId), this.now());
      if (outcome.ok) {
        await this.#lead(outcome.value);
        return outcome;
      }
      if (outcome.missing === undefined || attempt > 0) {
        // A sibling that could not answer may have had the units: BUSY (retry), not a refusal.
        return outcome.missing !== undefined && pullFailed ? { ok: false, code: "BUSY" } : outcome;
      }
      pullFailed = (await this.#pull(state, outcome.missing)).failed;
    }
  }

  /**
   * Hands shard 0's settings to every sibling (idempotent by version), then ends the plan the lead
   * transaction recorded; a failure leaves it to the alarm, which hands them again.
   */
  async #lead(lead: SkuState): Promise<void> {
    const siblings = Array.from({ length: lead.shards - 1 }, (_, i) => i + 1);
    const answers = await Promise.allSettled(
      siblings.map((shard) => this.#sibling(lead, shard).configure(followerSettings(lead, shard))),
    );
    if (answers.every((a) => a.status === "fulfilled" && a.value.ok)) this.engine.endPlan();
    else {
      log("warn", "a sibling did not take the SKU's settings", { version: lead.version });
      await this.#due.retry("config", this.now() + RETRY_MS);
    }
  }

  /**
   * A new shard count in two phases (see sku-change.ts): fence every shard it reaches, each only if
   * idle; then shard 0 commits with the plan recorded, every sibling commits, and the plan ends. A
   * refusal in the first phase lifts every fence and is the answer.
   */
  async #resize(plan: ResizePlan): Promise<Outcome<SkuState>> {
    const reach = reachOf(plan);
    if (plan.from > 0) {
      const own = this.engine.fence(plan.changeId, this.now(), JSON.stringify(plan));
      if (!own.ok) return own;
      // Durably armed first: if this object dies mid-way, the alarm lifts the fences.
      await this.#due.retry("config", this.now() + RETRY_MS);
      const fenced = await Promise.all(
        reach.slice(1).map((shard) =>
          this.#shardOf(plan.change.sku, shard)
            .fence(plan.changeId)
            .catch((err: unknown): Outcome<null> => {
              log("warn", "fencing a shard for a resize failed", { shard, error: String(err) });
              return { ok: false, code: "BUSY" };
            }),
        ),
      );
      const refused = fenced.find((f) => !f.ok);
      if (refused && !refused.ok) {
        await this.#liftFences(plan);
        return { ok: false, code: refused.code };
      }
    }
    const committed = this.engine.configure(resizeSettings(plan, 0), this.now());
    if (!committed.ok) {
      await this.#liftFences(plan);
      return committed;
    }
    await this.#due.retry("config", this.now() + RETRY_MS);
    await this.#commitSiblings(plan);
    return { ok: true, value: this.engine.state() ?? committed.value };
  }

  /** Every sibling a resize reaches commits it (a repeat changes nothing); then the plan ends. */
  async #commitSiblings(plan: ResizePlan): Promise<void> {
    const lead = this.engine.state();
    if (!lead) throw new Error("shard 0 commits a resize before its siblings");
    const answers = await Promise.allSettled(
      reachOf(plan)
        .slice(1)
        .map((shard) => this.#shardOf(plan.change.sku, shard).configure(resizeSettings(plan, shard, lead))),
    );
    if (answers.every((a) => a.status === "fulfilled" && a.value.ok)) this.engine.endPlan();
    else log("warn", "a sibling did not commit a resize yet", { changeId: plan.changeId }); // the alarm again
  }

  /** A resize that will not commit: every fence it set goes, shard 0's plan last. */
  async #liftFences(plan: ResizePlan): Promise<void> {
    const lifted = await Promise.allSettled(
      reachOf(plan)
        .slice(1)
        .map((shard) => this.#shardOf(plan.change.sku, shard).unfence(plan.changeId)),
    );
    if (lifted.every((a) => a.status === "fulfilled")) this.engine.unfence(plan.changeId);
    else log("warn", "lifting a resize's fences failed", { changeId: plan.changeId }); // the alarm again
  }

  /** Shard 0's alarm: a resize left half done by a restart is undone (preparing) or finished. */
  async #recoverPlan(byChange = false): Promise<void> {
    const row = this.engine.resizePlan();
    if (!row || (this.#changing && !byChange)) return;
    const plan = JSON.parse(row.plan) as ChangePlan;
    const state = this.engine.state();
    if (isFollowPlan(plan)) {
      if (state) await this.#lead(state);
    } else if (row.phase === "preparing") await this.#liftFences(plan);
    else await this.#commitSiblings(plan);
    if (this.engine.resizePlan()) await this.#due.retry("config", this.now() + RETRY_MS);
  }

  /** Resize, phase 1 on a sibling (see {@link StockEngine.fence}). */
  fence(changeId: string): Outcome<null> {
    return this.engine.fence(changeId, this.now());
  }

  /** A resize that will not commit lifts its fence here. */
  unfence(changeId: string): void {
    this.engine.unfence(changeId);
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
      await this.#due.retry("transfer", this.now() + RETRY_MS);
      try {
        const granted = await this.#sibling(state, from).giveStock(id, state.shard, ask);
        this.engine.completeTransfer(id, granted, this.now());
        pulled += granted;
      } catch (err) {
        failed = true;
        log("warn", "stock transfer failed", { transferId: id, error: String(err) });
        await this.#due.retry("transfer", this.now() + RETRY_MS); // the alarm finishes it
      }
    }
    if (pulled > 0) this.#siblingsEmptyUntil = 0;
    return { pulled, failed };
  }

  #sibling(state: SkuState, shard: number): DurableObjectStub<SkuStock> {
    return this.#shardOf(state.sku, shard);
  }

  #shardOf(sku: string, shard: number): DurableObjectStub<SkuStock> {
    return this.env.SKU_STOCK.getByName(shardName(sku, shard));
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
        await this.#due.retry("transfer", this.now() + RETRY_MS);
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
      // A token is replayable until its own expiry (the one its reservation recorded, else the
      // lifetime of now), plus the clock margin: the edge judges expiry by its own clock.
      const pruned = this.engine.pruneSettled(
        settledSeq,
        now - tokenLifetimeMs - TOKEN_CLOCK_SKEW_MS,
        now - TOKEN_CLOCK_SKEW_MS,
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
  async repair(actions: { reemit: string[]; sweep: boolean; transfers: boolean }): Promise<RepairDone> {
    const now = this.now();
    const reemitted = actions.reemit.length > 0 ? this.engine.reemit(actions.reemit, now) : 0;
    const released = actions.sweep ? this.engine.expireDue(now) : 0;
    const transfersCompleted = actions.transfers ? await this.#finishTransfers() : 0;
    this.#due.forget(); // read the alarm again: it may have been lost
    await this.#outbox.send();
    await this.#due.arm();
    return { reemitted, released, transfersCompleted, flushed: !this.engine.hasPendingEvents() };
  }

  /** Compares the mirror with this shard's state and rewrites it when it is missing or wrong. */
  async checkMirror(): Promise<MirrorCheck> {
    return this.#mirror ? this.#mirror.check() : { status: "ok" };
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
   *
   * An entry's request is woken only when that entry is settled (or the draw is over), and reads its
   * recorded answer without a transaction: a draw of N entrants costs N wakes, not N per settlement.
   */
  async awaitDraw(request: ReserveRequest): Promise<ReserveOutcome> {
    const deadline = (this.engine.draw.closesAt() ?? this.now()) + DRAW_DECISION_MS;
    for (;;) {
      this.#kickDraw();
      // Read and registered below with no await in between: a settlement cannot slip past unseen.
      const drawn = this.engine.drawAnswerOf(request);
      if (drawn && (drawn.ok || drawn.code !== "DRAW_PENDING")) return firstDrawAnswer(drawn);
      if (!drawn && !this.engine.draw.pending(this.now())) {
        // No entry, and the draw is over here: decided on arrival, as any reservation.
        const [answer] = await this.#reserve([request]);
        if (!answer) throw new Error("stock object returned no answer");
        if (answer.ok || answer.code !== "DRAW_PENDING") return firstDrawAnswer(answer);
        continue;
      }
      if (this.now() >= deadline) return { ok: false, code: "BUSY" };
      await this.#drawWaiters.wait(drawn ? request.userId : null, deadline);
    }
  }

  /**
   * Once a second while requests wait for the draw. An object that can no longer commit (aborted or
   * reset while its code runs on) throws here, which fails its waiting requests at once (the edge
   * answers BUSY): their retries reach the object that replaced it.
   */
  #drawTick(): void {
    this.ctx.storage.transactionSync(() => undefined);
    this.#kickDraw();
  }

  /** Shard 0: starts the draw's decision (or the telling of siblings) when due, without waiting for it. */
  #kickDraw(): void {
    if (this.#drawNeedsWork()) this.#background(this.#decideDraw().catch(() => undefined)); // failures book a retry
  }

  /** Shard 0: the SKU's draw as `GET /api/skus/:sku/draw` shows it, or null without a window. */
  drawInfo(): DrawInfo | null {
    return this.engine.draw.info();
  }

  /**
   * Shard 0: decided entries in draw order after position `after` (a page), for anyone checking the
   * order. Positions are 1..N, so `after` k skips the first k entries.
   */
  drawEntries(after: number, limit: number): DrawnEntry[] {
    return this.engine.draw.entries(after, limit);
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
    this.#drawWaiters.settled([userId]);
    await this.#afterCommit();
    return answer;
  }

  /** A home shard records results shard 0 decided without asking it (the stock ran out first). */
  recordDrawResults(results: { userId: string; place: DrawPlace; code: string }[]): void {
    this.engine.recordDrawResults(results);
    this.#drawWaiters.settled(results.map((r) => r.userId));
  }

  /** A sibling learns from shard 0 that the draw is over: reservations are decided on arrival again. */
  drawOver(): void {
    this.engine.finishDraw(this.now());
    this.#drawWaiters.over();
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
        await this.#due.retry("draw", this.now() + RETRY_MS);
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
    this.#drawWaiters.over();
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
   * Releases holds past expiry, decides a due opening draw (shard 0), then retries whatever is
   * pending: transfers, the line, the outbox, the mirror. At-least-once: every step is idempotent, and a step that fails again books its retry.
   */
  override async alarm(): Promise<void> {
    this.#due.fired();
    this.engine.expireDue(this.now());
    await this.#recoverPlan();
    if (this.#drawNeedsWork()) await this.#decideDraw().catch(() => undefined); // failures book a retry
    await this.#finishTransfers();
    const state = this.engine.state();
    this.engine.takeFreed();
    const line: Promise<void>[] = [];
    if (this.engine.lineWaiting && state && state.shards > 1) {
      // a lost notice too
      line.push(state.shard === 0 ? this.#serveLine() : this.#noticing.run());
    }
    if (state?.shard === 0 && this.engine.waitlistLength() > 0) line.push(this.#serveLine());
    await Promise.all([...line, this.#outbox.send(), this.#mirror?.publish()]);
    await this.#due.arm();
  }

  async #afterCommit(): Promise<void> {
    // Units released (or added) on a sharded SKU whose line has buyers are for that line.
    if (this.engine.takeFreed() > 0 && this.engine.lineWaiting) {
      const state = this.engine.state();
      if (state && state.shards > 1) this.#noticeLine(state);
    }
    this.#background(this.#outbox.send());
    if (this.#mirror) this.#background(this.#mirror.publish());
    await this.#due.arm();
  }
}
