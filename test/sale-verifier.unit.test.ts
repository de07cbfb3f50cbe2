import { describe, expect, it } from "vitest";
import { Broken, checkShownDraws, type Entry, replay } from "../tools/sale-verifier";

/**
 * verify-sale's replay (tools/sale-verifier.ts) across an operator's change of a sharded sale: shard
 * 0 takes it at the configuration entry's `time`, every sibling by its `until`; in between a shard
 * may still decide under the configuration before, and after `until` it may not.
 */
const T = Date.parse("2026-12-05T10:00:00.000Z");
const at = (seconds: number) => new Date(T + seconds * 1000).toISOString();
const user = (n: number) => n.toString(16).padStart(64, "0");

function config(seconds: number, fields: Partial<{ status: string; total: number }>, untilSeconds?: number): Entry {
  return {
    type: "config",
    time: at(seconds),
    ...(untilSeconds === undefined ? {} : { until: at(untilSeconds) }),
    status: "on_sale",
    total: 5,
    perUserLimit: 2,
    holdSeconds: 600,
    startsAt: null,
    endsAt: null,
    openingWindowMs: 0,
    shards: 2,
    price: null,
    currency: "usd",
    tiers: [],
    ...fields,
  };
}

let reservations = 0;
function hold(seconds: number, quantity = 1): Entry {
  reservations++;
  return {
    type: "hold",
    time: at(seconds),
    reservation: `r${reservations}`,
    quantity,
    shard: 1,
    seq: reservations,
    user: user(reservations),
    expires: at(seconds + 600),
  };
}

const broken = (entries: Entry[]) => {
  try {
    replay(entries, new Map(), 0);
    return null;
  } catch (err) {
    if (err instanceof Broken) return err.message;
    throw err;
  }
};

describe("verify-sale's replay across a change reaching the shards", () => {
  it("takes a sibling's hold under the configuration before while the change reached it, and only then", () => {
    const paused = (untilSeconds?: number) => config(10, { status: "paused" }, untilSeconds);
    // A pause at 10 s that every shard had by 12 s: a hold at 11 s was a sibling's before it knew.
    expect(broken([config(0, {}), paused(12), hold(11)])).toBeNull();
    // The same hold after the pause was everywhere, or with no `until` at all: a broken rule.
    expect(broken([config(0, {}), paused(12), hold(13)])).toMatch(/a hold while the sale is paused/);
    expect(broken([config(0, {}), paused(), hold(11)])).toMatch(/a hold while the sale is paused/);
  });

  it("checks the stock against either configuration in the span, and the new one after it", () => {
    // A cut from 5 to 3 at 10 s, on every shard by 12 s; 3 held before it.
    const before = [config(0, {}), hold(1), hold(2), hold(3), config(10, { total: 3 }, 12)];
    expect(broken([...before, hold(11)])).toBeNull();
    expect(broken([...before, hold(13)])).toMatch(/3 held \+ 0 sold \+ 1 is more than the stock of 3/);
    // Neither configuration allows it: broken, named by the one in force.
    expect(broken([...before, hold(11, 3)])).toMatch(/more than the stock of 3/);
  });

  it("takes a release before a cut of the same millisecond (found by the simulator, seed 3388 of bae68ee)", () => {
    // 2 held of 2; one is cancelled and the stock cut to 1 in the same millisecond, as a shard decides
    // a cancel and then a PUT while its clock stands still: the cut was lawful.
    const held = [config(0, { total: 2 }), hold(1), hold(2)];
    const cancel: Entry = { ...held[2], type: "cancelled", time: at(5) } as Entry;
    expect(broken([...held, config(5, { total: 1 }), cancel])).toBeNull();
    expect(broken([...held, cancel, config(5, { total: 1 })])).toBeNull();
    // Without the release the cut is below what is held: broken.
    expect(broken([...held, config(5, { total: 1 })])).toMatch(/stock 1 is less than the 2 held \+ 0 sold/);
  });
});

describe("the draws /draw shows, against the log's reveals", () => {
  const hash = (n: number) => n.toString(16).padStart(64, "0");
  const shown = (n: number, seed: string | null, decidedSeconds: number | null) => ({
    opensAt: at(0),
    seedHash: hash(n),
    seed,
    decidedAt: decidedSeconds === null ? null : at(decidedSeconds),
  });
  const reveals = new Map([[hash(1), "seed-1"]]);

  it("takes a revealed draw, and one not decided yet", () => {
    expect(checkShownDraws([shown(1, "seed-1", 10), shown(2, null, null)], reveals, T + 20_000)).toBeNull();
  });

  it("refuses a seed other than the revealed one", () => {
    expect(() => checkShownDraws([shown(1, "seed-x", 10)], reveals, T + 20_000)).toThrow(
      new Broken("the draw shows another seed than the log revealed"),
    );
  });

  it("says a draw decided in the log's last minute, not revealed in it yet, is not settled; older, broken", () => {
    // Decided at 10 s; the log's last entry at 9 s (the reveal is newer) or at 69 s: still within the minute.
    for (const latest of [9, 69])
      expect(checkShownDraws([shown(2, "seed-2", 10)], reveals, T + latest * 1000)).toMatch(
        /^the draw of the opening at .*, decided at .*, is not revealed in the log yet$/,
      );
    expect(() => checkShownDraws([shown(2, "seed-2", 10)], reveals, T + 71_000)).toThrow(/has no reveal in the log/);
  });
});
