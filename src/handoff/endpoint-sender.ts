import { DurableObject } from "cloudflare:workers";
import { flushMetrics, flushMetricsSoon } from "../observability/metrics";
import { nextDueAt } from "./deliveries";
import { deliverEndpoint, type Lane, retrySchedule } from "./endpoint-lane";

/** The shortest wait before a run's next alarm when a row is due already. */
const MIN_ALARM_MS = 250;

/**
 * One endpoint's sender: a Durable Object per endpoint (named by its id) whose alarm runs the
 * endpoint's lane. Each alarm is an invocation of its own, with its own six connections and its own
 * budget, so an endpoint that hangs or fails never delays another's deliveries (API.md v1.3
 * "Webhook deliveries"). It keeps no state but its endpoint's id: the rows in D1 are the truth.
 */
export class WebhookSender extends DurableObject<Env> {
  #endpointId: string | undefined;
  /** A wake-up came during the running alarm: rows it did not see may be due. */
  #woken = false;

  /** Deliver what is due now: an alarm right away, unless one is due already or running. */
  async wake(endpointId: string): Promise<void> {
    await this.#remember(endpointId);
    this.#woken = true;
    await this.#alarmBy(Date.now());
  }

  async #remember(endpointId: string): Promise<void> {
    if (this.#endpointId !== endpointId) {
      this.#endpointId = endpointId;
      await this.ctx.storage.put("endpoint", endpointId);
    }
  }

  /** An alarm at `at` unless one comes earlier. */
  async #alarmBy(at: number): Promise<void> {
    const alarm = await this.ctx.storage.getAlarm();
    if (alarm === null || alarm > at) await this.ctx.storage.setAlarm(at);
  }

  override async alarm(): Promise<void> {
    this.#endpointId ??= await this.ctx.storage.get<string>("endpoint");
    const endpointId = this.#endpointId;
    if (!endpointId) return;
    this.#woken = false;
    const schedule = retrySchedule(this.env.WEBHOOK_RETRY_SCHEDULE);
    let lane: Lane;
    try {
      lane = await deliverEndpoint(this.env, endpointId, schedule, this.ctx.id.toString());
    } finally {
      // The run's counts live in this object's isolate, which no request or scrape of the Worker
      // flushes: sent with the isolate's next background flush (at most one a second), or now when
      // there is none (METRICS_FLUSH_INTERVAL_MS 0).
      if (Number(this.env.METRICS_FLUSH_INTERVAL_MS) > 0) flushMetricsSoon(this.env, (p) => this.ctx.waitUntil(p));
      else await flushMetrics(this.env);
    }
    // More due, or a wake-up came meanwhile (a new order): again now, whatever a retry's time.
    if (lane.more || this.#woken) {
      await this.ctx.storage.setAlarm(Date.now());
      return;
    }
    // Its next retry (or a lapsed lease), by D1's clock, from the due index: one read a run, not a delivery.
    // A batched endpoint's events held back for more are due rows already, so then it is the first row
    // due after now: they go when their wait ends (or sooner, when a wake-up brings enough), and a retry
    // due before that comes first.
    const next = await nextDueAt(this.env.DB, endpointId, lane.holdUntil !== null);
    // At least a beat later: a row due now that this run did not take is not retried in a tight loop.
    const retryMs = next ? Math.max(MIN_ALARM_MS, next.at - next.now + 50) : null;
    const holdMs = lane.holdUntil === null ? null : Math.max(10, lane.holdUntil - Date.now() + 10);
    const waitMs = retryMs === null ? holdMs : holdMs === null ? retryMs : Math.min(retryMs, holdMs);
    if (waitMs !== null) await this.ctx.storage.setAlarm(Date.now() + waitMs);
  }
}

export function senderOf(env: Env, endpointId: string): DurableObjectStub<WebhookSender> {
  return env.WEBHOOK_SENDERS.get(env.WEBHOOK_SENDERS.idFromName(endpointId));
}
