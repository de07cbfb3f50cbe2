import type { ReserveOutcome, ReserveRequest } from "../../durable-objects/stock/stock-model";
import { Gatherer as ProductionGatherer } from "../edge/gatherer";

/**
 * The gatherer as the chaos harness runs it: the production class plus three faults that
 * scripts/chaos reaches through /chaos/gatherer/* (src/harness/chaos-routes.ts), exported under the
 * same class name by the harness entry only. Each refuses to run unless the var CHAOS is "true".
 */
export class Gatherer extends ProductionGatherer {
  /** Batches sent before this time wait `#slowMs` first: a gatherer slow to pass batches on. */
  #slowUntil = 0;
  #slowMs = 0;
  /** Armed: the next batch reaches the stock object, which decides it; then this gatherer dies before answering. */
  #abortAfterSend = false;

  constructor(ctx: DurableObjectState, env: Env) {
    super(ctx, env);
    const send = this.send;
    this.send = async (stock: string, batch: ReserveRequest[]): Promise<ReserveOutcome[]> => {
      if (Date.now() < this.#slowUntil) await new Promise((resolve) => setTimeout(resolve, this.#slowMs));
      const answers = await send(stock, batch);
      if (this.#abortAfterSend) {
        this.#abortAfterSend = false;
        // The holds are made and acknowledged by no one yet: every caller of this batch is told 503.
        this.ctx.abort("chaos: gatherer aborted mid-batch");
      }
      return answers;
    };
  }

  #chaosOnly(): void {
    if (this.env.CHAOS !== "true") throw new Error("gatherer faults are only available when CHAOS is true");
  }

  /** Arms the mid-batch abort: the next batch this gatherer passes on is decided, then lost with it. */
  chaosAbortMidBatch(): void {
    this.#chaosOnly();
    this.#abortAfterSend = true;
  }

  /** Delays every batch by `delayMs` for the next `forMs`. */
  chaosSlow(delayMs: number, forMs: number): void {
    this.#chaosOnly();
    this.#slowMs = delayMs;
    this.#slowUntil = Date.now() + forMs;
  }

  /** Restarts the gatherer: its queue and whatever it has in flight go, the next call makes a new instance. */
  chaosRestart(): void {
    this.#chaosOnly();
    this.ctx.abort("chaos: gatherer restarted");
  }
}
