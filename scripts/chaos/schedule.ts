/**
 * The seeded part of the chaos run: options, the PRNG, the SKUs, and the fault schedule.
 * The same seed and options give the same SKUs, shopper plans and fault schedule.
 */

import { parseArgs } from "node:util";
import { seededRandom } from "../../src/harness/seeded-random";

export interface Options {
  seed: number;
  /** POW_BITS of the Worker (`--pow-bits`, default 0): above 0 every token costs a proof of work. */
  powBits: number;
  quick: boolean;
  /** How long shoppers arrive, in ms. */
  trafficMs: number;
  shoppers: number;
  /** Shoppers running at once (the machine has 2 cores). */
  concurrency: number;
  fuzz: boolean;
  chaos: boolean;
}

export function parseOptions(argv: string[]): Options {
  const { values } = parseArgs({
    args: argv,
    options: {
      seed: { type: "string" },
      quick: { type: "boolean", default: false },
      minutes: { type: "string" },
      "fuzz-only": { type: "boolean", default: false },
      "no-fuzz": { type: "boolean", default: false },
      "pow-bits": { type: "string" },
    },
    strict: true,
  });
  const seed = values.seed === undefined ? 1 : Number(values.seed);
  if (!Number.isInteger(seed) || seed < 0 || seed >= 2 ** 32)
    throw new Error(`--seed must be an integer, got ${values.seed}`);
  const minutes = values.minutes === undefined ? undefined : Number(values.minutes);
  if (minutes !== undefined && !(minutes > 0 && minutes <= 120)) throw new Error(`--minutes must be in (0, 120]`);
  const trafficMs = minutes !== undefined ? minutes * 60_000 : values.quick ? 60_000 : 180_000;
  const shoppers = Math.round((values.quick && minutes === undefined ? 260 : 200) * (trafficMs / 60_000));
  const powBits = Number(values["pow-bits"] ?? 0);
  if (!Number.isInteger(powBits) || powBits < 0 || powBits > 20) throw new Error("--pow-bits must be 0 to 20");
  return {
    seed,
    powBits,
    quick: values.quick,
    trafficMs,
    shoppers: Math.max(50, shoppers),
    concurrency: 48,
    fuzz: !values["no-fuzz"],
    chaos: !values["fuzz-only"],
  };
}

/** The harness's PRNG: the same seed gives the same schedule. */
export const prng = seededRandom;

/** A derived seed (for one shopper or one subsystem) that does not overlap the main stream. */
export function derive(seed: number, index: number): number {
  return (Math.imul(seed ^ 0x9e3779b9, 0x85ebca6b) + Math.imul(index + 1, 0xc2b2ae35)) >>> 0;
}

export const pick = <T>(random: () => number, items: readonly T[]): T => {
  const item = items[Math.floor(random() * items.length)];
  if (item === undefined) throw new Error("pick from an empty list");
  return item;
};
export const between = (random: () => number, min: number, max: number): number =>
  min + Math.floor(random() * (max - min + 1));

export interface SkuPlan {
  sku: string;
  totalStock: number;
  perUserLimit: number;
  holdSeconds: number;
  shards: number;
  /** Relative share of shoppers. */
  weight: number;
  /** Fair opening: the sale starts `leadMs` after configuration; its first `windowMs` are one draw. */
  opening?: { leadMs: number; windowMs: number };
  /**
   * A SKU no random shopper buys (weight 0), played by the money scene of scripts/chaos/actors.ts: a
   * sharded SKU paid late across a resize, twice at once and by Stripe's delayed methods. The seeded
   * faults of the shopper SKUs (aborts, operators, restocks) never pick it. The stock objects' own
   * scenes (resizes raced by reservations, the line, sizes, early access) are the simulator's
   * (docs/SIMULATOR.md).
   */
  role?: "money";
}

/** How many `money` SKUs (one money scene each: it sells, so the SKU cannot be resized again): 2 to 4. */
export function moneyScenes(opts: Options): number {
  return Math.min(4, Math.max(2, Math.ceil(opts.trafficMs / 90_000)));
}

/** A SKU of one actor (weight 0: no random shopper buys it), its holds 900 s. */
const actorSku = (
  sku: string,
  totalStock: number,
  perUserLimit: number,
  shards: number,
  role: NonNullable<SkuPlan["role"]>,
): SkuPlan => ({ sku, totalStock, perUserLimit, holdSeconds: 900, shards, weight: 0, role });

export function skuPlans(opts: Options): SkuPlan[] {
  const scale = Math.max(1, Math.ceil(opts.trafficMs / 120_000));
  const prefix = `chaos${opts.seed}`;
  return [
    { sku: `${prefix}-solo`, totalStock: 50 * scale, perUserLimit: 2, holdSeconds: 900, shards: 1, weight: 3 },
    { sku: `${prefix}-short`, totalStock: 40 * scale, perUserLimit: 2, holdSeconds: 10, shards: 1, weight: 3 },
    { sku: `${prefix}-sharded`, totalStock: 90 * scale, perUserLimit: 3, holdSeconds: 900, shards: 4, weight: 3 },
    { sku: `${prefix}-hot`, totalStock: 12 * scale, perUserLimit: 1, holdSeconds: 10, shards: 2, weight: 2 },
    // A sale with a fair opening: the first 3 s after its start are decided by one draw (over 2 shards).
    {
      sku: `${prefix}-drawn`,
      totalStock: 30 * scale,
      perUserLimit: 2,
      holdSeconds: 900,
      shards: 2,
      weight: 3,
      opening: { leadMs: 4_000, windowMs: 3_000 },
    },
    // Held and cancelled, resized, then paid late, twice at once and by Stripe's delayed methods (actors.ts, `money`).
    ...Array.from({ length: moneyScenes(opts) }, (_, i) => actorSku(`${prefix}-money${i + 1}`, 6, 1, 2, "money")),
  ];
}

export type Fault =
  | {
      kind: "consumer";
      failRate: number;
      /** Share of events that fail on every attempt while the window lasts (they reach the dead-letter queue). */
      poisonRate: number;
      duplicateRate: number;
      maxDelaySeconds: number;
      seed: number;
    }
  | { kind: "consumer-off" }
  | { kind: "redis-kill"; downMs: number }
  | { kind: "abort"; sku: string; shard: number }
  | { kind: "reconcile" }
  | { kind: "dead-letter-replay" }
  | { kind: "restock"; sku: string; add: number }
  /**
   * An operator at work during the sale: `PUT /admin/skus/:sku` setting a new total (`delta` from the
   * last one set, cuts included), pausing the sale for `pauseMs` and resuming it, or resizing to
   * `shards` (refused with 409 while anything is held, sold or waiting).
   */
  | {
      kind: "operator";
      sku: string;
      action: "total" | "pause" | "resize";
      delta: number;
      pauseMs: number;
      shards: number;
    }
  /**
   * The actors of actors.ts. `refused-put`: a `PUT` mid-sale that must be refused (`totalStock` below
   * what is sold), carrying other changes too (name, status, perUserLimit, holdSeconds, endsAt); `sku`
   * is the first choice, the next shopper SKU with units sold is taken when it has none. `stranger`:
   * requests about SKU ids never configured, on every route that names one.
   */
  | { kind: "refused-put"; sku: string; round: number }
  | { kind: "stranger"; ghosts: string[]; round: number }
  /** `money`: one money scene on a `money` SKU, resized from its 2 shards to `shards` (3 or 4) mid-scene. */
  | { kind: "money"; sku: string; shards: number; round: number }
  /**
   * The shop's webhook receiver (hooks.ts), by endpoint role. `receiver-window`: its next `fail`
   * requests answer 500, the `drop` after them are recorded, then cut unanswered (it processed them,
   * Flashgate sees a failure and sends them again). `receiver-outage`: every request answered 503 at
   * once for `downMs`, longer than the whole retry schedule, so some deliveries end `failed` (the
   * operator retries them after the faults). `receiver-stall`: for `stallMs` its answers take 11–12 s,
   * past the sender's 10-s timeout (processed, yet sent again).
   */
  | { kind: "receiver-window"; endpoint: HookRole; fail: number; drop: number }
  | { kind: "receiver-outage"; endpoint: HookRole; downMs: number }
  | { kind: "receiver-stall"; endpoint: HookRole; stallMs: number }
  /**
   * The gathering tier (GATHER = "sharded": every SKU of more than one shard goes through it): a
   * shard's gatherer `abort-mid-batch` (its next batch is decided by the stock object, then lost with
   * the gatherer: every caller in it is told 503 and retries its token), `slow` (each batch waits
   * `delayMs` for `forMs`) or `restart` (it dies with what it has queued).
   */
  | { kind: "worker-restart" }
  | { kind: "gatherer"; sku: string; shard: number; fault: "abort-mid-batch" | "restart" }
  | { kind: "gatherer"; sku: string; shard: number; fault: "slow"; delayMs: number; forMs: number };

/** The shop's webhook endpoints that faults reach (hooks.ts); the third, `paid`, stays healthy. */
export type HookRole = "shop" | "refunds";

export interface Scheduled {
  atMs: number;
  fault: Fault;
}

/** The fault schedule: every fault at a seeded offset from the start of traffic, in time order. */
export function faultSchedule(opts: Options, all: SkuPlan[]): Scheduled[] {
  const random = prng(derive(opts.seed, 1_000_000));
  // The seeded faults of the shopper SKUs (the same schedule as before the actors' SKUs existed).
  const skus = all.filter((plan) => plan.role === undefined);
  const end = opts.trafficMs;
  const out: Scheduled[] = [];
  // Consumer failure windows: on for a while, then off, over the whole traffic period.
  // The first window is long and poisons a share of events: those fail past max_retries (about 31 s of
  // back-off) and land in the dead-letter queue, replayed later.
  for (let at = between(random, 2_000, 6_000), first = true; at < end - 5_000; first = false) {
    const failRate = pick(random, [0.2, 0.35, 0.5, 0.9]);
    out.push({
      atMs: at,
      fault: {
        kind: "consumer",
        failRate,
        poisonRate: first ? 0.1 : 0,
        duplicateRate: pick(random, [0.1, 0.25, 0.4]),
        maxDelaySeconds: between(random, 0, 5),
        seed: between(random, 1, 2 ** 31),
      },
    });
    const length = first ? Math.max(45_000, Math.min(end - at - 5_000, 60_000)) : between(random, 6_000, 15_000);
    out.push({ atMs: Math.min(end, at + length), fault: { kind: "consumer-off" } });
    at += length + between(random, 3_000, 10_000);
  }
  const perMinute = (n: number) => Math.max(1, Math.round((n * end) / 60_000));
  for (let i = 0; i < perMinute(2); i++) {
    out.push({
      atMs: between(random, 5_000, end - 8_000),
      fault: { kind: "redis-kill", downMs: between(random, 2_000, 6_000) },
    });
  }
  for (let i = 0; i < perMinute(8); i++) {
    const sku = pick(random, skus);
    out.push({
      atMs: between(random, 1_000, end - 1_000),
      fault: { kind: "abort", sku: sku.sku, shard: between(random, 0, sku.shards - 1) },
    });
  }
  for (let i = 0; i < perMinute(3); i++) out.push({ atMs: between(random, 3_000, end), fault: { kind: "reconcile" } });
  for (let i = 0; i < perMinute(1); i++)
    out.push({ atMs: between(random, 20_000, end + 20_000), fault: { kind: "dead-letter-replay" } });
  for (let i = 0; i < perMinute(1); i++) {
    const sku = pick(random, skus);
    out.push({
      atMs: between(random, 10_000, end - 5_000),
      fault: { kind: "restock", sku: sku.sku, add: between(random, 5, 20) },
    });
  }
  for (let i = 0; i < perMinute(6); i++) {
    const sku = pick(random, skus);
    out.push({
      atMs: between(random, 2_000, end - 2_000),
      fault: {
        kind: "operator",
        sku: sku.sku,
        action: pick(random, ["total", "total", "pause", "resize"] as const),
        delta: between(random, -8, 12),
        pauseMs: between(random, 500, 3_000),
        shards: pick(
          random,
          [1, 2, 4].filter((n) => n !== sku.shards),
        ),
      },
    });
  }
  out.push(...actorSchedule(opts, all, perMinute));
  out.push(...receiverSchedule(opts, perMinute));
  out.push(...gathererSchedule(opts, all, perMinute));
  out.push(...restartSchedule(opts, perMinute));
  return out.sort((a, b) => a.atMs - b.atMs);
}

/**
 * Restarts of the whole Worker (wrangler dev stopped and started again over the same state: every
 * isolate and object new, as after a deploy), from their own seeded stream so the others keep their
 * times: one a minute of traffic, at least two, none in the first or last 10 s.
 */
function restartSchedule(opts: Options, perMinute: (n: number) => number): Scheduled[] {
  const random = prng(derive(opts.seed, 5_000_000));
  const end = opts.trafficMs;
  return Array.from({ length: Math.max(2, perMinute(1)) }, () => ({
    atMs: between(random, 10_000, end - 10_000),
    fault: { kind: "worker-restart" as const },
  }));
}

/** The actors' faults (actors.ts), from their own seeded stream so the others keep their times. */
function actorSchedule(opts: Options, all: SkuPlan[], perMinute: (n: number) => number): Scheduled[] {
  const random = prng(derive(opts.seed, 2_000_000));
  const end = opts.trafficMs;
  const out: Scheduled[] = [];
  const shopperSkus = all.filter((plan) => plan.role === undefined);
  // Refused PUTs once units are sold; the first one on a sharded SKU (several shards to leave as they were).
  const sharded = shopperSkus.filter((plan) => plan.shards > 1);
  for (let i = 0; i < perMinute(3); i++) {
    const sku = pick(random, i === 0 && sharded.length > 0 ? sharded : shopperSkus);
    out.push({
      atMs: between(random, Math.min(15_000, end / 4), end - 2_000),
      fault: { kind: "refused-put", sku: sku.sku, round: i + 1 },
    });
  }
  const hex = () => between(random, 0, 2 ** 31 - 1).toString(16);
  for (let i = 0; i < perMinute(1); i++) {
    out.push({
      atMs: between(random, 5_000, end - 5_000),
      fault: {
        kind: "stranger",
        ghosts: [`chaos${opts.seed}-ghost${i + 1}`, `never-configured-${hex()}`, `${shopperSkus[0]?.sku ?? "sku"}x`],
        round: i + 1,
      },
    });
  }
  // Money scenes spread over the traffic, each on its own SKU.
  const money = all.filter((plan) => plan.role === "money");
  money.forEach((plan, i) => {
    const slot = (end - 10_000) / money.length;
    out.push({
      atMs: Math.round(4_000 + slot * i + between(random, 0, Math.max(0, Math.floor(slot / 2)))),
      fault: { kind: "money", sku: plan.sku, shards: between(random, 3, 4), round: i + 1 },
    });
  });
  return out;
}

/**
 * The shop receiver's faults (hooks.ts), from their own seeded stream so the others keep their times.
 * Traffic is cut into 30-s slots, each with an outage (even slots) or a stall (odd ones), which never
 * overlap; fail and drop windows come at random times throughout.
 */
function receiverSchedule(opts: Options, perMinute: (n: number) => number): Scheduled[] {
  const random = prng(derive(opts.seed, 3_000_000));
  const end = opts.trafficMs;
  const out: Scheduled[] = [];
  const slots = Math.max(1, Math.floor(end / 30_000));
  for (let slot = 0; slot < slots; slot++) {
    const start = slot * 30_000;
    out.push(
      slot % 2 === 0
        ? {
            atMs: start + between(random, 4_000, 8_000),
            fault: { kind: "receiver-outage", endpoint: "shop", downMs: between(random, 16_000, 20_000) },
          }
        : {
            atMs: start + between(random, 4_000, 20_000),
            fault: { kind: "receiver-stall", endpoint: "shop", stallMs: between(random, 2_000, 4_000) },
          },
    );
  }
  for (let i = 0; i < perMinute(4); i++) {
    out.push({
      atMs: between(random, 2_000, end - 5_000),
      fault: { kind: "receiver-window", endpoint: "shop", fail: between(random, 3, 12), drop: between(random, 2, 6) },
    });
  }
  for (let i = 0; i < perMinute(3); i++) {
    out.push({
      atMs: between(random, 2_000, end - 5_000),
      fault: { kind: "receiver-window", endpoint: "refunds", fail: 0, drop: between(random, 1, 4) },
    });
  }
  return out;
}

/**
 * The gatherers' faults, on the shopper SKUs that gather (more than one shard), from their own seeded
 * stream so the others keep their times: mid-batch aborts, slow windows and restarts.
 */
function gathererSchedule(opts: Options, all: SkuPlan[], perMinute: (n: number) => number): Scheduled[] {
  const random = prng(derive(opts.seed, 4_000_000));
  const end = opts.trafficMs;
  const gathered = all.filter((plan) => plan.role === undefined && plan.shards > 1);
  if (gathered.length === 0) return [];
  const out: Scheduled[] = [];
  const at = () => between(random, 1_000, end - 1_000);
  const shardOf = (plan: SkuPlan) => between(random, 0, plan.shards - 1);
  for (let i = 0; i < perMinute(6); i++) {
    const plan = pick(random, gathered);
    out.push({
      atMs: at(),
      fault: { kind: "gatherer", sku: plan.sku, shard: shardOf(plan), fault: "abort-mid-batch" },
    });
  }
  for (let i = 0; i < perMinute(3); i++) {
    const plan = pick(random, gathered);
    const fault = { kind: "gatherer", sku: plan.sku, shard: shardOf(plan), fault: "slow" } as const;
    out.push({
      atMs: at(),
      fault: { ...fault, delayMs: between(random, 200, 1_500), forMs: between(random, 3_000, 8_000) },
    });
  }
  for (let i = 0; i < perMinute(3); i++) {
    const plan = pick(random, gathered);
    out.push({ atMs: at(), fault: { kind: "gatherer", sku: plan.sku, shard: shardOf(plan), fault: "restart" } });
  }
  return out;
}

export function describeFault(fault: Fault): string {
  switch (fault.kind) {
    case "consumer":
      return `consumer faults on (fail ${fault.failRate}, poison ${fault.poisonRate}, duplicate ${fault.duplicateRate}, delay ≤ ${fault.maxDelaySeconds}s)`;
    case "consumer-off":
      return "consumer faults off";
    case "redis-kill":
      return `redis-server killed for ${fault.downMs} ms`;
    case "abort":
      return `stock object ${fault.sku}#${fault.shard} aborted`;
    case "reconcile":
      return "reconciliation run mid-traffic (re-emits: duplicate deliveries)";
    case "dead-letter-replay":
      return "dead letters replayed";
    case "restock":
      return `${fault.sku} restocked by ${fault.add}`;
    case "operator":
      return fault.action === "total"
        ? `operator sets ${fault.sku}'s total ${fault.delta >= 0 ? "+" : ""}${fault.delta}`
        : fault.action === "pause"
          ? `operator pauses ${fault.sku} for ${fault.pauseMs} ms`
          : `operator resizes ${fault.sku} to ${fault.shards} shards`;
    case "refused-put":
      return `operator PUT refused mid-sale (totalStock below sold, other fields changed too) on ${fault.sku} or a SKU with sales`;
    case "stranger":
      return `a stranger asks about never-configured SKUs ${fault.ghosts.join(", ")} on every route`;
    case "money":
      return `money scene on ${fault.sku}: holds cancelled, resized to ${fault.shards} shards, then paid late, twice at once (its shard aborted) and by a Stripe delayed method`;
    case "receiver-window":
      return `the shop's ${fault.endpoint} webhook receiver fails its next ${fault.fail} requests (500), then drops ${fault.drop} (processed, unanswered)`;
    case "receiver-outage":
      return `the shop's ${fault.endpoint} webhook receiver answers 503 for ${fault.downMs} ms (past the retry schedule)`;
    case "receiver-stall":
      return `the shop's ${fault.endpoint} webhook receiver answers after 11–12 s (past the 10-s timeout) for ${fault.stallMs} ms`;
    case "worker-restart":
      return "the Worker restarted (wrangler dev stopped and started over the same state: every isolate new)";
    case "gatherer":
      return fault.fault === "slow"
        ? `gatherer of ${fault.sku}#${fault.shard} slow: each batch waits ${fault.delayMs} ms for ${fault.forMs} ms`
        : fault.fault === "restart"
          ? `gatherer of ${fault.sku}#${fault.shard} restarted (its queue lost)`
          : `gatherer of ${fault.sku}#${fault.shard} aborted mid-batch (decided by the stock object, answers lost)`;
  }
}
