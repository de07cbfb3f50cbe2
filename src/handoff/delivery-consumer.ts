import { log } from "../../durable-objects/support";
import { increment } from "../observability/metrics";
import { type Outcome, recordOutcomes, type Taken, takeDue } from "./deliveries";
import { type Answer, attempt, bodyOf, DELIVERY_TIMEOUT_MS } from "./sender";

/**
 * The sender: consumer of `webhook-deliveries`, off the order consumer's path. A message there
 * says only "deliveries are due" (sent by the order consumer after it wrote changes, by a failed
 * attempt for its retry time, by a manual retry, and by the cron's check-back); the sender takes
 * what is due from D1, page by page, attempts each, and records the outcomes. A slow or dead
 * receiver holds at most its own attempts (10 s each), never the orders or the stock objects.
 */

/** API.md's backoff, seconds after each failed attempt; then the delivery is `failed`. */
export const DEFAULT_RETRY_SCHEDULE = [5, 300, 1800, 7200, 18_000, 36_000, 36_000] as const;
/** A queue message's longest delay (Cloudflare Queues: 12 hours). */
const MAX_DELAY_SECONDS = 43_200;
const PAGE = 100;
/** Attempts in flight at once within one page. */
const CONCURRENCY = 32;
/**
 * Long enough for a page's attempts and the write of their outcomes: each lane makes up to
 * PAGE / CONCURRENCY attempts one after another, each at most the timeout, then one more timeout's
 * worth for the write.
 */
const LEASE_MS = DELIVERY_TIMEOUT_MS * (Math.ceil(PAGE / CONCURRENCY) + 1);
/** How long one invocation keeps taking pages before it hands over to a fresh message. */
const BUDGET_MS = 20_000;

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

export async function consumeDeliveries(batch: MessageBatch<unknown>, env: Env): Promise<void> {
  const schedule = retrySchedule(env.WEBHOOK_RETRY_SCHEDULE);
  const lease = crypto.randomUUID();
  const started = Date.now();
  const retryDelays = new Set<number>();
  let more = true;
  while (more && Date.now() - started < BUDGET_MS) {
    const taken = await takeDue(env.DB, PAGE, lease, LEASE_MS);
    more = taken.length === PAGE;
    const outcomes: Outcome[] = [];
    await eachLimited(taken, CONCURRENCY, async (delivery) => {
      const answer = await attempt(delivery, bodyOf(delivery), Date.now());
      outcomes.push(outcomeOf(delivery, answer, schedule));
    });
    await recordOutcomes(env.DB, outcomes, lease);
    const counts = { delivered: 0, retried: 0, failed: 0 };
    for (const outcome of outcomes) {
      const result = outcome.status === "delivered" ? "delivered" : outcome.status === "failed" ? "failed" : "retried";
      counts[result]++;
      if (outcome.delayMs !== null) retryDelays.add(outcome.delayMs / 1000);
    }
    for (const [result, n] of Object.entries(counts)) {
      if (n > 0) increment("flashgate_webhook_deliveries_total", { result }, n);
    }
    if (counts.retried + counts.failed > 0) {
      // Ids and answers only: never a secret, a signature or a body.
      log("warn", "webhook deliveries not delivered", {
        ...counts,
        failures: outcomes
          .filter((o) => o.status !== "delivered")
          .slice(0, 20)
          .map((o) => ({ deliveryId: o.id, status: o.status, code: o.code, response: o.response.slice(0, 200) })),
      });
    }
  }
  // Still more due: a fresh invocation goes on. Retries: one wake-up per distinct delay, a second
  // late so that it never comes before the rows it is for are due.
  if (more) await wakeSender(env);
  for (const delay of retryDelays) await wakeSender(env, delay + 1);
  batch.ackAll();
}
