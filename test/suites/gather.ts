import { runDurableObjectAlarm, runInDurableObject } from "cloudflare:test";
import { env } from "cloudflare:workers";
import { describe, expect, it } from "vitest";
import type { ReserveOutcome, ReserveRequest } from "../../durable-objects/engine/types";
import { homeShard, shardName } from "../../durable-objects/shared/shard-name";
import { gathererName } from "../../src/edge/gather-name";
import type { Gatherer } from "../../src/edge/gatherer";
import { mintPurchaseToken, newNonce, verifyPurchaseToken } from "../../src/edge/purchase-token";
import { callStock } from "../../src/stock/stock-client";
import {
  call,
  createSku,
  gathererCallsTo,
  stockCallsTo,
  stockOf,
  stockShard,
  tokenFor,
  uniqueSku,
} from "../support/client";
import { eventually } from "../support/eventually";
import { seededRandom } from "../support/random";

// The gathering tier (issue 44): GATHER = "on" sends reservations through the shard's gatherer.
// GROUP_COMMIT "off" at the edge makes each reservation its own call to the gatherer, as from an
// isolate of its own: the gatherer's batches are then all the coalescing there is.
const MANY_ISOLATES = { GATHER: "on", GROUP_COMMIT: "off" } as unknown as Partial<Env>;
const GATHERING = { GATHER: "on" } as unknown as Partial<Env>;

/** The gatherer a test's reservations go through (the test runs in no colo: "local"). */
const gathererOf = (sku: string, shard = 0) => env.GATHERER.getByName(gathererName(shardName(sku, shard), undefined));
const sentBy = (sku: string) => runInDurableObject(gathererOf(sku), (g: Gatherer) => ({ ...g.sent }));

const reserveVia = (user: string, sku: string, token: string, over: Partial<Env>, quantity = 1) =>
  call("POST", `/api/skus/${sku}/reservations`, { user, body: { token, quantity }, env: over });

/** The stock request the edge makes for a token (as the reservation route builds it). */
async function requestOf(user: string, sku: string, token: string): Promise<ReserveRequest> {
  const claims = await verifyPurchaseToken(token, { sku, userId: user }, env.TOKEN_SECRET, Date.now());
  return { userId: user, nonce: claims.nonce, quantity: 1, shards: claims.shards, tokenExpiresAt: claims.expiresAt };
}

/**
 * Makes the gatherer die between the stock object's decision and its answers: its call to the
 * object lets the object decide, then the gatherer aborts itself (`ctx.abort()`, as the runtime
 * resets an object that is restarted or moved). `decided` resolves with the holds the object made.
 */
async function dieAfterDecision(sku: string): Promise<{ decided: Promise<number> }> {
  const decided = Promise.withResolvers<number>();
  await runInDurableObject(gathererOf(sku), (g: Gatherer, state) => {
    const send = g.send;
    g.send = async (stock, batch) => {
      const answers = await send(stock, batch);
      decided.resolve(answers.filter((a) => a.ok).length);
      state.abort("test: the gatherer dies with the batch's answers");
      return answers; // never reached
    };
  });
  return { decided: decided.promise };
}

describe("the gathering tier", () => {
  it("reservations from many isolates reach the stock object in batches, each caller its own answer", async () => {
    const sku = uniqueSku("gather");
    await createSku(sku, { totalStock: 1000 });
    const users = Array.from({ length: 60 }, (_, i) => `gu${i}`);
    const tokens = await Promise.all(users.map((u) => tokenFor(u, sku)));
    const stockBefore = stockCallsTo(sku);
    const answers = await Promise.all(users.map((u, i) => reserveVia(u, sku, tokens[i] as string, MANY_ISOLATES)));

    expect(answers.map((a) => a.status)).toEqual(users.map(() => 202));
    // Each answer is its caller's own reservation: 60 distinct ids, one unit each.
    expect(new Set(answers.map((a) => a.json.reservationId)).size).toBe(60);
    expect(answers.every((a) => a.json.quantity === 1)).toBe(true);
    // 60 calls reached the gatherer, none went straight to the stock object, and it got fewer, larger ones.
    expect(gathererCallsTo(sku)).toBe(60);
    expect(stockCallsTo(sku)).toBe(stockBefore);
    const sent = await sentBy(sku);
    expect(sent.reservations).toBe(60);
    expect(sent.batches).toBeLessThan(60);
    expect(sent.batches).toBeGreaterThan(0);
    expect(await stockOf(sku)).toEqual({ total: 1000, available: 940, held: 60, sold: 0 });
  });

  it("gives each caller the answer the stock object gives its request in the order the gatherer sent them", async () => {
    const random = seededRandom(44);
    const requests: ReserveRequest[] = Array.from({ length: 120 }, (_, i) => ({
      userId: `s${Math.floor(random() * 40)}`,
      nonce: `nonce-${Math.floor(random() * 100)}`, // some nonces repeat: replays and mismatches
      quantity: 1 + Math.floor(random() * 3),
      requestId: `r${i}`, // names the request, decides nothing
    }));
    const gathered = uniqueSku("gathered");
    const single = uniqueSku("single");
    for (const sku of [gathered, single]) await createSku(sku, { totalStock: 90, perUserLimit: 4 });
    // The requests in the order the gatherer passed them on (calls arrive in no set order).
    const forwarded: ReserveRequest[] = [];
    await runInDurableObject(gathererOf(gathered), (g: Gatherer) => {
      const send = g.send;
      g.send = (stock, batch) => {
        forwarded.push(...batch);
        return send(stock, batch);
      };
    });

    // Each request its own call to the gatherer, all at once: 120 isolates with one reservation each.
    const [stock, gatherer] = [shardName(gathered, 0), gathererOf(gathered)];
    const viaGatherer = await Promise.all(requests.map((r) => gatherer.reserve(stock, [r])));
    // The same requests, in that order, one RPC each, to a SKU of its own.
    const direct = new Map<string | undefined, ReserveOutcome | undefined>();
    for (const r of forwarded)
      direct.set(r.requestId, (await callStock(() => stockShard(env, single, 0).reserve([r])))[0]);

    const summary = (o: ReserveOutcome | undefined) =>
      o?.ok ? `${o.value.replayed ? "replay" : "held"}:${o.value.reservation.quantity}:${o.value.available}` : o?.code;
    expect(forwarded.map((r) => r.requestId).sort()).toEqual(requests.map((r) => r.requestId).sort());
    expect(viaGatherer.map(([o]) => summary(o))).toEqual(requests.map((r) => summary(direct.get(r.requestId))));
    expect((await sentBy(gathered)).batches).toBeLessThan(requests.length / 4);
    const [a, b] = [await stockOf(gathered), await stockOf(single)];
    expect(a).toEqual(b);
    expect(a.available + a.held + a.sold).toBe(90);
  });

  it("per-user limits, sold out and replays by token answer as without it", async () => {
    const sku = uniqueSku("gather-rules");
    await createSku(sku, { totalStock: 3, perUserLimit: 1 });
    const first = await tokenFor("gr-a", sku);
    const held = await reserveVia("gr-a", sku, first, GATHERING);
    expect(held.status).toBe(202);
    // The same token again: the same reservation, replayed, nothing more held.
    const again = await reserveVia("gr-a", sku, first, GATHERING);
    expect([again.status, again.json.reservationId, again.headers.get("Idempotent-Replayed")]).toEqual([
      202,
      held.json.reservationId,
      "true",
    ]);
    // The same token for another quantity is refused; a second token is over the user's limit.
    expect((await reserveVia("gr-a", sku, first, GATHERING, 2)).json.error.code).toBe("IDEMPOTENCY_MISMATCH");
    const over = await reserveVia("gr-a", sku, await tokenFor("gr-a", sku), GATHERING);
    expect([over.status, over.json.error.code]).toEqual([409, "LIMIT_EXCEEDED"]);
    // Four more buyers at once for the two units left: two holds, two sold out.
    const buyers = ["gr-b", "gr-c", "gr-d", "gr-e"];
    const tokens = await Promise.all(buyers.map((u) => tokenFor(u, sku)));
    const answers = await Promise.all(buyers.map((u, i) => reserveVia(u, sku, tokens[i] as string, MANY_ISOLATES)));
    expect(answers.map((a) => a.status).sort()).toEqual([202, 202, 409, 409]);
    expect(answers.filter((a) => a.status === 409).map((a) => a.json.error.code)).toEqual(["SOLD_OUT", "SOLD_OUT"]);
    expect(await stockOf(sku)).toEqual({ total: 3, available: 0, held: 3, sold: 0 });
  });

  describe("a gatherer that dies mid-batch", () => {
    it("after the stock object decided: the shopper gets 503, and the retry with the same token replays the one hold", async () => {
      const sku = uniqueSku("gather-abort");
      await createSku(sku, { totalStock: 10, perUserLimit: 1 });
      const token = await tokenFor("ga-a", sku);
      const { decided } = await dieAfterDecision(sku);
      const answer = await reserveVia("ga-a", sku, token, GATHERING);
      expect(await decided).toBe(1); // the object held the unit; its answer died with the gatherer
      expect([answer.status, answer.json.error.code]).toEqual([503, "BUSY"]);
      expect(await stockOf(sku)).toMatchObject({ available: 9, held: 1 });

      const retry = await reserveVia("ga-a", sku, token, GATHERING);
      expect([retry.status, retry.headers.get("Idempotent-Replayed")]).toEqual([202, "true"]);
      expect(await stockOf(sku)).toMatchObject({ available: 9, held: 1 });
    });

    it("a batch of several callers: every one is told nothing was decided for it, and every retry gets its own one hold", async () => {
      const sku = uniqueSku("gather-abort-batch");
      await createSku(sku, { totalStock: 10, perUserLimit: 1 });
      const users = ["gb-a", "gb-b", "gb-c"];
      const tokens = await Promise.all(users.map((u) => tokenFor(u, sku)));
      const requests = await Promise.all(users.map((u, i) => requestOf(u, sku, tokens[i] as string)));
      const { decided } = await dieAfterDecision(sku);
      // One call with all three, as an isolate's batch: the gatherer sends them as one.
      const answered = await gathererOf(sku)
        .reserve(shardName(sku, 0), requests)
        .then(
          (answers) => answers.map((a) => (a.ok ? "held" : a.code)),
          () => "failed",
        );
      expect(await decided).toBe(3);
      // The edge turns a failed call into 503 BUSY for each; no caller is told it holds a unit.
      expect(answered).not.toContain("held");

      const retries = await Promise.all(users.map((u, i) => reserveVia(u, sku, tokens[i] as string, GATHERING)));
      expect(retries.map((r) => [r.status, r.headers.get("Idempotent-Replayed")])).toEqual(
        users.map(() => [202, "true"]),
      );
      expect(new Set(retries.map((r) => r.json.reservationId)).size).toBe(3);
      expect(await stockOf(sku)).toMatchObject({ available: 7, held: 3 });
    });
  });

  it("the fair opening through it: the window's entries wait for the one draw, and its winners hold", async () => {
    // As test/fair-opening.integration.test.ts: a window a minute away, the object's clock moved into it.
    const sku = uniqueSku("gather-draw");
    const opensAt = Date.now() + 60_000;
    const windowMs = 1_500;
    await createSku(sku, {
      totalStock: 4,
      perUserLimit: 1,
      startsAt: new Date(opensAt).toISOString(),
      openingWindowMs: windowMs,
    });
    const stub = () => stockShard(env, sku, 0);
    await runInDurableObject(stub(), (object) => {
      object.now = () => opensAt + 1;
    });
    const users = Array.from({ length: 12 }, (_, i) => `gd-${i}`);
    // Minted here: the edge judges the window by its own clock, a minute before the objects'.
    const token = (user: string) =>
      mintPurchaseToken(
        { sku, userId: user, shard: homeShard(user, 1), shards: 1, nonce: newNonce(), expiresAt: Date.now() + 300_000 },
        env.TOKEN_SECRET,
      );
    const tokens = await Promise.all(users.map(token));
    let answeredEarly = 0;
    const pending = users.map((u, i) =>
      reserveVia(u, sku, tokens[i] as string, MANY_ISOLATES).then((a) => {
        answeredEarly++;
        return a;
      }),
    );
    await eventually(async () => {
      const entered = await runInDurableObject(
        stub(),
        (_o, state) => state.storage.sql.exec<{ n: number }>("SELECT COUNT(*) AS n FROM draw_tokens").one().n,
      );
      expect(entered).toBe(users.length);
    }, 30_000);
    expect(answeredEarly).toBe(0); // entries wait for the draw, through the gatherer as without it
    await runInDurableObject(stub(), (object) => {
      object.now = () => opensAt + windowMs;
    });
    expect(await runDurableObjectAlarm(stub())).toBe(true);
    const answers = await Promise.all(pending);

    const won = answers.filter((a) => a.status === 202);
    expect(gathererCallsTo(sku)).toBe(users.length); // every entry went through the gatherer
    expect(won).toHaveLength(4);
    expect(won.map((a) => a.json.draw.position).sort()).toEqual([1, 2, 3, 4]);
    expect(answers.filter((a) => a.status === 409).map((a) => a.json.error.code)).toEqual(Array(8).fill("SOLD_OUT"));
    expect(await stockOf(sku)).toEqual({ total: 4, available: 0, held: 4, sold: 0 });
  });

  it('GATHER "sharded" gathers the SKUs of more than one shard and leaves one-shard SKUs a direct call', async () => {
    const SHARDED = { GATHER: "sharded", GROUP_COMMIT: "off" } as unknown as Partial<Env>;
    const single = uniqueSku("gather-one");
    const sharded = uniqueSku("gather-two");
    await createSku(single, { totalStock: 10 });
    await createSku(sharded, { totalStock: 10, shards: 2 });

    const singleToken = await tokenFor("gs-a", single);
    const direct = stockCallsTo(single);
    const one = await reserveVia("gs-a", single, singleToken, SHARDED);
    expect(one.status).toBe(202);
    expect(gathererCallsTo(single)).toBe(0);
    expect(stockCallsTo(single)).toBe(direct + 1); // the edge called the stock object itself

    // One user homed on each shard: both reservations go through that shard's gatherer.
    const users = [0, 1].map((shard) => {
      for (let k = 0; ; k++) if (homeShard(`gs-${k}`, 2) === shard) return `gs-${k}`;
    });
    for (const [shard, user] of users.entries()) {
      const token = await tokenFor(user, sharded);
      const before = stockCallsTo(sharded, shard);
      const answer = await reserveVia(user, sharded, token, SHARDED);
      expect(answer.status).toBe(202);
      expect(gathererCallsTo(sharded, shard)).toBe(1);
      expect(stockCallsTo(sharded, shard)).toBe(before); // not straight to the stock object
    }
    expect((await stockOf(sharded)).held).toBe(2);
  });
});
