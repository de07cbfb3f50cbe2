import { runInDurableObject } from "cloudflare:test";
import { env } from "cloudflare:workers";
import { describe, expect, it } from "vitest";
import { drawOrder, entryIdOf, rankEntrants, sha256Hex } from "../durable-objects/engine/opening-draw";
import type { ReserveRequest } from "../durable-objects/engine/types";
import { StockEngine } from "../durable-objects/stock-engine";
import { seededRandom } from "../src/harness/seeded-random";
import { stockShard, uniqueSku } from "./support/client";

/**
 * Fair opening at the engine level, where many seeded draws are cheap (the Worker path is in
 * test/fair-opening.integration.test.ts).
 *
 * The setup of issue 19: 1,000 shoppers arrive in a known order, and before all of them a few bots
 * fire many tokens each; 100 units, one per user. With a window, the arrival ranks of the winning
 * shoppers over many seeded draws must be uniform on 1..1000 (Kolmogorov–Smirnov, alpha = 0.001),
 * and a bot must win no more often than a shopper; without a window, the same test must fail.
 */

const SHOPPERS = 1_000;
const BOTS = 5;
const BOT_TOKENS = 40;
const UNITS = 100;
const RUNS = 40;
const T0 = 1_900_000_000_000;
const WINDOW_MS = 2_000;
/** The first of six entries under a fixed seed, computed with Node's crypto (test below). */
const KNOWN_FIRST = "252c7b27e8172d55348ebf0f4e6c80a3b63b3402581807b44b3bf22d42b6a77c";

/** UUID-shaped ids from a seeded PRNG: each run's seed (made of two of them) is known to the test. */
function seededIds(seed: number): () => string {
  const random = seededRandom(seed);
  const hex = (n: number) =>
    Array.from({ length: n }, () =>
      Math.floor(random() * 16)
        .toString(16)
        .slice(0, 1),
    ).join("");
  return () => `${hex(8)}-${hex(4)}-${hex(4)}-${hex(4)}-${hex(12)}`;
}

interface Run {
  /** Arrival ranks (1..SHOPPERS) of the shoppers who got a unit. */
  shopperRanks: number[];
  botWins: number;
  /** Reservations per bot (a bot's tokens must never make two). */
  perBot: number[];
  entrants: number;
  held: number;
  /** Draw order recomputed from the revealed seed equals the stored positions. */
  verified: boolean;
}

async function sale(run: number, windowMs: number): Promise<Run> {
  const sku = uniqueSku("fairstat");
  return runInDurableObject(stockShard(env, sku, 0), async (_object, state) => {
    const engine = new StockEngine(state.storage, seededIds(run * 7_919 + 1));
    engine.configure(
      { sku, shard: 0, shards: 1, totalStock: UNITS, perUserLimit: 1, startsAt: T0, openingWindowMs: windowMs },
      T0 - 60_000,
    );
    // Bots first (they fire the moment the sale opens), then the shoppers in their arrival order.
    const arrivals: ReserveRequest[] = [];
    for (let t = 0; t < BOT_TOKENS; t++) {
      for (let b = 0; b < BOTS; b++) arrivals.push({ userId: `bot-${b}`, nonce: `bot-${b}-${t}`, quantity: 1 });
    }
    for (let i = 0; i < SHOPPERS; i++) arrivals.push({ userId: `shopper-${i}`, nonce: `shopper-${i}`, quantity: 1 });
    // Batches of 64 as the group commit sends them, all inside the window.
    for (let i = 0; i < arrivals.length; i += 64) {
      const now = T0 + Math.floor((i / arrivals.length) * (windowMs > 0 ? windowMs - 1 : 500));
      const answers = engine.reserve(arrivals.slice(i, i + 64), now);
      if (windowMs > 0) expect(answers.every((a) => !a.ok && a.code === "DRAW_PENDING")).toBe(true);
    }
    if (windowMs > 0) {
      const seed = engine.draw.seedForDecision() ?? "";
      engine.drawDecision.decide(
        await rankEntrants(seed, sku, engine.drawDecision.close(T0 + windowMs)),
        T0 + windowMs,
      );
    }
    const holders = state.storage.sql
      .exec<{ user_id: string; n: number }>("SELECT user_id, COUNT(*) AS n FROM reservations GROUP BY user_id")
      .toArray();
    const info = engine.draw.info();
    let verified = false;
    if (info?.seed) {
      expect(await sha256Hex(info.seed)).toBe(info.seedHash);
      const stored = engine.draw.entries(0, 10_000);
      const recomputed = await drawOrder(
        info.seed,
        stored.map((e) => e.entryId),
      );
      const winners = new Set(await Promise.all(holders.map((h) => entryIdOf(sku, h.user_id))));
      verified =
        JSON.stringify(stored.map((e) => e.entryId)) === JSON.stringify(recomputed) &&
        stored.every((e, i) => e.position === i + 1 && (e.result === "HELD") === winners.has(e.entryId)) &&
        stored.slice(0, UNITS).every((e) => e.result === "HELD");
    }
    return {
      shopperRanks: holders.filter((h) => h.user_id.startsWith("shopper-")).map((h) => Number(h.user_id.slice(8)) + 1),
      botWins: holders.filter((h) => h.user_id.startsWith("bot-")).length,
      perBot: Array.from({ length: BOTS }, (_, b) => holders.find((h) => h.user_id === `bot-${b}`)?.n ?? 0),
      entrants: info?.entrants ?? 0,
      held: engine.state()?.stock.held ?? 0,
      verified,
    };
  });
}

/** One-sample Kolmogorov–Smirnov statistic of ranks 1..n against the discrete uniform on 1..n. */
function ksStatistic(ranks: number[], n: number): number {
  const sorted = [...ranks].sort((a, b) => a - b);
  let d = 0;
  for (let i = 0; i < sorted.length; i++) {
    const cdf = (sorted[i] as number) / n;
    d = Math.max(d, (i + 1) / sorted.length - cdf, cdf - 1 / n - i / sorted.length);
  }
  return d;
}

/** Critical value of the one-sample KS test at alpha = 0.001 (large-sample: 1.949 / sqrt(m)). */
const ksCritical = (m: number) => 1.949 / Math.sqrt(m);

async function runs(windowMs: number, count: number): Promise<Run[]> {
  const out: Run[] = [];
  for (let run = 1; run <= count; run++) out.push(await sale(run, windowMs));
  return out;
}

describe("fair opening: the draw's statistics", () => {
  it(`with a window, winners' arrival ranks are uniform over ${RUNS} seeded draws (KS, alpha 0.001) and bots get one entry's chance`, {
    timeout: 120_000,
  }, async () => {
    const results = await runs(WINDOW_MS, RUNS);
    for (const r of results) {
      expect(r.entrants).toBe(SHOPPERS + BOTS); // a bot's 40 tokens are one entry
      expect(r.held).toBe(UNITS); // no oversell, nothing left unsold with 1,005 entrants
      expect(Math.max(...r.perBot)).toBeLessThanOrEqual(1);
      expect(r.verified).toBe(true);
    }
    const ranks = results.flatMap((r) => r.shopperRanks);
    const d = ksStatistic(ranks, SHOPPERS);
    expect(d).toBeLessThan(ksCritical(ranks.length));
    // Each of the 5 bots is one entrant of 1,005: expected wins over 40 runs = 200 × 100/1005 ≈ 19.9
    // (sd ≈ 4.2). 40 bot wins would be ~5 sd above; a bot with 40 entries would win every run.
    const botWins = results.reduce((n, r) => n + r.botWins, 0);
    expect(botWins).toBeLessThan(40);
  });

  it("without a window the same test fails: arrival order (and the bots) decide", { timeout: 60_000 }, async () => {
    const results = await runs(0, 5);
    const ranks = results.flatMap((r) => r.shopperRanks);
    expect(ksStatistic(ranks, SHOPPERS)).toBeGreaterThan(ksCritical(ranks.length));
    expect(results.every((r) => r.botWins === BOTS)).toBe(true);
    expect(Math.max(...ranks)).toBe(UNITS - BOTS);
  });

  it("the order is HMAC-SHA256(seed, entryId) ascending, reproducible by anyone", async () => {
    const seed = "00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff";
    const ids = await Promise.all(["a", "b", "c", "d", "e", "f"].map((u) => entryIdOf("sku-x", u)));
    const order = await drawOrder(seed, ids);
    expect([...order].sort()).toEqual([...ids].sort());
    expect(await drawOrder(seed, [...ids].reverse())).toEqual(order); // arrival order does not matter
    expect(await drawOrder(`${seed}0`, ids)).not.toEqual(order); // another seed, another order (for these six)
    expect(await entryIdOf("sku-x", "a")).toBe(await sha256Hex("sku-x:a"));
    // A known answer, computed outside the Worker (Node: crypto.createHmac("sha256", seed).update(id)).
    expect(order[0]).toBe(KNOWN_FIRST);
  });
});
