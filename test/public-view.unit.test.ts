import { describe, expect, it } from "vitest";
import type { SkuState } from "../durable-objects/engine/types";
import { publicSkuJson, publicSkuView } from "../src/routes/views";

const START = Date.UTC(2026, 11, 24, 9, 0, 0);

function sku(): SkuState {
  return {
    sku: "cap",
    shard: 0,
    shards: 1,
    name: "Cap",
    status: "on_sale",
    perUserLimit: 1,
    holdSeconds: 300,
    startsAt: START,
    endsAt: START + 3_600_000,
    stock: { total: 5, available: 5, held: 0, sold: 0 },
    seq: 1,
    price: 1_500,
    currency: "eur",
  };
}

/**
 * `GET /api/skus/:sku` renders a display once per moment (src/routes/views.ts publicSkuJson): the
 * text kept for a display must be what the view would say now, as the countdown runs and the sale opens.
 */
describe("the public view, rendered once per moment", () => {
  it("says what the view says at every moment: the countdown, the opening, the end", () => {
    const state = sku();
    for (const now of [START - 5_000, START - 4_500, START - 3_999, START - 1, START, START + 10, START + 3_600_000]) {
      expect(JSON.parse(publicSkuJson(state, now))).toEqual(
        JSON.parse(JSON.stringify(publicSkuView(state as never, now))),
      );
    }
    expect(JSON.parse(publicSkuJson(state, START - 4_500)).opensInSeconds).toBe(5);
    expect(JSON.parse(publicSkuJson(state, START - 3_999)).opensInSeconds).toBe(4);
    expect(JSON.parse(publicSkuJson(state, START)).phase).toBe("open");
    expect(JSON.parse(publicSkuJson(state, START + 3_600_000)).phase).toBe("ended");
  });

  it("renders each display on its own: a newer display's counts are never answered with an older one's", () => {
    const before = sku();
    const after = { ...sku(), stock: { total: 5, available: 4, held: 1, sold: 0 } };
    expect(JSON.parse(publicSkuJson(before, START + 10)).available).toBe(5);
    expect(JSON.parse(publicSkuJson(after, START + 10)).available).toBe(4);
    expect(JSON.parse(publicSkuJson(before, START + 20)).available).toBe(5);
  });

  it("refuses an archived SKU, which has no public view", () => {
    expect(() => publicSkuJson({ ...sku(), status: "archived" }, START)).toThrow("no public view");
  });
});
