import type { ReserveOutcome, ReserveRequest } from "../../durable-objects/stock-engine";
import { ApiError } from "../http/errors";

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
 * hung. If that timer runs out, the request answers `503 BUSY` rather than send twice.
 */
export const MAX_BATCH = 64;
/** The longest a request waits for the batch it joined (then: 503 BUSY, retry the same token). */
export const MAX_WAIT_MS = 10_000;

type Send = (requests: ReserveRequest[]) => Promise<ReserveOutcome[]>;

interface Waiter {
  request: ReserveRequest;
  answer: PromiseWithResolvers<ReserveOutcome>;
  /** Resolved when this waiter is first in line and must send the next batch. */
  lead: PromiseWithResolvers<"lead">;
}

class ShardQueue {
  readonly #waiters: Waiter[] = [];
  #inFlight = false;

  async submit(request: ReserveRequest, send: Send): Promise<ReserveOutcome> {
    const me: Waiter = { request, answer: Promise.withResolvers(), lead: Promise.withResolvers() };
    this.#waiters.push(me);
    if (!this.#inFlight) this.#handOver();
    let timer: ReturnType<typeof setTimeout> | undefined;
    const timeout = new Promise<"timeout">((resolve) => {
      timer = setTimeout(() => resolve("timeout"), MAX_WAIT_MS);
    });
    try {
      const role = await Promise.race([me.lead.promise, me.answer.promise, timeout]);
      if (role === "lead") await this.#sendBatch(send);
      else if (role === "timeout") throw new ApiError("BUSY", undefined, { "Retry-After": "1" });
      return await me.answer.promise;
    } finally {
      clearTimeout(timer);
    }
  }

  get idle(): boolean {
    return !this.#inFlight && this.#waiters.length === 0;
  }

  /** Lets the first waiter lead the next batch. */
  #handOver(): void {
    const next = this.#waiters[0];
    this.#inFlight = next !== undefined;
    next?.lead.resolve("lead");
  }

  async #sendBatch(send: Send): Promise<void> {
    const batch = this.#waiters.splice(0, MAX_BATCH);
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
      this.#handOver();
    }
  }
}

const queues = new Map<string, ShardQueue>();

/** Reserves through the shard's queue of this isolate (one RPC per batch). */
export async function reserveGrouped(key: string, request: ReserveRequest, send: Send): Promise<ReserveOutcome> {
  let queue = queues.get(key);
  if (!queue) {
    queue = new ShardQueue();
    queues.set(key, queue);
  }
  try {
    return await queue.submit(request, send);
  } finally {
    if (queue.idle) queues.delete(key);
  }
}
