import { log } from "../../durable-objects/shared/log";
import type { ReserveOutcome, ReserveRequest } from "../../durable-objects/stock/stock-model";
import { ApiError, busy } from "../http/errors";
import { callStock, stockShard } from "../stock/stock-client";

/**
 * Fair opening (API.md): a reservation the stock object did not decide on arrival (`DRAW_PENDING`:
 * an entry of the opening draw, or a request that came after the window, before the decision)
 * waits on its home shard for the draw's answer, outside the group-commit queue (which must keep
 * carrying other entries meanwhile). A wait that ends without an answer (the object restarted, or
 * the decision is late) answers `503 BUSY`: the entry is kept in the object's storage, and a retry
 * with the same token gets the draw's answer.
 */
export async function awaitDraw(
  env: Env,
  sku: string,
  shard: number,
  request: ReserveRequest,
): Promise<ReserveOutcome> {
  try {
    return await callStock(() => stockShard(env, sku, shard).awaitDraw(request));
  } catch (err) {
    if (err instanceof ApiError) throw err;
    log("warn", "waiting for the opening draw failed", { requestId: request.requestId, sku, error: String(err) });
    throw busy("The opening draw is being decided (your token keeps its place)");
  }
}
