import { type DrawInfo, type DrawPlace, type Entrant, type OpeningInfo, rankEntrants } from "../engine/opening-draw";
import type { ReserveOutcome, ReserveRequest, SkuState } from "../engine/types";
import { isShort } from "../engine/types";
import { listedVariants } from "../engine/variants";
import { log, withLogContext } from "../shared/log";
import { saltSecret } from "../shared/sale-entries";
import { DrawWaiters } from "./draw-waiters";
import type { ShardPulls } from "./shard-pulls";
import { RETRY_MS, type StockHost, siblingsOf } from "./stock-host";

/**
 * Fair opening: how long after the window closes a waiting request gives up on the decision (then
 * 503 BUSY; the retry with the same token gets the draw's answer). A decision takes far less
 * (bench point `draw_decide`, docs/PERFORMANCE.md); this only bounds a lost one.
 */
const DRAW_DECISION_MS = 10_000;
/**
 * While requests wait for the draw, how often the object checks their deadlines and whether its draw
 * is due (should the alarm be lost). A request is woken when its own entry is decided, not by this.
 */
const DRAW_POLL_MS = 1_000;

type DrawResult = { userId: string; place: DrawPlace; code: string };

/** A waiting request's answer: the first of its entry (this request waited for it), not a replay. */
function firstDrawAnswer(answer: ReserveOutcome): ReserveOutcome {
  return answer.ok && answer.value.draw ? { ...answer, value: { ...answer.value, replayed: false } } : answer;
}

/** A salted draw is due and the object has no log key to name its entrants with: it waits for the key. */
class LogKeyMissing extends Error {
  constructor() {
    super(
      "this draw names its entrants by the sale log's salts and LOG_SIGNING_KEY is missing: it is decided once the key is back (wrangler secret put LOG_SIGNING_KEY, the same key)",
    );
  }
}

/**
 * The fair opening across a stock object's life (docs/FAIR-OPENING.md): requests that
 * wait for the draw, shard 0's decision once the window closes (one shard in one transaction; a
 * sharded SKU entry by entry on each entry's home shard), and telling the siblings it is over. The
 * steps inside the engine are engine/draw-decision.ts.
 */
export class DrawRunner {
  readonly #host: StockHost;
  readonly #pulls: ShardPulls;
  /** Decides a request on arrival (the stock object's reserve path). */
  readonly #reserve: (request: ReserveRequest) => Promise<ReserveOutcome>;
  /** The requests waiting here for the draw, each woken when its own entry is decided. */
  readonly #waiters: DrawWaiters;
  /** Shard 0: the decision under way, if any (one at a time). */
  #deciding: Promise<void> | null = null;

  /** Shard 0, once draws were decided: the line's turn (it waited while they were pending). */
  readonly #decided: () => void;
  /** The log key the object runs with (LOG_SIGNING_KEY; none without a log): its salts name a salted draw's entrants. */
  readonly #logKey: () => string | undefined;
  /** The salt secret of the last key read, derived once per key text. */
  #secretOf: { key: string; secret: Uint8Array } | null = null;

  constructor(
    host: StockHost,
    pulls: ShardPulls,
    reserve: (request: ReserveRequest) => Promise<ReserveOutcome>,
    decided: () => void,
    logKey: () => string | undefined,
  ) {
    this.#logKey = logKey;
    this.#host = host;
    this.#pulls = pulls;
    this.#reserve = reserve;
    this.#decided = decided;
    this.#waiters = new DrawWaiters(
      DRAW_POLL_MS,
      () => host.now(),
      () => this.#tick(),
    );
  }

  /**
   * Shard 0: the draws as `GET /api/skus/:sku/draw` shows them. From a window's opening until the
   * draw is ordered, each shard holds its home users' entries, so a sharded SKU's siblings are asked
   * for theirs (a sibling that does not answer counts none: `entrants` may lag); an opening ordered
   * meanwhile shows its count as ordered.
   */
  async info(): Promise<DrawInfo | null> {
    const info = await this.#info();
    return info && this.#withStalls(info);
  }

  /**
   * Marks each opening whose decision cannot be made now, and why: a salted draw whose window closed
   * while this object has no log key (LOG_SIGNING_KEY missing, a deploy without the secret) waits
   * for the key (API.md: "a salted draw is not decided while the key is missing"), and says so here,
   * on `/draw` and the admin SKU view, where an operator looks.
   */
  #withStalls(info: DrawInfo): DrawInfo {
    const now = this.#host.now();
    const { draw } = this.#host.engine;
    const stalled = (o: OpeningInfo) =>
      o.decidedAt === null &&
      o.entryIdPrefix === "salt" &&
      now >= o.closesAt &&
      !draw.placed(o.opensAt) && // an order written goes on without the key (see #decideSharded)
      this.#saltSecret() === null;
    const mark = <O extends OpeningInfo>(o: O): O => ({ ...o, stalled: stalled(o) ? "log_key_missing" : null });
    return { ...mark(info), openings: info.openings.map(mark) };
  }

  async #info(): Promise<DrawInfo | null> {
    const { engine } = this.#host;
    const state = engine.configuration.state();
    const uncounted = engine.draw.uncounted(this.#host.now());
    if (!state || state.shards <= 1 || uncounted.length === 0) return engine.draw.info();
    const elsewhere = new Map<number, number>(uncounted.map((opening) => [opening, 0]));
    await Promise.allSettled(
      siblingsOf(state.shards).flatMap((shard) =>
        uncounted.map(async (opening) => {
          const n = await this.#host.shardOf(state.sku, shard).drawEntriesHere(opening);
          elsewhere.set(opening, (elsewhere.get(opening) ?? 0) + n);
        }),
      ),
    );
    const info = engine.draw.info();
    if (!info) return null;
    const still = new Set(engine.draw.uncounted(this.#host.now()));
    const openings = info.openings.map((o) =>
      still.has(o.opensAt) ? { ...o, entrants: o.entrants + (elsewhere.get(o.opensAt) ?? 0) } : o,
    );
    return { ...info, entrants: (openings.at(-1) as (typeof openings)[number]).entrants, openings };
  }

  /**
   * The answer to a reservation that got `DRAW_PENDING`: waits (on the request's home shard) until
   * its entry is decided, or, for a request that came after the window, until the draw is over and
   * then decides it on arrival. Bounded: past the window's close plus {@link DRAW_DECISION_MS},
   * `BUSY` (retry with the same token). A request is woken only when its own entry is decided (or
   * the draw is over), and reads its answer without a transaction: N entrants cost N wakes.
   */
  async await(request: ReserveRequest): Promise<ReserveOutcome> {
    const { engine } = this.#host;
    const deadline = (engine.draw.lastCloseBy(this.#host.now()) ?? this.#host.now()) + DRAW_DECISION_MS;
    for (;;) {
      this.kick();
      // Read and registered below with no await in between: a decision cannot slip past unseen.
      const drawn = engine.drawDecision.answerOf(request);
      if (drawn && (drawn.ok || drawn.code !== "DRAW_PENDING")) return firstDrawAnswer(drawn);
      if (!drawn && !engine.draw.pending(this.#host.now())) {
        // No entry, and the draw is over here: decided on arrival, as any reservation.
        const answer = await this.#reserve(request);
        if (answer.ok || answer.code !== "DRAW_PENDING") return firstDrawAnswer(answer);
        continue;
      }
      if (this.#host.now() >= deadline) return { ok: false, code: "BUSY" };
      await this.#waiters.wait(drawn ? request.userId : null, deadline);
    }
  }

  /**
   * The home shard of an entry (sharded SKU), asked by shard 0 in draw order: holds for it, pulling
   * units from siblings when this shard is short (they are all waiting for the draw: none sells).
   * A sibling that could not answer: `BUSY`, nothing recorded, shard 0 asks again later.
   */
  async decideEntry(
    opening: number,
    userId: string,
    place: DrawPlace,
    seedHash: string | null = null,
  ): Promise<ReserveOutcome> {
    const { engine } = this.#host;
    let answer = engine.drawDecision.decideEntry(opening, userId, place, this.#host.now(), false, seedHash);
    const state = engine.configuration.state();
    if (isShort(answer) && state) {
      const entrant = engine.draw.entrantOf(opening, userId);
      const quantity = entrant?.quantity ?? 1;
      const sizes = entrant ? listedVariants(entrant) : undefined;
      if ((await this.#pulls.pullFor(state, quantity, sizes)).busy || !(await this.#grantsKnown()))
        answer = { ok: false, code: "BUSY" };
      else answer = engine.drawDecision.decideEntry(opening, userId, place, this.#host.now(), true, seedHash);
    }
    engine.holds.takeFreed();
    this.#waiters.decided([userId]);
    await this.#host.afterCommit();
    return answer;
  }

  /**
   * Whether every grant this shard asked a sibling for is known. A grant whose answer was lost is
   * off the sibling's stock and not yet on this one's: while it is, the SKU's shards have fewer units
   * than its stock less its holds and sales, and a draw's `SOLD_OUT` or `INSUFFICIENT_STOCK` could
   * come while units remained, which the log's replay proves it did not (docs/VERIFY.md). So lost
   * answers are asked for again first; one still unknown makes the entry `BUSY` (nothing recorded:
   * shard 0 asks again later, after this shard's alarm asked again).
   */
  async #grantsKnown(): Promise<boolean> {
    const { engine } = this.#host;
    if (engine.transfers.pending().length === 0) return true;
    await this.#pulls.finish();
    return engine.transfers.pending().length === 0;
  }

  /**
   * A sibling's entries close (see `DrawDecision.close`) and go to shard 0, once every grant this
   * shard asked a sibling for is known: a unit on its way between two shards is on neither one's
   * stock, and the home shards' pulls of the decision that follows would miss it (a `SOLD_OUT` while
   * it was left, sim seed 2688). Else this throws, and shard 0 decides again a moment later.
   */
  async close(opening: number, windowMs?: number): Promise<Entrant[]> {
    const entrants = this.#host.engine.drawDecision.close(opening, this.#host.now(), windowMs);
    if (!(await this.#grantsKnown())) throw new Error("a transfer of this shard is not finished yet");
    return entrants;
  }

  /** A home shard records results shard 0 decided without asking it (the stock ran out first). */
  record(opening: number, results: DrawResult[]): void {
    this.#host.engine.drawDecision.record(opening, results);
    this.#waiters.decided(results.map((r) => r.userId));
  }

  /** A sibling learns from shard 0 that an opening's draw is over: reservations go on arrival again. */
  over(opening: number): void {
    this.#host.engine.drawDecision.finish(opening, this.#host.now());
    this.#waiters.over();
  }

  /** Shard 0: starts the decision (or the telling of siblings) when due, without waiting for it. */
  kick(): void {
    if (this.needsWork()) this.#host.background(this.decide().catch(() => undefined)); // failures book a retry
  }

  /** Shard 0: a draw is due (window closed, undecided) or the siblings were not all told of one. */
  needsWork(): boolean {
    const { engine } = this.#host;
    const state = engine.configuration.state();
    if (state?.shard !== 0) return false;
    const draw = engine.draw;
    return engine.drawDecision.due(this.#host.now()) !== null || (state.shards > 1 && draw.untold().length > 0);
  }

  /** When shard 0's alarm must decide a draw: the earliest undecided window's close. */
  dueAt(): number | null {
    const { engine } = this.#host;
    const draw = engine.draw;
    return draw.undecided() !== null && engine.configuration.state()?.shard === 0 ? draw.closesAt() : null;
  }

  /** Shard 0: decides the draw, once at a time; a failure leaves it to the alarm (retried). */
  decide(): Promise<void> {
    this.#deciding ??= withLogContext(this.#host.where(), () => this.#decide())
      .catch(async (err: unknown) => {
        // A salted draw without its key waits for an operator: an error, not a passing failure.
        if (err instanceof LogKeyMissing)
          log("error", "the opening draw waits for LOG_SIGNING_KEY", { error: err.message });
        else log("warn", "deciding the opening draw failed", { error: String(err) });
        await this.#host.due.retry("draw", this.#host.now() + RETRY_MS);
        throw err;
      })
      .finally(() => {
        this.#deciding = null;
      });
    return this.#deciding;
  }

  /**
   * Once a second while requests wait for the draw. An object that can no longer commit (aborted or
   * reset while its code runs on) throws here, which fails its waiting requests at once (the edge
   * answers BUSY): their retries reach the object that replaced it.
   */
  #tick(): void {
    this.#host.assertAlive();
    this.kick();
    this.#nudge();
  }

  /**
   * A sibling whose requests wait past a window's close with the draw not over: shard 0's alarm
   * may be late (nothing else reaches shard 0 when no entrant is homed there), so shard 0 is asked
   * to decide now, once a tick. Else they would wait for that alarm, and give up BUSY before it.
   */
  #nudge(): void {
    const { engine } = this.#host;
    const state = engine.configuration.state();
    if (!state || state.shard === 0 || engine.drawDecision.due(this.#host.now()) === null) return;
    this.#host.background(
      this.#host
        .shardOf(state.sku, 0)
        .decideDraw()
        .catch(() => undefined), // the next tick asks again
    );
  }

  /** Decides every due draw, earliest opening first (an earlier tier's buyers are served first). */
  async #decide(): Promise<void> {
    const { engine } = this.#host;
    const state = engine.configuration.state();
    if (state?.shard !== 0) return;
    let decided = 0;
    for (let opening = engine.drawDecision.due(this.#host.now()); opening !== null; decided++) {
      const started = this.#host.now();
      if (state.shards === 1) {
        const ranked = this.#rank(state, opening, engine.drawDecision.close(opening, started));
        engine.drawDecision.decide(opening, ranked, this.#host.now());
      } else {
        await this.#decideSharded(state, opening);
      }
      const entrants = engine.draw.entrantCount(opening);
      log("info", "opening draw decided", { opening, entrants, ms: this.#host.now() - started });
      opening = engine.drawDecision.due(this.#host.now());
    }
    this.#waiters.over();
    await this.#host.afterCommit();
    for (const opening of state.shards > 1 ? engine.draw.untold() : []) {
      const shards = siblingsOf(state.shards);
      await Promise.all(shards.map((shard) => this.#host.shardOf(state.sku, shard).drawOver(opening)));
      engine.draw.markTold(opening);
    }
    // Every shard knows the draws are over: the line's turn.
    if (decided > 0) this.#decided();
  }

  /** The sale log's salt secret of the key this object runs with, or null without one. */
  #saltSecret(): Uint8Array | null {
    const key = this.#logKey();
    if (!key) return null;
    if (this.#secretOf?.key !== key) this.#secretOf = { key, secret: saltSecret(key) };
    return this.#secretOf.secret;
  }

  /** An opening's entrants in draw order, outside any transaction. */
  #rank(state: SkuState, opening: number, entrants: Entrant[]) {
    const { draw } = this.#host.engine;
    const seed = draw.seedForDecision(opening);
    if (!seed) throw new Error("shard 0 has no seed for its draw");
    // A salted draw promised (in the log) to name its entrants as the log does: not without its key.
    const salted = draw.saltedFor(opening);
    const secret = salted ? this.#saltSecret() : null;
    if (salted && !secret) throw new LogKeyMissing();
    return rankEntrants(seed, state.sku, entrants, secret);
  }

  /**
   * One draw over a sharded SKU: entries close on every shard and come to shard 0, which orders
   * them with the seed; then each entry, in order, is held on its home shard (where its user's limit
   * is kept), which pulls units from the other shards when it lacks them. Once the SKU has nothing
   * left, the rest are SOLD_OUT, one call per shard. Every step is idempotent (results are recorded
   * on both sides, a hold is keyed by the entry's nonce), so a retry after a crash or a failed call
   * finishes the same draw.
   */
  async #decideSharded(state: SkuState, opening: number): Promise<void> {
    const { engine } = this.#host;
    const shardOf = (shard: number) => this.#host.shardOf(state.sku, shard);
    // Every sibling, told of the opening or not (its copy of the settings may come after this).
    const windowMs = engine.draw.windowOf(opening);
    const lists = await Promise.all(
      siblingsOf(state.shards).map((shard) => shardOf(shard).closeDraw(opening, windowMs)),
    );
    const own = engine.drawDecision.close(opening, this.#host.now());
    // Shard 0's own transfers too (a cut's pull whose grant's answer was lost): see `close`.
    if (!(await this.#grantsKnown())) throw new Error("a transfer of shard 0 is not finished yet");
    // An order already written is the draw's (a retry after a crash or a BUSY shard): some of it may be
    // decided, its holds naming their positions. Ranked again, it could differ (the log key changed,
    // so the salts and entry ids did) and move entries the log already placed.
    const ranked = engine.draw.placedOrder(opening) ?? this.#rank(state, opening, [...own, ...lists.flat()]);
    const order = engine.drawDecision.place(opening, ranked, this.#host.now());
    const entrants = order.length;
    const seedHash = engine.draw.seedHashOf(opening);
    let soldOut = false;
    const rest = new Map<number, DrawResult[]>();
    for (const e of order) {
      const place = { entryId: e.entryId, position: e.position, entrants };
      if (e.code !== null) {
        soldOut ||= e.code === "SOLD_OUT" && !state.variants; // sizes: one size gone says nothing of the next
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
          ? await this.decideEntry(opening, e.userId, place, seedHash)
          : await shardOf(e.home).decideDrawEntry(opening, e.userId, place, seedHash);
      if (!answer.ok && answer.code === "BUSY") throw new Error(`shard ${e.home} could not decide a draw entry`);
      const code = answer.ok ? "HELD" : answer.code;
      if (e.home !== 0) engine.drawDecision.record(opening, [{ userId: e.userId, place, code }]);
      // Sizes: an entry whose sizes are gone says nothing of the next one's (each is asked).
      soldOut = code === "SOLD_OUT" && !state.variants;
    }
    await Promise.all(
      [...rest].map(async ([home, results]) => {
        if (home !== 0) await shardOf(home).recordDrawResults(opening, results);
        engine.drawDecision.record(opening, results);
      }),
    );
    engine.drawDecision.finish(opening, this.#host.now());
  }
}
