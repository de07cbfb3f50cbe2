import { log } from "../../durable-objects/support";
import { increment } from "../observability/metrics";
import { enabledEndpointIds, type Outcome, recordOutcomes, type Taken, takeDue } from "./deliveries";
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
/** Deliveries one endpoint's lane takes at a time, and how many of them are in flight at once. */
const PAGE = 64;
const CONCURRENCY = 32;
/** Long enough for a page's attempts (each at most the timeout) and the write of their outcomes. */
const LEASE_MS = Math.ceil(PAGE / CONCURRENCY) * DELIVERY_TIMEOUT_MS + 10_000;
/** How long one invocation keeps taking pages before it hands over to a fresh message. */
const BUDGET_MS = 20_000;
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
  const { code, response } = answer;
  if (answer.ok) return { id: delivery.id, status: "delivered", code, response, delayMs: null };
  const delay = schedule[delivery.attempts - 1];
  if (delay === undefined) return { id: delivery.id, status: "failed", code, response, delayMs: null };
  return { id: delivery.id, status: "pending", code, response, delayMs: delay * 1000 };
}

/** Runs `work` over `items` with at most `limit` in flight. */
async function eachLimited<T>(items: readonly T[], limit: number, work: (item: T) => Promise<void>) {
  let next = 0;
  const lanes = Array.from({ length: Math.min(limit, items.length) }, async () => {
    while (next < items.length) await work(items[next++] as T);
  });
  await Promise.all(lanes);
}

/** One invocation's lanes: when they stop, and how many are sending a page now. */
interface Run {
  until: number;
  sending: number;
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
  const lane: Lane = { more: false, retryDelays: [] };
  while (Date.now() < run.until) {
    const taken = await takeDue(env.DB, endpointId, PAGE, lease, LEASE_MS);
    lane.more = taken.length === PAGE;
    if (taken.length === 0) {
      if (run.sending === 0) break;
      await new Promise((resolve) => setTimeout(resolve, IDLE_POLL_MS));
      continue;
    }
    const outcomes: Outcome[] = [];
    run.sending++;
    try {
      await eachLimited(taken, CONCURRENCY, async (delivery) => {
        const answer = await attempt(delivery, bodyOf(delivery), Date.now());
        outcomes.push(outcomeOf(delivery, answer, schedule));
      });
      await recordOutcomes(env.DB, outcomes, lease);
    } finally {
      run.sending--;
    }
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
          .map((o) => ({ deliveryId: o.id, status: o.status, code: o.code, response: o.response.slice(0, 200) })),
      });
    }
  }
  return lane;
}

export async function consumeDeliveries(batch: MessageBatch<unknown>, env: Env): Promise<void> {
  const schedule = retrySchedule(env.WEBHOOK_RETRY_SCHEDULE);
  const run: Run = { until: Date.now() + BUDGET_MS, sending: 0 };
  const lanes = await Promise.all(
    (await enabledEndpointIds(env.DB)).map((id) => deliverEndpoint(env, id, schedule, run)),
  );
  // Still more due: a fresh invocation goes on. Retries: one wake-up per distinct delay, a second
  // late so that it never comes before the rows it is for are due.
  if (lanes.some((lane) => lane.more)) await wakeSender(env);
  for (const delay of new Set(lanes.flatMap((lane) => lane.retryDelays))) await wakeSender(env, delay + 1);
  batch.ackAll();
}
