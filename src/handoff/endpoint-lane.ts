import { log } from "../../durable-objects/shared/log";
import { increment } from "../observability/metrics";
import { batchMessagesOf, formMessages, MAX_BATCH_EVENTS } from "./batches";
import { Deadlines } from "./deadlines";
import { deliveryId, type Outcome, recordBatch, recordOutcomes, release, takeDuePage } from "./deliveries";
import { type Answer, bodyOf, DELIVERY_TIMEOUT_MS, post } from "./sender";
import { Slots } from "./slots";

/**
 * One endpoint's lane: what its sender object (./endpoint-sender.ts) runs. It takes the endpoint's
 * due rows from D1 page by page, attempts each, records the outcomes, and the object sets its alarm
 * for the retries the schedule gives.
 */

/** A queue message's longest delay (Cloudflare Queues: 12 hours), and so the longest retry delay. */
export const MAX_DELAY_SECONDS = 43_200;

/** API.md's backoff, seconds after each failed attempt; then the delivery is `failed`. */
export const DEFAULT_RETRY_SCHEDULE = [5, 300, 1800, 7200, 18_000, 36_000, 36_000] as const;
/**
 * The most deliveries (or batch messages) one take of an endpoint's lane takes; an unbatched lane
 * holds two pages at most (the next is taken while the last of one goes out). Each take and each
 * record is a D1 round trip, which a larger page shares among more deliveries. A page does not
 * bound how long a run lasts: no attempt starts past the run's budget.
 */
export const PAGE = 1024;
/** The most due rows a batched lane takes to form one round's messages: six full batches. */
const CANDIDATES = 6 * MAX_BATCH_EVENTS;
/**
 * Attempts in flight at once in one endpoint's invocation: a Worker invocation has at most six
 * connections waiting for response headers, and a seventh fetch would wait in a queue with its
 * timeout running (https://developers.cloudflare.com/workers/platform/limits/). Each endpoint's
 * sender object is an invocation of its own, so these six are the endpoint's alone.
 */
const CONNECTIONS = 6;
/**
 * How long one run of an endpoint's lane starts attempts before it hands over to a fresh alarm:
 * the rows of a page not started by then stay due, for the next run.
 */
const BUDGET_MS = 10_000;
/**
 * A run's hold on its endpoint, renewed by each take: past its budget no attempt starts, so its
 * attempts are answered or timed out one timeout later, and their outcomes written.
 */
const LEASE_MS = BUDGET_MS + DELIVERY_TIMEOUT_MS + 10_000;

/** `WEBHOOK_RETRY_SCHEDULE` (seconds, comma-separated), or the default when unset or malformed. */
export function retrySchedule(text: string | undefined): readonly number[] {
  if (!text) return DEFAULT_RETRY_SCHEDULE;
  const parts = text.split(",").map((part) => part.trim());
  // An empty part ("5,,10") is a slip, not a delay of 0 s (which Number("") would make of it).
  const delays = parts.map((part) => (part === "" ? Number.NaN : Number(part)));
  if (delays.some((d) => !Number.isInteger(d) || d < 0 || d > MAX_DELAY_SECONDS)) {
    log("error", "WEBHOOK_RETRY_SCHEDULE is malformed; using the default", { value: text });
    return DEFAULT_RETRY_SCHEDULE;
  }
  return delays;
}

/**
 * What an attempt's answer leaves in the row taken as `row`: delivered, due again after the
 * schedule's next delay, or failed. `attempts` is the attempts answered before this one (a batch's:
 * the fewest of its rows', so an event new to a batch gets the whole schedule; one tried alone
 * before, while the endpoint sent single events, may get a try or two more than its own schedule).
 */
function outcomeOf(
  row: { position: number; seen_at: number },
  attempts: number,
  answer: Answer,
  schedule: readonly number[],
): Outcome {
  const { code, response, error } = answer;
  const key = { position: row.position, seenAt: row.seen_at };
  if (answer.ok) return { ...key, status: "delivered", code, response, error, delayMs: null, batchId: null };
  // The schedule's delay after this attempt, the (attempts + 1)th; none left: failed.
  const delay = schedule[attempts];
  if (delay === undefined) return { ...key, status: "failed", code, response, error, delayMs: null, batchId: null };
  return { ...key, status: "pending", code, response, error, delayMs: delay * 1000, batchId: null };
}

/** Runs `work` over `items` with at most `limit` in flight, starting none at or past `until`; how many started. */
async function eachLimited<T>(items: readonly T[], limit: number, until: number, work: (item: T) => Promise<void>) {
  let next = 0;
  const lanes = Array.from({ length: Math.min(limit, items.length) }, async () => {
    while (next < items.length && Date.now() < until) await work(items[next++] as T);
  });
  await Promise.all(lanes);
  return next;
}

/** What one endpoint's lane did in a run. */
export interface Lane {
  /** A full page was taken last: more may be due. */
  more: boolean;
  /**
   * A batched endpoint's events held back for more: when (this isolate's `Date.now()`) the oldest
   * has waited `maxWaitMs` since it was written, and they go anyway. Null when none are held.
   */
  holdUntil: number | null;
}

type Result = "delivered" | "retried" | "failed";
const resultOf = (outcome: Outcome): Result =>
  outcome.status === "delivered" ? "delivered" : outcome.status === "failed" ? "failed" : "retried";

/** Counts a round's events and messages (`/metrics`) and logs what was not delivered. */
function report(
  endpointId: string,
  kind: "single" | "batch",
  outcomes: readonly Outcome[],
  messages: readonly Result[],
) {
  const counts = { delivered: 0, retried: 0, failed: 0 };
  for (const outcome of outcomes) counts[resultOf(outcome)]++;
  for (const [result, n] of Object.entries(counts)) {
    if (n > 0) increment("flashgate_webhook_deliveries_total", { result }, n);
  }
  const sent = { delivered: 0, retried: 0, failed: 0 };
  for (const result of messages) sent[result]++;
  for (const [result, n] of Object.entries(sent)) {
    if (n > 0) increment("flashgate_webhook_messages_total", { kind, result }, n);
  }
  if (counts.retried + counts.failed > 0) {
    // Ids and answers only: never a secret, a signature or a body.
    log("warn", "webhook deliveries not delivered", {
      endpointId,
      ...counts,
      failures: outcomes
        .filter((o) => o.status !== "delivered")
        .slice(0, 20)
        .map((o) => ({
          deliveryId: deliveryId(endpointId, o.position),
          ...(o.batchId ? { batchId: o.batchId } : {}),
          status: o.status,
          code: o.code,
          error: o.error,
          response: o.response.slice(0, 200),
        })),
    });
  }
}

/**
 * Delivers one endpoint's due rows, page by page, until none is left or the budget is spent. It
 * runs in the endpoint's own sender object (./endpoint-sender.ts), so its connections and its
 * budget are the endpoint's alone: one that hangs for its 10 s per attempt delays only itself. An
 * unbatched endpoint gets one message per row; a batched one (API.md v1.4 "Webhook batches") the
 * messages ./batches.ts forms, each row's outcome its message's. The setting is read with each
 * page, so a PUT that changes it takes effect at the next page. `sender` names the sender object:
 * its batches hold the endpoint under that name.
 */
export async function deliverEndpoint(
  env: Env,
  endpointId: string,
  schedule: readonly number[],
  sender: string,
): Promise<Lane> {
  const deadlines = new Deadlines(DELIVERY_TIMEOUT_MS);
  try {
    return await runLane(env, endpointId, schedule, deadlines, sender);
  } finally {
    deadlines.close();
  }
}

/** What an unbatched stretch of a run did. */
interface Singles {
  /** The last page taken was full, or the budget left some of it: more may be due. */
  more: boolean;
  /** The endpoint is batched now: nothing was taken by the last take. */
  batched: boolean;
}

/**
 * An unbatched endpoint's due rows, one message each, page by page, with six attempts in flight
 * across pages. While every answer since the last page taken alone was delivered, the next page is
 * taken as the last row of the one before goes out, so the connections never wait for D1 (its
 * take renews the endpoint's lease for the attempts still in flight before it, and leaves their rows
 * out). After an answer that was not, a page is taken only once the one before is answered and
 * recorded, one round at a time, as an endpoint that fails or hangs holds its lane for one round.
 * Each page's outcomes are recorded as soon as its last answer comes, while the next page's attempts
 * go on.
 */
async function sendSingles(
  env: Env,
  endpointId: string,
  schedule: readonly number[],
  deadlines: Deadlines,
  until: number,
  sender: string,
): Promise<Singles> {
  const slots = new Slots(CONNECTIONS);
  const records: Promise<void>[] = [];
  let recordFailed: unknown = null;
  // The rows taken and not yet recorded: still due in D1, so each take leaves them out.
  const out = new Set<number>();
  const take = async (size: number) => {
    const page = await takeDuePage(env.DB, endpointId, size, sender, LEASE_MS, [...out]);
    for (const delivery of page.taken) out.add(delivery.position);
    return page;
  };
  let size = CONNECTIONS;
  let next = take(size);
  let healthy = true;
  const finish = async (singles: Singles) => {
    await Promise.all(records);
    if (recordFailed !== null) throw recordFailed;
    await release(env.DB, endpointId, sender);
    return singles;
  };
  try {
    for (;;) {
      const { taken, target, batch } = await next;
      if (batch) return finish({ more: false, batched: true });
      // The endpoint is gone or disabled: nothing was taken.
      if (!target) return finish({ more: false, batched: false });
      let more = taken.length === size;
      let prefetched = false;
      const outcomes: Outcome[] = [];
      const answers: Promise<void>[] = [];
      for (const [i, delivery] of taken.entries()) {
        await slots.acquire();
        if (Date.now() >= until) {
          // The budget is spent: the rest of the page stays due, for the next run.
          slots.release();
          more = true;
          break;
        }
        if (i === taken.length - 1 && healthy && more) {
          size = Math.min(PAGE, size * 2);
          next = take(size);
          prefetched = true;
        }
        answers.push(
          (async () => {
            try {
              const id = deliveryId(endpointId, delivery.position);
              const answer = await post(target, id, bodyOf(delivery), Date.now(), deadlines);
              const outcome = outcomeOf(delivery, delivery.attempts, answer, schedule);
              if (outcome.status !== "delivered") healthy = false;
              outcomes.push(outcome);
            } finally {
              slots.release();
            }
          })(),
        );
      }
      const recorded = Promise.all(answers)
        .then(() => recordOutcomes(env.DB, endpointId, outcomes, sender))
        .then(() => {
          for (const delivery of taken) out.delete(delivery.position);
        })
        .then(() => report(endpointId, "single", outcomes, outcomes.map(resultOf)))
        .catch((err: unknown) => {
          recordFailed ??= err;
        });
      records.push(recorded);
      if (prefetched) continue;
      // Taken alone: once this page is answered, the next is one round after an answer that was not
      // delivered, twice this one after a page all delivered.
      await recorded;
      if (!more || Date.now() >= until) return finish({ more, batched: false });
      healthy = outcomes.every((o) => o.status === "delivered");
      size = healthy ? Math.min(PAGE, size * 2) : CONNECTIONS;
      next = take(size);
    }
  } catch (err) {
    // A take failed with earlier pages still out: their attempts keep their timeouts (the caller
    // closes the deadlines once this returns) and their outcomes are recorded before the run ends.
    await Promise.allSettled(records);
    throw err;
  }
}

async function runLane(
  env: Env,
  endpointId: string,
  schedule: readonly number[],
  deadlines: Deadlines,
  sender: string,
) {
  const until = Date.now() + BUDGET_MS;
  // A batched page starts at one round of messages and doubles while every one is delivered, so an
  // endpoint that fails or hangs holds its lane for one round (10 s at most), not a full page.
  let page = CONNECTIONS;
  const lane: Lane = { more: false, holdUntil: null };
  let batched = false;
  // A setting that changes back and forth between pages cannot keep the lane switching past a few pages.
  let switches = 0;
  // A batched round answered and not yet recorded: the next take records it, or the run's end.
  let owed: { outcomes: Outcome[]; results: Result[] } | null = null;
  while (Date.now() < until && switches < 4) {
    if (!batched) {
      const singles = await sendSingles(env, endpointId, schedule, deadlines, until, sender);
      lane.more = singles.more;
      lane.holdUntil = null;
      if (!singles.batched) break;
      batched = true;
      switches++;
      continue;
    }
    // The lease is the sender object's name, the same in every run: an object reset in the middle
    // of a batch takes the endpoint back at its next run, not once the lease lapses.
    const { taken, target, batch, now } = await takeDuePage(
      env.DB,
      endpointId,
      CANDIDATES,
      sender,
      LEASE_MS,
      [],
      owed?.outcomes,
    );
    if (owed) report(endpointId, "batch", owed.outcomes, owed.results);
    owed = null;
    if (!target) {
      // The endpoint is gone or disabled: nothing was taken (the last round's outcomes were recorded).
      await release(env.DB, endpointId, sender);
      return { more: false, holdUntil: null };
    }
    if (!batch) {
      batched = false;
      switches++;
      continue;
    }
    const formed = formMessages(taken, taken.length === CANDIDATES, batch, now, page);
    lane.more = formed.more;
    // In this isolate's clock, as of the take: the sends and records that follow eat into the wait.
    lane.holdUntil = formed.holdUntil === null ? null : Date.now() + formed.holdUntil - now;
    if (formed.messages.length === 0) {
      // Held back for more (or another sender holds the endpoint, and nothing was taken).
      await release(env.DB, endpointId, sender);
      break;
    }
    const messages = batchMessagesOf(endpointId, formed.messages, taken);
    const outcomes: Outcome[] = [];
    const results: Result[] = [];
    const started = await eachLimited(messages, CONNECTIONS, until, async (message) => {
      const answer = await post(target, message.id, message.body, Date.now(), deadlines);
      // One outcome for the whole batch: every row delivered, or every row due again at one time.
      const attempts = Math.min(...message.rows.map((row) => row.attempts));
      for (const row of message.rows) {
        outcomes.push({ ...outcomeOf(row, attempts, answer, schedule), batchId: message.id });
      }
      results.push(resultOf(outcomeOf({ position: 0, seen_at: 0 }, attempts, answer, schedule)));
    });
    owed = { outcomes, results };
    page = results.every((r) => r === "delivered") ? Math.min(PAGE, page * 2) : CONNECTIONS;
    // Messages not started (the budget is spent) stay due, for the next run.
    lane.more = formed.more || started < messages.length;
    if (!lane.more) break;
  }
  if (owed) {
    await recordBatch(env.DB, endpointId, owed.outcomes, sender);
    report(endpointId, "batch", owed.outcomes, owed.results);
  }
  return lane;
}
