import { runInDurableObject } from "cloudflare:test";
import { env } from "cloudflare:workers";
import { describe, expect, it } from "vitest";
import { homeShard } from "../../durable-objects/shared/shard-name";
import { call, createSku, reserve, stockOf, stockShard, uniqueSku } from "../support/client";
import { eventually } from "../support/eventually";
import { pay } from "../support/payments";

/**
 * A sharded SKU's one waitlist (on shard 0) against the per-user limits kept on each buyer's home
 * shard: API.md's waitlist, and invariant 9 (no unit stays available while every buyer is answered
 * SOLD_OUT).
 */

function userOn(shard: number, shards: number, prefix: string): string {
  for (let i = 0; ; i++) if (homeShard(`${prefix}-${i}`, shards) === shard) return `${prefix}-${i}`;
}

const join = (user: string, sku: string, quantity = 1) =>
  call("POST", `/api/skus/${sku}/waitlist`, { user, body: { quantity } });

describe("the waitlist of a sharded SKU and per-user limits", () => {
  it("refuses a buyer already at the limit on their home shard, and the released unit sells", async () => {
    const sku = uniqueSku("wlimit");
    await createSku(sku, { totalStock: 2, shards: 2, perUserLimit: 1 });
    const u = userOn(1, 2, "wl-u");
    const v = userOn(0, 2, "wl-v");
    expect((await reserve(u, sku)).status).toBe(202);
    const held = await reserve(v, sku);
    expect(held.status).toBe(202);

    // U holds its limit on shard 1; the waitlist is kept on shard 0.
    const joined = await join(u, sku);
    expect([joined.status, joined.json.error?.code]).toEqual([409, "LIMIT_EXCEEDED"]);

    expect((await call("POST", `/api/reservations/${held.json.reservationId}/cancel`, { user: v })).status).toBe(200);
    expect((await stockOf(sku)).available).toBe(1);
    const buyer = await reserve(userOn(1, 2, "wl-w"), sku);
    expect(buyer.status).toBe(202);
    expect((await call("GET", `/admin/skus/${sku}`, { admin: true })).json.waitlist).toBe(0);
  });

  it("lets newcomers buy units that no waiting entry fits", async () => {
    const sku = uniqueSku("wlfit");
    await createSku(sku, { totalStock: 2, shards: 2, perUserLimit: 2 });
    const a = userOn(0, 2, "wf-a");
    const b = userOn(1, 2, "wf-b");
    const first = await reserve(a, sku);
    const second = await reserve(a, sku);
    expect([first.status, second.status]).toEqual([202, 202]);
    expect((await join(b, sku, 2)).status).toBe(202); // wants 2; nothing is available

    // One unit comes back: B's entry does not fit it, so it is a newcomer's to buy.
    const cancel = await call("POST", `/api/reservations/${first.json.reservationId}/cancel`, { user: a });
    expect(cancel.status).toBe(200);
    const newcomer = userOn(1, 2, "wf-c");
    const answer = await eventually(async () => {
      const attempt = await reserve(newcomer, sku);
      if (attempt.status !== 202) throw new Error(`${attempt.status} ${attempt.json.error?.code}`);
      return attempt;
    });
    expect(answer.status).toBe(202);
    // B still waits for two units.
    expect((await call("GET", `/admin/skus/${sku}`, { admin: true })).json.waitlist).toBe(1);
  });

  it("a leave while the sale is paused gives the units back to newcomers when no one left fits them", async () => {
    const sku = uniqueSku("wlpause");
    await createSku(sku, { totalStock: 2, shards: 2, perUserLimit: 2 });
    const x = await reserve(userOn(1, 2, "wp-x"), sku);
    const y = await reserve(userOn(0, 2, "wp-y"), sku);
    expect([x.status, y.status]).toEqual([202, 202]);
    const [a, b] = [userOn(0, 2, "wp-a"), userOn(1, 2, "wp-b")];
    expect((await join(a, sku, 1)).status).toBe(202);
    expect((await join(b, sku, 2)).status).toBe(202);
    // Each shard's mode: 1, the units are the line's; 2, newcomers may buy what no entry fits.
    const modes = () =>
      Promise.all([0, 1].map((i) => runInDurableObject(stockShard(env, sku, i), (o) => o.engine.waitlist.mode)));
    expect((await call("PUT", `/admin/skus/${sku}`, { admin: true, body: { status: "paused" } })).status).toBe(200);
    await eventually(async () => expect(await modes()).toEqual([2, 2])); // nothing free: no entry fits
    // A unit comes back while paused: A's entry fits it, so every shard keeps it for the line.
    const xUser = userOn(1, 2, "wp-x");
    expect((await call("POST", `/api/reservations/${x.json.reservationId}/cancel`, { user: xUser })).status).toBe(200);
    await eventually(async () => expect(await modes()).toEqual([1, 1]));
    // No alarm soon (Y's hold expires in 15 min): only the leave itself can start a pass.
    for (const i of [0, 1])
      await runInDurableObject(stockShard(env, sku, i), (_o, state) => state.storage.deleteAlarm());
    // A leaves: B wants 2 where 1 is free, so the unit is a newcomer's again, on every shard.
    expect((await call("DELETE", `/api/skus/${sku}/waitlist`, { user: a })).status).toBe(200);
    await eventually(async () => expect(await modes()).toEqual([2, 2]));
    // X's payment, late: decided as a new reservation would be, it takes the free unit.
    const late = await pay(x.json.reservationId, "payment.succeeded");
    expect(late.json).toEqual({ received: true, reservationStatus: "paid", outcome: "applied" });
  });

  it("a sale not on takes no one into its line: 403 SALE_NOT_ACTIVE on any shard count, listed in /openapi.json", async () => {
    for (const shards of [1, 2]) {
      const withStock = uniqueSku(`wlpaused${shards}`);
      await createSku(withStock, { totalStock: 2, shards, status: "paused" });
      const soldOut = uniqueSku(`wlpausedout${shards}`);
      await createSku(soldOut, { totalStock: 1, shards });
      expect((await reserve(userOn(0, shards, "wn-a"), soldOut)).status).toBe(202);
      await call("PUT", `/admin/skus/${soldOut}`, { admin: true, body: { status: "paused" } });
      const later = uniqueSku(`wllater${shards}`);
      await createSku(later, { totalStock: 0, shards, startsAt: new Date(Date.now() + 3_600_000).toISOString() });
      for (const [sku, phase] of [
        [withStock, "paused"],
        [soldOut, "paused"],
        [later, "scheduled"],
      ]) {
        const answer = await join(userOn(1 % shards, shards, "wn-b"), sku as string);
        expect([answer.status, answer.json.error?.code, answer.json.error?.details?.phase], `${sku}`).toEqual([
          403,
          "SALE_NOT_ACTIVE",
          phase,
        ]);
      }
      expect((await call("GET", `/admin/skus/${soldOut}`, { admin: true })).json.waitlist).toBe(0);
    }
    const openapi = await call("GET", "/openapi.json");
    expect(Object.keys(openapi.json.paths["/api/skus/{sku}/waitlist"].post.responses)).toContain("403");
  });
});
