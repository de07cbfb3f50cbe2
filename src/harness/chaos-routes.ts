import { Hono } from "hono";
import { z } from "zod";
import { type OrderEvent, shardName } from "../../durable-objects/stock/stock-model";
import { gathererName } from "../edge/gather-name";
import { adminAuth } from "../http/auth";
import { readJson } from "../http/body";
import type { AppEnv } from "../http/context";
import { ApiError } from "../http/errors";
import type { ConsumeOrders } from "../index";
import { callStock, SKU_ID, stockShard } from "../stock/stock-client";
import { withConsumerFault } from "./consumer-fault";
import type { Gatherer as ChaosGatherer } from "./harness-gatherer";
import type { HarnessStock } from "./harness-stock";
import { seededRandom } from "./seeded-random";

/**
 * Chaos-only fault switches for `npm run chaos` (scripts/chaos/). They exist only when the var
 * `CHAOS` is exactly "true", which only the chaos harness passes (`wrangler dev --var CHAOS:true`);
 * wrangler.toml and .dev.vars never set it. Anywhere else every `/chaos/*` path answers
 * `404 NOT_FOUND` for every method, and the queue handler runs without a fault hook.
 * The routes also require the admin token.
 */

/** The isolate-global fault settings read by the queue handler (the isolate serves both). */
interface ConsumerFaults {
  failRate: number;
  poisonRate: number;
  duplicateRate: number;
  maxDelaySeconds: number;
  random: () => number;
  failures: number;
  duplicates: number;
}

const faults: ConsumerFaults = {
  failRate: 0,
  poisonRate: 0,
  duplicateRate: 0,
  maxDelaySeconds: 0,
  random: seededRandom(1),
  failures: 0,
  duplicates: 0,
};

/** Event ids already re-sent once (a duplicate is not duplicated again). */
const duplicated = new Set<string>();

const FaultRequest = z.object({
  failRate: z.number().min(0).max(1),
  poisonRate: z.number().min(0).max(1).default(0),
  duplicateRate: z.number().min(0).max(1).default(0),
  maxDelaySeconds: z.int().min(0).max(30).default(0),
  seed: z
    .int()
    .min(0)
    .max(2 ** 32 - 1)
    .default(1),
});

/**
 * The order consumer as the harness runs it: unchanged unless `CHAOS` is "true", else behind the
 * chaos fault hook (through {@link withConsumerFault}). The hook fails messages at `failRate` (the
 * queue retries them, and dead-letters what keeps failing) and every time for the ids `poisonRate`
 * picks; at `duplicateRate` a message's event is sent to the queue once more after the batch,
 * delayed by up to `maxDelaySeconds`: a duplicate and late delivery of the same event id.
 */
export function chaosConsumer(consume: ConsumeOrders): ConsumeOrders {
  return async (batch, env) => {
    if (env.CHAOS !== "true") return consume(batch, env);
    const resend: OrderEvent[] = [];
    const faulty = withConsumerFault(consume, (event) => {
      if (faults.duplicateRate > 0 && !duplicated.has(event.id) && faults.random() < faults.duplicateRate) {
        duplicated.add(event.id);
        resend.push(event);
      }
      const poisoned = faults.poisonRate > 0 && idFraction(event.id) < faults.poisonRate;
      if (poisoned || (faults.failRate > 0 && faults.random() < faults.failRate)) {
        faults.failures++;
        throw new Error("chaos: injected consumer failure");
      }
    });
    await faulty(batch, env);
    for (const event of resend) {
      const delaySeconds = Math.floor(faults.random() * (faults.maxDelaySeconds + 1));
      await env.ORDER_EVENTS.send(event, { contentType: "json", delaySeconds });
      faults.duplicates++;
    }
  };
}

/** A stable fraction in [0, 1) of an event id (FNV-1a): poisoned ids fail on every attempt. */
function idFraction(id: string): number {
  let hash = 0x811c9dc5;
  for (let i = 0; i < id.length; i++) {
    hash ^= id.charCodeAt(i);
    hash = Math.imul(hash, 0x01000193);
  }
  return (hash >>> 0) / 4_294_967_296;
}

export const chaos = new Hono<AppEnv>();

chaos.use("/chaos/*", async (c, next) => {
  if (c.env.CHAOS !== "true") throw new ApiError("NOT_FOUND");
  await next();
});
chaos.use("/chaos/*", adminAuth);

/** Sets the consumer fault rates; `200` with the settings and what was injected so far. */
chaos.put("/chaos/consumer-faults", async (c) => {
  const body = await readJson(c, FaultRequest);
  faults.failRate = body.failRate;
  faults.poisonRate = body.poisonRate;
  faults.duplicateRate = body.duplicateRate;
  faults.maxDelaySeconds = body.maxDelaySeconds;
  faults.random = seededRandom(body.seed);
  return c.json(faultView());
});

chaos.get("/chaos/consumer-faults", (c) => c.json(faultView()));

function faultView() {
  const { failRate, poisonRate, duplicateRate, maxDelaySeconds, failures, duplicates } = faults;
  return { failRate, poisonRate, duplicateRate, maxDelaySeconds, failures, duplicates };
}

/** Aborts one stock object (its in-memory state and in-flight requests; storage stays). */
chaos.post("/chaos/stock/:sku/:shard/abort", async (c) => {
  const sku = c.req.param("sku");
  const shard = Number(c.req.param("shard"));
  if (!SKU_ID.test(sku) || !Number.isInteger(shard) || shard < 0 || shard > 63) throw new ApiError("NOT_FOUND");
  let error: string | null = null;
  try {
    const stub = stockShard(c.env, sku, shard) as unknown as DurableObjectStub<HarnessStock>;
    await callStock(() => stub.chaosAbort());
  } catch (err) {
    error = String(err); // the abort rejects the very call that caused it
  }
  return c.json({ sku, shard, aborted: true, error });
});

const GathererFault = z.discriminatedUnion("fault", [
  z.object({ fault: z.literal("abort-mid-batch") }),
  z.object({ fault: z.literal("slow"), delayMs: z.int().min(1).max(9_000), forMs: z.int().min(1).max(60_000) }),
  z.object({ fault: z.literal("restart") }),
]);

/**
 * A fault on the gatherer that this request's colo sends the shard's reservations to (the shoppers
 * reach the same one: one wrangler dev, one colo): `abort-mid-batch` (its next batch is decided by
 * the stock object, then the gatherer dies before answering), `slow` (each batch waits `delayMs`
 * for `forMs`) or `restart` (it dies now, with whatever it holds in its queue).
 */
chaos.post("/chaos/gatherer/:sku/:shard", async (c) => {
  const sku = c.req.param("sku");
  const shard = Number(c.req.param("shard"));
  if (!SKU_ID.test(sku) || !Number.isInteger(shard) || shard < 0 || shard > 63) throw new ApiError("NOT_FOUND");
  const body = await readJson(c, GathererFault);
  const name = gathererName(shardName(sku, shard), c.req.raw.cf?.colo as string | undefined);
  const stub = c.env.GATHERER.getByName(name) as unknown as DurableObjectStub<ChaosGatherer>;
  let error: string | null = null;
  try {
    if (body.fault === "abort-mid-batch") await stub.chaosAbortMidBatch();
    else if (body.fault === "slow") await stub.chaosSlow(body.delayMs, body.forMs);
    else await stub.chaosRestart();
  } catch (err) {
    error = String(err); // a restart rejects the very call that caused it
  }
  return c.json({ sku, shard, gatherer: name, fault: body.fault, error });
});

/**
 * Every shard's own state, shards 0 to `count` - 1 (null where a shard has none): what a resize or a
 * refused PUT left on each shard, which the admin view (a sum over the shards shard 0 counts) hides.
 * Reading a shard wakes its object, so the harness asks only for shards a PUT of the SKU reached.
 */
chaos.get("/chaos/stock/:sku/shards", async (c) => {
  const sku = c.req.param("sku");
  const count = Number(c.req.query("count") ?? "1");
  if (!SKU_ID.test(sku) || !Number.isInteger(count) || count < 1 || count > 64) throw new ApiError("NOT_FOUND");
  const shards = await Promise.all(
    Array.from({ length: count }, (_, shard) => callStock(() => stockShard(c.env, sku, shard).state())),
  );
  return c.json({ sku, shards });
});

const StockIdsRequest = z.object({
  skus: z.array(z.string().regex(SKU_ID)).min(1).max(200),
  shards: z.int().min(1).max(100),
});

/**
 * The Durable Object ids (hex, as wrangler dev names their SQLite files) of shards 0 to `shards` - 1
 * of each SKU, in that order: `idFromName(<sku>#<shard>)` only computes an id, no object is created
 * or woken.
 */
chaos.post("/chaos/stock-ids", async (c) => {
  const { skus, shards } = await readJson(c, StockIdsRequest);
  const names = skus.flatMap((sku) => Array.from({ length: shards }, (_, shard) => shardName(sku, shard)));
  return c.json({ names, ids: names.map((name) => c.env.SKU_STOCK.idFromName(name).toString()) });
});
