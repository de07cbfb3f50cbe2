import { describe, expect, it } from "vitest";
import { call, createSku, reserve, stockOf, tokenFor, uniqueSku } from "./support/client";

describe("reservations", () => {
  it("300 concurrent shoppers against stock 50: exactly 50 holds, never oversold", async () => {
    const sku = uniqueSku("storm");
    await createSku(sku, { totalStock: 50, perUserLimit: 1 });
    const users = Array.from({ length: 300 }, (_, i) => `u${i}`);
    const tokens = await Promise.all(users.map((u) => tokenFor(u, sku).catch(() => null)));
    const answers = await Promise.all(
      users.map((u, i) => {
        const token = tokens[i];
        return token ? reserve(u, sku, 1, token) : call("POST", `/api/skus/${sku}/tokens`, { user: u });
      }),
    );
    const statuses = answers.map((a) => a.status);
    expect(statuses.filter((s) => s === 202)).toHaveLength(50);
    for (const a of answers.filter((x) => x.status !== 202)) {
      expect(a.status).toBe(409);
      expect(["SOLD_OUT", "INSUFFICIENT_STOCK"]).toContain(a.json.error.code);
    }
    const ids = new Set(answers.filter((a) => a.status === 202).map((a) => a.json.reservationId));
    expect(ids.size).toBe(50);
    const stock = await stockOf(sku);
    expect(stock).toEqual({ total: 50, available: 0, held: 50, sold: 0 });
  });
});
