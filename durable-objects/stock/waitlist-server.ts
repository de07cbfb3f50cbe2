import type { Outcome, ReserveOutcome, SkuState } from "../engine/types";
import { isShort } from "../engine/types";
import type { WaitlistEntry, WaitlistMode, WaitlistPlace } from "../engine/waitlist";
import { CoalescedRunner } from "../shared/coalesced-runner";
import { log } from "../shared/log";
import { homeShard } from "../shared/shard-name";
import type { ShardPulls } from "./shard-pulls";
import { RETRY_MS, type StockHost, siblingsAvailable, siblingsOf } from "./stock-host";

/**
 * A sharded SKU's waitlist, served across shards. It is kept on shard 0; each buyer is held on
 * their home shard (where their per-user limit is kept), which pulls the units from wherever they
 * are. Every shard keeps the waitlist's mode (engine/waitlist.ts) as shard 0 last told it, so units
 * a shard frees while buyers wait are offered to the waitlist first: the shard notices shard 0,
 * which serves. A 1-shard SKU's waitlist is served inside the engine's own transactions.
 */
export class WaitlistServer {
  readonly #host: StockHost;
  readonly #pulls: ShardPulls;
  /** Shard 0: passes serving the waitlist. */
  readonly #serving = new CoalescedRunner(() => this.#pass());
  /** A non-zero shard: notices to shard 0 that units were freed for the waitlist. */
  readonly #noticing = new CoalescedRunner(() => this.#noticeShardZero());
  /**
   * Shard 0: the entry a pass is holding for right now (on its buyer's home shard); `done` resolves
   * when that answer is in. A buyer who leaves meanwhile waits for it: served, they no longer wait.
   */
  #holding: { entryId: string; done: Promise<void> } | null = null;
  /**
   * Shard 0: whether a sibling may keep another mode than this shard's record (a tell that failed may
   * have reached some; a new instance does not know): the next pass or join tells every shard again.
   */
  #unsure = true;
  /** Shard 0: the tell under way; the next waits for it, so siblings and this shard's record end alike. */
  #telling: Promise<unknown> = Promise.resolve();

  constructor(host: StockHost, pulls: ShardPulls) {
    this.#host = host;
    this.#pulls = pulls;
  }

  /**
   * Puts a buyer on the waitlist: a 1-shard SKU's own, or on shard 0 the waitlist of a sharded SKU,
   * given the SKU's available units. Before a sharded waitlist's first buyer is answered, every shard
   * learns that its units are for the waitlist, so no newcomer takes a unit released after the answer;
   * then the waitlist is served in the background.
   */
  async join(
    userId: string,
    quantity: number,
    skuAvailable: number | undefined,
    call: (decide: () => Outcome<WaitlistEntry>) => Promise<Outcome<WaitlistEntry>>,
    variants?: readonly string[],
  ): Promise<Outcome<WaitlistEntry>> {
    const engine = this.#host.engine;
    let state = engine.configuration.state();
    // The limit is kept on the buyer's home shard: a buyer already at it never joins.
    const home = state && state.shards > 1 ? homeShard(userId, state.shards) : 0;
    const homeQuota = state && home !== 0 ? await this.#host.shardOf(state.sku, home).quotaOf(userId) : undefined;
    const outcome = await call(() =>
      engine.waitlist.join(userId, quantity, this.#host.now(), skuAvailable, homeQuota, variants),
    );
    state = engine.configuration.state();
    if (outcome.ok && state && state.shards > 1) {
      // Sizes: a buyer waiting for some sizes does not hold off buyers of the others (mode 2).
      const mode = state.variants ? 2 : 1;
      if (engine.waitlist.mode !== mode || this.#unsure) {
        try {
          await this.#tell(state, mode);
        } catch (err) {
          // The entry is in the line: the alarm's pass tells every shard again, whether or not the buyer asks again.
          await this.#host.due.retry("waitlist", this.#host.now() + RETRY_MS);
          throw err;
        }
      }
      this.serve();
    }
    return outcome;
  }

  /**
   * The buyer's place in the line (shard 0 of a sharded SKU keeps it), or null when they do not
   * wait, with the units they hold themselves (`ownHeld`), which the line's `held` (units held by
   * others) leaves out. A buyer's holds are all on their home shard, of every shard the SKU has:
   * tokens, the line and draws hold there, and a change of the shard count (a cut included) waits
   * until nothing is held; so that shard alone is asked, and only for a buyer who waits.
   */
  async place(userId: string): Promise<WaitlistPlace | null> {
    const { engine } = this.#host;
    const place = engine.waitlist.place(userId, this.#host.now());
    if (!place) return null;
    const state = engine.configuration.state();
    const home = state && state.shards > 1 ? homeShard(userId, state.shards) : (state?.shard ?? 0);
    const ownHeld =
      !state || home === state.shard
        ? engine.holds.heldBy(userId, this.#host.now())
        : await this.#host.shardOf(state.sku, home).heldBy(userId);
    return { ...place, ownHeld };
  }

  /**
   * The buyer leaves the line: their entry, or null when they do not wait. A pass holding for them
   * right now is waited for first, so a leave never answers "left" for a buyer that pass served:
   * served, the hold stands and they were not waiting (the object's turns are serial otherwise).
   */
  async leave(userId: string): Promise<WaitlistPlace | null> {
    const engine = this.#host.engine;
    if (!engine.configuration.configured) return null; // an object nobody configured writes nothing
    for (;;) {
      const inFlight = this.#holding;
      const entry = engine.waitlist.place(userId, this.#host.now());
      if (!entry || inFlight?.entryId !== entry.waitlistId) break;
      await inFlight.done;
    }
    const left = engine.waitlist.leaveLine(userId, this.#host.now());
    await this.#host.afterCommit();
    // A pass tells every shard what the line is now: the units may be newcomers' again (the line
    // emptied, or, while the sale is not on, no entry left fits them), or the next entries move up.
    const state = engine.configuration.state();
    if (left && state && state.shards > 1) this.serve();
    return left;
  }

  /**
   * The buyer's home shard, asked by shard 0 to hold for a waiting buyer: pulls from siblings when
   * this shard is short (whatever they answered a moment ago: the waitlist wants their units).
   */
  async holdFor(entryId: string, userId: string, quantity: number, variants?: string[]): Promise<ReserveOutcome> {
    const { engine } = this.#host;
    let answer = engine.holds.forWaitlist(entryId, userId, quantity, this.#host.now(), variants);
    const state = engine.configuration.state();
    if (isShort(answer) && state) {
      const pull = await this.#pulls.pullFor(state, quantity, variants);
      // Sizes: asked again after the pull either way (a later size this shard has may serve), unless a
      // sibling could not answer (its units of an earlier choice are unknown).
      if (pull.busy) answer = { ok: false, code: "BUSY" };
      else if (pull.pulled > 0 || variants !== undefined) {
        answer = engine.holds.forWaitlist(entryId, userId, quantity, this.#host.now(), variants, true);
      }
    }
    engine.holds.takeFreed(); // what this shard had was for this buyer: nothing to tell the waitlist
    await this.#host.afterCommit();
    return answer;
  }

  /** Starts a pass over the waitlist unless one is running; then that one goes round once more. */
  serve(): Promise<void> {
    const pass = this.#serving.run();
    this.#host.background(pass);
    return pass;
  }

  /** Units were freed here while buyers wait: shard 0 serves its waitlist (coalesced, in the background). */
  notice(state: SkuState): void {
    if (state.shard === 0) this.serve();
    else this.#host.background(this.#noticing.run());
  }

  /**
   * The alarm: a pass or a notice that failed, units freed that nobody was told of, or (shard 0) a
   * mode some sibling may not have: a pass tells every shard.
   */
  retry(state: SkuState): Promise<void>[] {
    const engine = this.#host.engine;
    const work: Promise<void>[] = [];
    if (engine.waitlist.waiting && state.shards > 1) {
      work.push(state.shard === 0 ? this.serve() : this.#noticing.run());
    }
    const unsure = this.#unsure && state.shards > 1;
    if (state.shard === 0 && (engine.waitlist.length() > 0 || unsure)) work.push(this.serve());
    return work;
  }

  async #pass(): Promise<void> {
    try {
      await this.#serveOnce();
    } catch (err) {
      log("warn", "serving the waitlist failed", { error: String(err) });
      await this.#host.due.retry("waitlist", this.#host.now() + RETRY_MS); // the alarm serves again
    }
  }

  /**
   * Shard 0: hands units to the waitlist first-fit in FIFO order. A pass stops when the SKU has
   * nothing left (SOLD_OUT) or the sale is not on. An entry its home shard answers `LIMIT_EXCEEDED`
   * (the buyer holds their limit, or a lowered one) keeps its place and is skipped, as on one shard:
   * the units the buyer holds may come back, and a unit freed then serves it. Then every
   * shard learns what the waitlist is: empty (units for newcomers), waiting for the units (newcomers
   * refused), or waiting for more than the SKU has (newcomers may buy what there is).
   */
  async #serveOnce(): Promise<void> {
    const { engine } = this.#host;
    const state = engine.configuration.state();
    if (!state || state.shards <= 1 || state.shard !== 0) return;
    let stopped: string | null = null;
    for (const entry of engine.waitlist.entries(this.#host.now())) {
      // Read at the pass's start: a buyer may have left since (then nothing is held for them).
      if (!engine.waitlist.has(entry.id)) continue;
      const answer = await this.#serveEntry(state, entry);
      // Sizes: an entry whose sizes are gone says nothing of the next one's (first fit across sizes).
      const shortOfItsSizes = entry.variants !== undefined && !answer.ok && answer.code === "SOLD_OUT";
      if (!answer.ok && answer.code !== "LIMIT_EXCEEDED" && answer.code !== "INSUFFICIENT_STOCK" && !shortOfItsSizes) {
        stopped = answer.code; // first fit: nothing left (SOLD_OUT), or the sale is not on
        break;
      }
    }
    let mode: WaitlistMode;
    if (engine.waitlist.length() === 0) mode = 0;
    else if (state.variants)
      mode = 2; // sizes: buyers of other sizes are not held off
    else if (stopped === "SOLD_OUT") mode = 1;
    else if (stopped === "SALE_NOT_ACTIVE") mode = (await this.#fitsAnEntry(state)) ? 1 : 2;
    else if (stopped !== null) mode = engine.waitlist.mode;
    else mode = (await this.#skuAvailable(state)) === 0 ? 1 : 2; // every entry wants more than there is
    if (mode !== engine.waitlist.mode || this.#unsure) await this.#tell(state, mode);
  }

  /**
   * Holds for one entry on its buyer's home shard; served, it leaves the line. A leave of that buyer
   * waits until both are done, the entry's removal included.
   */
  async #serveEntry(
    state: SkuState,
    entry: { id: string; userId: string; quantity: number; variants?: string[] | undefined },
  ): Promise<ReserveOutcome> {
    let settle = () => {};
    this.#holding = { entryId: entry.id, done: new Promise<void>((resolve) => (settle = resolve)) };
    try {
      const home = homeShard(entry.userId, state.shards);
      const answer =
        home === state.shard
          ? await this.holdFor(entry.id, entry.userId, entry.quantity, entry.variants)
          : await this.#host
              .shardOf(state.sku, home)
              .holdForWaitlist(entry.id, entry.userId, entry.quantity, entry.variants);
      if (answer.ok) this.#host.engine.waitlist.served(entry.id);
      return answer;
    } finally {
      this.#holding = null;
      settle();
    }
  }

  /**
   * The sale is not on, so no pass serves: whether the SKU's available units fit an entry within its
   * buyer's limit (then they are the line's, mode 1), or fit none (mode 2: a late payment or an early
   * access tier's hold may take them), as one shard's line claims them. Each entry that could fit
   * asks its home shard for the buyer's count; the first that fits ends it.
   */
  async #fitsAnEntry(state: SkuState): Promise<boolean> {
    const { engine } = this.#host;
    const available = await this.#skuAvailable(state);
    for (const entry of engine.waitlist.entries(this.#host.now())) {
      if (entry.quantity > available) continue;
      const home = homeShard(entry.userId, state.shards);
      const held =
        home === state.shard
          ? engine.holds.quotaAt(entry.userId, this.#host.now())
          : await this.#host.shardOf(state.sku, home).quotaOf(entry.userId);
      if (held + entry.quantity <= state.perUserLimit) return true;
    }
    return false;
  }

  /** The units available over all of the SKU's shards. */
  async #skuAvailable(state: SkuState): Promise<number> {
    const elsewhere = await siblingsAvailable(this.#host, state);
    return elsewhere + (this.#host.engine.configuration.state()?.stock.available ?? 0);
  }

  /**
   * Tells every shard what the SKU's waitlist is, this one last (the record that all were told); one
   * tell at a time (a join's and a pass's may overlap), so a sibling never takes them in another order.
   */
  #tell(state: SkuState, mode: WaitlistMode): Promise<void> {
    const told = this.#telling.then(() => this.#tellNow(state, mode));
    this.#telling = told.catch(() => undefined);
    return told;
  }

  async #tellNow(state: SkuState, mode: WaitlistMode): Promise<void> {
    this.#unsure = true;
    await Promise.all(
      siblingsOf(state.shards).map((shard) => this.#host.shardOf(state.sku, shard).setWaitlistMode(mode)),
    );
    this.#host.engine.waitlist.setMode(mode);
    this.#unsure = false;
  }

  async #noticeShardZero(): Promise<void> {
    const state = this.#host.engine.configuration.state();
    if (!state) return;
    try {
      await this.#host.shardOf(state.sku, 0).serveWaitlist();
    } catch (err) {
      log("warn", "waitlist notice failed", { error: String(err) });
      await this.#host.due.retry("waitlist", this.#host.now() + RETRY_MS); // the alarm tells shard 0 again
    }
  }
}
