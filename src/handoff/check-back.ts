import { deliveriesDue } from "./deliveries";
import { wakeSender } from "./delivery-consumer";

/**
 * The cron's check-back (every minute): if a delivery is due and no wake-up came for it (the order
 * consumer died between its D1 write and its send, a wake-up was dropped, a sender died holding
 * its endpoint), wake a sender. The rows are written with the orders, so this is
 * all it takes for none to be left behind.
 */
export async function checkBackDeliveries(env: Env): Promise<boolean> {
  const due = await deliveriesDue(env.DB);
  if (due) await wakeSender(env);
  return due;
}
