import { log } from "../../durable-objects/shared/log";
import { increment } from "../observability/metrics";
import { deliveryId, type Outcome, recordOutcomes, type Taken, takeDue } from "./deliveries";
import { type Answer, attempt, bodyOf, DELIVERY_TIMEOUT_MS } from "./sender";

/**
 * One endpoint's lane: what its sender object (./endpoint-sender.ts) runs. It takes the endpoint's
 * due rows from D1 page by page, attempts each, records the outcomes, and the object sets its alarm
 * for the retries the schedule gives.
 */

/** A queue message's longest delay (Cloudflare Queues: 12 hours), and so the longest retry delay. */
export const MAX_DELAY_SECONDS = 43_200;

/** API.md's backoff, seconds after each failed attempt; then the delivery is `failed`. */
export const DEFAULT_RETRY_SCHEDULE = [5, 300, 1800, 7200, 18_000, 36_000, 36_000] as const;
/** The most deliveries one endpoint's lane takes at a time. */
const PAGE = 64;
/**
 * Attempts in flight at once in one endpoint's invocation: a Worker invocation has at most six
 * connections waiting for response headers, and a seventh fetch would wait in a queue with its
 * timeout running (https://developers.cloudflare.com/workers/platform/limits/). Each endpoint's
 * sender object is an invocation of its own, so these six are the endpoint's alone.
 */
const CONNECTIONS = 6;
/** How long one run of an endpoint's lane keeps taking pages before it hands over to a fresh alarm. */
const BUDGET_MS = 10_000;

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

/** What one endpoint's lane did in a run. */
export interface Lane {
  /** A full page was taken last: more may be due. */
  more: boolean;
}

/**
 * Delivers one endpoint's due rows, page by page, until none is left or the budget is spent. It
 * runs in the endpoint's own sender object (./endpoint-sender.ts), so its connections and its
 * budget are the endpoint's alone: one that hangs for its 10 s per attempt delays only itself.
 */
export async function deliverEndpoint(env: Env, endpointId: string, schedule: readonly number[]): Promise<Lane> {
  const until = Date.now() + BUDGET_MS;
  const lease = crypto.randomUUID();
  // A page starts at one round of attempts and doubles while every attempt is delivered, so an
  // endpoint that fails or hangs holds its lane for one round (10 s at most), not a full page.
  let page = CONNECTIONS;
  const lane: Lane = { more: false };
  while (Date.now() < until) {
    // Long enough for the page's attempts, each at most the timeout, and the write of their outcomes.
    const leaseMs = Math.ceil(page / CONNECTIONS) * DELIVERY_TIMEOUT_MS + 10_000;
    const taken = await takeDue(env.DB, endpointId, page, lease, leaseMs);
    lane.more = taken.length === page;
    if (taken.length === 0) break;
    const outcomes: Outcome[] = [];
    await eachLimited(taken, CONNECTIONS, async (delivery) => {
      const answer = await attempt(delivery, bodyOf(delivery), Date.now());
      outcomes.push(outcomeOf(delivery, answer, schedule));
    });
    await recordOutcomes(env.DB, endpointId, outcomes, lease);
    page = outcomes.every((o) => o.status === "delivered") ? Math.min(PAGE, page * 2) : CONNECTIONS;
    const counts = { delivered: 0, retried: 0, failed: 0 };
    for (const outcome of outcomes) {
      const result = outcome.status === "delivered" ? "delivered" : outcome.status === "failed" ? "failed" : "retried";
      counts[result]++;
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
