import { runInDurableObject } from "cloudflare:test";
import { env } from "cloudflare:workers";
import { describe, expect, it } from "vitest";
import type { ReserveRequest } from "../durable-objects/stock-engine";
import { reserveGrouped } from "../src/edge/group-commit";
import { callStock } from "../src/edge/stock-client";
import { createSku, reserve, stockOf, stockShard, tokenFor, uniqueSku } from "./support/client";
import { seededRandom } from "./support/random";

const rpcCalls = (sku: string) => runInDurableObject(stockShard(env, sku, 0), (object) => object.rpcCalls);

describe("group commit at the edge", () => {
  it("serves a burst of reservations with fewer RPCs than reservations", async () => {
    const sku = uniqueSku("burst");
    await createSku(sku, { totalStock: 1000 });
    const users = Array.from({ length: 60 }, (_, i) => `g${i}`);
    const tokens = await Promise.all(users.map((u) => tokenFor(u, sku)));
    const before = await rpcCalls(sku);
    const answers = await Promise.all(users.map((u, i) => reserve(u, sku, 1, tokens[i])));
    const rpcs = (await rpcCalls(sku)) - before;
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
    const sendTo = (sku: string) => (batch: ReserveRequest[]) =>
      callStock(() => stockShard(env, sku, 0).reserve(batch));

    const before = await rpcCalls(grouped);
    const batched = await Promise.all(requests.map((r) => reserveGrouped(`${grouped}#0`, r, sendTo(grouped))));
    const groupedRpcs = (await rpcCalls(grouped)) - before;
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
});
