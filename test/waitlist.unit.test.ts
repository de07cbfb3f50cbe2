import { describe, expect, it } from "vitest";
import { rankEntrants } from "../durable-objects/engine/opening-draw";
import { StockEngine } from "../durable-objects/engine/stock-engine";
import type { Outcome, ReserveAnswer } from "../durable-objects/engine/types";
import { inMemory } from "./support/node-place";

/** The waitlist inside the engine: filled in the same transaction as the release. */

const T0 = 1_900_000_000_000;

function withEngine(run: (engine: StockEngine) => void): Promise<void> {
  return inMemory("wl", async (storage) => {
    let ids = 0;
    run(new StockEngine(storage, () => `00000000-0000-4000-8000-${String(++ids).padStart(12, "0")}`));
  });
}

function held(outcome: Outcome<ReserveAnswer> | undefined) {
  if (!outcome?.ok) throw new Error(`expected a hold, got ${JSON.stringify(outcome)}`);
  return outcome.value.reservation;
}

const holdsOf = (engine: StockEngine, user: string) =>
  engine.outbox.pendingEvents(1000).filter((e) => e.event.userId === user && e.event.type === "reservation.held");

describe("waitlist", () => {
  it("serves released units first-fit in FIFO order", async () => {
    await withEngine((engine) => {
      engine.configuration.configure(
        { sku: "wl", shard: 0, shards: 1, totalStock: 3, perUserLimit: 3, holdSeconds: 60 },
        T0,
      );
      const big = held(engine.holds.reserve([{ userId: "owner", nonce: "n1", quantity: 3 }], T0)[0]);
      expect(engine.waitlist.join("ann", 2, T0)).toEqual({
        ok: true,
        value: { waitlistId: expect.any(String), position: 1 },
      });
      expect(engine.waitlist.join("ben", 3, T0 + 1)).toMatchObject({ ok: true, value: { position: 2 } });
      expect(engine.waitlist.join("cat", 1, T0 + 2)).toMatchObject({ ok: true, value: { position: 3 } });
      // Joining twice keeps the first place.
      expect(engine.waitlist.join("ann", 2, T0 + 3)).toMatchObject({ ok: true, value: { position: 1 } });
      expect(engine.waitlist.length()).toBe(3);

      // 3 units come back: ann (2) fits first, ben (3) does not fit in the 1 left, cat (1) does.
      expect(engine.holds.cancel(big.id, "owner", T0 + 10).ok).toBe(true);
      expect(holdsOf(engine, "ann").map((e) => e.event.quantity)).toEqual([2]);
      expect(holdsOf(engine, "ben")).toEqual([]);
      expect(holdsOf(engine, "cat").map((e) => e.event.quantity)).toEqual([1]);
      expect(engine.waitlist.length()).toBe(1);
      expect(engine.configuration.state()?.stock).toEqual({ total: 3, available: 0, held: 3, sold: 0 });
    });
  });

  it("respects the per-user limit, and refuses to queue while stock is available", async () => {
    await withEngine((engine) => {
      engine.configuration.configure(
        { sku: "wl", shard: 0, shards: 1, totalStock: 2, perUserLimit: 2, holdSeconds: 60 },
        T0,
      );
      expect(engine.waitlist.join("dan", 1, T0)).toEqual({ ok: false, code: "STOCK_AVAILABLE" });
      const dan = held(engine.holds.reserve([{ userId: "dan", nonce: "d1", quantity: 1 }], T0)[0]);
      const eve = held(engine.holds.reserve([{ userId: "eve", nonce: "e1", quantity: 1 }], T0)[0]);
      expect(engine.waitlist.join("dan", 2, T0)).toEqual({
        ok: false,
        code: "LIMIT_EXCEEDED",
        limit: { perUserLimit: 2, held: 1 },
      });
      expect(engine.waitlist.join("dan", 1, T0).ok).toBe(true); // 1 held + 1 waiting = the limit
      expect(engine.waitlist.join("fay", 1, T0).ok).toBe(true);
      // dan pays, then buys more elsewhere... his quota is full, so eve's release goes to fay.
      engine.payments.apply({ eventId: "evt-1", type: "payment.succeeded", reservationId: dan.id }, T0 + 1);
      engine.configuration.configure({ sku: "wl", shard: 0, shards: 1, perUserLimit: 1 }, T0 + 2);
      expect(engine.holds.cancel(eve.id, "eve", T0 + 3).ok).toBe(true);
      expect(holdsOf(engine, "dan")).toHaveLength(1); // only his original hold
      expect(holdsOf(engine, "fay")).toHaveLength(1);
      expect(engine.waitlist.length()).toBe(1); // dan still waits
    });
  });

  it("passes the units of an expired waitlist hold to the next in line", async () => {
    await withEngine((engine) => {
      engine.configuration.configure(
        { sku: "wl", shard: 0, shards: 1, totalStock: 1, perUserLimit: 1, holdSeconds: 60 },
        T0,
      );
      const first = held(engine.holds.reserve([{ userId: "gus", nonce: "g1", quantity: 1 }], T0)[0]);
      engine.waitlist.join("hal", 1, T0);
      engine.waitlist.join("ivy", 1, T0);
      // gus's hold expires: hal gets it; hal's hold expires: ivy gets it.
      expect(engine.holds.expireDue(first.expiresAt)).toBe(1);
      const hal = holdsOf(engine, "hal")[0]?.event;
      expect(hal?.quantity).toBe(1);
      expect(engine.holds.expireDue(Date.parse(hal?.expiresAt ?? ""))).toBe(1);
      expect(holdsOf(engine, "ivy")).toHaveLength(1);
      expect(engine.holds.reservation(hal?.reservationId ?? "")?.status).toBe("expired");
      expect(engine.configuration.state()?.stock).toEqual({ total: 1, available: 0, held: 1, sold: 0 });
      expect(engine.waitlist.length()).toBe(0);
    });
  });

  it("waits while a draw is pending: units freed in the window go to its entrants, then the line", async () => {
    await withEngine((engine) => {
      const START = T0 + 3_600_000;
      const W = 2_000;
      const decide = (opening: number, at: number) => {
        const seed = engine.draw.seedForDecision(opening) ?? "";
        engine.drawDecision.decide(opening, rankEntrants(seed, "wl", engine.drawDecision.close(opening, at)), at);
      };
      const sale = { sku: "wl", shard: 0, shards: 1, perUserLimit: 1, holdSeconds: 3600, openingWindowMs: W };
      const early = [{ name: "early", startsAt: T0 }];
      engine.configuration.configure({ ...sale, totalStock: 1, startsAt: START, access: early }, T0 - 60_000);
      // The early tier's draw gives ann the only unit.
      engine.holds.reserve([{ userId: "ann", nonce: "a1", quantity: 1, tier: "early" }], T0 + 10);
      decide(T0, T0 + W);
      const ann = holdsOf(engine, "ann")[0]?.event;
      // The public window: cat's request waits for its draw; bob joins the line of the sold-out SKU.
      expect(engine.holds.reserve([{ userId: "cat", nonce: "c1", quantity: 1 }], START + 5)[0]).toMatchObject({
        ok: false,
        code: "DRAW_PENDING",
      });
      expect(engine.waitlist.join("bob", 1, START + 10).ok).toBe(true);
      // Inside the window ann cancels and the operator adds a unit: nothing is held for the line.
      expect(engine.holds.cancel(ann?.reservationId ?? "", "ann", START + 30).ok).toBe(true);
      engine.configuration.configure({ ...sale, totalStock: 2 }, START + 40);
      expect(holdsOf(engine, "bob")).toEqual([]);
      expect(engine.configuration.state()?.stock).toMatchObject({ available: 2, held: 0 });
      // At the close the draw's entrant is decided first, then the line takes what is left.
      decide(START, START + W);
      expect(holdsOf(engine, "cat").map((e) => e.event.occurredAt)).toEqual([new Date(START + W).toISOString()]);
      expect(holdsOf(engine, "bob").map((e) => e.event.occurredAt)).toEqual([new Date(START + W).toISOString()]);
      expect(engine.waitlist.length()).toBe(0);
    });
  });

  it("drops waiting entries when the sale ends", async () => {
    await withEngine((engine) => {
      engine.configuration.configure(
        { sku: "wl", shard: 0, shards: 1, totalStock: 1, holdSeconds: 60, endsAt: T0 + 1000 },
        T0,
      );
      const only = held(engine.holds.reserve([{ userId: "jo", nonce: "j1", quantity: 1 }], T0)[0]);
      engine.waitlist.join("kim", 1, T0);
      expect(engine.holds.cancel(only.id, "jo", T0 + 2000).ok).toBe(true);
      expect(holdsOf(engine, "kim")).toEqual([]);
      expect(engine.waitlist.length()).toBe(0);
    });
  });

  it("writes a request's id into the events it causes, and none into expiries done on the way", async () => {
    await withEngine((engine) => {
      engine.configuration.configure(
        { sku: "wl", shard: 0, shards: 1, totalStock: 2, perUserLimit: 1, holdSeconds: 10 },
        T0,
      );
      const early = held(
        engine.holds.reserve([{ userId: "gil", nonce: "g1", quantity: 1, requestId: "req-gil" }], T0)[0],
      );
      const late = held(
        engine.holds.reserve([{ userId: "hal", nonce: "h1", quantity: 1, requestId: "req-hal" }], T0 + 5_000)[0],
      );
      expect(engine.waitlist.join("ida", 1, T0 + 5_000).ok).toBe(true);
      // Hal cancels after Gil's hold lapsed: the cancel's own transaction expires Gil's hold first.
      const cancel = engine.holds.onBehalfOf("req-cancel", () => engine.holds.cancel(late.id, "hal", T0 + 11_000));
      expect(cancel.ok).toBe(true);
      const events = engine.outbox.pendingEvents(100).map((p) => p.event);
      const of = (id: string, type: string) => events.find((e) => e.reservationId === id && e.type === type);
      expect(of(early.id, "reservation.held")?.requestId).toBe("req-gil");
      expect(of(late.id, "reservation.held")?.requestId).toBe("req-hal");
      expect(of(early.id, "reservation.expired")).toBeDefined();
      expect(of(early.id, "reservation.expired")?.requestId).toBeUndefined();
      expect(of(late.id, "reservation.cancelled")?.requestId).toBe("req-cancel");
      // Ida's waitlisted hold came from units released by expiry (nobody's request).
      const ida = events.find((e) => e.userId === "ida" && e.type === "reservation.held");
      expect(ida).toBeDefined();
      expect(ida?.requestId).toBeUndefined();
    });
  });
});
