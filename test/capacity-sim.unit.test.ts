import { describe, expect, it } from "vitest";
import { type Costs, objectCosts, type Spike, simulateClosedLoop, simulateSpike } from "../bench/lib/capacity-sim";

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
});
