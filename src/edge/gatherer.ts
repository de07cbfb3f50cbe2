import { DurableObject } from "cloudflare:workers";
import { log } from "../../durable-objects/shared/log";
import type { ReserveOutcome, ReserveRequest } from "../../durable-objects/stock/stock-model";
import { ApiError, busy } from "../http/errors";
import { callStock, stockShardByName } from "../stock/stock-client";
import { GroupCommit } from "./group-commit";

/** A gatherer answers BUSY (retry the same token) before the edge's own wait of 10 s runs out. */
const GATHER_WAIT_MS = 8_000;

const BUSY: ReserveOutcome = { ok: false, code: "BUSY" };

/**
 * The gathering tier (issue 44; src/edge/README.md): an object between the isolates
 * and one stock shard that coalesces the reservations of every isolate that sends to it into one
 * reserve RPC at a time, with the edge's own group commit (./group-commit.ts), so the stock object
 * meets batches however many isolates a spike lands on. It stores nothing and decides nothing: each
 * caller gets the stock object's own answer for its request, or BUSY when it cannot know that
 * answer, which the edge turns into `503` and the shopper's retry with the same token replays (the
 * stock object decides a nonce once).
 */
export class Gatherer extends DurableObject<Env> {
  /** Batches sent to the stock object and the reservations in them, since this instance started (tests read them). */
  sent = { batches: 0, reservations: 0 };
  /** This instance's queue: a gatherer reset mid-batch leaves no batch in flight to its successor. */
  readonly #batches = new GroupCommit();
  /** The reserve RPC to the stock object; a seam for tests, which hold a batch's answers back. */
  send: (stock: string, batch: ReserveRequest[]) => Promise<ReserveOutcome[]> = (stock, batch) =>
    callStock(() => stockShardByName(this.env, stock).reserve(batch));

  /** Reserves `requests` on the stock object named `stock`, in batches with every other caller's. */
  async reserve(stock: string, requests: ReserveRequest[]): Promise<ReserveOutcome[]> {
    // One gatherer serves one shard (its name is `<stock>@<group>`): two shards' batches never mix.
    const name = this.ctx.id.name;
    if (name !== undefined && !name.startsWith(`${stock}@`)) throw new Error(`gatherer ${name} is not for ${stock}`);
    const sendBatch = (batch: ReserveRequest[]) => {
      this.sent.batches++;
      this.sent.reservations += batch.length;
      return this.send(stock, batch);
    };
    return Promise.all(
      requests.map((request) =>
        this.#batches.reserve(stock, request, sendBatch, GATHER_WAIT_MS).catch((err: unknown) => {
          // Only the stock object's answers pass through: what failed on the way is BUSY, never a guess.
          if (!isBusy(err)) log("error", "gatherer: reserve failed", { object: stock, error: String(err) });
          return BUSY;
        }),
      ),
    );
  }
}

function isBusy(err: unknown): boolean {
  return err instanceof ApiError && err.code === "BUSY";
}

/**
 * The edge's side: sends an isolate's batch for one stock shard to its gatherer. A gatherer that
 * fails (restarted, overloaded, unreachable) decided nothing itself, and whatever it passed on is
 * idempotent by nonce, so the shopper is told `503 BUSY`: the retry with the same token replays
 * any hold the batch made, or makes it.
 */
export function sendThroughGatherer(env: Env, stock: string, gatherer: string) {
  return async (requests: ReserveRequest[]): Promise<ReserveOutcome[]> => {
    try {
      return await env.GATHERER.getByName(gatherer).reserve(stock, requests);
    } catch (err) {
      log("warn", "gatherer call failed", { object: gatherer, error: String(err) });
      // The stock object may have decided the batch before the answer was lost: not "decided nothing".
      throw busy("The stock service's answer was lost (the same token never holds twice)");
    }
  };
}
