import { env } from "cloudflare:workers";
import { describe, expect, it } from "vitest";
import type { ReserveOutcome, ReserveRequest } from "../../durable-objects/engine/types";
import { reserveGrouped } from "../../src/edge/group-commit";
import { ApiError } from "../../src/http/errors";
import { callStock } from "../../src/stock/stock-client";
import { createSku, reserve, stockCallsTo, stockOf, stockShard, tokenFor, uniqueSku } from "../support/client";
import { seededRandom } from "../support/random";

describe("group commit at the edge", () => {
  it("serves a burst of reservations with fewer RPCs than reservations", async () => {
    const sku = uniqueSku("burst");
    await createSku(sku, { totalStock: 1000 });
    const users = Array.from({ length: 60 }, (_, i) => `g${i}`);
    const tokens = await Promise.all(users.map((u) => tokenFor(u, sku)));
    const before = stockCallsTo(sku);
    const answers = await Promise.all(users.map((u, i) => reserve(u, sku, 1, tokens[i])));
    const rpcs = stockCallsTo(sku) - before;
    expect(answers.every((a) => a.status === 202)).toBe(true);
    expect(rpcs).toBeLessThan(users.length);
    expect(rpcs).toBeGreaterThan(0);
    expect(await stockOf(sku)).toEqual({ total: 1000, available: 940, held: 60, sold: 0 });
  });

  it("gives the same answers as one RPC per reservation on the same seeded input", async () => {
    const random = seededRandom(99);
    const requests: ReserveRequest[] = Array.from({ length: 120 }, () => ({
      userId: `s${Math.floor(random() * 40)}`,
      nonce: `nonce-${Math.floor(random() * 100)}`, // some nonces repeat: replays and mismatches
      quantity: 1 + Math.floor(random() * 3),
    }));
    const grouped = uniqueSku("grouped");
    const single = uniqueSku("single");
    for (const sku of [grouped, single]) await createSku(sku, { totalStock: 90, perUserLimit: 4 });
    let groupedRpcs = 0;
    const sendTo = (sku: string) => (batch: ReserveRequest[]) => {
      if (sku === grouped) groupedRpcs++;
      return callStock(() => stockShard(env, sku, 0).reserve(batch));
    };

    const batched = await Promise.all(requests.map((r) => reserveGrouped(`${grouped}#0`, r, sendTo(grouped))));
    const sequential = [];
    for (const r of requests) sequential.push((await sendTo(single)([r]))[0]);

    const summary = (o: (typeof batched)[number] | undefined) =>
      o?.ok ? `${o.value.replayed ? "replay" : "held"}:${o.value.reservation.quantity}:${o.value.available}` : o?.code;
    expect(batched.map(summary)).toEqual(sequential.map(summary));
    expect(groupedRpcs).toBeLessThan(requests.length / 4);
    const [a, b] = [await stockOf(grouped), await stockOf(single)];
    expect(a).toEqual(b);
    expect(a.available + a.held + a.sold).toBe(90);
  });

  describe("a stock object slower than the wait", () => {
    const WAIT_MS = 150;
    /**
     * A sender to the real stock object whose n-th batch (for n < `gated`) keeps its answers until
     * the test calls `release(n)`: the test, not a sleep, decides when a batch comes back.
     * `answered(n)` resolves once the n-th batch has its answers (and is waiting for release).
     */
    const gatedSender = (sku: string, gated: number) => {
      const gates = Array.from({ length: gated }, () => ({
        answered: Promise.withResolvers<void>(),
        release: Promise.withResolvers<void>(),
      }));
      let n = 0;
      const send = async (batch: ReserveRequest[]) => {
        const gate = gates[n++];
        const answers = await callStock(() => stockShard(env, sku, 0).reserve(batch));
        gate?.answered.resolve();
        await gate?.release.promise;
        return answers;
      };
      const answered = (i: number) => gates[i]?.answered.promise;
      const release = (i: number) => gates[i]?.release.resolve();
      return { send, answered, release };
    };
    type Settled = { value?: ReserveOutcome; error?: unknown };
    const settle = (p: Promise<ReserveOutcome>): Promise<Settled> =>
      p.then(
        (value) => ({ value }),
        (error: unknown) => ({ error }),
      );
    const busy = (r: Settled) => r.error instanceof ApiError && r.error.code === "BUSY";

    it("a waiter answered 503 before its batch left holds nothing, and the queue goes on", async () => {
      const sku = uniqueSku("wedge");
      await createSku(sku, { totalStock: 10, perUserLimit: 2 });
      const { send, answered, release } = gatedSender(sku, 1);
      const key = `${sku}#0`;
      const a = reserveGrouped(key, { userId: "wa", nonce: "wa-1", quantity: 1 }, send, WAIT_MS);
      await answered(0); // A's batch is out and stays out until released
      const b = settle(reserveGrouped(key, { userId: "wb", nonce: "wb-1", quantity: 1 }, send, WAIT_MS));
      expect(busy(await b)).toBe(true); // its wait ran out while A's batch was still out
      release(0);
      expect(await a).toMatchObject({ ok: true, value: { replayed: false } });
      // Today's shard queue gave the lead to B, who had gone: C would wait out its timer and get 503.
      const c = await settle(reserveGrouped(key, { userId: "wc", nonce: "wc-1", quantity: 1 }, send, WAIT_MS));
      expect(c.value).toMatchObject({ ok: true, value: { replayed: false } });
      expect(await stockOf(sku)).toMatchObject({ available: 8, held: 2 });
      // B holds nothing: its retry with the same token makes its first hold, not a replay.
      const retry = await reserveGrouped(key, { userId: "wb", nonce: "wb-1", quantity: 1 }, send, WAIT_MS);
      expect(retry).toMatchObject({ ok: true, value: { replayed: false } });
      expect(await stockOf(sku)).toMatchObject({ available: 7, held: 3 });
    });

    it("a waiter answered 503 after its batch left gets the same hold on retry with the same token", async () => {
      const sku = uniqueSku("late");
      await createSku(sku, { totalStock: 10, perUserLimit: 2 });
      const { send, answered, release } = gatedSender(sku, 2);
      const key = `${sku}#0`;
      const a = reserveGrouped(key, { userId: "la", nonce: "la-1", quantity: 1 }, send, WAIT_MS);
      await answered(0); // B and C queue behind A's batch and leave together as the next one
      const b = reserveGrouped(key, { userId: "lb", nonce: "lb-1", quantity: 1 }, send, WAIT_MS);
      const c = settle(reserveGrouped(key, { userId: "lc", nonce: "lc-1", quantity: 1 }, send, WAIT_MS));
      release(0);
      expect(await a).toMatchObject({ ok: true, value: { replayed: false } });
      await answered(1); // B's batch, with C in it, has been decided; its answers are held back
      expect(busy(await c)).toBe(true); // C left with B's batch, which took longer than C's wait
      release(1);
      expect(await b).toMatchObject({ ok: true, value: { replayed: false } });
      expect(await stockOf(sku)).toMatchObject({ available: 7, held: 3 }); // C's hold was made
      const retry = await reserveGrouped(key, { userId: "lc", nonce: "lc-1", quantity: 1 }, send, WAIT_MS);
      expect(retry).toMatchObject({ ok: true, value: { replayed: true } });
      expect(await stockOf(sku)).toMatchObject({ available: 7, held: 3 });
    });

    it("a batch that never comes back does not block the shard's queue", async () => {
      const sku = uniqueSku("lost");
      await createSku(sku, { totalStock: 10 });
      const key = `${sku}#0`;
      const never = new Promise<never>(() => {});
      let sends = 0;
      const send = async (batch: ReserveRequest[]) => {
        if (sends++ === 0) return never; // the sender's request was cancelled, say
        return callStock(() => stockShard(env, sku, 0).reserve(batch));
      };
      void reserveGrouped(key, { userId: "na", nonce: "na-1", quantity: 1 }, send, WAIT_MS);
      const b = await settle(reserveGrouped(key, { userId: "nb", nonce: "nb-1", quantity: 1 }, send, WAIT_MS));
      expect(busy(b)).toBe(true);
      const c = await reserveGrouped(key, { userId: "nc", nonce: "nc-1", quantity: 1 }, send, WAIT_MS);
      expect(c).toMatchObject({ ok: true, value: { replayed: false } });
    });
  });
});
