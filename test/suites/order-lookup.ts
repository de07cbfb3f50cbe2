import { env } from "cloudflare:workers";
import { describe, expect, it } from "vitest";
import { applyOrderEvents } from "../../src/orders/order-store";
import { call, createSku, reserve, uniqueSku } from "../support/client";
import { eventually } from "../support/eventually";

/** The console's "Find an order": one order by its reservation id, and a user's orders, from D1. */
describe("order lookup", () => {
  it("finds an order by reservation id and every order of a user, newest first", async () => {
    const [first, second] = [uniqueSku("look-a"), uniqueSku("look-b")];
    await createSku(first, { totalStock: 5, perUserLimit: 2, price: 700, currency: "eur" });
    await createSku(second, { totalStock: 5 });
    const user = `olga-${first}`;
    const older = await reserve(user, first, 2);
    const newer = await reserve(user, second, 1);
    await reserve(`other-${first}`, first, 1);
    expect([older.status, newer.status]).toEqual([202, 202]);

    const one = await eventually(async () => {
      const answer = await call("GET", `/admin/orders/${older.json.reservationId}`, { admin: true });
      expect(answer.status).toBe(200);
      return answer.json;
    });
    expect(one).toEqual({
      reservationId: older.json.reservationId,
      sku: first,
      userId: user,
      quantity: 2,
      status: "held",
      amount: 1400,
      currency: "eur",
      test: false, // a real sale (API.md v1.4 "Test sales")
      variant: null, // a SKU without sizes (API.md v1.4 "Sizes")
      createdAt: expect.any(String),
      updatedAt: expect.any(String),
    });

    const mine = await eventually(async () => {
      const answer = await call("GET", `/admin/users/${user}/orders`, { admin: true });
      expect(answer.json.orders).toHaveLength(2);
      return answer.json.orders as { reservationId: string; sku: string }[];
    });
    expect(mine.map((o) => [o.reservationId, o.sku])).toEqual([
      [newer.json.reservationId, second],
      [older.json.reservationId, first],
    ]);

    const unknown = await call("GET", `/admin/orders/${first}.0.nothing`, { admin: true });
    expect([unknown.status, unknown.json.error?.code]).toEqual([404, "RESERVATION_NOT_FOUND"]);
    expect((await call("GET", "/admin/users/nobody-at-all/orders", { admin: true })).json).toEqual({ orders: [] });
    expect((await call("GET", `/admin/users/${user}/orders`, { user })).status).toBe(401);
  });
});

describe("GET /api/me/reservations", () => {
  it("lists every reservation of the user: a paid one is not dropped behind 100 later ones (found in an audit)", async () => {
    const sku = uniqueSku("many");
    await createSku(sku, { totalStock: 500, perUserLimit: 1 });
    const user = `many-${sku}`;
    const base = Date.now() - 3_600_000;
    const event = (i: number, type: "reservation.held" | "reservation.paid" | "reservation.expired", seq: number) => ({
      id: crypto.randomUUID(),
      type,
      reservationId: `${sku}.0.${i.toString(16).padStart(32, "0")}`,
      sku,
      userId: user,
      quantity: 1,
      occurredAt: new Date(base + i * 1000 + (seq % 2)).toISOString(),
      seq,
    });
    // The first reservation was paid; the next 100 were held and expired (a shopper retrying).
    const events = [event(0, "reservation.held", 1), event(0, "reservation.paid", 2)];
    for (let i = 1; i <= 100; i++)
      events.push(event(i, "reservation.held", 2 * i + 1), event(i, "reservation.expired", 2 * i + 2));
    for (let i = 0; i < events.length; i += 50) await applyOrderEvents(env.DB, events.slice(i, i + 50), Date.now());
    const answer = await call("GET", "/api/me/reservations", { user });
    expect(answer.status).toBe(200);
    const statuses = answer.json.reservations.map((r: { status: string }) => r.status);
    expect(statuses.filter((s: string) => s === "paid")).toEqual(["paid"]);
    expect(answer.json.reservations).toHaveLength(101);
  });
});
