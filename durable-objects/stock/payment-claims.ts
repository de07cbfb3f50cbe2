import type { GrantAnswer, PaymentAnswer, PaymentCommand, UnitClaim } from "../engine/payments";
import { fail, type Outcome, ok, type Reservation } from "../engine/types";
import { log } from "../shared/log";
import { homeShard } from "../shared/shard-name";
import type { ShardPulls } from "./shard-pulls";
import { RETRY_MS, type StockHost } from "./stock-host";

/** Engine steps one payment may take (decide, pull or claim, decide again): a bound, not a count. */
const MAX_STEPS = 6;
/** Times a claim follows a changed shard count in one go before it waits for the alarm. */
const MAX_MOVES = 3;

/**
 * A payment event applied across shards (engine/payments.ts decides; this runs the steps between).
 * A late payment is decided on the buyer's home shard under the SKU's current shard count, as a
 * reservation is: when that is this shard and it is short, it pulls from its siblings first, as a
 * reservation does; when it is another shard, the engine records a claim and this asks the home shard
 * for the unit (`grantUnit`, once per reservation), then finishes the claim with its answer.
 *
 * Exactly once, as a transfer: the claim is recorded, and the alarm armed, before the home shard is
 * asked; the home shard decides once per reservation and answers the same grant, or the same
 * refusal, when asked again (two asks at once get one answer); the
 * claim is finished once, in one transaction with the reservation's status and the event's answer.
 * A delivery that finds a claim in flight (a retry, another event for the reservation, the alarm)
 * finishes it first, so a crash between two steps loses nothing and sells nothing twice.
 */
export class PaymentClaims {
  readonly #host: StockHost;
  readonly #pulls: ShardPulls;

  constructor(host: StockHost, pulls: ShardPulls) {
    this.#host = host;
    this.#pulls = pulls;
  }

  /**
   * Applies a verified payment event (see engine/payments.ts). `BUSY` when it cannot be decided now
   * (a sibling or the home shard could not answer, a resize is staging the home shard): nothing was
   * decided, and the provider's retry of the event goes on from where this stopped.
   */
  async apply(command: PaymentCommand, finished: Reservation | undefined): Promise<Outcome<PaymentAnswer>> {
    const { engine } = this.#host;
    if (!(await this.#pricedAsShardZero())) return fail("BUSY");
    let pulled = false;
    let pullAsked = false;
    let began = false;
    for (let step = 0; step < MAX_STEPS; step++) {
      const outcome = engine.payments.step(command, this.#host.now(), finished, pulled);
      if (!outcome.ok) return outcome;
      const next = outcome.value;
      if (next.kind === "answer") {
        // This delivery recorded the claim: its answer is the event's first, whoever finished the claim.
        return ok(began && next.answer.replayed ? { ...next.answer, replayed: false } : next.answer);
      }
      if (next.kind === "pull") {
        // Asked twice: a sibling that could not answer may have the units; deciding would be a guess.
        if (pullAsked) return fail("BUSY");
        pullAsked = true;
        const state = engine.configuration.state();
        if (!state) return fail("BUSY");
        // Whatever the siblings answered a moment ago (`siblingsEmpty`): the money is here now.
        const pull = await this.#pulls.pull(state, next.wanted, next.variant);
        pulled = !pull.failed;
        continue;
      }
      began ||= next.began;
      if (!(await this.finish(next.claim))) return fail("BUSY");
    }
    return fail("BUSY");
  }

  /**
   * A shard a cut left out hears of no later change of the SKU: before it checks a payment's money, it
   * takes the price in force from shard 0 (a late payment is a new sale, at today's price). False:
   * shard 0 could not answer (the provider's retry of the event decides it).
   */
  async #pricedAsShardZero(): Promise<boolean> {
    const state = this.#host.engine.configuration.state();
    if (!state || state.shard < state.shards) return true;
    try {
      const lead = await this.#host.shardOf(state.sku, 0).state();
      if (lead) this.#host.engine.configuration.takePricing(lead);
      return true;
    } catch (err) {
      log("warn", "a retired shard could not read shard 0's price", { error: String(err) });
      return false;
    }
  }

  /**
   * Asks the buyer's home shard for a claim's unit and finishes the claim with the answer. False when
   * it is not decided now (the home shard could not answer, or a resize is staging it): the alarm,
   * armed first, asks again.
   */
  async finish(claim: UnitClaim): Promise<boolean> {
    const host = this.#host;
    await host.due.retry("payment", host.now() + RETRY_MS);
    let shards = claim.shards;
    for (let move = 0; move < MAX_MOVES; move++) {
      let answer: GrantAnswer;
      try {
        answer = await this.#ask({ ...claim, shards });
      } catch (err) {
        log("warn", "a late payment's claim failed", { reservationId: claim.reservationId, error: String(err) });
        return false;
      }
      if (answer.kind === "moved") {
        shards = answer.shards; // resized since this shard last learnt the count: the buyer's home under the new one
        continue;
      }
      if (answer.kind === "busy") return false;
      host.engine.payments.finishClaim(claim.reservationId, answer, host.now());
      return true;
    }
    return false;
  }

  /** The alarm (and reconciliation's repair): finishes the claims left in flight; returns how many. */
  async finishAll(): Promise<number> {
    let finished = 0;
    for (const claim of this.#host.engine.payments.pendingClaims()) if (await this.finish(claim)) finished++;
    return finished;
  }

  /**
   * The buyer's home shard, asked for a late payment's unit: decided as a reservation is, pulling
   * from siblings when short (whatever they answered a moment ago: this money wants their units).
   */
  async grant(claim: UnitClaim): Promise<GrantAnswer> {
    const host = this.#host;
    const { engine } = host;
    let answer = engine.payments.grant(claim, host.now(), false);
    if (answer.kind === "short") {
      const state = engine.configuration.state();
      const pull = state ? await this.#pulls.pull(state, answer.wanted, answer.variant) : { pulled: 0, failed: true };
      answer = engine.payments.grant(claim, host.now(), !pull.failed);
      // Still short after a sibling could not answer: its units are unknown, so no refusal yet.
      if (answer.kind === "short") answer = { kind: "busy" };
    }
    await host.afterCommit();
    return answer;
  }

  /** The claim's home shard under `claim.shards`: this one (the count changed), or a sibling by RPC. */
  async #ask(claim: UnitClaim): Promise<GrantAnswer> {
    const state = this.#host.engine.configuration.state();
    if (!state) return { kind: "busy" };
    const home = homeShard(claim.userId, claim.shards);
    if (home === state.shard) return this.grant(claim);
    return this.#host.shardOf(state.sku, home).grantUnit(claim);
  }
}
