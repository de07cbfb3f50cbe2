import { env } from "cloudflare:workers";
import { describe, expect, it } from "vitest";
import { call, createSku, reserve, stockOf, tokenFor, uniqueSku } from "../support/client";
import { eventually } from "../support/eventually";
import { pay } from "../support/payments";
import { seededRandom } from "../support/random";

/**
 * End to end through miniflare's real queue emulation: stock object outbox → `order-events`
 * queue → the Worker's queue handler → D1. Nothing here calls the consumer directly.
 */
describe("order pipeline through the real queue", () => {
  it("every acknowledged reservation ends as exactly one D1 row with the stock object's status", async () => {
    const sku = uniqueSku("pipe");
    await createSku(sku, { totalStock: 80, perUserLimit: 2 });
    const random = seededRandom(2026);
    const users = Array.from({ length: 120 }, (_, i) => `p${i}`);
    const tokens = await Promise.all(users.map((u) => tokenFor(u, sku)));
    const answers = await Promise.all(users.map((u, i) => reserve(u, sku, 1 + Math.floor(random() * 2), tokens[i])));
    const accepted = answers.filter((a) => a.status === 202).map((a) => a.json.reservationId as string);
    expect(accepted.length).toBeGreaterThan(40);

    // Finish some of them concurrently: a third paid, a third cancelled, the rest left held.
    const owners = new Map(answers.map((a, i) => [a.json.reservationId as string, users[i] as string]));
    const expected = new Map<string, string>();
    const statuses = await Promise.all(
      accepted.map(async (id, i) => {
        const want = (["paid", "cancelled", "held"] as const)[i % 3] ?? "held";
        expected.set(id, want);
        const got =
          want === "paid"
            ? (await pay(id)).json.reservationStatus
            : want === "cancelled"
              ? (await call("POST", `/api/reservations/${id}/cancel`, { user: owners.get(id) })).json.status
              : "held";
        return [id, got];
      }),
    );
    expect(Object.fromEntries(statuses)).toEqual(Object.fromEntries(expected));

    const stock = await stockOf(sku);
    // Poll D1 (no fixed sleeps) until the queue has delivered everything.
    const rows = await eventually(async () => {
      const { results } = await env.DB.prepare("SELECT reservation_id, status, quantity FROM orders WHERE sku = ?")
        .bind(sku)
        .all<{ reservation_id: string; status: string; quantity: number }>();
      const byId = new Map(results.map((r) => [r.reservation_id, r]));
      for (const [id, status] of expected) expect(byId.get(id)?.status, id).toBe(status);
      return results;
    }, 20_000);

    // Invariant 4, by id: exactly one row per acknowledged reservation, and no other rows.
    expect(rows.map((r) => r.reservation_id).sort()).toEqual([...expected.keys()].sort());
    const sum = (status: string) => rows.filter((r) => r.status === status).reduce((n, r) => n + r.quantity, 0);
    expect([sum("held"), sum("paid")]).toEqual([stock.held, stock.sold]);

    // The API reports the persisted order, and the admin view counts rows by status.
    const first = [...expected.keys()][0] as string;
    const view = await call("GET", `/api/reservations/${first}`, { user: owners.get(first) });
    expect(view.json.order).toEqual({ persisted: true, status: expected.get(first) });
    const adminView = await call("GET", `/admin/skus/${sku}`, { admin: true });
    const count = (status: string) => [...expected.values()].filter((s) => s === status).length;
    expect(adminView.json.orders).toMatchObject({
      held: count("held"),
      paid: count("paid"),
      cancelled: count("cancelled"),
    });
    const mine = await call("GET", "/api/me/reservations", { user: owners.get(first) });
    expect(mine.json.reservations.map((r: { reservationId: string }) => r.reservationId)).toEqual([first]);
  });
});
