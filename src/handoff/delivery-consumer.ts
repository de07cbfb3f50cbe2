import { log } from "../../durable-objects/support";
import { increment } from "../observability/metrics";
import { deliveryId, enabledEndpointIds, type Outcome, recordOutcomes, type Taken, takeDue } from "./deliveries";
import { type Answer, attempt, bodyOf, DELIVERY_TIMEOUT_MS } from "./sender";

/**
 * The sender: consumer of `webhook-deliveries`, off the order consumer's path. A message there
 * says only "deliveries are due" (sent by the order consumer after it wrote changes, by a failed
 * attempt for its retry time, by a manual retry, and by the cron's check-back); the sender takes
 * what is due from D1, each endpoint in its own lane, page by page, attempts each, and records the
 * outcomes. A slow or dead receiver holds only its own lane (10 s an attempt), never another
 * endpoint's deliveries, the orders or the stock objects.
 */

/** API.md's backoff, seconds after each failed attempt; then the delivery is `failed`. */
export const DEFAULT_RETRY_SCHEDULE = [5, 300, 1800, 7200, 18_000, 36_000, 36_000] as const;
/** A queue message's longest delay (Cloudflare Queues: 12 hours). */
const MAX_DELAY_SECONDS = 43_200;
/** The most deliveries one endpoint's lane takes at a time. */
const PAGE = 64;
/**
 * Attempts in flight at once in one invocation: a Worker invocation has at most six connections
 * waiting for response headers, and a seventh fetch would wait in a queue with its timeout running
 * (https://developers.cloudflare.com/workers/platform/limits/). Lanes share them fairly.
 */
const CONNECTIONS = 6;
/** How long one invocation keeps taking pages before it hands over to a fresh message. */
const BUDGET_MS = 10_000;
/** How often an idle lane looks for new due rows while another lane is still sending. */
const IDLE_POLL_MS = 250;

/** `WEBHOOK_RETRY_SCHEDULE` (seconds, comma-separated), or the default when unset or malformed. */
export function retrySchedule(text: string | undefined): readonly number[] {
  if (!text) return DEFAULT_RETRY_SCHEDULE;
  const delays = text.split(",").map((part) => Number(part.trim()));
  if (delays.length === 0 || delays.some((d) => !Number.isInteger(d) || d < 0 || d > MAX_DELAY_SECONDS)) {
    log("error", "WEBHOOK_RETRY_SCHEDULE is malformed; using the default", { value: text });
    return DEFAULT_RETRY_SCHEDULE;
  }
  return delays;
}

/** Asks a sender to deliver what is due, now or after `delaySeconds`. */
export async function wakeSender(env: Env, delaySeconds = 0): Promise<void> {
  await env.WEBHOOK_DELIVERIES.send({ due: true }, { delaySeconds: Math.min(delaySeconds, MAX_DELAY_SECONDS) });
}

/** What an attempt's answer leaves: delivered, due again after the schedule's next delay, or failed. */
function outcomeOf(delivery: Taken, answer: Answer, schedule: readonly number[]): Outcome {
  const { code, response, error } = answer;
  const position = delivery.position;
  if (answer.ok) return { position, status: "delivered", code, response, error, delayMs: null };
  // The schedule's delay after this attempt, the (attempts + 1)th; none left: failed.
  const delay = schedule[delivery.attempts];
  if (delay === undefined) return { position, status: "failed", code, response, error, delayMs: null };
  return { position, status: "pending", code, response, error, delayMs: delay * 1000 };
}

/** Runs `work` over `items` with at most `limit` in flight. */
async function eachLimited<T>(items: readonly T[], limit: number, work: (item: T) => Promise<void>) {
  let next = 0;
  const lanes = Array.from({ length: Math.min(limit, items.length) }, async () => {
    while (next < items.length) await work(items[next++] as T);
  });
  await Promise.all(lanes);
}

/** One invocation's lanes: when they stop, how many are sending a page now, its free connections. */
interface Run {
  until: number;
  sending: number;
  /** Attempts in flight per lane: a fair share of {@link CONNECTIONS}. */
  perLane: number;
  slots: Slots;
}

/** At most `free` holders at once, the others waiting in arrival order. */
class Slots {
  #waiting: (() => void)[] = [];
  constructor(private free: number) {}
  async take(): Promise<void> {
    if (this.free > 0) {
      this.free--;
      return;
    }
    await new Promise<void>((resolve) => this.#waiting.push(resolve));
  }
  give(): void {
    const next = this.#waiting.shift();
    if (next) next();
    else this.free++;
  }
}

/** What one endpoint's lane did in an invocation. */
interface Lane {
  /** A full page was taken last: more may be due. */
  more: boolean;
  /** The delays (seconds) its retries are due after. */
  retryDelays: number[];
}

/**
 * Delivers one endpoint's due rows, page by page, until none is left or the budget is spent. Each
 * endpoint has its own lane, so one that hangs for its 10 s per attempt delays only itself: while
 * any lane is still sending, the others keep taking what comes due (new orders) every
 * {@link IDLE_POLL_MS}, rather than wait for the slow lane's invocation to end.
 */
async function deliverEndpoint(env: Env, endpointId: string, schedule: readonly number[], run: Run) {
  const lease = crypto.randomUUID();
  // A page starts at one round of attempts and doubles while every attempt is delivered, so an
  // endpoint that fails or hangs holds its lane for one round (10 s at most), not a full page.
  let page = run.perLane;
  const lane: Lane = { more: false, retryDelays: [] };
  while (Date.now() < run.until) {
    // Long enough for the page's attempts, each at most the timeout, and the write of their outcomes.
    const leaseMs = Math.ceil(page / run.perLane) * DELIVERY_TIMEOUT_MS + 10_000;
    const taken = await takeDue(env.DB, endpointId, page, lease, leaseMs);
    lane.more = taken.length === page;
    if (taken.length === 0) {
      if (run.sending === 0) break;
      await new Promise((resolve) => setTimeout(resolve, IDLE_POLL_MS));
      continue;
    }
    const outcomes: Outcome[] = [];
    run.sending++;
    try {
      await eachLimited(taken, run.perLane, async (delivery) => {
        // The attempt's timeout starts once it has a connection, never while it waits for one.
        await run.slots.take();
        try {
          const answer = await attempt(delivery, bodyOf(delivery), Date.now());
          outcomes.push(outcomeOf(delivery, answer, schedule));
        } finally {
          run.slots.give();
        }
      });
      await recordOutcomes(env.DB, endpointId, outcomes, lease);
    } finally {
      run.sending--;
    }
    page = outcomes.every((o) => o.status === "delivered") ? Math.min(PAGE, page * 2) : run.perLane;
    const counts = { delivered: 0, retried: 0, failed: 0 };
    for (const outcome of outcomes) {
      const result = outcome.status === "delivered" ? "delivered" : outcome.status === "failed" ? "failed" : "retried";
      counts[result]++;
      if (outcome.delayMs !== null) lane.retryDelays.push(outcome.delayMs / 1000);
    }
    for (const [result, n] of Object.entries(counts)) {
      if (n > 0) increment("flashgate_webhook_deliveries_total", { result }, n);
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
            status: o.status,
            code: o.code,
            error: o.error,
            response: o.response.slice(0, 200),
          })),
      });
    }
  }
  return lane;
}

export async function consumeDeliveries(batch: MessageBatch<unknown>, env: Env): Promise<void> {
  const schedule = retrySchedule(env.WEBHOOK_RETRY_SCHEDULE);
  const endpoints = await enabledEndpointIds(env.DB);
  const run: Run = {
    until: Date.now() + BUDGET_MS,
    sending: 0,
    perLane: Math.max(1, Math.floor(CONNECTIONS / Math.max(1, endpoints.length))),
    slots: new Slots(CONNECTIONS),
  };
  const lanes = await Promise.all(endpoints.map((id) => deliverEndpoint(env, id, schedule, run)));
  // Still more due: a fresh invocation goes on. Retries: one wake-up per distinct delay, a second
  // late so that it never comes before the rows it is for are due.
  if (lanes.some((lane) => lane.more)) await wakeSender(env);
  for (const delay of new Set(lanes.flatMap((lane) => lane.retryDelays))) await wakeSender(env, delay + 1);
  batch.ackAll();
}
