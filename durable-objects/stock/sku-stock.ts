import { DurableObject } from "cloudflare:workers";
import { v7 as uuidv7 } from "uuid";
import type { Audit } from "../engine/audit";
import type { SkuSettings } from "../engine/configuration";
import type { DrawInfo, DrawnEntry, DrawPlace, Entrant } from "../engine/opening-draw";
import type { GrantAnswer, PaymentCommand, PaymentTotals, UnitClaim } from "../engine/payments";
import { NOTHING_PRUNED, type Pruned } from "../engine/retention";
import { StockEngine } from "../engine/stock-engine";
import {
  type EngineStorage,
  isOnSale,
  isShort,
  type Outcome,
  type Reservation,
  type ReserveOutcome,
  type ReserveRequest,
  type SkuState,
  type SpentDigest,
  showsSoldOut,
} from "../engine/types";
import type { WaitlistEntry, WaitlistMode, WaitlistPlace } from "../engine/waitlist";
import { saleLogAppender } from "../log/sale-log-client";
import { MIRROR_WRITE_TIMEOUT_MS, mirrorFromEnv } from "../mirror/redis-mirror";
import { log, withLogContext } from "../shared/log";
import { shardName } from "../shared/shard-name";
import { tokenLifetimeMs } from "../shared/token-lifetime";
import { type CodeAnswer, CodeAsks } from "./code-asks";
import { DrawRunner } from "./draw-runner";
import { DueWork } from "./due-work";
import { type MirrorCheck, MirrorPublisher } from "./mirror-publisher";
import { OutboxSender } from "./outbox-sender";
import { PaymentClaims } from "./payment-claims";
import { ShardPulls } from "./shard-pulls";
import type { SkuChange } from "./sku-change";
import { SkuChanges } from "./sku-change-runner";
import type { AdminFace, EdgeFace, PaymentVerdict, RepairDone, ShardFace, StockStub } from "./stock-faces";
import { RETRY_MS, type StockHost } from "./stock-host";
import { WaitlistServer } from "./waitlist-server";

export type { MirrorCheck } from "./mirror-publisher";
export type { RepairDone } from "./stock-faces";

/** Margin for clocks when deciding which tokens may still be replayed (minted within their lifetime). */
const TOKEN_CLOCK_SKEW_MS = 60_000;
/** Finished reservations forgotten per transaction, and transactions per reconciliation visit. */
const PRUNE_BATCH = 500;
const PRUNE_ROUNDS = 40;

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
 *
 * The work across shards has its own parts: pulling units from siblings (shard-pulls.ts), serving a
 * sharded waitlist (waitlist-server.ts), the fair opening's decision (draw-runner.ts) and the
 * changes of the SKU (sku-change-runner.ts); they get the object's private {@link StockHost}, never
 * `this`. The public methods below are the RPC surface, one face per caller (stock-faces.ts).
 */
export class SkuStock extends DurableObject<Env> implements EdgeFace, ShardFace, AdminFace {
  readonly engine: StockEngine;
  /** The object's clock. A seam for tests, which move time forward instead of sleeping. */
  now: () => number = () => Date.now();
  /**
   * The sale log's key this object runs with (LOG_SIGNING_KEY; none without a log). A seam for tests,
   * which take it away as a deploy without the secret would.
   */
  logKey: () => string | undefined = () => this.env.LOG_SIGNING_KEY;
  readonly due: DueWork;
  readonly #outbox: OutboxSender;
  /** Null when the mirror is off. */
  readonly #mirror: MirrorPublisher | null;
  /** What the runners see of this object: private, so none of it is reachable over RPC. */
  readonly #host: StockHost;
  readonly #pulls: ShardPulls;
  readonly #waitlist: WaitlistServer;
  readonly #draw: DrawRunner;
  readonly #changes: SkuChanges;
  readonly #claims: PaymentClaims;
  readonly #codes: CodeAsks;
  /** The last spent-nonce digest, reused while the shard's seq has not moved. */
  #digest: SpentDigest | null = null;

  constructor(ctx: DurableObjectState, env: Env) {
    super(ctx, env);
    // Time-ordered ids (UUIDv7) for reservations and events: each lands at the right edge of the
    // b-trees keyed by it (the object's reservations, D1's orders and processed events), where a
    // random UUID would touch a page anywhere in them. The draw's seed is secret: random bytes. With
    // a sale log kept, a draw names its entrants as the log does (their salted `user`).
    this.engine = new StockEngine(
      this.engineStorage(ctx.storage),
      () => uuidv7(),
      () => ({ seed: randomSeed(), salted: Boolean(this.logKey()) }),
    );
    const now = () => this.now();
    this.due = new DueWork(
      ctx.storage,
      () => this.engine.holds.nextExpiry(),
      () => this.#draw.dueAt(),
      () => this.engine.waitlist.turnAt(this.now()),
    );
    this.#host = {
      engine: this.engine,
      due: this.due,
      now,
      shardOf: (sku, shard) => env.SKU_STOCK.getByName(shardName(sku, shard)) as StockStub<ShardFace>,
      background: (work) => ctx.waitUntil(work),
      afterCommit: () => this.#afterCommit(),
      assertAlive: () => ctx.storage.transactionSync(() => undefined),
      // Its name is `<sku>#<shard>` (see shard-name.ts), for log lines.
      where: () => ({ object: ctx.id.name }),
    };
    this.#pulls = new ShardPulls(this.#host);
    this.#codes = new CodeAsks(this.#host);
    this.#waitlist = new WaitlistServer(this.#host, this.#pulls);
    this.#draw = new DrawRunner(
      this.#host,
      this.#pulls,
      async (request) => {
        const [answer] = await this.#reserve([request]);
        if (!answer) throw new Error("stock object returned no answer");
        return answer;
      },
      () => {
        const state = this.engine.configuration.state();
        for (const work of state ? this.#waitlist.retry(state) : []) this.#host.background(work);
      },
      () => this.logKey(),
    );
    this.#changes = new SkuChanges(this.#host, this.#pulls);
    this.#claims = new PaymentClaims(this.#host, this.#pulls);
    const saleLog = saleLogAppender(env, () => this.engine.configuration.state()); // the SKU's public log (durable-objects/log/)
    this.#outbox = new OutboxSender(this.engine.outbox, env.ORDER_EVENTS, this.due, now, saleLog);
    const mirror = mirrorFromEnv(env, MIRROR_WRITE_TIMEOUT_MS);
    this.#mirror = mirror && new MirrorPublisher(mirror, () => this.engine.configuration.state(), this.due, now);
    // Events committed before a restart but never sent go out now.
    if (this.engine.outbox.hasPending()) this.#host.background(this.#outbox.send());
    // A transfer interrupted by a restart is finished by the alarm, which its intent armed; so is a
    // late payment's claim, whose alarm may not have been armed before the restart.
    if (this.engine.payments.pendingClaims().length > 0) this.#host.background(this.due.retry("payment", this.now()));
    // The mirror may have missed the last commits before a restart: publish the current snapshot.
    if (this.#mirror) this.#host.background(this.#mirror.publish());
    // A change of the SKU left half done by a restart: the alarm undoes or finishes it.
    if (this.engine.configuration.resizePlan()) this.#host.background(this.due.retry("config", this.now()));
  }

  /** The follow-up every RPC runs after its transaction (see {@link StockHost.afterCommit}). */
  async #afterCommit(): Promise<void> {
    this.#noticeFreed();
    this.#host.background(this.#outbox.send());
    if (this.#mirror) this.#host.background(this.#mirror.publish());
    await this.due.arm();
  }

  /**
   * Units released (or added) on a sharded SKU whose waitlist has buyers are for that waitlist: shard 0
   * serves it (a one-shard SKU's line took them in the releasing transaction).
   */
  #noticeFreed(): void {
    if (this.engine.holds.takeFreed() > 0 && this.engine.waitlist.waiting) {
      const state = this.engine.configuration.state();
      if (state && state.shards > 1) this.#waitlist.notice(state);
    }
  }

  /** The storage the engine runs on: the object's own (the harness counts its reads, src/harness/). */
  protected engineStorage(storage: DurableObjectStorage): EngineStorage {
    return storage;
  }

  // ---- The SKU ----

  async configure(settings: SkuSettings, requestId?: string): Promise<Outcome<SkuState>> {
    return this.#call(requestId, () => this.engine.configuration.configure(settings, this.now()));
  }

  state(): SkuState | null {
    return this.engine.configuration.state();
  }

  /**
   * Shard 0, for a token request that carries an access code: the state, as {@link state}, and
   * the tier the code admits `userId` to, codes presented together taken in one transaction
   * (./code-asks.ts). One call, as without a code.
   */
  tokenState(userId: string, codeHash: string, claims: Record<string, unknown> = {}): Promise<CodeAnswer> {
    return this.#codes.ask(userId, codeHash, claims);
  }

  /** Shard 0: stores access codes of `tier` by their SHA-256 (false: no such tier). */
  addAccessCodes(tier: string, hashes: string[]): boolean {
    return this.engine.access.addCodes(tier, hashes);
  }

  /** Shard 0: access codes made and taken, per tier. */
  accessCodeCounts(): { tier: string; codes: number; taken: number }[] {
    return this.engine.access.codeCounts();
  }

  /** Shard 0: applies `PUT /admin/skus/:sku`, all or nothing (see sku-change-runner.ts). */
  async putSku(change: SkuChange, requestId?: string): Promise<Outcome<SkuState>> {
    return withLogContext({ requestId, ...this.#host.where() }, async () => {
      const outcome = await this.#changes.put(change);
      await this.#afterCommit();
      // Its configuration entry in the log before the PUT answers, unless the log cannot take it now.
      await this.#outbox.send();
      // A sharded sale on again (or with more units) while buyers wait: its line is served now. Units
      // freed while it was paused started a pass that stopped at the pause, and none is freed by this.
      // Not on: the pass stops at once and tells the shards whether an entry fits (a limit may have
      // moved). A line the change lapsed (the sale had ended) leaves the shards holding units for it:
      // a pass finds it empty and gives them back to newcomers.
      const state = this.engine.configuration.state();
      const line = this.engine.waitlist.length() > 0 || this.engine.waitlist.waiting;
      if (outcome.ok && state && state.status !== "archived" && state.shards > 1 && line)
        this.#host.background(this.#waitlist.serve()); // a pass that fails books its own retry
      return outcome;
    });
  }

  /** Resize, phase 1 on a sibling (see engine/configuration.ts). */
  async fence(changeId: string): Promise<Outcome<null>> {
    const fenced = this.engine.configuration.fence(changeId, this.now());
    // Its alarm asks shard 0 whether the change still runs: a fence that came after its lift (sent by
    // an instance of shard 0 that was reset) would otherwise stay for good.
    if (fenced.ok && this.engine.configuration.fencedBy() === changeId)
      await this.due.retry("config", this.now() + RETRY_MS);
    return fenced;
  }

  /** Shard 0: whether change `changeId` is still being made (see sku-change-runner.ts `recover`). */
  changeRuns(changeId: string): boolean {
    return this.#changes.runs(changeId);
  }

  /** A resize that will not commit lifts its fence here. */
  unfence(changeId: string): void {
    this.engine.configuration.unfence(changeId);
  }

  // ---- Reservations ----

  /**
   * Decides a batch of reservations (one or more callers' requests) in one transaction, in order.
   * On a sharded SKU, requests this shard cannot serve pull stock from its siblings first and are
   * decided again, so `SOLD_OUT` means every shard is empty.
   */
  async reserve(requests: ReserveRequest[]): Promise<ReserveOutcome[]> {
    return withLogContext(this.#host.where(), () => this.#reserve(requests));
  }

  async #reserve(requests: ReserveRequest[]): Promise<ReserveOutcome[]> {
    const answers: ReserveOutcome[] = this.engine.holds.reserve(requests, this.now());
    if (answers.some((a) => !a.ok && a.code === "VARIANT_INVALID") && (await this.#learnSizes())) {
      const again = answers.flatMap((a, i) => (!a.ok && a.code === "VARIANT_INVALID" ? [i] : []));
      this.#decideAgain(requests, answers, again);
    }
    // A draw's refusal replayed is final and old: it says nothing of the stock now, so it pulls no
    // units and marks nothing sold out (a replayed loser's token would have pulled every replay).
    const final = (a: ReserveOutcome) => !a.ok && a.draw !== undefined;
    const short = answers.flatMap((a, i) => (isShort(a) && !final(a) ? [i] : []));
    // The state is read only when some request went short: a served batch costs no extra query.
    const state = short.length > 0 ? this.engine.configuration.state() : null;
    // Siblings found empty a moment ago are not asked again: a sold-out storm costs one round of
    // asks per interval, not one per request.
    if (state && state.shards > 1 && !this.engine.waitlist.ahead && !this.#pulls.siblingsEmpty) {
      await this.#pullFor(requests, answers, short, state);
    }
    // Answers that show the SKU sold out say so, with the spent-nonce digest (one, shared by all). Only
    // a sale that is on is sold out: a paused, ended, not started or archived one is answered as such
    // (the edge remembers "sold out" and answers from it, where a fresh isolate asks the sale first).
    // Nor does a shard a resize left out (its index past the count: 0 units by design, reached only by
    // a replay or a stale token): its 0 says nothing of the SKU.
    let spent: SpentDigest | undefined;
    let on: SkuState | null | undefined;
    const onSale = () => {
      on ??= state ?? this.engine.configuration.state();
      return on !== null && on.shard < on.shards && isOnSale(on, this.now()) ? on : null;
    };
    if (answers.some((a) => (a.ok ? a.value.available : a.available) === 0)) {
      const shards = onSale()?.shards;
      answers.forEach((a, i) => {
        if (shards === undefined || final(a) || !showsSoldOut(a, shards)) return;
        spent ??= this.#spentDigest();
        answers[i] = { ...a, soldOut: true, spent };
      });
    }
    // Sizes: a SOLD_OUT of listed variants is the SKU's for them (a sharded shard pulled them first).
    answers.forEach((a, i) => {
      if (a.ok || a.code !== "SOLD_OUT" || a.variants === undefined || a.soldOut || final(a) || !onSale()) return;
      spent ??= this.#spentDigest();
      answers[i] = { ...a, sizesSoldOut: true, spent };
    });
    // No log line per decision (it showed in the CPU profile): the edge counts every answer in /metrics,
    // and each hold's queue event carries its request id to the consumer's line.
    await this.#afterCommit();
    return answers;
  }

  /**
   * Sizes on a sibling shard: a size it does not know may be one shard 0 added and has not handed
   * here yet; it learns shard 0's (at 0 units here, pulled on demand) and says whether it learnt any.
   */
  async #learnSizes(): Promise<boolean> {
    const state = this.engine.configuration.state();
    // Only a shard already in sizes learns any (learnVariants): a plain one waits for the hand-off.
    if (!state?.variants || state.shard === 0 || state.shards <= 1) return false;
    const lead = await this.#host.shardOf(state.sku, 0).state();
    const sizes = lead?.variants?.map((v) => ({ id: v.id, name: v.name })) ?? [];
    return this.engine.configuration.learnVariants(sizes) > 0;
  }

  /** Decides the requests at `which` again, in one batch, their answers put in place of the first ones. */
  #decideAgain(requests: ReserveRequest[], answers: ReserveOutcome[], which: number[], pulled = false): void {
    const again = which.map((i) => requests[i] as ReserveRequest);
    const retried = this.engine.holds.reserve(pulled ? again.map((r) => ({ ...r, pulled })) : again, this.now());
    which.forEach((i, k) => {
      const answer = retried[k];
      if (answer) answers[i] = answer;
    });
  }

  /** Pulls units for the requests that went short, and decides them again. */
  async #pullFor(requests: ReserveRequest[], answers: ReserveOutcome[], short: number[], state: SkuState) {
    if (state.variants) {
      await this.#pullVariants(requests, answers, short, state);
      return;
    }
    const pull = await this.#pullUnits(requests, short, state);
    if (pull.pulled > 0) this.#decideAgain(requests, answers, short);
    else if (!pull.failed) this.#pulls.noteEmpty();
    // A sibling that could not answer may have stock: SOLD_OUT would be a guess, and the edge
    // would cache it. Such answers become BUSY (503, retry).
    if (pull.failed) {
      for (const i of short) {
        const a = answers[i];
        if (a && !a.ok && a.code === "SOLD_OUT") answers[i] = { ok: false, code: "BUSY" };
      }
    }
  }

  #pullUnits(requests: ReserveRequest[], short: number[], state: SkuState) {
    const wanted = short.reduce((n, i) => n + (requests[i]?.quantity ?? 0), 0) - state.stock.available;
    return this.#pulls.pull(state, wanted);
  }

  /**
   * Sizes: each short request's choices pulled in order (a size pulled for one counts for the next),
   * then each decided again, now free to take a later choice this shard has; a request whose pull
   * a sibling could not answer is BUSY (503, retry): its first choice may be on that sibling. No
   * "siblings empty" memory: siblings out of some sizes may have others.
   */
  async #pullVariants(requests: ReserveRequest[], answers: ReserveOutcome[], short: number[], state: SkuState) {
    const failed = new Set<number>();
    // A request that found a choice here pulled none of it, and that unit may go while the siblings are
    // asked (to a request decided first, or to a sibling's pull): still short, it is pulled for once
    // more; short so again, BUSY, as after a failed pull (a sibling may have the size: sim seed 273).
    let which = short;
    for (let round = 0; round < 2 && which.length > 0; round++) {
      const current = round === 0 ? state : (this.engine.configuration.state() ?? state);
      const here = new Map((current.variants ?? []).map((v) => [v.id, v.stock.available]));
      const relied: number[] = [];
      for (const i of which) {
        const request = requests[i];
        if (!request?.variants) continue;
        if ((await this.#pulls.pullChoices(current, request.quantity, request.variants, here)).failed) failed.add(i);
        else if (request.variants.some((id) => (here.get(id) ?? 0) >= request.quantity)) relied.push(i);
      }
      this.#decideAgain(
        requests,
        answers,
        which.filter((i) => !failed.has(i)),
        true,
      );
      which = relied.filter((i) => isShort(answers[i] as ReserveOutcome));
    }
    for (const i of [...failed, ...which]) answers[i] = { ok: false, code: "BUSY" };
  }

  /**
   * The spent-nonce digest of the tokens that can still be replayed (not expired by their own expiry,
   * or for rows without one, minted within one token lifetime of now), read again only after the
   * shard changed: a sold-out storm costs one read per change.
   */
  #spentDigest(): SpentDigest {
    const seq = this.engine.configuration.state()?.seq ?? 0;
    if (this.#digest?.seq !== seq) {
      const { replayableSince, expiredBefore } = this.#replayWindow();
      this.#digest = this.engine.retention.spentNonces(replayableSince, expiredBefore);
    }
    return this.#digest;
  }

  /**
   * Which tokens can still be replayed: until their own expiry (the one their reservation recorded,
   * else the lifetime of now), plus the clock margin, since the edge judges expiry by its own clock.
   */
  #replayWindow(): { replayableSince: number; expiredBefore: number; now: number } {
    const now = this.now();
    const lifetimeMs = tokenLifetimeMs(this.env);
    return {
      replayableSince: now - lifetimeMs - TOKEN_CLOCK_SKEW_MS,
      expiredBefore: now - TOKEN_CLOCK_SKEW_MS,
      now,
    };
  }

  async cancel(reservationId: string, userId: string, requestId?: string): Promise<Outcome<Reservation>> {
    return this.#call(requestId, () => this.engine.holds.cancel(reservationId, userId, this.now()));
  }

  reservation(reservationId: string): Reservation | null {
    return this.engine.holds.reservation(reservationId);
  }

  spentDigest(): SpentDigest {
    return this.#spentDigest();
  }

  /**
   * Applies a verified payment event (see engine/payments.ts and payment-claims.ts): a late payment
   * is decided on the buyer's home shard. `finished`: a pruned reservation's D1 row. With the SKU's
   * currency, which an event that names none was paid in, and whether its sale is a test (the edge
   * records both); and, for a payment refused for its money (`amount_mismatch`, `currency_mismatch`)
   * on a SKU with a price, what the reservation costs at the price now (`expected`), which the
   * webhook's answer carries so the sender learns what was due.
   */
  async applyPayment(command: PaymentCommand, finished?: Reservation): Promise<Outcome<PaymentVerdict>> {
    return withLogContext({ requestId: command.requestId, ...this.#host.where() }, async () => {
      const outcome = await this.#claims.apply(command, finished);
      await this.#afterCommit();
      if (!outcome.ok) {
        log("info", "stock request refused", { code: outcome.code });
        return outcome;
      }
      const answer = outcome.value;
      const { price, currency, test } = this.engine.configuration.pricing();
      const money = answer.reason === "amount_mismatch" || answer.reason === "currency_mismatch";
      const expected = money && price !== null ? { amount: answer.reservation.quantity * price, currency } : undefined;
      return {
        ...outcome,
        value: { ...answer, skuCurrency: currency, skuTest: test, ...(expected ? { expected } : {}) },
      };
    });
  }

  /** The buyer's home shard, asked by a late payment's shard for a unit (see payment-claims.ts). */
  async grantUnit(claim: UnitClaim): Promise<GrantAnswer> {
    return withLogContext(this.#host.where(), () => this.#claims.grant(claim));
  }

  paymentTotals(): PaymentTotals {
    return this.engine.payments.totals();
  }

  // ---- The waitlist (waitlist-server.ts) ----

  /** Puts a buyer on the waitlist (see {@link WaitlistServer.join}). */
  async joinWaitlist(
    userId: string,
    quantity: number,
    requestId?: string,
    skuAvailable?: number,
    variants?: string[],
  ): Promise<Outcome<WaitlistEntry>> {
    return this.#waitlist.join(userId, quantity, skuAvailable, (decide) => this.#call(requestId, decide), variants);
  }

  /** Shard 0 tells this shard what the SKU's waitlist is now (see engine/waitlist.ts). */
  setWaitlistMode(mode: WaitlistMode): void {
    this.engine.waitlist.setMode(mode);
  }

  /** A user's held + sold on this shard (their home shard: where their limit is kept), holds due left out. */
  quotaOf(userId: string): number {
    return this.engine.holds.quotaAt(userId, this.now());
  }

  /** The units a user holds on this shard now (their home shard), not what they bought. */
  heldBy(userId: string): number {
    return this.engine.holds.heldBy(userId, this.now());
  }

  /** Shard 0: serves the SKU's waitlist now (a sibling freed units for it). */
  async serveWaitlist(): Promise<void> {
    await this.#waitlist.serve();
  }

  /** The buyer's home shard, asked by shard 0 to hold for a waiting buyer. */
  async holdForWaitlist(
    entryId: string,
    userId: string,
    quantity: number,
    variants?: string[],
  ): Promise<ReserveOutcome> {
    return this.#waitlist.holdFor(entryId, userId, quantity, variants);
  }

  /**
   * Where a buyer stands in the SKU's line (shard 0 keeps it), with the units they hold themselves
   * (`ownHeld`, asked of their home shard), or null when they do not wait.
   */
  async waitlistPlace(userId: string): Promise<WaitlistPlace | null> {
    return this.#waitlist.place(userId);
  }

  /** A buyer leaves the SKU's line (shard 0): their entry, or null when they were not waiting. */
  async leaveWaitlist(userId: string, requestId?: string): Promise<WaitlistPlace | null> {
    return withLogContext({ requestId, ...this.#host.where() }, () => this.#waitlist.leave(userId));
  }

  waitlistLength(): number {
    return this.engine.waitlist.length();
  }

  // ---- Shard transfers (shard-pulls.ts) ----

  /** Giver side of a transfer to a sibling shard; idempotent by transfer id. */
  async giveStock(transferId: string, toShard: number, requested: number, variant?: string): Promise<number | null> {
    const granted = this.engine.transfers.give(transferId, toShard, requested, this.now(), variant);
    await this.#afterCommit();
    return granted;
  }

  // ---- Reconciliation ----

  /** What reconciliation compares (see engine/audit.ts); it only reads. */
  audit(afterSeq: number, limit: number): Audit | null {
    return this.engine.audits.audit(afterSeq, limit, this.now());
  }

  /**
   * Reconciliation stored `watermark` for this shard: everything at or below it is in D1
   * (what it found missing was re-emitted first, with a newer seq). Finished rows there whose tokens
   * can no longer be replayed are forgotten, in small transactions with a pause between them so that
   * sales are never held up for long. Returns what went, with the rows the deletes read.
   */
  async prune(watermark: number): Promise<Pruned> {
    const total: Pruned = { ...NOTHING_PRUNED };
    for (let round = 0; round < PRUNE_ROUNDS; round++) {
      if (round > 0) await scheduler.wait(0); // let waiting requests in between two batches
      const pruned = this.engine.retention.prune({ watermark, ...this.#replayWindow(), limit: PRUNE_BATCH });
      for (const key of Object.keys(total) as (keyof Pruned)[]) total[key] += pruned[key];
      if (pruned.reservations < PRUNE_BATCH) break;
    }
    return total;
  }

  /**
   * Reconciliation's repairs, all idempotent: re-emit reservations D1 lacks, release holds no alarm
   * released (and re-arm the alarm), send a stuck outbox, finish interrupted transfers (and claims).
   */
  async repair(actions: { reemit: string[]; sweep: boolean; transfers: boolean }): Promise<RepairDone> {
    const now = this.now();
    const reemitted = actions.reemit.length > 0 ? this.engine.audits.reemit(actions.reemit, now) : [];
    if (actions.sweep) this.engine.holds.expireDue(now);
    if (actions.transfers) {
      await this.#pulls.finish();
      await this.#claims.finishAll();
    }
    // Units the sweep released (or transfers brought) go to the waitlist as any release's do: the alarm
    // that would have told it was lost, and nothing else may come to.
    this.#noticeFreed();
    this.due.forget(); // read the alarm again: it may have been lost
    await this.#outbox.send();
    await this.due.arm();
    // What is left, not what was attempted: a send or a sibling that failed leaves its work open.
    const left = this.engine.audits.openWork(now);
    return {
      reemitted,
      oldestUnsent: left.oldestUnsent,
      overdueHolds: left.overdueHolds,
      pendingTransfers: left.pendingTransfers,
    };
  }

  /** Compares the mirror with this shard's state and rewrites it when it is missing or wrong. */
  async checkMirror(): Promise<MirrorCheck> {
    return this.#mirror ? this.#mirror.check() : { status: "ok" };
  }

  // ---- Fair opening (draw-runner.ts; docs/FAIR-OPENING.md) ----

  /** The answer to a reservation that got `DRAW_PENDING` (see {@link DrawRunner.await}). */
  async awaitDraw(request: ReserveRequest): Promise<ReserveOutcome> {
    return this.#draw.await(request);
  }

  /** Shard 0: the SKU's draw as `GET /api/skus/:sku/draw` shows it, or null without a window. */
  async drawInfo(): Promise<DrawInfo | null> {
    return this.#draw.info();
  }

  /** Shard 0: decided entries in draw order after position `after` (positions are 1..N). */
  drawEntries(after: number, limit: number, opensAt?: number): DrawnEntry[] {
    return this.engine.draw.entries(after, limit, opensAt);
  }

  /** A sibling of a sharded SKU: its home users' entries so far, while the opening's entries are open. */
  drawEntriesHere(opening: number): number {
    return this.engine.draw.entriesHere(opening);
  }

  /** A sibling of a sharded SKU: entries close (an opening of `windowMs`); shard 0 gets this shard's entrants. */
  async closeDraw(opening: number, windowMs?: number): Promise<Entrant[]> {
    return this.#draw.close(opening, windowMs);
  }

  /** The home shard of an entry (sharded SKU), asked by shard 0 in draw order. */
  async decideDrawEntry(
    opening: number,
    userId: string,
    place: DrawPlace,
    seedHash: string | null = null,
  ): Promise<ReserveOutcome> {
    return this.#draw.decideEntry(opening, userId, place, seedHash);
  }

  /** A home shard records results shard 0 decided without asking it (the stock ran out first). */
  recordDrawResults(opening: number, results: { userId: string; place: DrawPlace; code: string }[]): void {
    this.#draw.record(opening, results);
  }

  /** A sibling learns from shard 0 that the draw is over. */
  drawOver(opening: number): void {
    this.#draw.over(opening);
  }

  /** Shard 0, asked by a sibling whose requests wait past a window's close: decides a due draw now. */
  decideDraw(): void {
    this.#draw.kick();
  }

  // ---- The alarm ----

  /**
   * Releases holds past expiry, finishes or undoes a change left half done, decides a due opening
   * draw (shard 0), then retries whatever is pending: transfers, late payments' claims, the waitlist,
   * the outbox, the mirror. At-least-once: every step is idempotent, and a step that fails again books its retry.
   */
  override async alarm(): Promise<void> {
    this.due.fired();
    this.engine.holds.expireDue(this.now());
    this.engine.waitlist.take(this.now()); // one shard; shard 0 of more serves its line below
    await this.#changes.recover();
    if (this.#draw.needsWork()) await this.#draw.decide().catch(() => undefined); // failures book a retry
    await this.#pulls.finish();
    await this.#claims.finishAll();
    const state = this.engine.configuration.state();
    this.engine.holds.takeFreed();
    const waitlist = state ? this.#waitlist.retry(state) : [];
    await Promise.all([...waitlist, this.#outbox.send(), this.#mirror?.publish()]);
    await this.due.arm();
  }

  /**
   * One engine transaction for an edge request, then the follow-up; its log lines (and the events
   * it emits) carry the request id. Failed outcomes are logged with their code.
   */
  async #call<T>(requestId: string | undefined, decide: () => Outcome<T>): Promise<Outcome<T>> {
    return withLogContext({ requestId, ...this.#host.where() }, async () => {
      const outcome = this.engine.holds.onBehalfOf(requestId, decide);
      await this.#afterCommit();
      if (!outcome.ok) log("info", "stock request refused", { code: outcome.code });
      return outcome;
    });
  }
}
