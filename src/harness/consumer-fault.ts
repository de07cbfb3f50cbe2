import type { ConsumeOrders } from "../index";
import { type OrderEvent, OrderEventSchema } from "../orders/events";
import { retryLater } from "../orders/order-consumer";

/** Shown each message's event before the consumer; throwing makes that message fail. */
export type ConsumerFault = (event: OrderEvent, attempts: number) => void;

/**
 * The one way faults reach the order consumer, for the chaos harness and the tests: `fault` sees each
 * message's event first, and a message it throws for is retried as a failed write would be (the same
 * backoff, metric and log line), without reaching the consumer; the others go on as one batch.
 * A message that is no event at all goes on untouched, for the consumer to refuse.
 */
export function withConsumerFault(consume: ConsumeOrders, fault: ConsumerFault): ConsumeOrders {
  return async (batch, env) => {
    const passed: Message<unknown>[] = [];
    for (const message of batch.messages) {
      const parsed = OrderEventSchema.safeParse(message.body);
      try {
        if (parsed.success) fault(parsed.data, message.attempts);
        passed.push(message);
      } catch (err) {
        if (parsed.success) retryLater(message, parsed.data, err);
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
