import { claimTier } from "../engine/access";
import { isScheduled, type SkuState } from "../engine/types";
import { type StockHost, siblingsAvailable } from "./stock-host";

/** Shard 0's answer to a token request with an access code (see {@link CodeAsks.ask}). */
export interface CodeAnswer {
  state: SkuState | null;
  codeTier: string | null;
  claimTier?: string;
  soldOut?: boolean;
  /** When shard 0 judged, by its clock (after the edge read its own): the edge judges the sale's phase then too. */
  at?: number;
}

/** An access code presented to shard 0, waiting for the turn that takes it. */
interface CodeAsk {
  hash: string;
  userId: string;
  /** Units of the sibling shards, read when this shard had none (null: not read, it had some). */
  elsewhere: number | null;
  resolve: (answer: CodeAnswer) => void;
  reject: (err: unknown) => void;
}

/**
 * Shard 0's access codes presented by token requests (docs/FAIR-OPENING.md "Early access"): codes
 * presented at about the same time are taken in one transaction (one commit), each judged against
 * the SKU's units in the turn that takes it.
 */
export class CodeAsks {
  readonly #host: StockHost;
  /** Codes presented and not yet decided: decided together. */
  #asks: CodeAsk[] = [];

  constructor(host: StockHost) {
    this.#host = host;
  }

  /**
   * The state and, only while the sale is on and has not publicly started, the tier the code
   * admits `userId` to (taking the code for them; null: the code admits nobody else). A code is
   * taken only by a shopper it alone admits: when an opened tier admits the shopper by a claim of
   * their JWT (`claims`), that tier is answered and the code stays free for whom it was meant for
   * (so does it once the public sale admits everyone). A code is taken only with a token, so its
   * stock is judged here before (this shard's units, else its siblings'): a SKU with no unit takes
   * none (`soldOut`: the edge answers SOLD_OUT), nor does one whose shards are changing (the state
   * says so: the edge answers BUSY).
   */
  async ask(userId: string, codeHash: string, claims: Record<string, unknown>): Promise<CodeAnswer> {
    const { engine } = this.#host;
    const state = engine.configuration.state();
    const now = this.#host.now();
    if (!state || !isScheduled(state, now)) return { state, codeTier: null, at: now };
    const byClaim = claimTier(state.access, claims, now);
    if (byClaim) return { state, codeTier: null, claimTier: byClaim.name, at: now };
    // The siblings' units count only when this shard has none (as the edge judges a token).
    const elsewhere =
      state.stock.available > 0 || state.shards === 1 ? null : await siblingsAvailable(this.#host, state);
    return new Promise((resolve, reject) => this.#push({ hash: codeHash, userId, elsewhere, resolve, reject }));
  }

  /**
   * The first presentation waits a timer's turn, letting the requests queued behind it join its
   * batch. One timer a batch, as draw-waiters.ts does: a timer per request measured twice the CPU.
   */
  #push(ask: CodeAsk): void {
    this.#asks.push(ask);
    if (this.#asks.length > 1) return;
    void scheduler.wait(0).then(() => {
      const asks = this.#asks;
      this.#asks = [];
      try {
        // Judged in the turn that takes the codes: a change or a sale since the call is seen.
        const at = this.#host.now();
        const current = this.#host.engine.configuration.state();
        const open = current !== null && isScheduled(current, at) && !current.reconfiguring;
        const units = current?.stock.available ?? 0;
        // This shard's units went since a call that so read no sibling's (a hold, a sibling's pull):
        // its siblings are read now and the code asked again, not answered sold out while they have units.
        const unread = open && units === 0 && current.shards > 1 ? asks.filter((a) => a.elsewhere === null) : [];
        if (unread.length > 0 && current !== null) {
          siblingsAvailable(this.#host, current).then(
            (n) => {
              for (const again of unread) this.#push({ ...again, elsewhere: n });
            },
            (err: unknown) => {
              for (const again of unread) again.reject(err);
            },
          );
        }
        const judged = unread.length > 0 ? asks.filter((a) => a.elsewhere !== null) : asks;
        const tiers = this.#host.engine.access.redeemMany(
          judged.map((a) => ({ hash: a.hash, userId: a.userId, take: open && units + (a.elsewhere ?? 0) > 0 })),
          at,
        );
        judged.forEach((a, i) => {
          a.resolve({ state: current, codeTier: tiers[i] ?? null, soldOut: units + (a.elsewhere ?? 0) === 0, at });
        });
      } catch (err) {
        for (const a of asks) a.reject(err);
      }
    });
  }
}
