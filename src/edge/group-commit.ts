import type { ReserveOutcome, ReserveRequest } from "../../durable-objects/stock/stock-model";
import { busy } from "../http/errors";

/**
 * Group commit at the edge: reservations for one stock shard that arrive in this isolate while
 * an RPC to that shard is in flight wait for it, then go together as one RPC, decided in one
 * transaction in arrival order; each caller gets its own answer.
 *
 * An idle shard adds no wait at all: the first request leaves at once. The wait of a batched
 * request is bounded by one RPC to the shard, and a batch by `MAX_BATCH` requests.
 *
 * Every RPC is sent by a request that belongs to its batch (the batch's first), so no request
 * does I/O on behalf of a request whose response has already gone. A waiting request is woken
 * by another request (a promise resolved across request contexts); it keeps a timer of its own
 * pending meanwhile, because workerd cancels a request that waits with no I/O of its own as
 * hung. If that timer runs out, the request answers `503 BUSY`:
 *
 * - if its batch had not left yet, it leaves the queue and holds nothing;
 * - if its batch was already sent (the stock object is slower than the wait), the object may
 *   still make its hold. The hold is tied to the token's nonce, so a retry with the same token
 *   returns that same hold (`Idempotent-Replayed`), never a second one. That is the promise:
 *   after a 503, retry with the same token.
 *
 * The queue always makes progress: a waiter that leaves is never handed the lead, and a batch
 * that has not come back within the wait (its sender's request was cancelled, say) no longer
 * blocks the queue: the next batch leaves without it (the stock object serialises both, and
 * nonces make any overlap harmless).
 */
export const MAX_BATCH = 64;
/** The longest a request waits for the batch it joined (then: 503 BUSY, retry the same token). */
const MAX_WAIT_MS = 10_000;

type Send = (requests: ReserveRequest[]) => Promise<ReserveOutcome[]>;

interface Waiter {
  request: ReserveRequest;
  answer: PromiseWithResolvers<ReserveOutcome>;
  /** Resolved when this waiter is first in line and must send the next batch. */
  lead: PromiseWithResolvers<"lead">;
}

/** A batch on its way to the stock object. */
interface Flight {
  readonly sentAt: number;
}

class ShardQueue {
  readonly #waiters: Waiter[] = [];
  /** The waiter handed the lead that has not taken its batch yet. */
  #leader: Waiter | undefined;
  #flight: Flight | undefined;

  constructor(readonly maxWaitMs: number) {}

  async submit(request: ReserveRequest, send: Send): Promise<ReserveOutcome> {
    const me: Waiter = { request, answer: Promise.withResolvers(), lead: Promise.withResolvers() };
    this.#waiters.push(me);
    this.#next();
    let timer: ReturnType<typeof setTimeout> | undefined;
    const timeout = new Promise<"timeout">((resolve) => {
      timer = setTimeout(() => resolve("timeout"), this.maxWaitMs);
    });
    try {
      const role = await Promise.race([me.lead.promise, me.answer.promise, timeout]);
      if (role === "lead") await this.#sendBatch(send);
      else if (role === "timeout") {
        this.#leave(me);
        throw busy();
      }
      return await me.answer.promise;
    } finally {
      clearTimeout(timer);
    }
  }

  get idle(): boolean {
    return !this.#flight && !this.#leader && this.#waiters.length === 0;
  }

  /** Hands the lead to the first waiter when no batch is in flight and nobody holds the lead. */
  #next(): void {
    if (this.#flight || this.#leader) return;
    const next = this.#waiters[0];
    this.#leader = next;
    next?.lead.resolve("lead");
  }

  /** A waiter whose time ran out: out of the line, and the lead (if it had it) to the next. */
  #leave(me: Waiter): void {
    const at = this.#waiters.indexOf(me);
    if (at >= 0) this.#waiters.splice(at, 1);
    if (this.#leader === me) this.#leader = undefined;
    // A batch out for longer than the wait is presumed lost to the queue; the next one leaves.
    if (this.#flight && Date.now() - this.#flight.sentAt >= this.maxWaitMs) this.#flight = undefined;
    this.#next();
  }

  async #sendBatch(send: Send): Promise<void> {
    const batch = this.#waiters.splice(0, MAX_BATCH);
    const flight: Flight = { sentAt: Date.now() };
    this.#leader = undefined;
    this.#flight = flight;
    try {
      const answers = await send(batch.map((w) => w.request));
      batch.forEach((w, i) => {
        const answer = answers[i];
        if (answer) w.answer.resolve(answer);
        else w.answer.reject(new Error("stock object returned fewer answers than requests"));
      });
    } catch (err) {
      for (const w of batch) w.answer.reject(err);
    } finally {
      if (this.#flight === flight) this.#flight = undefined;
      this.#next();
    }
  }
}

/**
 * The shard queues of one owner: an isolate's edge (the module's own, below) or one gatherer object
 * (src/edge/gatherer.ts), whose queues must go with it: an object that is reset can come back in the
 * same isolate, and its successor must not wait behind a batch that died with it.
 */
export class GroupCommit {
  readonly #queues = new Map<string, ShardQueue>();

  /**
   * Reserves through the shard's queue (one RPC per batch). `maxWaitMs` exists for tests, which
   * cannot wait 10 s for a timer, and for the gatherer, which answers before its callers give up.
   */
  async reserve(key: string, request: ReserveRequest, send: Send, maxWaitMs = MAX_WAIT_MS): Promise<ReserveOutcome> {
    let queue = this.#queues.get(key);
    if (!queue) {
      queue = new ShardQueue(maxWaitMs);
      this.#queues.set(key, queue);
    }
    try {
      return await queue.submit(request, send);
    } finally {
      if (queue.idle) this.#queues.delete(key);
    }
  }
}

const isolate = new GroupCommit();

/** Reserves through the shard's queue of this isolate (one RPC per batch). */
export function reserveGrouped(
  key: string,
  request: ReserveRequest,
  send: Send,
  maxWaitMs = MAX_WAIT_MS,
): Promise<ReserveOutcome> {
  return isolate.reserve(key, request, send, maxWaitMs);
}
