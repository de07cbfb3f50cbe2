import { endpointsDue } from "./deliveries";
import { MAX_DELAY_SECONDS } from "./endpoint-lane";
import { senderOf } from "./endpoint-sender";

/**
 * The sender: consumer of `webhook-deliveries`, off the order consumer's path. A message there
 * says only "deliveries are due" (sent by the order consumer after it wrote changes, by a manual
 * retry, and by the cron's check-back); the consumer wakes the sender object of each endpoint with
 * something due (./endpoint-sender.ts), which takes what is due from D1 page by page, attempts each,
 * records the outcomes and sets its own alarm for its retries. A slow or dead receiver holds only
 * its own object's invocation (10 s an attempt), never another endpoint's deliveries, the orders or
 * the stock objects.
 */

/** Asks a sender to deliver what is due, now or after `delaySeconds`. */
export async function wakeSender(env: Env, delaySeconds = 0): Promise<void> {
  await env.WEBHOOK_DELIVERIES.send({ due: true }, { delaySeconds: Math.min(delaySeconds, MAX_DELAY_SECONDS) });
}

/**
 * Wakes the sender objects of these endpoints (the order consumer knows them from its own batch, so
 * it skips the queue and a D1 read); if one cannot be reached, a queued wake-up tries again (the
 * queue's retries, then the cron's check-back).
 */
export async function wakeEndpoints(env: Env, ids: readonly string[]): Promise<void> {
  const woken = await Promise.allSettled(ids.map((id) => senderOf(env, id).wake(id)));
  if (woken.some((result) => result.status === "rejected")) await wakeSender(env);
}

/**
 * A wake-up: the queue message only says "deliveries are due". It wakes the sender object of each
 * enabled endpoint with a delivery due (one D1 read), each of which delivers in its own invocation.
 */
export async function consumeDeliveries(batch: MessageBatch<unknown>, env: Env): Promise<void> {
  for (const id of await endpointsDue(env.DB)) await senderOf(env, id).wake(id);
  batch.ackAll();
}
