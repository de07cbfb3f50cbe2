import { createHash, createHmac } from "node:crypto";
import { describe, expect, it } from "vitest";
import {
  Broken,
  checkDrawBuyers,
  checkDrawOutcomes,
  checkDrawPage,
  checkRevealsShown,
  checkShownDraws,
  type DrawHolds,
  type DrawnEntry,
  type Entry,
  replay,
} from "../tools/sale-verifier";

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

/** The verifier's clock in these replays: a day after the sale, when every entry is in. */
const NOW = T + 86_400_000;

const broken = (entries: Entry[]) => {
  try {
    replay(entries, new Map(), { now: NOW, settleMs: 0 });
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

  it("checks the stock against either configuration in the span, and the new one from its until on", () => {
    // A cut from 5 to 3 at 10 s, on every shard by 12 s; 3 held before it.
    const before = [config(0, {}), hold(1), hold(2), hold(3), config(10, { total: 3 }, 12)];
    const inSpan = hold(11);
    const released: Entry = { ...inSpan, type: "cancelled", time: at(11.5) };
    expect(broken([...before, inSpan, released])).toBeNull();
    expect(broken([...before, hold(13)])).toMatch(/3 held \+ 0 sold \+ 1 is more than the stock of 3/);
    // Neither configuration allows it: broken, named by the one in force.
    expect(broken([...before, hold(11, 3)])).toMatch(/more than the stock of 3/);
  });

  it("finds the units a span let through still held once every shard had the change (found in an audit)", () => {
    // The cut's shard 0 takes the units it cuts before it commits, so from `until` on what is held
    // must fit the new stock: a 4th hold kept past 12 s, and paid, is an oversell.
    const h = [hold(1), hold(2), hold(3)];
    const inSpan = hold(11);
    const paid = [...h, inSpan].map((x, i): Entry => ({ ...x, type: "paid", time: at(100 + i) }));
    const log = [config(0, {}), ...h, config(10, { total: 3 }, 12), inSpan, ...paid];
    expect(broken(log)).toMatch(
      /^at 2026-12-05T10:00:12\.000Z, when every shard had the change: stock 3 is less than the 4 held \+ 0 sold$/,
    );
    expect(broken([config(0, {}), ...h, config(10, { total: 3 }, 12), inSpan])).toMatch(
      /stock 3 is less than the 4 held/,
    );
    // Read within the minute after `until`: not settled yet (a release may be on its way), not broken.
    const early = replay(log.slice(0, 6), new Map(), { now: T + 30_000 });
    expect(early.settled).toBe(false);
    expect(early.unsettled).toMatch(/stock 3 is less than the 4 held/);
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

  it("wants every draw the log revealed shown decided, else its order goes unchecked (found in a third reading)", () => {
    const revealed = new Map<string, DrawHolds>([
      [hash(1), { tagged: true, holds: new Map(), entrants: 2, revealedAt: T + 11_000, sizes: false }],
    ]);
    expect(checkRevealsShown([shown(1, "seed-1", 10)], revealed, T + 120_000)).toBeNull();
    // /draw a second behind the log: not settled; a minute on, broken.
    expect(checkRevealsShown([shown(1, null, null)], revealed, T + 20_000)).toMatch(/shows it undecided/);
    expect(() => checkRevealsShown([shown(1, null, null)], revealed, T + 120_000)).toThrow(
      /the log revealed the draw 000000000000… at .*, but \/draw shows it undecided: its order and outcomes go unchecked/,
    );
    expect(() => checkRevealsShown([shown(2, null, null)], revealed, T + 120_000)).toThrow(/shows it nowhere/);
  });
});

/** Whether the replay of `entries`, read at `now` (a day after the sale by default), is broken, and why. */
function verdict(entries: Entry[], now = NOW, options: { since?: number } = {}): string {
  try {
    const summary = replay(entries, new Map(), { now, ...options });
    return summary.settled ? "ok" : `unsettled: ${String(summary.unsettled)}`;
  } catch (err) {
    if (err instanceof Broken) return `broken: ${err.message}`;
    throw err;
  }
}

const release = (held: Entry, type: string, seconds: number): Entry => {
  const { expires: _expires, ...rest } = held;
  return { ...rest, type, time: at(seconds) };
};

describe("verify-sale's replay against an operator who writes the log (found in an audit)", () => {
  it("refuses an entry written after a kept checkpoint more than a minute older than its newest", () => {
    // 2 held of 1 (broken), then a cancel appended after a pause at 300 s but stamped 1.5 s: it
    // rewrites the history the checkpoint of the first 4 entries showed.
    const a = hold(1);
    const log = [config(0, { total: 1 }), a, hold(2), config(300, { status: "paused", total: 1 })];
    expect(verdict(log)).toMatch(/^broken: entry 2 \(hold .*\): 1 held \+ 0 sold \+ 1 is more than the stock of 1$/);
    const cured = [...log, release(a, "cancelled", 1.5)];
    expect(verdict(cured, NOW, { since: 4 })).toMatch(
      /^broken: entry 4 \(cancelled at 2026-12-05T10:00:01\.500Z\): written after the checkpoint of 4 entries you kept, though more than 60 s older than its newest entry \(2026-12-05T10:05:00\.000Z\)/,
    );
    // Without a checkpoint kept, a late entry is as much a log that was unreachable a while as a
    // rewrite: the replay judges the history as it stands.
    expect(verdict(cured)).toBe("ok");
    // Within the minute it is how shards' flushes interleave: a release logged after a later hold.
    const interleaved = [config(0, { total: 1 }), a, config(50, { total: 1 }), release(a, "cancelled", 1.5)];
    expect(verdict(interleaved, NOW, { since: 3 })).toBe("ok");
  });

  it("refuses an entry stamped after the verifier's clock, and settles the log's last minute by that clock", () => {
    const over = [config(0, { total: 1 }), hold(1), hold(2)];
    // Read a day later, the excess of the log's last minute is old: broken, not unsettled for ever.
    expect(verdict(over)).toMatch(/^broken: entry 2 \(hold .*\): 1 held \+ 0 sold \+ 1 is more than the stock of 1$/);
    expect(verdict(over, T + 30_000)).toMatch(/^unsettled: entry 2 \(hold .*\): 1 held/);
    const future = { ...hold(0), time: "2036-01-01T00:00:00.000Z", expires: "2036-01-01T00:10:00.000Z" };
    expect(verdict([config(0, { total: 1 }), hold(1), future])).toMatch(
      /^broken: entry 2 \(hold at 2036-01-01T00:00:00\.000Z\): its time is after the verifier's clock/,
    );
    // A change whose every shard "had it" a year on: its `until` is a time to come too.
    expect(verdict([config(0, {}), config(10, { status: "paused" }, 365 * 86_400), hold(3600)])).toMatch(
      /^broken: entry 1 \(config .*\): its time is after the verifier's clock/,
    );
  });

  it("reads times and quantities as the gateway writes them", () => {
    expect(verdict([config(0, { total: 3 }), hold(1, 1.5), hold(2, 1.5)])).toMatch(
      /^broken: entry 1 \(hold .*\): no quantity$/,
    );
    expect(verdict([config(0, { endsAt: "soon" } as never), hold(3600)])).toMatch(
      /^broken: entry 0 \(config .*\): "soon" is not a time$/,
    );
  });

  it("takes a cut whose room a release not logged yet made as unsettled, then broken once old", () => {
    const a = hold(1);
    const cut = [config(0, { total: 2 }), a, hold(2), config(20, { total: 1 })];
    expect(verdict(cut, T + 25_000)).toMatch(
      /^unsettled: entry 3 \(config .*\): stock 1 is less than the 2 held \+ 0 sold$/,
    );
    expect(verdict([...cut, release(a, "cancelled", 10)], T + 25_000)).toBe("ok");
    expect(verdict(cut)).toMatch(/^broken: entry 3 \(config .*\): stock 1 is less than the 2 held \+ 0 sold$/);
  });

  it("refuses sizes whose stock is not the SKU's total, and a late payment after the archive", () => {
    const sizes = {
      total: 10,
      perUserLimit: 20,
      variants: [
        { id: "S", name: "S", total: 10 },
        { id: "M", name: "M", total: 10 },
      ],
    };
    expect(verdict([config(0, sizes as never)])).toMatch(
      /^broken: entry 0 \(config .*\): the sizes' stock adds up to 20, not the total 10$/,
    );
    expect(verdict([config(0, { ...sizes, total: 20 } as never), { ...hold(1, 10), variant: "S" }])).toBe("ok");
    const a = { ...hold(1), expires: at(61) };
    const archived = { ...config(100, {}), type: "archive", status: "archived" };
    const late = [config(0, {}), a, release(a, "expired", 61), archived, release(a, "paid", 200)];
    expect(verdict(late)).toMatch(
      /^broken: entry 4 \(paid .*\): a late payment of reservation r\d+ after the archive$/,
    );
    // Before the archive the same late payment is a sale.
    expect(verdict([config(0, {}), a, release(a, "expired", 61), release(a, "paid", 90)])).toBe("ok");
  });
});

describe("verify-sale's replay of a fair opening's commitments (found in an audit)", () => {
  const seed = "ab".repeat(32);
  const seedHash = createHash("sha256").update(seed, "utf8").digest("hex");
  const draws = (opens: number, window: number) => [{ opensAt: at(opens), closesAt: at(opens + window), seedHash }];
  const opening = (seconds: number, opens: number, window: number, until?: number) =>
    config(
      seconds,
      { startsAt: at(opens), openingWindowMs: window * 1000, draws: draws(opens, window) } as never,
      until,
    );
  const reveal = (seconds: number, opens: number, window: number): Entry => ({
    type: "draw-reveal",
    time: at(seconds),
    opensAt: at(opens),
    closesAt: at(opens + window),
    seedHash,
    seed,
    entrants: 3,
  });

  it("follows an opening moved before it opens, with the seed hash it keeps", () => {
    // Moved earlier (3600 s to 1800 s) before it opened, revealed after the new close: honest.
    expect(verdict([opening(0, 3600, 10), opening(60, 1800, 10), reveal(1811, 1800, 10)])).toBe("ok");
    // Its window shortened before it opened: revealed after the new close.
    expect(verdict([opening(0, 3600, 10), opening(60, 3600, 5), reveal(3606, 3600, 5)])).toBe("ok");
    // Moved later (1800 s to 7200 s), and the seed shown 88 minutes before the opening: broken.
    expect(verdict([opening(0, 1800, 10), opening(60, 7200, 10), reveal(1900, 1800, 10)])).toMatch(
      /^broken: entry 2 \(draw-reveal .*\): the draw was revealed before its window closed$/,
    );
    // A reveal naming another window than the one committed last.
    expect(verdict([opening(0, 1800, 10), opening(60, 7200, 10), reveal(7300, 1800, 10)])).toMatch(
      /^broken: entry 2 \(draw-reveal .*\): the reveal names the window 2026-12-05T10:30:00\.000Z to .*, not the one committed/,
    );
  });

  it("refuses a hold inside an opening's window, but an earlier opening's draw decided late (found in an audit)", () => {
    // The window's requests wait for its draw: a hold at 1805 s, inside 1800–1810 s, jumped it.
    expect(verdict([opening(0, 1800, 10), hold(1805), reveal(1811, 1800, 10)])).toMatch(
      /^broken: entry 1 \(hold .*\): a hold inside the opening's window \(2026-12-05T10:30:00\.000Z to 2026-12-05T10:30:10\.000Z\), whose requests its draw decides after the close$/,
    );
    // Its draw's holds, at the close or after, or a sibling's stamped by a clock up to a second behind: honest.
    expect(verdict([opening(0, 1800, 10), hold(1810), reveal(1810, 1800, 10), hold(1812)])).toBe("ok");
    expect(verdict([opening(0, 1800, 10), hold(1809.5), reveal(1810, 1800, 10)])).toBe("ok");
    expect(verdict([opening(0, 1800, 10), hold(1808.5), reveal(1810, 1800, 10)])).toMatch(/^broken: entry 1 /);
    // A tier's opening (1790–1800 s) one window before the public one (1800–1810 s): its draw,
    // due at its close, holds at 1801 s, revealed then; a hold after its reveal in the window is not its.
    const tierHash = createHash("sha256").update("cd".repeat(32), "utf8").digest("hex");
    const both = config(0, {
      startsAt: at(1800),
      openingWindowMs: 10_000,
      tiers: [{ name: "early", startsAt: at(1790) }],
      draws: [{ opensAt: at(1790), closesAt: at(1800), seedHash: tierHash }, ...draws(1800, 10)],
    } as never);
    const tierReveal = { ...reveal(1801, 1790, 10), seedHash: tierHash, seed: "cd".repeat(32) };
    expect(verdict([both, hold(1801), tierReveal, reveal(1811, 1800, 10)])).toBe("ok");
    expect(verdict([both, hold(1801), tierReveal, hold(1803), reveal(1811, 1800, 10)])).toMatch(
      /^broken: entry 3 \(hold .*\): a hold inside the opening's window \(2026-12-05T10:30:00\.000Z/,
    );
  });

  it("wants every closed opening revealed within the hour, but one withdrawn before it opened", () => {
    expect(verdict([opening(0, 1800, 10)])).toMatch(
      /^broken: the opening at 2026-12-05T10:30:00\.000Z closed at 2026-12-05T10:30:10\.000Z, and its seed \(hash [0-9a-f]{12}…\) is not revealed in the log$/,
    );
    // A sharded draw of many entrants takes a while to decide: unsettled for the hour after the close.
    expect(verdict([opening(0, 1800, 10)], T + 1_810_000 + 59 * 60_000)).toMatch(
      /^unsettled: the opening at .* is not revealed in the log yet$/,
    );
    expect(verdict([opening(0, 1800, 10)], T + 1_000_000)).toBe("ok");
    // The window taken off before the opening: nothing to reveal.
    expect(verdict([opening(0, 1800, 10), config(60, {})])).toBe("ok");
    expect(verdict([opening(0, 1800, 10), config(1805, {})])).toMatch(
      /^broken: the opening at .* is not revealed in the log$/,
    );
  });
});

/** A fair opening's seed (one hex digit repeated), its 10-s window as committed, and its reveal. */
const seedOf = (c: string) => c.repeat(64);
const windowOf = (opens: number, c: string) => ({
  opensAt: at(opens),
  closesAt: at(opens + 10),
  seedHash: createHash("sha256").update(seedOf(c), "utf8").digest("hex"),
});
const revealOf = (time: number, opens: number, c: string, entrants: number): Entry => ({
  type: "draw-reveal",
  time: at(time),
  ...windowOf(opens, c),
  seed: seedOf(c),
  entrants,
});

describe("verify-sale's replay against forged logs (found in an audit)", () => {
  const sized = (ids: string[]) =>
    ({ total: 5 * ids.length, perUserLimit: 100, variants: ids.map((id) => ({ id, name: id, total: 5 })) }) as never;
  const ofSize = (seconds: number, size: string) => ({ ...hold(seconds), variant: size });

  it("refuses a size no longer listed, which would stop counting what it held", () => {
    const small = [1, 2, 3, 4, 5].map((s) => ofSize(s, "S"));
    expect(verdict([config(0, sized(["S"])), ...small, config(10, sized(["X"])), ofSize(11, "X")])).toMatch(
      /^broken: entry 6 \(config .*\): size "S" is no longer listed: a size is never removed$/,
    );
    expect(verdict([config(0, sized(["S"])), ...small, config(10, { total: 5 })])).toMatch(
      /size "S" is no longer listed/,
    );
    // A size added beside it: honest.
    expect(verdict([config(0, sized(["S"])), ...small, config(10, sized(["S", "X"])), ofSize(11, "X")])).toBe("ok");
  });

  it("counts units sold without a size once sizes are given, against the SKU's stock (found in a third reading)", () => {
    // 5 sold of 5 before the SKU had sizes, then sizes S:5 (the gateway refuses sizes while units
    // are held or sold): 5 more sold of S are 10 units of a stock of 5.
    const plain = [1, 2, 3, 4, 5].map((s) => hold(s));
    const paid = plain.map((h, i) => release(h, "paid", 10 + i));
    const sizedOnly = [1, 2, 3, 4, 5].map((s) => ofSize(100 + s, "S"));
    expect(verdict([config(0, { total: 5 }), ...plain, ...paid, config(50, sized(["S"])), ...sizedOnly])).toMatch(
      /^broken: entry 12 \(hold .*\): 0 held \+ 5 sold \+ 1 is more than the stock of 5, units without a size included$/,
    );
    // Sizes given to a SKU that sold nothing, and then sold out: honest.
    expect(verdict([config(0, { total: 5 }), config(50, sized(["S"])), ...sizedOnly])).toBe("ok");
  });

  it("refuses a configuration after the archive", () => {
    const archive = { ...config(100, {}), type: "archive", status: "archived" };
    expect(verdict([config(0, {}), hold(1), archive, config(200, {}), hold(300)])).toMatch(
      /^broken: entry 3 \(config .*\): a configuration of an archived SKU$/,
    );
  });

  it("refuses a hold that lasts longer than the sale's holdSeconds", () => {
    expect(verdict([config(0, {}), { ...hold(1), expires: at(1 + 601) }])).toMatch(
      /^broken: entry 1 \(hold .*\): a hold until .*, past the 600 s a hold lasts$/,
    );
  });

  it("refuses an opening at neither the start nor a tier's, and more holds in a later window than an earlier draw's entrants", () => {
    // A dummy opening of no tier, whose late reveal would exempt the public window.
    expect(
      verdict([
        config(0, {
          startsAt: at(1800),
          openingWindowMs: 10_000,
          draws: [windowOf(1700, "a"), windowOf(1800, "b")],
        } as never),
      ]),
    ).toMatch(/an opening at 2026-12-05T10:28:20\.000Z, which is neither the sale's start nor a tier's$/);
    // A tier's opening that opened stays listed after its tier is gone: history, not a new opening.
    const tierGone = config(1795, {
      startsAt: at(1800),
      openingWindowMs: 10_000,
      draws: [windowOf(1700, "a"), windowOf(1800, "b")],
    } as never);
    const withTier = config(0, {
      startsAt: at(1800),
      openingWindowMs: 10_000,
      tiers: [{ name: "early", startsAt: at(1700) }],
      draws: [windowOf(1700, "a"), windowOf(1800, "b")],
    } as never);
    expect(verdict([withTier, revealOf(1711, 1700, "a", 0), tierGone, revealOf(1811, 1800, "b", 0)])).toBe("ok");
    // A tier's draw of 1 entrant "decided" at 1815: two buyers held inside the public window meanwhile.
    const both = config(0, {
      total: 100,
      perUserLimit: 100,
      startsAt: at(1800),
      openingWindowMs: 10_000,
      tiers: [{ name: "early", startsAt: at(1790) }],
      draws: [windowOf(1790, "c"), windowOf(1800, "d")],
    } as never);
    const late = [hold(1801), hold(1803)];
    expect(verdict([both, ...late, revealOf(1815, 1790, "c", 2), revealOf(1816, 1800, "d", 0)])).toBe("ok");
    expect(verdict([both, ...late, revealOf(1815, 1790, "c", 1), revealOf(1816, 1800, "d", 0)])).toMatch(
      /^broken: entry 3 \(draw-reveal .*\): 2 buyers held inside a later window while this draw of 1 entrants was decided$/,
    );
    const twice = { ...hold(1804), user: late[0]?.user };
    expect(
      verdict([both, ...late, twice as Entry, revealOf(1815, 1790, "c", 3), revealOf(1816, 1800, "d", 0)]),
    ).toMatch(/a second hold of one buyer inside a window while an earlier draw was decided$/);
  });
});

describe("verify-sale's window rule against honest sharded sales (found in a second reading)", () => {
  const buyer = (seconds: number, who: number): Entry => ({ ...hold(seconds), user: user(10_000 + who) });

  it("judges a hold in a change's span by the windows before the change", () => {
    // A window set a second ahead on a live sale; the last sibling has the change at 104 s.
    const put = config(100, { startsAt: at(101), openingWindowMs: 10_000, draws: [windowOf(101, "a")] } as never, 104);
    // A sibling not told yet holds on arrival at 102 s, as the configuration before allowed.
    expect(verdict([config(0, {}), put, buyer(102, 1), revealOf(111, 101, "a", 0)])).toBe("ok");
    // After every shard had the change, a hold in the window is the gateway's fault.
    expect(verdict([config(0, {}), put, buyer(102, 1), buyer(105, 2), revealOf(111, 101, "a", 0)])).toMatch(
      /^broken: entry 3 \(hold .*\): a hold inside the opening's window/,
    );
  });

  it("credits a late hold to the earliest draw still being decided", () => {
    // Two tiers and the public start a window apart; the first tier's draw, decided entry by entry,
    // ends at 1801.5 s, inside the public window; the second tier's follows at once.
    const tiers = config(0, {
      total: 100,
      startsAt: at(1800),
      openingWindowMs: 10_000,
      tiers: [
        { name: "t1", startsAt: at(1780) },
        { name: "t2", startsAt: at(1790) },
      ],
      draws: [windowOf(1780, "b"), windowOf(1790, "c"), windowOf(1800, "d")],
    } as never);
    // Buyer 7 won in both tiers' draws (a limit of 2): one hold each, each credited to its own draw.
    const log = [
      tiers,
      buyer(1791, 5),
      buyer(1795, 7),
      revealOf(1801.5, 1780, "b", 2),
      buyer(1802, 7),
      revealOf(1802.2, 1790, "c", 1),
      revealOf(1811, 1800, "d", 0),
    ];
    expect(verdict(log)).toBe("ok");
  });
});

describe("a draw's published entries", () => {
  const seed = "cd".repeat(32);
  const ordered = ["a", "b", "c", "d"]
    .map((entryId) => ({ entryId, key: createHmac("sha256", seed).update(entryId, "utf8").digest("hex") }))
    .sort((x, y) => (x.key < y.key ? -1 : 1))
    .map((e, i) => ({ entryId: e.entryId, position: i + 1 }));

  it("takes them in the seed's order, each once", () => {
    expect(() => checkDrawPage(seed, ordered, 0)).not.toThrow();
    const twice = [
      ordered[0],
      { ...ordered[0], position: 2 },
      ...ordered.slice(1).map((e) => ({ ...e, position: e.position + 1 })),
    ];
    expect(() => checkDrawPage(seed, twice as { entryId: string; position: number }[], 0)).toThrow(
      /draw position 2 is out of the order the seed gives, or listed twice/,
    );
  });
});

describe("a draw's outcomes against the log: each hold names its place (found in an audit)", () => {
  // The public opening 1800–1810 s, 2 units, 4 entrants: positions 1 and 2 held, 3 and 4 SOLD_OUT.
  const opening = windowOf(1800, "e");
  const sale = (fields: object = {}) =>
    config(0, { total: 2, startsAt: at(1800), openingWindowMs: 10_000, draws: [opening], ...fields } as never);
  const drawHold = (seconds: number, position: number, seedHash = opening.seedHash, quantity = 1): Entry => ({
    ...hold(seconds, quantity),
    draw: { seedHash, position },
  });
  const results = (...codes: string[]) =>
    codes.map((result, i) => ({ entryId: `${i + 1}`.repeat(64), position: i + 1, quantity: 1, result }));
  const reveal = (seconds = 1810.2, entrants = 4) => revealOf(seconds, 1800, "e", entrants);
  /** The replay, then `/draw/entries` against the holds it found: ok, broken, unsettled or unproven. */
  const outcome = (
    log: Entry[],
    listed: DrawnEntry[] = results("HELD", "HELD", "SOLD_OUT", "SOLD_OUT"),
    now = NOW,
    stock = true,
  ): string => {
    const draws = new Map<string, DrawHolds>();
    try {
      replay(log, new Map(), { now, settleMs: 0, draws });
      const drawn = draws.get(opening.seedHash);
      if (drawn && !stock) delete drawn.stock;
      const checked = checkDrawOutcomes(listed, drawn, now);
      return checked.unproven ? `unproven: ${checked.unproven}` : checked.unsettled ? "unsettled" : "ok";
    } catch (err) {
      if (err instanceof Broken) return `broken: ${err.message}`;
      throw err;
    }
  };

  it("takes an honest draw: each held entry's hold at its position, of its quantity", () => {
    const log = [sale(), drawHold(1810.1, 1), drawHold(1810.1, 2), reveal()];
    expect(outcome(log)).toBe("ok");
    expect(replay(log, new Map(), { now: NOW })).toMatchObject({ drawOutcomes: "tied to positions" });
    // A home shard's hold stamped by a clock a little behind the reveal's, or logged a little after it.
    expect(outcome([sale(), drawHold(1809.5, 1), reveal(), drawHold(1811, 2)])).toBe("ok");
  });

  it("refuses a hold at a position the draw answered SOLD_OUT", () => {
    // The operator answers position 2 SOLD_OUT and keeps its unit for position 3: the stock the log
    // leaves the draw (2 units, 1 held before position 2) breaks that refusal first...
    const log = [sale(), drawHold(1810.1, 1), drawHold(1810.1, 3), reveal()];
    expect(outcome(log, results("HELD", "SOLD_OUT", "SOLD_OUT", "SOLD_OUT"))).toMatch(
      /^broken: draw position 2 \(entry 222222222222…\) was answered SOLD_OUT, but 1 of them were left at its turn/,
    );
    // ...and without that figure (a draw the replay leaves no stock for), its hold at a refused position.
    expect(outcome(log, results("HELD", "SOLD_OUT", "SOLD_OUT", "SOLD_OUT"), NOW, false)).toMatch(
      /^broken: draw position 3 \(entry 333333333333…\) was answered SOLD_OUT, yet the log's entry 2 \(hold at .*\) names that position$/,
    );
    // ...or lists position 3 HELD: held after a SOLD_OUT, which a draw deciding in order never does.
    expect(outcome(log, results("HELD", "SOLD_OUT", "HELD", "SOLD_OUT"), NOW, false)).toMatch(
      /^broken: draw position 3 \(entry 3.*\) was held after position 2 was answered SOLD_OUT/,
    );
    // With sizes, one size gone says nothing of the next entry's: that order is honest.
    const sized = {
      total: 4,
      variants: [
        { id: "S", name: "S", total: 2 },
        { id: "M", name: "M", total: 2 },
      ],
    };
    const ofSize = (e: Entry) => ({ ...e, variant: "S" });
    expect(
      outcome(
        [sale(sized), ofSize(drawHold(1810.1, 1)), ofSize(drawHold(1810.1, 3)), reveal()],
        results("HELD", "SOLD_OUT", "HELD", "SOLD_OUT"),
      ),
    ).toBe("ok");
  });

  it("refuses a held entry whose hold the log lacks, or of another quantity; unsettled within the minute", () => {
    const log = [sale(), drawHold(1810.1, 1), reveal()];
    expect(outcome(log)).toMatch(
      /^broken: draw position 2 \(entry 2.*\) is held, but no hold in the log names that position$/,
    );
    expect(outcome(log, undefined, T + 1_840_000)).toBe("unsettled");
    const two = [{ ...results("HELD")[0], quantity: 2 }, ...results("HELD", "SOLD_OUT", "SOLD_OUT").slice(1)];
    expect(outcome([sale(), drawHold(1810.1, 1), drawHold(1810.1, 2), reveal()], two as never)).toMatch(
      /^broken: draw position 1 .* asked 2 units, but the log's entry 1 holds 1 for it$/,
    );
  });

  it("refuses a hold at a position beyond the draw's entrants, before or after its reveal", () => {
    expect(outcome([sale(), drawHold(1810.1, 1), drawHold(1810.1, 5), reveal()])).toMatch(
      /^broken: entry 3 \(draw-reveal .*\): entry 2 \(hold at .*\) names position 5 of this draw of 4 entrants$/,
    );
    expect(outcome([sale(), drawHold(1810.1, 1), reveal(), drawHold(1810.5, 5)])).toMatch(
      /^broken: entry 3 \(hold .*\): a hold naming position 5 of the draw [0-9a-f]{12}…, which had 4 entrants$/,
    );
  });

  it("refuses two holds for one position, and one buyer held twice by one draw", () => {
    expect(outcome([sale(), drawHold(1810.1, 1), drawHold(1810.1, 1), reveal()])).toMatch(
      /^broken: entry 2 \(hold .*\): a second hold for position 1 of the draw [0-9a-f]{12}… \(the first: entry 1\)$/,
    );
    const first = drawHold(1810.1, 1);
    expect(outcome([sale(), first, { ...drawHold(1810.1, 2), user: first.user }, reveal()])).toMatch(
      /^broken: entry 2 \(hold .*\): a second hold of one buyer by the draw [0-9a-f]{12}… \(one entry each\)$/,
    );
  });

  it("refuses a hold naming a draw never committed, or made before its close or after its reveal", () => {
    const other = windowOf(1800, "f").seedHash;
    expect(outcome([sale(), drawHold(1810.1, 1, other), reveal()])).toMatch(
      /^broken: entry 1 \(hold .*\): a hold naming the draw [0-9a-f]{12}…, which no configuration committed to$/,
    );
    expect(outcome([sale(), drawHold(1808, 1), reveal()])).toMatch(
      /a hold naming the draw .* before its window closed/,
    );
    expect(outcome([sale(), drawHold(1810.1, 1), reveal(), drawHold(1812, 2)])).toMatch(
      /^broken: entry 3 \(hold .*\): a hold naming the draw .* after it was decided \(its reveal at .*\)$/,
    );
  });

  it("exempts a hold inside a later window only when it names the earlier draw that made it", () => {
    // A tier's opening (1790–1800 s) one window before the public one: its draw, due at its close,
    // holds at 1801 s, inside the public window.
    const tier = windowOf(1790, "a");
    const both = sale({
      total: 10,
      tiers: [{ name: "early", startsAt: at(1790) }],
      draws: [tier, opening],
    });
    const tierReveal = revealOf(1801.5, 1790, "a", 2);
    const tail = [tierReveal, reveal(1810.2, 0)];
    expect(outcome([both, drawHold(1801, 1, tier.seedHash), ...tail], [])).toBe("ok");
    // An untagged hold there, in a log whose draws tag their holds: the old count would have let it by.
    expect(outcome([both, drawHold(1801, 1, tier.seedHash), hold(1801.2), ...tail], [])).toMatch(
      /^broken: entry 2 \(hold .*\): a hold inside the opening's window .*, whose requests its draw decides after the close, and it names no draw that made it$/,
    );
    // Naming the window's own draw does not exempt it either (its draw decides after its close).
    expect(outcome([both, drawHold(1801, 1, tier.seedHash), drawHold(1801.2, 1), ...tail], [])).toMatch(
      /^broken: entry 2 \(hold .*\): a hold naming the draw .* before its window closed/,
    );
  });

  it("refuses a hold that names no draw while the draw is pending, from its close to its reveal", () => {
    // Someone who never entered, held after the close while the draw was being decided.
    const log = [sale(), drawHold(1810.1, 1), hold(1810.5), drawHold(1812, 2), reveal(1813)];
    expect(outcome(log)).toMatch(
      /^broken: entry 2 \(hold .*\): a hold after the opening's window closed \(2026-12-05T10:30:10\.000Z\) and before its draw was decided \(its reveal at 2026-12-05T10:30:13\.000Z\), and it names no draw: the draw's units are its entrants'$/,
    );
    // Arrivals after the decision are decided as they come; a sibling's clock may stamp one a second early.
    // (The unit left is theirs when the rest of the draw was refused by its limit, not SOLD_OUT.)
    const limited = results("HELD", "HELD", "LIMIT_EXCEEDED", "LIMIT_EXCEEDED");
    expect(
      outcome([sale({ total: 3 }), drawHold(1810.1, 1), drawHold(1812, 2), reveal(1813), hold(1812.5)], limited),
    ).toBe("ok");
    // The reveal not in the log yet: unsettled for the minute, then broken.
    const unrevealed = [sale(), drawHold(1810.1, 1), hold(1810.5)];
    expect(verdict(unrevealed, T + 1_830_000)).toMatch(
      /^unsettled: entry 2 \(hold .*\): a hold after .*no reveal in the log/,
    );
    expect(verdict(unrevealed)).toMatch(/^broken: entry 2 \(hold .*\): a hold after .*no reveal in the log/);
    // A log whose holds name no draw keeps the rule before: only the window itself is closed to holds.
    expect(verdict([sale(), hold(1810.1), hold(1810.5), reveal(1813)])).toBe("ok");
  });

  it("holds a draw promised to name its holds' places to it, whatever the log's holds do (found in a second reading)", () => {
    // The configuration that committed to the draw, before it opened, promised its holds name their places.
    const promising = (fields: object = {}) => sale({ draws: [{ ...opening, holdsNamed: true }], ...fields });
    // Every tag left out: not the old count, but the draw's rules: an untagged hold while it is pending...
    expect(verdict([promising(), hold(1810.1), hold(1810.5), reveal(1813)])).toMatch(
      /^broken: entry 1 \(hold .*\): a hold after the opening's window closed .* and it names no draw/,
    );
    // ...and a winner whose hold names no position.
    expect(outcome([promising({ total: 0 }), reveal()], results("HELD", "SOLD_OUT", "SOLD_OUT", "SOLD_OUT"))).toMatch(
      /^broken: draw position 1 .* is held, but no hold in the log names that position$/,
    );
    expect(replay([promising(), reveal()], new Map(), { now: NOW })).toMatchObject({
      drawOutcomes: "tied to positions",
    });
    // A promise made only after the opening opened binds nothing (an old draw listed again by a new gateway).
    const late = config(1805, {
      total: 2,
      startsAt: at(1800),
      openingWindowMs: 10_000,
      draws: [{ ...opening, holdsNamed: true }],
    } as never);
    expect(verdict([sale(), late, hold(1810.1), hold(1810.5), reveal(1813)])).toBe("ok");
  });

  it("reports a log whose holds name no draw (written before they did) as unproven, judged by the old count", () => {
    const log = [sale(), hold(1810.1), hold(1810.1), reveal()];
    expect(outcome(log)).toBe("unproven: the log's holds name no draw position (written before they did)");
    expect(replay(log, new Map(), { now: NOW })).toMatchObject({ drawOutcomes: "untagged log" });
    // Nothing held by the draw: nothing to tie (and nothing left to hold: every entry SOLD_OUT).
    expect(outcome([sale({ total: 0 }), reveal()], results("SOLD_OUT", "SOLD_OUT", "SOLD_OUT", "SOLD_OUT"))).toBe("ok");
  });

  describe("its refusals against the stock the log leaves it (found in an audit)", () => {
    /** `/draw/entries` of [result, quantity] pairs, positions 1 up. */
    const listed = (...rows: [string, number][]): DrawnEntry[] =>
      rows.map(([result, quantity], i) => ({ entryId: `${i + 1}`.repeat(64), position: i + 1, quantity, result }));
    /** Early access from the sale's creation: holds before the opening. */
    const tier = { tiers: [{ name: "early", startsAt: at(0) }] };
    const soldOut = (n: number) => Array.from({ length: n }, (): [string, number] => ["SOLD_OUT", 1]);

    it("refuses SOLD_OUT while units remained, whom the line then takes after the reveal", () => {
      // Stock 2, nobody held: every entrant answered SOLD_OUT, and the line after the reveal gets the units.
      const log = [sale(), reveal(), hold(1810.2), hold(1811)];
      expect(outcome(log, listed(...soldOut(4)))).toMatch(
        /^broken: draw position 1 \(entry 111111111111…\) was answered SOLD_OUT, but 2 of them were left at its turn: the log leaves at least 2 units for the draw \(stock 2, at most 0 taken by others from its close to its reveal\), and the entries before it held 0$/,
      );
      // One held, the next SOLD_OUT with a unit left.
      expect(outcome([sale(), drawHold(1810.1, 1), reveal(), hold(1811)], listed(["HELD", 1], ...soldOut(3)))).toMatch(
        /^broken: draw position 2 .* was answered SOLD_OUT, but 1 of them were left at its turn/,
      );
      // Units taken before the close and released before it too (an expiry, a cancel) are the draw's.
      const early = hold(100);
      const freed = [sale(tier), early, release(early, "expired", 700), reveal(), hold(1811), hold(1811)];
      expect(outcome(freed, listed(...soldOut(4)))).toMatch(/^broken: draw position 1 .* 2 of them were left/);
      // Within the minute of the reveal, an entry that takes units may still be on its way: unsettled.
      expect(outcome(log, listed(...soldOut(4)), T + 1_840_000)).toBe("unsettled");
    });

    it("takes SOLD_OUT once the draw's holds used what the log leaves it", () => {
      // Honest: the units gone to positions 1 and 2 (one of 2 units), then SOLD_OUT.
      expect(outcome([sale(), drawHold(1810.1, 1), drawHold(1810.1, 2), reveal()])).toBe("ok");
      expect(outcome([sale(), drawHold(1810.1, 1, undefined, 2), reveal()], listed(["HELD", 2], ...soldOut(3)))).toBe(
        "ok",
      );
      // A hold before the window whose expiry is not logged by the close keeps its unit: the engine
      // may expire it lazily, during the decision or after it.
      const early = hold(100);
      expect(
        outcome(
          [sale(tier), early, drawHold(1810.1, 1), release(early, "expired", 1810.1), reveal()],
          listed(["HELD", 1], ...soldOut(3)),
        ),
      ).toBe("ok");
      expect(outcome([sale(tier), early, drawHold(1810.1, 1), reveal()], listed(["HELD", 1], ...soldOut(3)))).toBe(
        "ok",
      );
      // A late payment in the decision's span takes its units again; an earlier tier's draw holds too.
      const lapsed = hold(200);
      const paid = { ...release(lapsed, "paid", 1810.1), amount: null };
      expect(
        outcome(
          [sale(tier), lapsed, release(lapsed, "expired", 800), paid, drawHold(1810.1, 1), reveal()],
          listed(["HELD", 1], ...soldOut(3)),
        ),
      ).toBe("ok");
      // A stock cut in the span: the least stock in force counts.
      expect(
        outcome(
          [sale(), drawHold(1810.1, 1), config(1810.1, { total: 1 }), reveal()],
          listed(["HELD", 1], ...soldOut(3)),
        ),
      ).toBe("ok");
      // A unit released by a draw's own hold in the span does not make a later refusal wrong either.
      const first = drawHold(1810.1, 1);
      expect(
        outcome(
          [sale(), first, release(first, "cancelled", 1810.15), drawHold(1810.2, 2), reveal(1810.3)],
          listed(["HELD", 1], ["HELD", 1], ...soldOut(2)),
        ),
      ).toBe("ok");
      // With sizes, a size gone says nothing of the stock: not judged.
      const sized = {
        total: 4,
        variants: [
          { id: "S", name: "S", total: 2 },
          { id: "M", name: "M", total: 2 },
        ],
      };
      expect(outcome([sale(sized), reveal()], listed(...soldOut(4)))).toBe("ok");
    });

    it("refuses INSUFFICIENT_STOCK on one shard while what the entry asked remained; a sharded pull may fall short", () => {
      const one = sale({ total: 3, shards: 1 });
      const log = [one, drawHold(1810.1, 1), drawHold(1810.1, 3), reveal()];
      // Position 2 asked 2 of the 2 left.
      const forged = listed(["HELD", 1], ["INSUFFICIENT_STOCK", 2], ["HELD", 1], ["INSUFFICIENT_STOCK", 2]);
      expect(outcome(log, forged)).toMatch(
        /^broken: draw position 2 .* was answered INSUFFICIENT_STOCK, but the 2 it asked were left at its turn/,
      );
      // Honest: it asked 3 of the 2 left; the next one's unit fits, and the last asked 2 of the 1 left.
      const honest = listed(["HELD", 1], ["INSUFFICIENT_STOCK", 3], ["HELD", 1], ["INSUFFICIENT_STOCK", 2]);
      expect(outcome(log, honest)).toBe("ok");
      // Sharded: a sibling that could not answer leaves a pull short of what the SKU has: not judged.
      expect(outcome([sale({ total: 3 }), drawHold(1810.1, 1), drawHold(1810.1, 3), reveal()], forged)).toBe("ok");
      // A limit's refusal is not the stock's: not judged either.
      const limited = listed(...Array.from({ length: 4 }, (): [string, number] => ["LIMIT_EXCEEDED", 1]));
      expect(outcome([sale(), reveal(), hold(1812)], limited)).toBe("ok");
    });
  });
});

describe("a draw's outcomes against the log: a late payment while pending (second reading)", () => {
  const opening = windowOf(1800, "e");
  // One shard: its draw is decided in one transaction, so a SOLD_OUT answer means nothing was left then.
  const sale = (fields: object = {}) =>
    config(0, {
      total: 2,
      shards: 1,
      startsAt: at(1800),
      openingWindowMs: 10_000,
      draws: [opening],
      ...fields,
    } as never);
  const drawHold = (seconds: number, position: number, quantity = 1): Entry => ({
    ...hold(seconds, quantity),
    draw: { seedHash: opening.seedHash, position },
  });
  const results = (...codes: string[]) =>
    codes.map((result, i) => ({ entryId: `${i + 1}`.repeat(64), position: i + 1, quantity: 1, result }));
  const reveal = (seconds = 1810.2, entrants = 4) => revealOf(seconds, 1800, "e", entrants);
  const outcome = (log: Entry[], listed: ReturnType<typeof results>): string => {
    const draws = new Map<string, DrawHolds>();
    try {
      replay(log, new Map(), { now: NOW, settleMs: 0, draws });
      const checked = checkDrawOutcomes(listed, draws.get(opening.seedHash), NOW);
      return checked.unproven ? `unproven: ${checked.unproven}` : checked.unsettled ? "unsettled" : "ok";
    } catch (err) {
      if (err instanceof Broken) return `broken: ${err.message}`;
      throw err;
    }
  };

  it("refuses a late payment that takes a unit while the draw is pending", () => {
    // A tier's buyer held at 1700 s, the hold lapsed at 1760 s; paid late at 1805 s, inside the
    // public window: the engine answers that payment busy until the draw is decided.
    const tiered = sale({ tiers: [{ name: "early", startsAt: at(1690) }] });
    const early = { ...hold(1700), expires: at(1760) };
    const late = { ...release(early, "paid", 1805), amount: null };
    const log = [tiered, early, release(early, "expired", 1760), late, drawHold(1810.1, 1), reveal(1810.2, 2)];
    expect(outcome(log, results("HELD", "SOLD_OUT"))).toMatch(
      /^broken: entry 3 \(paid .*\): a late payment of reservation r[0-9]+ \(a hold inside the opening.s window/,
    );
    // After the reveal it is a sale as any.
    const after = { ...release(early, "paid", 1812), amount: null };
    expect(
      outcome(
        [tiered, early, release(early, "expired", 1760), drawHold(1810.1, 1), reveal(1810.2, 1), after],
        results("HELD"),
      ),
    ).toBe("ok");
  });
});

describe("a log that spans the gateway's upgrade to tagged holds (second reading)", () => {
  // A tier's opening (1790–1800 s) decided by a gateway from before holds named their draw (its
  // home shards' holds 2 s after its close, inside the public window, its reveal at 1803 s); the
  // public opening (1800–1810 s) decided after the upgrade, its holds tagged.
  const tier = windowOf(1790, "a");
  const opening = windowOf(1800, "e");
  const sale = config(0, {
    total: 10,
    startsAt: at(1800),
    openingWindowMs: 10_000,
    tiers: [{ name: "early", startsAt: at(1790) }],
    draws: [tier, opening],
  } as never);
  const tagged = (seconds: number, position: number): Entry => ({
    ...hold(seconds),
    draw: { seedHash: opening.seedHash, position },
  });
  const results = (...codes: string[]) =>
    codes.map((result, i) => ({ entryId: `${i + 1}`.repeat(64), position: i + 1, quantity: 1, result }));

  it("judges the old draw by the old rule and the new one by its tags", () => {
    const log = [
      sale,
      hold(1802),
      hold(1802.5),
      revealOf(1803, 1790, "a", 2),
      tagged(1810.3, 1),
      tagged(1810.6, 2),
      revealOf(1812, 1800, "e", 2),
    ];
    const draws = new Map<string, DrawHolds>();
    expect(verdict(log)).toBe("ok");
    replay(log, new Map(), { now: NOW, draws });
    expect(checkDrawOutcomes(results("HELD", "HELD"), draws.get(opening.seedHash), NOW)).toMatchObject({ held: 2 });
    // The old draw's count still holds: a third late hold is one more than its 2 entrants.
    expect(verdict([...log.slice(0, 3), hold(1802.7), ...log.slice(3)])).toMatch(
      /3 buyers held inside a later window while this draw of 2 entrants was decided/,
    );
    // ...and an untagged hold while the tagged draw is pending is still broken.
    expect(verdict([...log.slice(0, 5), hold(1810.4), ...log.slice(5)])).toMatch(
      /a hold after the opening's window closed .* and it names no draw/,
    );
  });

  it("ties each drawn hold to its entry's buyer when the draw's ids are salted (entryIdPrefix salt)", () => {
    const first = tagged(1810.3, 1);
    const second = tagged(1810.6, 2);
    const log = [
      sale,
      hold(1802),
      hold(1802.5),
      revealOf(1803, 1790, "a", 2),
      first,
      second,
      revealOf(1812, 1800, "e", 2),
    ];
    const draws = new Map<string, DrawHolds>();
    replay(log, new Map(), { now: NOW, draws });
    const listed = (ids: unknown[]) =>
      ids.map((entryId, i) => ({ entryId: String(entryId), position: i + 1, quantity: 1, result: "HELD" }));
    expect(() => checkDrawBuyers(listed([first.user, second.user]), draws.get(opening.seedHash), "salt")).not.toThrow();
    // The holds swapped: each position held for the other entry's buyer.
    const swapped = listed([second.user, first.user]);
    expect(() => checkDrawBuyers(swapped, draws.get(opening.seedHash), "salt")).toThrow(
      /the log's entry 4 \(hold at .*\) holds draw position 1 for a buyer other than that entry's/,
    );
    // Ids of `<sku>:<userId>` (a gateway without the log's salts) tie no hold to a buyer.
    expect(() => checkDrawBuyers(swapped, draws.get(opening.seedHash), "sku")).not.toThrow();
    // Unless the configuration promised salted ids before the opening: then /draw may not take it back.
    const promising = {
      ...sale,
      draws: (sale.draws as Record<string, unknown>[]).map((d) => ({ ...d, entryIdPrefix: "salt" })),
    };
    const promised = new Map<string, DrawHolds>();
    replay([promising, ...log.slice(1)], new Map(), { now: NOW, draws: promised });
    expect(() => checkDrawBuyers(swapped, promised.get(opening.seedHash), "sku")).toThrow(
      /promised entry ids of its buyers' `user`, but \/draw says they are of `<sku>:<userId>`/,
    );
    expect(() => checkDrawBuyers(swapped, promised.get(opening.seedHash), undefined)).toThrow(/says nothing of them/);
    expect(() => checkDrawBuyers(swapped, promised.get(opening.seedHash), "salt")).toThrow(/holds draw position 1/);
  });
});

describe("a short window's draw against holds just before it (second reading)", () => {
  // The public opening 1800–1800.5 s (openingWindowMs 500), 1 unit; an early-access tier open from 0.
  const opening = {
    opensAt: at(1800),
    closesAt: at(1800.5),
    seedHash: createHash("sha256").update(seedOf("f"), "utf8").digest("hex"),
  };
  const sale = config(0, {
    total: 1,
    startsAt: at(1800),
    openingWindowMs: 500,
    draws: [opening],
    tiers: [{ name: "early", startsAt: at(0) }],
  } as never);
  const reveal: Entry = { type: "draw-reveal", time: at(1800.7), ...opening, seed: seedOf("f"), entrants: 1 };
  const listed: DrawnEntry[] = [{ entryId: "1".repeat(64), position: 1, quantity: 1, result: "SOLD_OUT" }];
  const outcome = (log: Entry[]) => {
    const draws = new Map<string, DrawHolds>();
    try {
      replay(log, new Map(), { now: NOW, settleMs: 0, draws });
      const checked = checkDrawOutcomes(listed, draws.get(opening.seedHash), NOW);
      return checked.unsettled ? "unsettled" : "ok";
    } catch (err) {
      if (err instanceof Broken) return `broken: ${err.message}`;
      throw err;
    }
  };

  it("counts a tier hold taken before the opening, within a second of the close, against the draw", () => {
    // A tier buyer took the only unit 0.3 s before the public opening (kept, paid): the draw's one
    // entrant is honestly SOLD_OUT.
    const early = hold(1799.7);
    expect(outcome([sale, early, reveal])).toBe("ok");
    expect(outcome([sale, early, { ...release(early, "paid", 1799.9), amount: null }, reveal])).toBe("ok");
  });
});

describe("verify-sale's replay of payments that changed no reservation (API.md v1.4)", () => {
  const priced = () => config(0, { price: 1500 } as Partial<{ status: string; total: number }>);
  const payment = (of: Entry, seconds: number, reason: string, amount: number | null, currency: string | null) =>
    ({
      type: "payment",
      time: at(seconds),
      reservation: of.reservation,
      user: of.user,
      outcome: "refund_required",
      reason,
      amount,
      currency,
    }) as Entry;
  const paid = (of: Entry, seconds: number): Entry => ({ ...of, type: "paid", time: at(seconds), amount: 1500 });

  it("takes each payment whose reason its rules give at that point, and a log without any", () => {
    const h = hold(1);
    const log = [
      priced(),
      h,
      payment(h, 2, "amount_mismatch", 1499, "usd"),
      payment(h, 3, "currency_mismatch", 1500, "eur"),
      paid(h, 4),
      payment(h, 5, "already_paid", 1500, "usd"),
      payment(h, 6, "already_paid", null, null),
    ];
    expect(broken(log)).toBeNull();
    const summary = replay(log, new Map(), { now: NOW, settleMs: 0 });
    expect(summary.byType).toMatchObject({ payment: 4, paid: 1 });
    expect(summary.notReplayed).toBeUndefined(); // replayed under its rules, not passed over
    // An older log, with no payment entries and no reasons: as before.
    expect(broken(log.filter((e) => e.type !== "payment"))).toBeNull();
    // A configuration that does not say its price: a mismatch is not checked.
    const { price: _, ...unpriced } = priced();
    expect(broken([unpriced as Entry, h, payment(h, 2, "amount_mismatch", 1500, "usd")])).toBeNull();
  });

  it("refuses a forged payment entry, naming it: already_paid on a held reservation", () => {
    const h = hold(1);
    expect(broken([priced(), h, payment(h, 2, "already_paid", 1500, "usd")])).toMatch(
      new RegExp(
        `^entry 2 \\(payment at ${at(2).replace(/\./g, "\\.")}\\): already_paid, but reservation ${h.reservation} is held in the log at that point$`,
      ),
    );
    // Paid only after it: the payment entry is judged where its time puts it.
    expect(broken([priced(), h, payment(h, 2, "already_paid", 1500, "usd"), paid(h, 3)])).toMatch(
      /^entry 2 \(payment .*already_paid, but reservation r\d+ is held/,
    );
  });

  it("refuses a mismatch the price does not give, an unknown reason, another buyer or reservation", () => {
    const h = hold(1);
    const fails = (p: Entry, first = priced()) => broken([first, h, p]);
    expect(fails(payment(h, 2, "amount_mismatch", 1500, "usd"))).toMatch(
      /entry 2 \(payment .*amount_mismatch, but 1500 is the price 1500 × 1/,
    );
    expect(fails(payment(h, 2, "amount_mismatch", 1499, "eur"))).toMatch(/eur is not the sale's currency usd/);
    expect(fails(payment(h, 2, "currency_mismatch", 1499, "USD"))).toMatch(/usd is the sale's currency/);
    expect(fails(payment(h, 2, "amount_mismatch", 1499, "usd"), config(0, {}))).toMatch(/the sale has no price/);
    expect(fails(payment(h, 2, "amount_mismatch", null, null))).toMatch(/without the money the payment said/);
    expect(fails(payment(h, 2, "too_late", 1500, "usd"))).toMatch(/"too_late", which is not a reason that changes/);
    expect(fails({ ...payment(h, 2, "already_paid", 1500, "usd"), outcome: "applied" })).toMatch(
      /outcome is "applied"/,
    );
    expect(fails({ ...payment(h, 2, "amount_mismatch", 1499, "usd"), user: user(999) })).toMatch(/another user/);
    expect(fails({ ...payment(h, 2, "amount_mismatch", 1499, "usd"), reservation: "nowhere" })).toMatch(
      /reservation nowhere, which the log never held/,
    );
  });

  it("takes a late payment's refund_required with a late payment's reason, and no other", () => {
    const h = hold(1);
    const expired: Entry = { ...h, type: "expired", time: at(700) };
    const late = (reason: string): Entry => ({ ...h, type: "refund_required", time: at(800), reason });
    expect(broken([priced(), h, expired, late("too_late")])).toBeNull();
    expect(broken([priced(), h, expired, late("limit_exceeded")])).toBeNull();
    expect(broken([priced(), h, expired, late("amount_mismatch")])).toMatch(
      /entry 3 \(refund_required .*"amount_mismatch", which is no late payment's reason/,
    );
  });
});
