import { describe, expect, it } from "vitest";
import { drawOrder, sha256Hex } from "../../durable-objects/engine/opening-draw";
import { homeShard } from "../../durable-objects/shared/shard-name";
import { mintPurchaseToken, newNonce } from "../../src/edge/purchase-token";
import { call, createSku, uniqueSku } from "../support/client";
import { closeWindow, entryIdFor, setClock, untilEntered } from "../support/draw-window";
import { eventually } from "../support/eventually";

/**
 * API.md v1.4 "Sizes": an opening draw decides its entries in draw order, each taking its first
 * listed size with stock. Checked against the order recomputed from the revealed seed and the rule
 * replayed over it, on 1 and 4 shards (where a home shard pulls the size from its siblings).
 */

const TOKEN_SECRET = "test-token-secret";
const SIZES = [
  { id: "38", totalStock: 2 },
  { id: "39", totalStock: 2 },
  { id: "40", totalStock: 1 },
];
/** Each buyer's choices, by index: some want one size only, some fall back. */
const CHOICES = [["38"], ["38", "39"], ["40", "38"], ["39"], ["40"], ["38", "40", "39"], ["39", "40"]];

describe.each([1, 4])("an opening draw with sizes on %i shard(s)", (shards) => {
  it("decides entries in the seed's order, each its first listed size with stock", async () => {
    const sku = uniqueSku(`sizedraw${shards}`);
    const opensAt = Date.now() + 60_000;
    const windowMs = 1_500;
    await createSku(sku, {
      variants: SIZES,
      perUserLimit: 1,
      shards,
      startsAt: new Date(opensAt).toISOString(),
      openingWindowMs: windowMs,
    });
    const seedHash = (await call("GET", `/api/skus/${sku}/draw`)).json.seedHash as string;
    await setClock(sku, shards, opensAt + 1);
    const users = Array.from({ length: 14 }, (_, i) => ({
      user: `sd-${sku}-${i}`,
      choices: CHOICES[i % CHOICES.length] as string[],
    }));
    const pending = users.map(async (u) => {
      // Minted here: the edge judges the window by its own clock, a minute before the objects'.
      const claims = {
        sku,
        userId: u.user,
        shard: homeShard(u.user, shards),
        shards,
        nonce: newNonce(),
        expiresAt: Date.now() + 300_000,
      };
      const token = await mintPurchaseToken(claims, TOKEN_SECRET);
      const answer = await call("POST", `/api/skus/${sku}/reservations`, {
        user: u.user,
        body: { token, quantity: 1, variants: u.choices },
      });
      return { ...u, answer };
    });
    await untilEntered(sku, shards, users.length);
    await closeWindow(sku, shards, opensAt + windowMs);
    const answers = await Promise.all(pending);

    const draw = await eventually(async () => {
      const read = await call("GET", `/api/skus/${sku}/draw`);
      expect(read.json.seed).toMatch(/^[0-9a-f]{64}$/);
      return read.json;
    });
    expect(sha256Hex(draw.seed)).toBe(seedHash);
    const ids = new Map(users.map((u) => [entryIdFor(sku, u.user), u] as const));
    const order = drawOrder(draw.seed, [...ids.keys()]);
    // The rule replayed over the recomputed order: each entry its first listed size with a unit left.
    const left = new Map(SIZES.map((s) => [s.id, s.totalStock]));
    const expected = new Map<string, string>();
    for (const entryId of order) {
      const u = ids.get(entryId);
      const size = u?.choices.find((id) => (left.get(id) ?? 0) > 0);
      if (size !== undefined) left.set(size, (left.get(size) ?? 0) - 1);
      expected.set(u?.user ?? "", size ?? "SOLD_OUT");
    }
    const got = new Map(
      answers.map((a) => [
        a.user,
        a.answer.status === 202 ? (a.answer.json.variant as string) : a.answer.json.error?.code,
      ]),
    );
    expect(got).toEqual(expected);
    // A refusal names each listed size and its units (none left of any), as one outside a draw does.
    for (const a of answers.filter((x) => x.answer.status === 409)) {
      const none = Object.fromEntries(a.choices.map((id) => [id, 0]));
      expect(a.answer.json.error.details, a.user).toMatchObject({ variants: none, draw: { entrants: 14 } });
    }
    expect([...left.values()]).toEqual([0, 0, 0]); // 14 buyers, 5 units: every size sold
    const view = await call("GET", `/admin/skus/${sku}`, { admin: true });
    expect(view.json.variants.map((v: { stock: { held: number } }) => v.stock.held)).toEqual([2, 2, 1]);
  });
});

describe("an opening draw with sizes on a sharded SKU", () => {
  it("gives an entry its first choice from another shard before a later one its home shard has", async () => {
    const shards = 4;
    const sku = uniqueSku("sizedrawfirst");
    const opensAt = Date.now() + 60_000;
    // A: one unit, on shard 0; B: one unit on every shard.
    await createSku(sku, {
      variants: [
        { id: "A", totalStock: 1 },
        { id: "B", totalStock: 4 },
      ],
      perUserLimit: 1,
      shards,
      startsAt: new Date(opensAt).toISOString(),
      openingWindowMs: 1_500,
    });
    await setClock(sku, shards, opensAt + 1);
    const user = Array.from({ length: 50 }, (_, i) => `first-${sku}-${i}`).find(
      (u) => homeShard(u, shards) === 2,
    ) as string;
    const claims = { sku, userId: user, shard: 2, shards, nonce: newNonce(), expiresAt: Date.now() + 300_000 };
    const token = await mintPurchaseToken(claims, TOKEN_SECRET);
    const pending = call("POST", `/api/skus/${sku}/reservations`, {
      user,
      body: { token, quantity: 1, variants: ["A", "B"] },
    });
    await untilEntered(sku, shards, 1);
    await closeWindow(sku, shards, opensAt + 1_500);
    const answer = await pending;
    expect(answer.status, JSON.stringify(answer.json)).toBe(202);
    expect(answer.json.variant).toBe("A");
  });
});

describe("an opening draw with sizes: a token sent again", () => {
  it("asking other sizes is refused 422, each token of the entry alike; asking the same replays the hold", async () => {
    const sku = uniqueSku("sizedrawreplay");
    const opensAt = Date.now() + 60_000;
    await createSku(sku, {
      variants: SIZES,
      perUserLimit: 1,
      startsAt: new Date(opensAt).toISOString(),
      openingWindowMs: 1_000,
    });
    await setClock(sku, 1, opensAt + 1);
    const user = `replay-${sku}`;
    const mint = () =>
      mintPurchaseToken(
        { sku, userId: user, shard: 0, shards: 1, nonce: newNonce(), expiresAt: Date.now() + 300_000 },
        TOKEN_SECRET,
      );
    const tokens = [await mint(), await mint()];
    const send = (token: string, variants: string[]) =>
      call("POST", `/api/skus/${sku}/reservations`, { user, body: { token, quantity: 1, variants } });
    // The buyer's second token joins the first's entry: one entry, one answer.
    const waiting = tokens.map((token) => send(token, ["38"]));
    await untilEntered(sku, 1, tokens.length);
    await closeWindow(sku, 1, opensAt + 1_000);
    const held = await Promise.all(waiting);
    expect(held.map((a) => [a.status, a.json.variant])).toEqual([
      [202, "38"],
      [202, "38"],
    ]);
    for (const token of tokens) {
      const other = await send(token, ["39"]);
      expect([other.status, other.json.error?.code]).toEqual([422, "IDEMPOTENCY_MISMATCH"]);
      const same = await send(token, ["38"]);
      expect([same.status, same.json.reservationId]).toEqual([202, held[0]?.json.reservationId]);
    }
  });
});
