import { app } from "./app";
import { consumeDeadLetters } from "./orders/dead-letter-consumer";
import { consumeOrderEvents } from "./orders/order-consumer";

export { SkuStock } from "../durable-objects/sku-stock";

const DEAD_LETTER_QUEUE = "order-events-dlq";

export default {
  fetch: app.fetch,
  async queue(batch, env) {
    if (batch.queue === DEAD_LETTER_QUEUE) await consumeDeadLetters(batch, env);
    else await consumeOrderEvents(batch, env);
  },
} satisfies ExportedHandler<Env>;
