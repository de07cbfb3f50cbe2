import { abortAllDurableObjects, runDurableObjectAlarm, runInDurableObject } from "cloudflare:test";
import { env } from "cloudflare:workers";
import { describe, expect, it } from "vitest";
import { drawOrder, sha256Hex } from "../durable-objects/engine/opening-draw";
import { homeShard } from "../durable-objects/shared/shard-name";
import { configureSku } from "../src/catalog/configure-sku";
import { mintPurchaseToken, newNonce } from "../src/edge/purchase-token";
import { type Answer, call, createSku, stockOf, stockShard, uniqueSku } from "./support/client";
import { closeWindow, entryIdFor, setClock, untilEntered } from "./support/draw-window";
import { eventually } from "./support/eventually";
import { logEntriesOf } from "./support/log-entries";
import { differencesOf, ordersOf, reconcileNow } from "./support/reconcile";
// The other draws' suites share this file's workerd (one start-up, issue #56): what a draw costs, a
// draw with sizes, and a draw at each early-access tier. They run first (imports come first): this
// file's restart test aborts every object of the runtime.
import "./suites/draw-bounds";
import "./suites/sizes-draw";
import "./suites/tier-draw";
import "./suites/sale-log";
import "./suites/early-access";

/**
 * Fair opening (API.md "Fair opening") through the Worker: a window's reservations wait for one
 * draw, which is decided once, verifiably, over the whole SKU. The statistics (uniform winners over
 * many seeded draws) are in test/opening-draw.unit.test.ts.
 */

const HOLD = 600;
const TOKEN_SECRET = "test-token-secret";

/**
 * A SKU whose window opens a minute from now. The tests never wait for it: they move the stock
 * objects' clocks (the `now` seam) into the window, then to its close, and run shard 0's alarm.
 */
async function saleWithWindow(
  sku: string,
  opts: { total: number; windowMs: number; shards?: number; perUserLimit?: number },
) {
  const opensAt = Date.now() + 60_000;
  const created = await createSku(sku, {
    totalStock: opts.total,
    perUserLimit: opts.perUserLimit ?? 1,
    holdSeconds: HOLD,
    shards: opts.shards ?? 1,
    startsAt: new Date(opensAt).toISOString(),
    openingWindowMs: opts.windowMs,
  });
  expect(created.json.openingWindowMs).toBe(opts.windowMs);
  return { opensAt, closesAt: opensAt + opts.windowMs, shards: opts.shards ?? 1 };
}

/**
 * A purchase token as POST /tokens mints it. Minted here because the edge judges the sale window
 * by its own (real) clock, which is a minute before the opening the objects' clocks were moved to.
 */
function tokenAt(user: string, sku: string, shards: number): Promise<string> {
  const claims = {
    sku,
    userId: user,
    shard: homeShard(user, shards),
    shards,
    nonce: newNonce(),
    expiresAt: Date.now() + 300_000,
  };
  return mintPurchaseToken(claims, TOKEN_SECRET);
}

function reserveWith(user: string, sku: string, token: string, quantity = 1): Promise<Answer> {
  return call("POST", `/api/skus/${sku}/reservations`, { user, body: { token, quantity } });
}

async function allEntries(sku: string) {
  const entries: { entryId: string; position: number; quantity: number; result: string }[] = [];
  for (;;) {
    const page = await call("GET", `/api/skus/${sku}/draw/entries?offset=${entries.length}&limit=50`);
    expect(page.status).toBe(200);
    entries.push(...page.json.entries);
    if (page.json.entries.length < 50) return entries;
  }
}

/** Recomputes the draw from the revealed seed: every position must match. */
async function verifyDraw(sku: string, seedHashBefore: string) {
  // The edge remembers an undecided draw for about a second: poll until the seed is revealed.
  const draw = await eventually(async () => {
    const read = await call("GET", `/api/skus/${sku}/draw`);
    expect(read.status).toBe(200);
    expect(read.json.seed).toMatch(/^[0-9a-f]{64}$/);
    return read;
  });
  expect(sha256Hex(draw.json.seed)).toBe(seedHashBefore);
  expect(draw.json.seedHash).toBe(seedHashBefore);
  const entries = await allEntries(sku);
  expect(entries).toHaveLength(draw.json.entrants);
  const recomputed = drawOrder(
    draw.json.seed,
    entries.map((e) => e.entryId),
  );
  expect(entries.map((e) => e.entryId)).toEqual(recomputed);
  expect(entries.map((e) => e.position)).toEqual(entries.map((_, i) => i + 1));
  return { draw: draw.json, entries };
}

describe("fair opening: configuration", () => {
  it("publishes the seed hash before the window opens; refuses windows it cannot honour, changing nothing", async () => {
    const sku = uniqueSku("drawcfg");
    expect((await createSku(sku, { totalStock: 5 })).status).toBe(200);
    const noStart = await call("PUT", `/admin/skus/${sku}`, {
      admin: true,
      body: { totalStock: 9, openingWindowMs: 2_000 },
    });
    expect([noStart.status, noStart.json.error?.code]).toEqual([400, "INVALID_REQUEST"]);
    const past = new Date(Date.now() - 1_000).toISOString();
    const late = await call("PUT", `/admin/skus/${sku}`, {
      admin: true,
      body: { totalStock: 9, openingWindowMs: 2_000, startsAt: past },
    });
    expect([late.status, late.json.error?.code]).toEqual([409, "INVALID_STATE"]);
    expect((await stockOf(sku)).total).toBe(5);
    expect((await call("GET", `/api/skus/${sku}/draw`)).json.error?.code).toBe("NOT_FOUND");

    const startsAt = new Date(Date.now() + 60_000).toISOString();
    const set = await call("PUT", `/admin/skus/${sku}`, {
      admin: true,
      body: { totalStock: 9, openingWindowMs: 2_000, startsAt },
    });
    expect(set.status).toBe(200);
    const draw = await call("GET", `/api/skus/${sku}/draw`);
    expect(draw.status).toBe(200);
    expect(draw.json).toMatchObject({ sku, openingWindowMs: 2_000, seed: null, entrants: 0, decidedAt: null });
    expect(draw.json.seedHash).toMatch(/^[0-9a-f]{64}$/);
    expect((await call("GET", `/api/skus/${sku}`)).json.openingWindowMs).toBe(2_000);
    // Moving the opening before it opens keeps the committed seed.
    const moved = await call("PUT", `/admin/skus/${sku}`, {
      admin: true,
      body: { totalStock: 9, startsAt: new Date(Date.now() + 90_000).toISOString() },
    });
    expect(moved.status).toBe(200);
    expect((await call("GET", `/api/skus/${sku}/draw`)).json.seedHash).toBe(draw.json.seedHash);
    // 0 turns it off before it opens.
    const off = await call("PUT", `/admin/skus/${sku}`, { admin: true, body: { totalStock: 9, openingWindowMs: 0 } });
    expect(off.status).toBe(200);
    expect((await call("GET", `/api/skus/${sku}/draw`)).json.error?.code).toBe("NOT_FOUND");
  });

  it("GET /api/skus/:sku/draw: SKU_NOT_FOUND for an unknown SKU", async () => {
    const unknown = await call("GET", `/api/skus/${uniqueSku("nosuch")}/draw`);
    expect([unknown.status, unknown.json.error?.code]).toEqual([404, "SKU_NOT_FOUND"]);
  });
});

describe("fair opening: a sale through the Worker", () => {
  it("a later opening the stock objects take after a decided draw has its own draw over every shard, and an isolate that read the first shows it", async () => {
    const sku = uniqueSku("drawagain");
    const shards = 2;
    const first = await saleWithWindow(sku, { total: 2, windowMs: 1_000, shards });
    const drawOf = async (opens: number, users: string[]) => {
      await setClock(sku, shards, opens + 1);
      const asked = users.map(async (user) => ({
        user,
        answer: await reserveWith(user, sku, await tokenAt(user, sku, shards)),
      }));
      return asked;
    };
    const one = Array.from({ length: 4 }, (_, i) => `again1-${sku}-${i}`);
    const dropOne = await drawOf(first.opensAt, one);
    await untilEntered(sku, shards, one.length);
    await closeWindow(sku, shards, first.closesAt);
    expect((await Promise.all(dropOne)).filter((a) => a.answer.status === 202)).toHaveLength(2);
    const decided = await eventually(async () => {
      const read = await call("GET", `/api/skus/${sku}/draw`);
      expect(read.json).toMatchObject({ entrants: one.length, seed: expect.stringMatching(/^[0-9a-f]{64}$/) });
      return read.json;
    });
    // A second opening, PUT through another isolate: the route's own code, without this isolate's
    // forgetting. The edge refuses to move a start whose window opened (state window_open) by its own
    // clock, a minute behind the objects' here; the objects take a later opening once a draw is
    // decided, and the isolate's memory must not depend on which of the two rules judged it.
    const opensAt = Date.now() + 600_000;
    const next = new Date(opensAt).toISOString();
    await configureSku(env, sku, { totalStock: 5, startsAt: next }, Date.now());
    // This isolate answers as a fresh one would: the new opening, its seed hash published, undecided;
    // the first draw stays, as history.
    const published = await eventually(async () => {
      const read = await call("GET", `/api/skus/${sku}/draw`);
      expect(read.json).toMatchObject({ opensAt: next, seed: null, entrants: 0, decidedAt: null });
      expect(read.json.seedHash).not.toBe(decided.seedHash);
      return read.json;
    });
    expect(published.openings.map((o: { seed: string | null }) => o.seed)).toEqual([decided.seed, null]);
    // Its draw: the 3 new units over both shards. The first drop's 2 winners are at the limit of 1:
    // answered LIMIT_EXCEEDED at once, they take no entry; its losers enter again.
    const two = [...Array.from({ length: 5 }, (_, i) => `again2-${sku}-${i}`), ...one];
    const dropTwo = await drawOf(opensAt, two);
    await untilEntered(sku, shards, one.length + two.length - 2);
    await closeWindow(sku, shards, opensAt + 1_000);
    const answers = await Promise.all(dropTwo);
    const { draw, entries } = await verifyDraw(sku, published.seedHash);
    expect(draw.entrants).toBe(two.length - 2);
    expect(answers.filter((a) => a.answer.json.error?.code === "LIMIT_EXCEEDED")).toHaveLength(2);
    const held = answers.filter((a) => a.answer.status === 202);
    expect(held).toHaveLength(3);
    const won = new Set(held.map((a) => entryIdFor(sku, a.user)));
    expect(
      entries
        .filter((e) => e.result === "HELD")
        .map((e) => e.entryId)
        .sort(),
    ).toEqual([...won].sort());
    expect(await stockOf(sku)).toEqual({ total: 5, available: 0, held: 5, sold: 0 });
  });

  it("decides a window's entries in one verifiable draw; a bot's many tokens are one entry", async () => {
    const sku = uniqueSku("drawsale");
    const units = 8;
    const { opensAt, closesAt } = await saleWithWindow(sku, { total: units, windowMs: 1_500 });
    const seedHash = (await call("GET", `/api/skus/${sku}/draw`)).json.seedHash as string;
    await setClock(sku, 1, opensAt + 1);

    const shoppers = Array.from({ length: 30 }, (_, i) => `fair-${sku}-${i}`);
    const bots = [`bot-${sku}-a`, `bot-${sku}-b`];
    // Bots take many tokens each and fire them all, first.
    const botTokens = await Promise.all(
      bots.flatMap((bot) => Array.from({ length: 5 }, async () => ({ user: bot, token: await tokenAt(bot, sku, 1) }))),
    );
    const shopperTokens = await Promise.all(
      shoppers.map(async (user) => ({ user, token: await tokenAt(user, sku, 1) })),
    );
    const all = [...botTokens, ...shopperTokens];
    let answeredEarly = 0;
    const requests = all.map(async (t) => {
      const answer = await reserveWith(t.user, sku, t.token);
      answeredEarly++;
      return { ...t, answer };
    });
    // Every request waits for the draw: none is answered while the window is open.
    await untilEntered(sku, 1, all.length);
    expect(answeredEarly).toBe(0);
    await closeWindow(sku, 1, closesAt);
    const answers = await Promise.all(requests);

    const { draw, entries } = await verifyDraw(sku, seedHash);
    expect(draw.entrants).toBe(shoppers.length + bots.length); // one entry per user
    expect(draw.decidedAt).toBe(new Date(closesAt).toISOString());

    const held = answers.filter((a) => a.answer.status === 202);
    const heldUsers = new Set(held.map((a) => a.user));
    expect(heldUsers.size).toBe(units);
    // The winners are the first `units` entries of the recomputed order (quantity 1, limit 1).
    const winners = new Set(entries.slice(0, units).map((e) => e.entryId));
    const ids = new Map([...bots, ...shoppers].map((u) => [u, entryIdFor(sku, u)] as const));
    expect(new Set([...heldUsers].map((u) => ids.get(u)))).toEqual(winners);
    expect(entries.slice(units).every((e) => e.result === "SOLD_OUT")).toBe(true);
    for (const a of answers) {
      const position = entries.findIndex((e) => e.entryId === ids.get(a.user)) + 1;
      const won = winners.has(ids.get(a.user) ?? "");
      // A winner's body carries its place in the draw; everyone else is sold out, told their place too.
      const place = { entryId: ids.get(a.user), position, entrants: draw.entrants };
      const body = a.answer.json;
      expect({ status: a.answer.status, draw: body.draw ?? body.error?.details?.draw, code: body.error?.code }).toEqual(
        won ? { status: 202, draw: place, code: undefined } : { status: 409, draw: place, code: "SOLD_OUT" },
      );
    }
    // A bot's tokens share its one entry: all the same answer, at most one reservation.
    for (const bot of bots) {
      const mine = answers.filter((a) => a.user === bot);
      expect(new Set(mine.map((a) => a.answer.status)).size).toBe(1);
      expect(new Set(mine.map((a) => a.answer.json.reservationId ?? null)).size).toBe(1);
    }
    // No oversell; every hold persisted in D1 through the outbox; the books agree.
    expect(await stockOf(sku)).toEqual({ total: units, available: 0, held: units, sold: 0 });
    await eventually(async () => expect((await ordersOf(sku)).filter((o) => o.status === "held")).toHaveLength(units));
    expect(differencesOf(await reconcileNow({ sku }), sku)).toEqual([]);

    // A retried token gets its draw answer again; after the window, arrivals are decided on arrival.
    const first = held[0];
    if (!first) throw new Error("no holder");
    const again = await reserveWith(first.user, sku, first.token);
    expect(again.status).toBe(202);
    expect(again.headers.get("Idempotent-Replayed")).toBe("true");
    expect(again.json.reservationId).toBe(first.answer.json.reservationId);
    expect(again.json.draw.position).toBe(first.answer.json.draw.position);
    const loser = answers.find((a) => a.answer.status === 409 && !bots.includes(a.user));
    if (!loser) throw new Error("no loser");
    expect((await reserveWith(loser.user, sku, loser.token)).json.error?.code).toBe("SOLD_OUT");
    const late = `late-${sku}`;
    const lateAnswer = await reserveWith(late, sku, await tokenAt(late, sku, 1));
    expect([lateAnswer.status, lateAnswer.json.error?.code]).toEqual([409, "SOLD_OUT"]);
    expect(lateAnswer.json.draw).toBeUndefined();
    expect(lateAnswer.json.error.details?.draw).toBeUndefined(); // decided on arrival, not by the draw
  });

  it("names nobody: a guessed user id finds no entry, and each entry is its buyer's salted `user` in the log (found in an audit)", async () => {
    const sku = uniqueSku("drawsalt");
    const { opensAt, closesAt } = await saleWithWindow(sku, { total: 2, windowMs: 1_000 });
    const seedHash = (await call("GET", `/api/skus/${sku}/draw`)).json.seedHash as string;
    await setClock(sku, 1, opensAt + 1);
    const users = Array.from({ length: 5 }, (_, i) => `user-${i + 1}`); // ids anyone could guess
    const pending = users.map(async (user) => ({
      user,
      answer: await reserveWith(user, sku, await tokenAt(user, sku, 1)),
    }));
    await untilEntered(sku, 1, users.length);
    await closeWindow(sku, 1, closesAt);
    const answers = await Promise.all(pending);
    const { draw, entries } = await verifyDraw(sku, seedHash);
    expect(draw.entryIdPrefix).toBe("salt");
    // Before, an entry id was hex SHA-256 of `<sku>:<userId>`: anyone could find a guessed user's place.
    const guessed = new Set(users.map((u) => sha256Hex(`${sku}:${u}`)));
    expect(entries.filter((e) => guessed.has(e.entryId))).toEqual([]);
    // A winner recomputes their entry id from the salt only they are shown.
    const held = answers.filter((a) => a.answer.status === 202);
    expect(held).toHaveLength(2);
    for (const { user, answer } of held)
      expect(sha256Hex(`${answer.json.salt}:${user}`)).toBe(answer.json.draw.entryId);
    // The log's holds name the same buyers as the draw's entries at their positions.
    const logged = await eventually(async () => {
      const got = await logEntriesOf(sku);
      expect(got.filter((e) => e.type === "hold")).toHaveLength(2);
      return got;
    });
    const holds = logged.filter((e) => e.type === "hold") as { user: string; draw: { position: number } }[];
    for (const hold of holds) expect(entries[hold.draw.position - 1]?.entryId).toBe(hold.user);
    // The configuration that committed to the draw promised it before the opening (verify-sale holds it to that).
    expect(logged[0]).toMatchObject({ type: "config", draws: [{ seedHash, holdsNamed: true, entryIdPrefix: "salt" }] });
  });

  it("replays a winner's hold to each token it sent in the window, from an isolate that knows the SKU sold out", async () => {
    const sku = uniqueSku("drawjoin");
    const { opensAt, closesAt } = await saleWithWindow(sku, { total: 1, windowMs: 1_000 });
    await setClock(sku, 1, opensAt + 1);
    const winner = `w-${sku}`;
    const tokens = [await tokenAt(winner, sku, 1), await tokenAt(winner, sku, 1)];
    const waiting = tokens.map((token) => reserveWith(winner, sku, token));
    await untilEntered(sku, 1, tokens.length);
    await closeWindow(sku, 1, closesAt);
    const held = (await Promise.all(waiting)).map((a) => [a.status, a.json.reservationId]);
    expect(held[1]).toEqual(held[0]);
    expect(held[0]?.[0]).toBe(202);
    // Another buyer is told SOLD_OUT: this isolate now remembers it, with the shard's spent tokens.
    const late = `late-${sku}`;
    expect((await reserveWith(late, sku, await tokenAt(late, sku, 1))).json.error?.code).toBe("SOLD_OUT");
    for (const token of tokens) {
      const again = await reserveWith(winner, sku, token);
      expect([again.status, again.json.reservationId, again.headers.get("Idempotent-Replayed")]).toEqual([
        202,
        held[0]?.[1],
        "true",
      ]);
    }
  });

  it("a reservation decided by the draw carries its draw in GET /api/reservations/:id and its cancel, as in its 202 (found in an audit)", async () => {
    const sku = uniqueSku("drawget");
    const { opensAt, closesAt } = await saleWithWindow(sku, { total: 1, windowMs: 1_000 });
    await setClock(sku, 1, opensAt + 1);
    const winner = `w-${sku}`;
    const waiting = reserveWith(winner, sku, await tokenAt(winner, sku, 1));
    await untilEntered(sku, 1, 1);
    await closeWindow(sku, 1, closesAt);
    const held = await waiting;
    expect(held.status).toBe(202);
    expect(held.json.draw).toMatchObject({ position: 1, entrants: 1 });
    const read = await call("GET", `/api/reservations/${held.json.reservationId}`, { user: winner });
    expect(read.status).toBe(200);
    expect(read.json.draw).toEqual(held.json.draw);
    const cancelled = await call("POST", `/api/reservations/${held.json.reservationId}/cancel`, { user: winner });
    expect([cancelled.status, cancelled.json.status, cancelled.json.draw]).toEqual([200, "cancelled", held.json.draw]);
  });

  it("answers a loser's retried token with its draw result, from an isolate that knows the SKU sold out", async () => {
    const sku = uniqueSku("drawlose");
    const { opensAt, closesAt } = await saleWithWindow(sku, { total: 1, windowMs: 1_000, perUserLimit: 2 });
    await setClock(sku, 1, opensAt + 1);
    // Two buyers for the one unit: the loser asked 1 (SOLD_OUT) or 2 (INSUFFICIENT_STOCK), by the draw.
    const buyers = [`one-${sku}`, `two-${sku}`];
    const tokens = [await tokenAt(buyers[0] as string, sku, 1), await tokenAt(buyers[1] as string, sku, 1)];
    const waiting = buyers.map((b, i) => reserveWith(b, sku, tokens[i] as string, i + 1));
    await untilEntered(sku, 1, 2);
    await closeWindow(sku, 1, closesAt);
    const answers = await Promise.all(waiting);
    const lost = answers.findIndex((a) => a.status === 409);
    const first = answers[lost];
    expect(first?.json.error.details.draw).toMatchObject({ entrants: 2 });
    const late = `late-${sku}`;
    expect((await reserveWith(late, sku, await tokenAt(late, sku, 1))).json.error?.code).toBe("SOLD_OUT");
    const again = await reserveWith(buyers[lost] as string, sku, tokens[lost] as string, lost + 1);
    expect([again.status, again.json.error?.code, again.json.error?.details?.draw]).toEqual([
      409,
      first?.json.error.code,
      first?.json.error.details.draw,
    ]);
  });

  it("decides exactly once when the stock object restarts mid-window: waiting requests fail, retries get the draw's answer", async () => {
    const sku = uniqueSku("drawrestart");
    const units = 4;
    const { opensAt, closesAt } = await saleWithWindow(sku, { total: units, windowMs: 2_000 });
    const seedHash = (await call("GET", `/api/skus/${sku}/draw`)).json.seedHash as string;
    await setClock(sku, 1, opensAt + 1);
    const users = Array.from({ length: 12 }, (_, i) => `restart-${sku}-${i}`);
    const tokens = await Promise.all(users.map(async (user) => ({ user, token: await tokenAt(user, sku, 1) })));
    const waiting = tokens.map((t) => reserveWith(t.user, sku, t.token).catch((err: unknown) => String(err)));
    await untilEntered(sku, 1, users.length);
    await abortAllDurableObjects(); // the object restarts mid-window: its waiting requests fail
    const failed = await Promise.all(waiting);
    // Each waiting request fails: 503 BUSY, or the connection to the object broke (the call throws).
    const seen = failed.map((f) => (typeof f === "string" ? "threw" : `${f.status} ${f.json.error?.code}`));
    expect(seen.filter((f) => f !== "threw" && f !== "503 BUSY")).toEqual([]);
    // The restarted object has its own clock again: move it to the close, where the alarm decides.
    await closeWindow(sku, 1, closesAt);
    // Retries with the same tokens: entries were persisted, each gets the one draw's answer.
    const retried = await Promise.all(
      tokens.map(async (t) => ({ ...t, answer: await reserveWith(t.user, sku, t.token) })),
    );
    const { draw, entries } = await verifyDraw(sku, seedHash);
    expect(draw.entrants).toBe(users.length);
    const winners = new Set(entries.slice(0, units).map((e) => e.entryId));
    for (const r of retried) {
      const won = winners.has(entryIdFor(sku, r.user));
      expect(r.answer.status).toBe(won ? 202 : 409);
    }
    const again = await Promise.all(tokens.map((t) => reserveWith(t.user, sku, t.token)));
    expect(again.map((a) => a.json.reservationId ?? a.json.error?.code)).toEqual(
      retried.map((r) => r.answer.json.reservationId ?? r.answer.json.error?.code),
    );
    expect(await stockOf(sku)).toEqual({ total: units, available: 0, held: units, sold: 0 });
    const holds = await runInDurableObject(
      stockShard(env, sku, 0),
      (_object, state) => state.storage.sql.exec<{ n: number }>("SELECT COUNT(*) AS n FROM reservations").one().n,
    );
    expect(holds).toBe(units);
    await eventually(async () => expect(await ordersOf(sku)).toHaveLength(units));
  });

  it("a sharded SKU's line waits while its draw is pending, whoever frees a unit, and is served after it", async () => {
    const sku = uniqueSku("drawline");
    const shards = 2;
    const window = 1_500;
    const early = Date.now() + 10 * 60_000;
    const opensAt = Date.now() + 60 * 60_000;
    await createSku(sku, {
      totalStock: 1,
      perUserLimit: 1,
      holdSeconds: 86_400, // ann's members' hold lasts into the public window an hour later
      shards,
      startsAt: new Date(opensAt).toISOString(),
      openingWindowMs: window,
      access: [{ name: "members", startsAt: new Date(early).toISOString(), claim: { name: "member", value: "gold" } }],
    });
    const [ann, bob, cat] = ["ann", "bob", "cat"].map((name) => `${name}-${sku}`) as [string, string, string];
    const tierToken = mintPurchaseToken(
      {
        sku,
        userId: ann,
        shard: homeShard(ann, shards),
        shards,
        nonce: newNonce(),
        expiresAt: Date.now() + 300_000,
        tier: "members",
      },
      TOKEN_SECRET,
    );
    // The members' draw gives ann the only unit.
    await setClock(sku, shards, early + 1);
    const annHold = reserveWith(ann, sku, await tierToken);
    await untilEntered(sku, shards, 1);
    await closeWindow(sku, shards, early + window);
    const annId = (await annHold).json.reservationId as string;
    // The public window: bob joins the sold-out SKU's line (the edge judges by its real clock, a
    // minute before, so shard 0 is asked as the route would), cat's request enters the draw.
    await setClock(sku, shards, opensAt + 10);
    expect(await stockShard(env, sku, 0).joinWaitlist(bob, 1, undefined, 0)).toMatchObject({ ok: true });
    const catAnswer = reserveWith(cat, sku, await tokenAt(cat, sku, shards));
    await untilEntered(sku, shards, 2);
    // Ann's unit comes back inside the window: the line does not take it, nor enter the draw.
    expect((await call("POST", `/api/reservations/${annId}/cancel`, { user: ann })).status).toBe(200);
    await closeWindow(sku, shards, opensAt + window);
    expect((await catAnswer).status).toBe(202);
    expect((await call("GET", `/api/skus/${sku}/draw`)).json).toMatchObject({ entrants: 1 });
    expect(await stockShard(env, sku, 0).waitlistPlace(bob)).toMatchObject({ position: 1 });
    // Cat's unit comes back after the draw: the line's turn, bob is served.
    const catId = (await catAnswer).json.reservationId as string;
    expect((await call("POST", `/api/reservations/${catId}/cancel`, { user: cat })).status).toBe(200);
    await eventually(async () => expect(await stockShard(env, sku, 0).waitlistPlace(bob)).toBeNull());
    await eventually(async () => {
      const bobs = await call("GET", "/api/me/reservations", { user: bob });
      expect(bobs.json.reservations.map((r: { status: string }) => r.status)).toEqual(["held"]);
    });
  });

  it("a sharded SKU has one draw over all its shards' entries and stock", async () => {
    const sku = uniqueSku("drawshards");
    const units = 7;
    const shards = 3;
    const { opensAt, closesAt } = await saleWithWindow(sku, { total: units, windowMs: 1_500, shards, perUserLimit: 2 });
    const seedHash = (await call("GET", `/api/skus/${sku}/draw`)).json.seedHash as string;
    await setClock(sku, shards, opensAt + 1);
    const users = Array.from({ length: 24 }, (_, i) => `shd-${sku}-${i}`);
    const tokens = await Promise.all(users.map(async (user) => ({ user, token: await tokenAt(user, sku, shards) })));
    // Some ask for 2: first fit in draw order (a 2 that does not fit is INSUFFICIENT_STOCK, a 1 behind it may fit).
    const quantity = (i: number) => (i % 3 === 0 ? 2 : 1);
    const pending = tokens.map(async (t, i) => ({
      ...t,
      q: quantity(i),
      answer: await reserveWith(t.user, sku, t.token, quantity(i)),
    }));
    await untilEntered(sku, shards, users.length);
    // While entries are open each shard keeps its home users': the draw counts every shard's.
    const open = await call("GET", `/admin/skus/${sku}`, { admin: true });
    expect(open.json.draw).toMatchObject({ seed: null, entrants: users.length });
    await closeWindow(sku, shards, closesAt);
    const answers = await Promise.all(pending);
    const { draw, entries } = await verifyDraw(sku, seedHash);
    expect(draw.entrants).toBe(users.length);
    // Replay the rule over the recomputed order: the SKU's units, whichever shard held them.
    let left = units;
    const expected = new Map<string, string>();
    for (const e of entries) {
      const result = left === 0 ? "SOLD_OUT" : e.quantity > left ? "INSUFFICIENT_STOCK" : "HELD";
      if (result === "HELD") left -= e.quantity;
      expected.set(e.entryId, result);
    }
    expect(entries.map((e) => e.result)).toEqual(entries.map((e) => expected.get(e.entryId)));
    for (const a of answers) {
      const entryId = entryIdFor(sku, a.user);
      const result = expected.get(entryId);
      expect(a.answer.status === 202 ? "HELD" : a.answer.json.error?.code).toBe(result);
      // Winners and losers alike are told their place, whichever shard decided them.
      const position = entries.findIndex((e) => e.entryId === entryId) + 1;
      expect(a.answer.json.draw ?? a.answer.json.error?.details?.draw).toEqual({
        entryId,
        position,
        entrants: users.length,
      });
    }
    const stock = await stockOf(sku);
    expect(stock.total).toBe(units);
    expect(stock.held).toBe(units - left);
    await eventually(async () =>
      expect((await ordersOf(sku)).length).toBe(answers.filter((a) => a.answer.status === 202).length),
    );
    expect(differencesOf(await reconcileNow({ sku }), sku)).toEqual([]);
    // The public log ties each outcome to its place: every hold, whichever home shard made it, names
    // the draw's seed hash and its entry's position, with that entry's quantity (API.md v1.4).
    const byPosition = (a: { position: number }, b: { position: number }) => a.position - b.position;
    const logged = await eventually(async () => {
      const holds = (await logEntriesOf(sku)).filter((e) => e.type === "hold");
      expect(holds).toHaveLength(entries.filter((e) => e.result === "HELD").length);
      return holds;
    });
    expect(
      logged
        .map((e) => ({ ...(e.draw as { seedHash: string; position: number }), quantity: e.quantity }))
        .sort(byPosition),
    ).toEqual(
      entries.filter((e) => e.result === "HELD").map((e) => ({ seedHash, position: e.position, quantity: e.quantity })),
    );
    // Every shard was told: a new arrival is decided at once.
    const late = `late-${sku}`;
    const lateAnswer = await reserveWith(late, sku, await tokenAt(late, sku, shards));
    expect(lateAnswer.status === 202 ? "HELD" : lateAnswer.json.error?.code).toBe(left > 0 ? "HELD" : "SOLD_OUT");
  });
});

/** What the draw's holds in the log say of its entries: each HELD entry has one hold at its position, of its buyer. */
async function holdsMatchEntries(sku: string, entries: { entryId: string; position: number; result: string }[]) {
  const held = entries.filter((e) => e.result === "HELD");
  const holds = await eventually(async () => {
    const got = (await logEntriesOf(sku)).filter((e) => e.type === "hold") as {
      user: string;
      draw: { position: number };
    }[];
    expect(got).toHaveLength(held.length);
    return got;
  });
  const byPosition = (a: { position: number }, b: { position: number }) => a.position - b.position;
  expect(holds.map((h) => ({ position: h.draw.position, user: h.user })).sort(byPosition)).toEqual(
    held.map((e) => ({ position: e.position, user: e.entryId })),
  );
}

describe("fair opening: the log key at the decision", () => {
  it("a salted draw whose LOG_SIGNING_KEY is missing at the close waits, says so on /draw and the admin view, and is decided once the key is back", async () => {
    const sku = uniqueSku("drawnokey");
    const units = 2;
    const { opensAt, closesAt } = await saleWithWindow(sku, { total: units, windowMs: 1_000 });
    const seedHash = (await call("GET", `/api/skus/${sku}/draw`)).json.seedHash as string;
    await setClock(sku, 1, opensAt + 1);
    const users = Array.from({ length: 4 }, (_, i) => `nokey-${sku}-${i}`);
    const tokens = await Promise.all(users.map(async (user) => ({ user, token: await tokenAt(user, sku, 1) })));
    const waiting = tokens.map((t) => reserveWith(t.user, sku, t.token).catch((err: unknown) => String(err)));
    await untilEntered(sku, 1, users.length);
    // A deploy without the secret: the stock object runs without LOG_SIGNING_KEY when the window closes.
    await runInDurableObject(stockShard(env, sku, 0), (object) => {
      object.logKey = () => undefined;
    });
    await closeWindow(sku, 1, closesAt);
    // The operator sees why nothing sells, on the admin SKU view and on /draw.
    const admin = await call("GET", `/admin/skus/${sku}`, { admin: true });
    expect(admin.json.draw).toMatchObject({
      seed: null,
      decidedAt: null,
      entryIdPrefix: "salt",
      stalled: "log_key_missing",
    });
    expect(admin.json.draw.openings).toMatchObject([{ stalled: "log_key_missing" }]);
    await eventually(async () =>
      expect((await call("GET", `/api/skus/${sku}/draw`)).json).toMatchObject({
        seed: null,
        stalled: "log_key_missing",
      }),
    );
    // Buyers are told to come back, not held or refused: past the decision's bound, 503 BUSY.
    await setClock(sku, 1, closesAt + 10_001);
    const busy = await Promise.all(waiting);
    expect(busy.map((b) => (typeof b === "string" ? "threw" : `${b.status} ${b.json.error?.code}`))).toEqual(
      users.map(() => "503 BUSY"),
    );
    // The key is back (the same secret put again): the retry booked decides the draw, salted as promised.
    await runInDurableObject(stockShard(env, sku, 0), (object) => {
      object.logKey = () => env.LOG_SIGNING_KEY;
    });
    expect(await runDurableObjectAlarm(stockShard(env, sku, 0))).toBe(true);
    const retried = await Promise.all(tokens.map((t) => reserveWith(t.user, sku, t.token)));
    expect(retried.map((r) => r.status).sort()).toEqual([202, 202, 409, 409]);
    const { draw, entries } = await verifyDraw(sku, seedHash);
    expect(draw).toMatchObject({ entryIdPrefix: "salt", entrants: users.length, stalled: null });
    for (const [i, r] of retried.entries())
      expect((r.json.draw ?? r.json.error?.details?.draw)?.entryId).toBe(entryIdFor(sku, tokens[i]?.user as string));
    await holdsMatchEntries(sku, entries);
  });

  it("a sharded draw retried after its order was written keeps that order, though the retry runs with another log key", async () => {
    const sku = uniqueSku("drawrekey");
    const shards = 2;
    const { opensAt, closesAt } = await saleWithWindow(sku, { total: 20, windowMs: 1_000, shards });
    const seedHash = (await call("GET", `/api/skus/${sku}/draw`)).json.seedHash as string;
    // Both shards' clocks move with `at`; shard 1 fails every call once shard 0 ranked (`down`); the
    // retry runs with a new log key on shard 0 (`rotated`: a rotation, the object restarted with it).
    let at = opensAt + 1;
    let down = false;
    let rotated = false;
    await runInDurableObject(stockShard(env, sku, 1), (object) => {
      object.now = () => {
        if (down) throw new Error("shard 1 is restarting");
        return at;
      };
    });
    await runInDurableObject(stockShard(env, sku, 0), (object) => {
      object.now = () => at;
      object.logKey = () => {
        if (rotated) return "PRIVATE+KEY+flashgate-rotated+00000000+AAAA";
        down ||= at >= closesAt; // ranking at the close: the order is written next
        return env.LOG_SIGNING_KEY;
      };
    });
    const users = Array.from({ length: 8 }, (_, i) => `rekey-${sku}-${i}`);
    expect(new Set(users.map((u) => homeShard(u, shards)))).toEqual(new Set([0, 1]));
    const tokens = await Promise.all(users.map(async (user) => ({ user, token: await tokenAt(user, sku, shards) })));
    const waiting = tokens.map((t) => reserveWith(t.user, sku, t.token).catch((err: unknown) => String(err)));
    await untilEntered(sku, shards, users.length);
    at = closesAt;
    // The first attempt orders the draw, then a home shard fails: the draw is retried.
    await runDurableObjectAlarm(stockShard(env, sku, 0));
    expect(down).toBe(true);
    expect((await call("GET", `/admin/skus/${sku}`, { admin: true })).json.draw.decidedAt).toBeNull();
    down = false;
    rotated = true;
    await runDurableObjectAlarm(stockShard(env, sku, 0));
    at = closesAt + 10_001; // requests that still wait give up: their retries get the draw's answer
    await Promise.all(waiting);
    const { entries } = await verifyDraw(sku, seedHash);
    expect(entries.map((e) => e.result)).toEqual(users.map(() => "HELD"));
    // Each winner finds their entry with the salt they are shown, and the log's hold at its position.
    for (const t of tokens) {
      const answer = await reserveWith(t.user, sku, t.token);
      expect(answer.status).toBe(202);
      const entry = entries.find((e) => e.position === answer.json.draw.position);
      expect(answer.json.draw.entryId).toBe(sha256Hex(`${answer.json.salt}:${t.user}`));
      expect(entry?.entryId).toBe(answer.json.draw.entryId);
    }
    await holdsMatchEntries(sku, entries);
  });
});
