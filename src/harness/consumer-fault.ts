import { eventsOfMessage, type OrderEvent } from "../../durable-objects/stock/stock-model";
import type { ConsumeOrders } from "../index";
import { retryMessage } from "../orders/order-consumer";

/** Shown each event of each message before the consumer; throwing makes that message fail. */
export type ConsumerFault = (event: OrderEvent, attempts: number) => void;

/**
 * The one way faults reach the order consumer, for the chaos harness and the tests: `fault` sees each
 * event of each message first (a message carries one or many, durable-objects/shared/order-events.ts), and a message it
 * throws for, for any of its events, is retried whole as a failed write would be (the same backoff,
 * metric and log line), without reaching the consumer; the others go on as one batch. What is not a
 * valid event goes on untouched, for the consumer to refuse.
 */
export function withConsumerFault(consume: ConsumeOrders, fault: ConsumerFault): ConsumeOrders {
  return async (batch, env) => {
    const passed: Message<unknown>[] = [];
    for (const message of batch.messages) {
      const { events } = eventsOfMessage(message.body);
      try {
        for (const event of events) fault(event, message.attempts);
        passed.push(message);
      } catch (err) {
        retryMessage(message, events, err);
      }
    }
    await consume(
      {
        queue: batch.queue,
        metadata: batch.metadata,
        messages: passed,
        retryAll: (options) => {
          for (const message of passed) message.retry(options);
        },
        ackAll: () => {
          for (const message of passed) message.ack();
        },
      },
      env,
    );
  };
}
