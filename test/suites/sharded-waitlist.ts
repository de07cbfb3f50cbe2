import { describe, expect, it } from "vitest";
import { homeShard } from "../../durable-objects/shared/shard-name";
import { call, createSku, reserve, stockOf, uniqueSku } from "../support/client";
import { eventually } from "../support/eventually";

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
});
