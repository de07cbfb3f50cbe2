import { describe, expect, it } from "vitest";
import { drawOrder, sha256Hex } from "../../durable-objects/engine/opening-draw";
import { homeShard } from "../../durable-objects/shared/shard-name";
import { mintPurchaseToken, newNonce } from "../../src/edge/purchase-token";
import { signHs256 } from "../../tools/jwt";
import { type Answer, call, createSku, stockOf, uniqueSku } from "../support/client";
import { closeWindow, entryIdFor, setClock, untilEntered } from "../support/draw-window";
import { eventually } from "../support/eventually";

/**
 * Early access with a fair opening (API.md "Early access": an opening window drawn at each tier's
 * start as at the public one): each opening has its own draw, seed and seed hash; entrants of a
 * tier's window are placed by that draw, not by arrival; a shopper who won the members' draw meets
 * the per-user limit in the public one. No test waits for a window: the stock objects' clocks are
 * moved into each window, then to its close, and shard 0's alarm decides.
 */

const AUTH_SECRET = "test-auth-secret";
const TOKEN_SECRET = "test-token-secret";
const MINUTE = 60_000;
const WINDOW = 1_500;
const iso = (ms: number) => new Date(ms).toISOString();
const codeOf = (answer: Answer) => answer.json.error?.code as string | undefined;

async function jwtWith(user: string, claims: Record<string, unknown> = {}): Promise<string> {
  const now = Math.floor(Date.now() / 1000);
  return signHs256({ sub: user, iat: now, exp: now + 600, ...claims }, AUTH_SECRET);
}

/**
 * A purchase token as POST /tokens mints it for a claim tier (or the public sale): minted here
 * because the edge judges a claim tier's opening by its own real clock, hours before the clock the
 * stock objects were moved to. The stock object still checks the tier against its own clock.
 */
function mint(user: string, sku: string, shards: number, tier?: string): Promise<string> {
  const claims = { sku, userId: user, shard: homeShard(user, shards), shards, nonce: newNonce() };
  return mintPurchaseToken({ ...claims, expiresAt: Date.now() + 300_000, tier }, TOKEN_SECRET);
}

async function reserveWith(user: string, sku: string, token: string): Promise<Answer> {
  const headers = { authorization: `Bearer ${await jwtWith(user)}` };
  return call("POST", `/api/skus/${sku}/reservations`, { headers, body: { token, quantity: 1 } });
}

type Opening = { opensAt: string; seedHash: string; seed: string | null; entrants: number; decidedAt: string | null };

/** Each answer must be the rule (first fit of `units`) replayed over the order its opening's seed gives. */
async function expectDrawn(
  sku: string,
  opening: Opening,
  answers: { user: string; answer: Answer }[],
  units: number,
): Promise<string[]> {
  const seed = opening.seed as string;
  expect(sha256Hex(seed)).toBe(opening.seedHash);
  const ids = answers.map((a) => entryIdFor(sku, a.user));
  const order = drawOrder(seed, ids);
  expect(opening.entrants).toBe(answers.length);
  const winners: string[] = [];
  for (const [i, a] of answers.entries()) {
    const position = order.indexOf(ids[i] as string) + 1;
    const won = position <= units;
    expect(a.answer.status === 202 ? "HELD" : codeOf(a.answer)).toBe(won ? "HELD" : "SOLD_OUT");
    if (won) winners.push(a.user);
    expect(a.answer.json.draw ?? a.answer.json.error?.details?.draw).toEqual({
      entryId: ids[i],
      position,
      entrants: answers.length,
    });
  }
  return winners;
}

/** The draw as GET shows it once `count` openings are decided (the edge remembers an undecided one ~1 s). */
async function drawDecided(sku: string, count: number) {
  return eventually(async () => {
    const read = await call("GET", `/api/skus/${sku}/draw`);
    expect(read.status).toBe(200);
    expect((read.json.openings as Opening[]).filter((o) => o.decidedAt !== null)).toHaveLength(count);
    return read.json as { openings: Opening[]; seed: string | null; opensAt: string; seedHash: string };
  });
}

describe("early access: a draw at each tier's start", () => {
  it("refuses tiers whose openings are closer than one window (400, nothing changed)", async () => {
    const sku = uniqueSku("tiergap");
    const start = Date.now() + 60 * MINUTE;
    const tooClose = await call("PUT", `/admin/skus/${sku}`, {
      admin: true,
      body: {
        totalStock: 1,
        startsAt: iso(start),
        openingWindowMs: 2_000,
        access: [{ name: "members", startsAt: iso(start - 1_000) }],
      },
    });
    expect(tooClose.status).toBe(400);
    expect(codeOf(tooClose)).toBe("INVALID_REQUEST");
    expect(tooClose.json.error.message).toContain("at least one window apart");
    expect((await call("GET", `/api/skus/${sku}`)).status).toBe(404);
    // One window apart is fine; a later PUT that widens the window past the gap is refused.
    await createSku(sku, {
      totalStock: 1,
      startsAt: iso(start),
      openingWindowMs: 2_000,
      access: [{ name: "members", startsAt: iso(start - 2_000) }],
    });
    const wider = await call("PUT", `/admin/skus/${sku}`, { admin: true, body: { openingWindowMs: 3_000 } });
    expect(wider.status).toBe(400);
    expect((await call("GET", `/api/skus/${sku}/draw`)).json.openingWindowMs).toBe(2_000);
  });

  for (const shards of [1, 3]) {
    it(`on ${shards} shard(s): the members' (claim) and the code tier's windows are each decided by their own draw; a members' winner meets the limit in the public draw`, async () => {
      const sku = uniqueSku(`tierdraw${shards}`);
      const now = Date.now();
      const at = { members: now + 10 * MINUTE, codes: now + 20 * MINUTE, public: now + 60 * MINUTE };
      await createSku(sku, {
        totalStock: 3,
        perUserLimit: 1,
        holdSeconds: 86_400,
        shards,
        startsAt: iso(at.public),
        openingWindowMs: WINDOW,
        access: [
          { name: "members", startsAt: iso(at.members), claim: { name: "member", value: "gold" } },
          { name: "codes", startsAt: iso(at.codes) },
        ],
      });
      // Every opening's seed hash is published at configure; the top-level fields stay the public one's.
      const before = await call("GET", `/api/skus/${sku}/draw`);
      expect(before.status).toBe(200);
      const openings = before.json.openings as Opening[];
      expect(openings.map((o) => o.opensAt)).toEqual([iso(at.members), iso(at.codes), iso(at.public)]);
      expect(new Set(openings.map((o) => o.seedHash)).size).toBe(3);
      for (const o of openings) expect(o.seedHash).toMatch(/^[0-9a-f]{64}$/);
      expect(before.json.opensAt).toBe(iso(at.public));
      expect(before.json.seedHash).toBe(openings[2]?.seedHash);
      expect(openings.every((o) => o.seed === null)).toBe(true);

      // Members' window: five gold members for three units.
      await setClock(sku, shards, at.members + 1);
      const members = Array.from({ length: 5 }, (_, i) => `gold-${sku}-${i}`);
      const memberTokens = await Promise.all(members.map((user) => mint(user, sku, shards, "members")));
      const memberAnswers = members.map(async (user, i) => ({
        user,
        answer: await reserveWith(user, sku, memberTokens[i] as string),
      }));
      await untilEntered(sku, shards, members.length);
      await closeWindow(sku, shards, at.members + WINDOW);
      const afterMembers = await drawDecided(sku, 1);
      const memberWinners = await expectDrawn(
        sku,
        afterMembers.openings[0] as Opening,
        await Promise.all(memberAnswers),
        3,
      );
      expect(afterMembers.seed).toBeNull(); // the public draw's seed stays secret
      expect(afterMembers.openings[1]?.seed).toBeNull();

      // The operator releases two more units for the code holders' hour.
      await setClock(sku, shards, at.members + 5 * MINUTE);
      expect((await call("PUT", `/admin/skus/${sku}`, { admin: true, body: { totalStock: 5 } })).status).toBe(200);

      // Code tier's window: three code holders (through POST /tokens with Access-Code) for two units.
      const codes = (
        await call("POST", `/admin/skus/${sku}/access-codes`, {
          admin: true,
          body: { tier: "codes", count: 3 },
        })
      ).json.codes as string[];
      await setClock(sku, shards, at.codes + 1);
      const holders = codes.map((_, i) => `code-${sku}-${i}`);
      const holderTokens = await Promise.all(
        holders.map(async (user, i) => {
          const token = await call("POST", `/api/skus/${sku}/tokens`, {
            headers: { authorization: `Bearer ${await jwtWith(user)}`, "Access-Code": codes[i] as string },
          });
          expect(token.status).toBe(201);
          return token.json.token as string;
        }),
      );
      const holderAnswers = holders.map(async (user, i) => ({
        user,
        answer: await reserveWith(user, sku, holderTokens[i] as string),
      }));
      await untilEntered(sku, shards, members.length + holders.length);
      await closeWindow(sku, shards, at.codes + WINDOW);
      const afterCodes = await drawDecided(sku, 2);
      await expectDrawn(sku, afterCodes.openings[1] as Opening, await Promise.all(holderAnswers), 2);

      // Public window, with one more unit: a members' winner is at the limit (409 at once, no
      // entry); a members' loser and a newcomer enter the public draw for that unit.
      await setClock(sku, shards, at.codes + 5 * MINUTE);
      expect((await call("PUT", `/admin/skus/${sku}`, { admin: true, body: { totalStock: 6 } })).status).toBe(200);
      await setClock(sku, shards, at.public + 1);
      const winner = memberWinners[0] as string;
      const again = await reserveWith(winner, sku, await mint(winner, sku, shards));
      expect(again.status).toBe(409);
      expect(codeOf(again)).toBe("LIMIT_EXCEEDED");
      const loser = members.find((m) => !memberWinners.includes(m)) as string;
      const publicUsers = [loser, `public-${sku}`];
      const publicTokens = await Promise.all(publicUsers.map((user) => mint(user, sku, shards)));
      const publicAnswers = publicUsers.map(async (user, i) => ({
        user,
        answer: await reserveWith(user, sku, publicTokens[i] as string),
      }));
      await untilEntered(sku, shards, members.length + holders.length + publicUsers.length);
      await closeWindow(sku, shards, at.public + WINDOW);
      const afterPublic = await drawDecided(sku, 3);
      await expectDrawn(sku, afterPublic.openings[2] as Opening, await Promise.all(publicAnswers), 1);
      expect(afterPublic.seed).toBe(afterPublic.openings[2]?.seed);
      expect(await stockOf(sku)).toMatchObject({ total: 6, held: 6, available: 0 });

      // The public opening's entries route lists the public draw only.
      const entries = await call("GET", `/api/skus/${sku}/draw/entries?offset=0&limit=50`);
      expect(entries.json.entries).toHaveLength(publicUsers.length);
    });
  }

  it("keeps a tier's name and claim while its draw is under way (409, nothing changed), then lets them change", async () => {
    const sku = uniqueSku("tierrename");
    const tierAt = Date.now() + 30 * MINUTE;
    const members = { name: "members", startsAt: iso(tierAt), claim: { name: "plan", value: "gold" } };
    await createSku(sku, {
      totalStock: 5,
      perUserLimit: 1,
      startsAt: iso(tierAt + 30 * MINUTE),
      openingWindowMs: WINDOW,
      access: [members],
    });
    await setClock(sku, 1, tierAt + 1);
    const users = [0, 1, 2].map((i) => `tr${i}-${sku}`);
    const pending = users.map(async (user) => reserveWith(user, sku, await mint(user, sku, 1, "members")));
    await untilEntered(sku, 1, users.length);
    // Found in an audit: a new name at the same time was taken, and at the close every entry was
    // refused SALE_NOT_ACTIVE (its tier gone), nothing held.
    for (const tier of [
      { ...members, name: "gold" },
      { ...members, claim: { name: "plan", value: "platinum" } },
    ]) {
      const put = await call("PUT", `/admin/skus/${sku}`, { admin: true, body: { access: [tier] } });
      expect([put.status, codeOf(put), put.json.error?.details?.state]).toEqual([409, "INVALID_STATE", "window_open"]);
    }
    await closeWindow(sku, 1, tierAt + WINDOW);
    const answers = await Promise.all(pending);
    expect(answers.map((a) => a.status)).toEqual([202, 202, 202]);
    expect(await stockOf(sku)).toMatchObject({ held: 3 });
    await drawDecided(sku, 1);
    // Decided: the draw is history, and the tier may be renamed.
    const renamed = await call("PUT", `/admin/skus/${sku}`, {
      admin: true,
      body: { access: [{ ...members, name: "gold" }] },
    });
    expect(renamed.status).toBe(200);
  });
});
