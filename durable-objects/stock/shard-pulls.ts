import type { SkuState } from "../engine/types";
import { log } from "../shared/log";
import { RETRY_MS, type StockHost } from "./stock-host";

/** Units a shard pulls from a sibling beyond what it needs right now, to spare the next transfer. */
const PULL_SLACK = 8;
/**
 * How long siblings that all gave nothing are not asked again: a sharded SKU answers SOLD_OUT
 * from this shard alone meanwhile (the edge caches a SOLD_OUT for about as long anyway).
 */
export const SIBLINGS_EMPTY_MS = 500;

/**
 * A shard of a sharded SKU taking units from its siblings when it is short, with the engine's
 * exactly-once transfers (engine/transfers.ts): each transfer's intent is recorded before the
 * sibling is asked, so an interrupted one is finished by the alarm (or reconciliation) exactly once.
 */
export class ShardPulls {
  readonly #host: StockHost;
  /** Until when this shard's siblings count as empty (they were all asked and gave nothing). */
  #emptyUntil = 0;

  constructor(host: StockHost) {
    this.#host = host;
  }

  /** Whether the siblings were asked a moment ago and had nothing (each ask writes on both sides). */
  get siblingsEmpty(): boolean {
    return this.#host.now() < this.#emptyUntil;
  }

  /**
   * Pulls up to `wanted` (at least one) units from sibling shards, asking each in turn from the next
   * one on. Returns the units added, and whether some sibling could not be asked (its stock unknown).
   * Given a variant (sizes), units of that variant only.
   */
  async pull(state: SkuState, wanted: number, variant?: string): Promise<{ pulled: number; failed: boolean }> {
    const host = this.#host;
    let pulled = 0;
    let failed = false;
    // A shard a cut left outside the count (reached only by a replay of a token minted before it) pulls
    // nothing: nothing of the count would ask it for the units again (sim seed 282 on 4 shards).
    if (state.shard >= state.shards) return { pulled, failed };
    for (let step = 1; step < state.shards && pulled < Math.max(1, wanted); step++) {
      const from = (state.shard + step) % state.shards;
      const ask = Math.max(1, wanted - pulled) + PULL_SLACK;
      const id = crypto.randomUUID();
      host.engine.transfers.begin(id, from, ask, host.now(), variant);
      // Durably armed before the sibling is asked: if this object dies now, the alarm finishes it.
      await host.due.retry("transfer", host.now() + RETRY_MS);
      try {
        const granted = await this.#ask(state, from, id, ask, variant);
        host.engine.transfers.complete(id, granted, host.now());
        pulled += granted;
      } catch (err) {
        failed = true;
        log("warn", "stock transfer failed", { transferId: id, error: String(err) });
        await host.due.retry("transfer", host.now() + RETRY_MS); // the alarm finishes it
      }
    }
    if (pulled > 0) this.#emptyUntil = 0;
    return { pulled, failed };
  }

  /**
   * Sizes: a buyer's choices in order, each pulled from the siblings until one has `quantity` here.
   * `here`: this shard's units of each size, kept up to date across the buyers of one batch (a size
   * pulled for one counts for the next). A sibling that could not answer stops it (`failed`): its
   * units of that choice are unknown, so no later choice may be taken instead.
   */
  async pullChoices(
    state: SkuState,
    quantity: number,
    variants: readonly string[],
    here = new Map((state.variants ?? []).map((v) => [v.id, v.stock.available])),
  ) {
    let pulled = 0;
    let failed = false;
    for (const id of variants) {
      const left = here.get(id) ?? 0;
      if (left >= quantity) break;
      const pull = await this.pull(state, quantity - left, id);
      pulled += pull.pulled;
      failed ||= pull.failed;
      here.set(id, left + pull.pulled);
      if (pull.failed || left + pull.pulled >= quantity) break;
    }
    return { pulled, failed };
  }

  /**
   * One buyer short here (a line's grant, a draw's entry): their units pulled, their choices in
   * order with sizes. `busy`: a sibling could not answer and any answer now would be a guess (with
   * sizes, a later choice might stand for an earlier one on that sibling; without, nothing came).
   */
  async pullFor(
    state: SkuState,
    quantity: number,
    variants: readonly string[] | undefined,
  ): Promise<{ pulled: number; busy: boolean }> {
    const pull = variants
      ? await this.pullChoices(state, quantity, variants)
      : await this.pull(state, quantity - state.stock.available);
    return { pulled: pull.pulled, busy: pull.failed && (variants !== undefined || pull.pulled === 0) };
  }

  /** Every sibling answered and none had units: newcomers are not asked to wait for another ask. */
  noteEmpty(): void {
    this.#emptyUntil = this.#host.now() + SIBLINGS_EMPTY_MS;
  }

  /**
   * Asks sibling `from` to give a transfer's units. One fenced for a resize gives nothing yet and
   * records nothing: that is an ask that failed, finished by the alarm as a lost answer is.
   */
  async #ask(state: SkuState, from: number, id: string, requested: number, variant?: string): Promise<number> {
    const granted = await this.#host.shardOf(state.sku, from).giveStock(id, state.shard, requested, variant);
    if (granted === null) throw new Error(`shard ${from} is fenced for a resize`);
    return granted;
  }

  /** Finishes transfers whose answer was never recorded: asking again returns the first grant. */
  async finish(): Promise<number> {
    const host = this.#host;
    const state = host.engine.configuration.state();
    let finished = 0;
    if (!state) return finished;
    for (const transfer of host.engine.transfers.pending()) {
      try {
        const granted = await this.#ask(state, transfer.from, transfer.id, transfer.requested, transfer.variant);
        host.engine.transfers.complete(transfer.id, granted, host.now());
        finished++;
      } catch (err) {
        log("warn", "stock transfer retry failed", { transferId: transfer.id, error: String(err) });
        await host.due.retry("transfer", host.now() + RETRY_MS);
      }
    }
    return finished;
  }
}
