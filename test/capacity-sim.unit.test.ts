import { describe, expect, it } from "vitest";
import {
  type Costs,
  gathererCosts,
  objectCosts,
  type Spike,
  simulateClosedLoop,
  simulateSpike,
  type Tier,
} from "../bench/lib/capacity-sim";

// The capacity simulation (bench/lib/capacity-sim.ts): small spikes, so the suite stays fast.
const near: Spike["rtt"] = { medianMs: 0.01, p99Ms: 0.01, jitterSigma: 0 };
const spike = (over: Partial<Spike>): Spike => ({
  shoppers: 10_000,
  seconds: 1,
  isolates: 10,
  colos: 5,
  shards: 1,
  rtt: { medianMs: 20, p99Ms: 100, jitterSigma: 0.1 },
  seed: 7,
  ...over,
});
const costs = (over: Partial<Costs> = {}): Costs => ({
  aUs: 360,
  bUs: 40,
  edgeUs: 0,
  maxCallsPerSec: Number.POSITIVE_INFINITY,
  ...over,
});

describe("capacity simulation", () => {
  it("is deterministic for a seed, and another seed draws another spike", () => {
    const a = simulateSpike(spike({ shards: 4 }), costs({ maxCallsPerSec: 1000 }));
    expect(simulateSpike(spike({ shards: 4 }), costs({ maxCallsPerSec: 1000 }))).toEqual(a);
    expect(simulateSpike(spike({ shards: 4, seed: 8 }), costs({ maxCallsPerSec: 1000 }))).not.toEqual(a);
  });

  it("coalesces more as the load grows: batches are larger at ten times the rate", () => {
    const light = simulateSpike(spike({ shoppers: 500 }), costs());
    const heavy = simulateSpike(spike({ shoppers: 20_000 }), costs());
    expect(light.batch.mean).toBeLessThan(2);
    expect(heavy.batch.mean).toBeGreaterThan(3 * light.batch.mean);
    expect(heavy.busy).toBe(0);
  });

  it("one call in flight per isolate: each batch is what its isolate gathered during the others' calls", () => {
    // 4 isolates at 250/s each, an object of 10 ms a call whatever its batch, RTT ≈ 0: the object
    // serves the 4 in turn, so each waits 40 ms between calls and carries about 250 × 0.04 = 10.
    const r = simulateSpike(
      spike({ shoppers: 4_000, seconds: 4, isolates: 4, colos: 4, rtt: near }),
      costs({ aUs: 10_000, bUs: 0 }),
    );
    expect(r.batch.mean).toBeGreaterThan(8);
    expect(r.batch.mean).toBeLessThan(12);
    expect(r.sustainedPerSec).toBeGreaterThan(900);
  });

  it("one shard saturates near 1e6 × 64 ÷ (a + 64·b) reservations/s, batches full", () => {
    const c = costs();
    const r = simulateSpike(spike({ shoppers: 50_000, rtt: near }), c);
    const ceiling = (1e6 * 64) / (c.aUs + 64 * c.bUs);
    expect(r.batch.p50).toBe(64);
    expect(r.objectBusyMaxPct).toBeGreaterThan(99);
    expect(r.sustainedPerSec / ceiling).toBeGreaterThan(0.95);
    expect(r.sustainedPerSec / ceiling).toBeLessThan(1.01);
  });

  it("the documented requests/s per object caps calls: what the object kept up with one by one now queues", () => {
    // Cheap calls from many isolates: without the cap the object keeps up one by one; with it, not.
    const s = spike({ shoppers: 9_000, seconds: 3, isolates: 1_000, colos: 10 });
    const free = simulateSpike(s, costs({ aUs: 50, bUs: 5 }));
    const capped = simulateSpike(s, costs({ aUs: 50, bUs: 5, maxCallsPerSec: 1000 }));
    expect(free.batch.mean).toBeLessThan(1.2);
    expect(capped.batch.mean).toBeGreaterThan(1.5);
    expect(free.sustainedPerSec).toBeGreaterThan(0.95 * 3000);
    expect(capped.sustainedPerSec).toBeLessThan(0.9 * 3000);
    expect(capped.objectBusyMaxPct).toBeGreaterThan(free.objectBusyMaxPct);
  });

  it("the closed loop on one thread runs at 1e6 ÷ (edge + a ÷ batch + b) per second", () => {
    const c = costs({ edgeUs: 800 });
    const r = simulateClosedLoop({ connections: 50, seconds: 4, clientRttUs: 0, jitterSigma: 0.25, seed: 7 }, c);
    const expected = 1e6 / (c.edgeUs + c.aUs / r.batch.mean + c.bUs);
    expect(r.batch.mean).toBeGreaterThan(5);
    expect(r.perSec / expected).toBeGreaterThan(0.97);
    expect(r.perSec / expected).toBeLessThan(1.03);
  });

  it("takes a and b from the engine core in batches of 1 and of 64, and says when one is a default", () => {
    const both = objectCosts({
      engine_core_batch1: { batch: 1, cpuUsPerReservation: 400 },
      engine_core: { batch: 64, cpuUsPerReservation: 45.25 },
    });
    expect(both.aUs + both.bUs).toBeCloseTo(400);
    expect(both.aUs + 64 * both.bUs).toBeCloseTo(64 * 45.25);
    expect(both.notes).toEqual([]);
    const one = objectCosts({ engine_core: { batch: 64, cpuUsPerReservation: 45.25 } });
    expect(one.notes.join()).toContain("engine_core_batch1");
    expect(one.from[0]?.figure).toContain("default");
  });

  describe("the gathering tier (issue 44)", () => {
    const tier = (over: Partial<Tier> = {}): Tier => ({
      perShard: 4,
      rtt: { medianMs: 20, p99Ms: 100, jitterSigma: 0.1 },
      inUs: 90,
      inPerReservationUs: 3,
      outUs: 90,
      maxCallsPerSec: 1000,
      ...over,
    });
    // Many isolates, each with about one reservation in flight: the case the tier is for.
    const wide = (over: Partial<Spike> = {}) =>
      spike({ shoppers: 9_000, seconds: 3, isolates: 1_000, colos: 20, ...over });
    const capped = costs({ maxCallsPerSec: 1000 });

    it("is deterministic for a seed, and a spike without it is told apart from one with it", () => {
      const a = simulateSpike(wide({ tier: tier() }), capped);
      expect(simulateSpike(wide({ tier: tier() }), capped)).toEqual(a);
      expect(a.tier?.callsIn).toBeGreaterThan(0);
      expect(simulateSpike(wide(), capped).tier).toBeNull();
    });

    it("the object's batches no longer shrink as the isolates grow: they are what its gatherers gathered", () => {
      const few = (t?: Tier) => simulateSpike(wide({ isolates: 50, tier: t }), capped);
      const many = (t?: Tier) => simulateSpike(wide({ isolates: 2_000, tier: t }), capped);
      // Without the tier, 40 times the isolates: smaller batches, and the object falls behind.
      expect(many().batch.mean).toBeLessThan(0.7 * few().batch.mean);
      expect(many().sustainedPerSec).toBeLessThan(0.9 * 3000);
      // With it, the object sees 4 gatherers whatever the isolates: the same batches, the whole rate.
      const [f, m] = [few(tier()), many(tier())];
      expect(m.batch.mean / f.batch.mean).toBeGreaterThan(0.8);
      expect(m.batch.mean).toBeGreaterThan(2 * many().batch.mean);
      expect(m.sustainedPerSec).toBeGreaterThan(0.95 * 3000);
      expect(m.busy).toBe(0);
      // The gatherers took the isolates' calls one by one (about one reservation each).
      expect(m.tier?.meanIn).toBeLessThan(1.3);
    });

    it("every reservation is answered once, through a gatherer's batch: none lost, none answered twice", () => {
      const r = simulateSpike(wide({ tier: tier() }), capped);
      const reservations = (r.tier?.callsIn ?? 0) * (r.tier?.meanIn ?? 0);
      expect(Math.round(reservations)).toBe(9_000);
      expect(r.batch.calls * r.batch.mean).toBeCloseTo(9_000);
      expect(r.batch.calls).toBeLessThan(r.tier?.callsIn ?? 0);
    });

    it("a gatherer is an object too: one per shard takes every call and meets its own requests/s", () => {
      const one = simulateSpike(wide({ shoppers: 6_000, tier: tier({ perShard: 1 }) }), capped);
      expect(one.tier?.busyMaxPct).toBeGreaterThan(90);
      expect(one.sustainedPerSec).toBeLessThan(0.8 * 2000);
      const four = simulateSpike(wide({ shoppers: 6_000, tier: tier({ perShard: 4 }) }), capped);
      expect(four.sustainedPerSec).toBeGreaterThan(0.95 * 2000);
    });

    it("takes the gatherer's costs from its figures when measured, else from an RPC doing nothing and says so", () => {
      const measured = gathererCosts(
        {
          gather_core_batch1: { batch: 1, cpuUsPerReservation: 200 },
          gather_core: { batch: 64, cpuUsPerReservation: 10 },
        },
        1000,
      );
      expect(measured.inUs + measured.outUs + measured.inPerReservationUs).toBeCloseTo(200);
      expect(measured.inUs + measured.outUs + 64 * measured.inPerReservationUs).toBeCloseTo(640);
      expect(measured.notes).toEqual([]);
      const assumed = gathererCosts({ floor_rpc_noop: { cpuUsPerCall: 80 } }, 1000);
      expect(assumed.inUs).toBe(80);
      expect(assumed.notes.join()).toContain("to be measured");
    });
  });
});
