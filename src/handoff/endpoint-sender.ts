import { DurableObject } from "cloudflare:workers";
import { nextDueAt } from "./deliveries";
import { deliverEndpoint, retrySchedule } from "./delivery-consumer";

/**
 * One endpoint's sender: a Durable Object per endpoint (named by its id) whose alarm runs the
 * endpoint's lane. Each alarm is an invocation of its own, with its own six connections and its own
 * budget, so an endpoint that hangs or fails never delays another's deliveries (API.md v1.3
 * "Webhook deliveries"). It keeps no state but its endpoint's id: the rows in D1 are the truth.
 */
export class WebhookSender extends DurableObject<Env> {
  #endpointId: string | undefined;

  /** Deliver what is due now: an alarm right away, unless one is due already or running. */
  async wake(endpointId: string): Promise<void> {
    if (this.#endpointId !== endpointId) {
      this.#endpointId = endpointId;
      await this.ctx.storage.put("endpoint", endpointId);
    }
    const alarm = await this.ctx.storage.getAlarm();
    if (alarm === null || alarm > Date.now()) await this.ctx.storage.setAlarm(Date.now());
  }

  override async alarm(): Promise<void> {
    this.#endpointId ??= await this.ctx.storage.get<string>("endpoint");
    const endpointId = this.#endpointId;
    if (!endpointId) return;
    const lane = await deliverEndpoint(this.env, endpointId, retrySchedule(this.env.WEBHOOK_RETRY_SCHEDULE));
    if (lane.more) {
      await this.ctx.storage.setAlarm(Date.now());
      return;
    }
    // Its next retry (or a lapsed lease), by D1's clock, from the due index: one read a run, not a delivery.
    const next = await nextDueAt(this.env.DB, endpointId);
    if (next) await this.ctx.storage.setAlarm(Date.now() + Math.max(0, next.at - next.now) + 50);
  }
}

export function senderOf(env: Env, endpointId: string): DurableObjectStub<WebhookSender> {
  return env.WEBHOOK_SENDERS.get(env.WEBHOOK_SENDERS.idFromName(endpointId));
}
