import { createExecutionContext, createMessageBatch, getQueueResult } from "cloudflare:test";
import { env } from "cloudflare:workers";
import { describe, expect, it } from "vitest";
import { type ConsumerFault, withConsumerFault } from "../src/harness/consumer-fault";
import { consumeDeadLetters } from "../src/orders/dead-letter-consumer";
import type { OrderEvent } from "../src/orders/events";
import { consumeOrderEvents } from "../src/orders/order-consumer";
import { call, uniqueSku } from "./support/client";
import { seededRandom, shuffle } from "./support/random";

/** The idempotent consumer, driven with hand-made batches: duplicates, reordering, faults. */

const MAX_RETRIES = 5; // as in wrangler.toml

function event(sku: string, reservation: number, type: OrderEvent["type"], seq: number): OrderEvent {
  const now = new Date().toISOString();
  return {
    id: crypto.randomUUID(),
    type,
    reservationId: `${sku}.0.${reservation.toString(16).padStart(32, "0")}`,
    sku,
    userId: `user-${reservation}`,
    quantity: 1 + (reservation % 3),
    occurredAt: now,
    expiresAt: now,
    seq,
  };
}

interface Delivery {
  id: string;
  body: unknown;
  attempts: number;
}

/** Delivers messages as a queue would: one batch, then retried ones again, until done. */
async function deliver(messages: Delivery[], fault?: ConsumerFault): Promise<{ deadLettered: Delivery[] }> {
  let pending = messages;
  const deadLettered: Delivery[] = [];
  while (pending.length > 0) {
    const batch = createMessageBatch(
      "order-events",
      pending.map((m) => ({ id: m.id, timestamp: new Date(), attempts: m.attempts, body: m.body })),
    );
    const ctx = createExecutionContext();
    await (fault ? withConsumerFault(consumeOrderEvents, fault) : consumeOrderEvents)(batch, env);
    const result = await getQueueResult(batch, ctx);
    const retried = new Set(result.retryMessages.map((m: { msgId: string }) => m.msgId));
    expect(result.explicitAcks.length + retried.size).toBe(pending.length);
    const next: Delivery[] = [];
    for (const m of pending.filter((p) => retried.has(p.id))) {
      if (m.attempts > MAX_RETRIES) deadLettered.push(m);
      else next.push({ ...m, attempts: m.attempts + 1 });
    }
    pending = next;
  }
  return { deadLettered };
}

const asDelivery = (e: OrderEvent): Delivery => ({ id: crypto.randomUUID(), body: e, attempts: 1 });

async function ordersOf(sku: string) {
  const { results } = await env.DB.prepare(
    "SELECT reservation_id, status, last_seq FROM orders WHERE sku = ? ORDER BY reservation_id",
  )
    .bind(sku)
    .all<{ reservation_id: string; status: string; last_seq: number }>();
  return results;
}

describe("order consumer", () => {
  it("applies a duplicated event once, in one batch and across batches", async () => {
    const sku = uniqueSku("dup");
    const held = event(sku, 1, "reservation.held", 1);
    await deliver([asDelivery(held), asDelivery(held), asDelivery(held)]);
    await deliver([asDelivery(held)]);
    expect(await ordersOf(sku)).toEqual([{ reservation_id: held.reservationId, status: "held", last_seq: 1 }]);
    const processed = await env.DB.prepare("SELECT COUNT(*) AS n FROM processed_events WHERE event_id = ?")
      .bind(held.id)
      .first<{ n: number }>();
    expect(processed?.n).toBe(1);
  });

  it("converges when events arrive out of order (paid before held)", async () => {
    const sku = uniqueSku("order");
    const held = event(sku, 2, "reservation.held", 1);
    const paid = { ...event(sku, 2, "reservation.paid", 2), userId: held.userId, quantity: held.quantity };
    await deliver([asDelivery(paid)]);
    await deliver([asDelivery(held), asDelivery(paid)]);
    expect(await ordersOf(sku)).toEqual([{ reservation_id: held.reservationId, status: "paid", last_seq: 2 }]);
  });

  it("ends with exactly one row per reservation under 30% random consumer failures", async () => {
    const sku = uniqueSku("faults");
    const random = seededRandom(42);
    let injected = 0;
    const fault: ConsumerFault = () => {
      if (random() < 0.3) {
        injected++;
        throw new Error("injected consumer failure");
      }
    };
    // 60 reservations, each held then settled; both events delivered twice, shuffled.
    const final = new Map<string, string>();
    const events: OrderEvent[] = [];
    for (let r = 0; r < 60; r++) {
      const held = event(sku, r, "reservation.held", 2 * r + 1);
      const type =
        (["reservation.paid", "reservation.cancelled", "reservation.expired"] as const)[r % 3] ?? "reservation.paid";
      const settled = { ...held, id: crypto.randomUUID(), type, seq: 2 * r + 2 };
      events.push(held, settled, held, settled);
      final.set(held.reservationId, type.slice("reservation.".length));
    }
    const shuffled = shuffle(events, seededRandom(7));
    const { deadLettered } = await deliver(shuffled.map(asDelivery), fault);
    expect(injected).toBeGreaterThan(30);
    expect(deadLettered).toEqual([]);
    const rows = await ordersOf(sku);
    expect(rows).toHaveLength(60);
    for (const row of rows) expect(row.status, row.reservation_id).toBe(final.get(row.reservation_id));
  });

  it("dead-letters a message that always fails, lists it, and replays it once fixed", async () => {
    const sku = uniqueSku("dlq");
    const poison = event(sku, 9, "reservation.held", 1);
    const alwaysFails: ConsumerFault = (e) => {
      if (e.id === poison.id) throw new Error("downstream is broken");
    };
    const { deadLettered } = await deliver([asDelivery(poison)], alwaysFails);
    expect(deadLettered).toHaveLength(1);
    expect(await ordersOf(sku)).toEqual([]);

    // The queue moves it to the DLQ; the DLQ consumer stores it (twice delivered, stored once).
    const dlq = deadLettered.map((m) => ({ ...m, timestamp: new Date() }));
    await consumeDeadLetters(createMessageBatch("order-events-dlq", dlq), env);
    await consumeDeadLetters(createMessageBatch("order-events-dlq", dlq), env);
    const listed = await call("GET", "/admin/dead-letters?pending=true", { admin: true });
    const mine = listed.json.deadLetters.filter((d: { body: OrderEvent }) => d.body.id === poison.id);
    expect(mine).toHaveLength(1);

    // "Fixed": replay goes through the normal, idempotent apply. Twice is harmless.
    const id = mine[0].id as string;
    const first = await call("POST", `/admin/dead-letters/${id}/replay`, { admin: true });
    const second = await call("POST", `/admin/dead-letters/${id}/replay`, { admin: true });
    expect([first.status, second.status]).toEqual([200, 200]);
    expect(second.json.replayedAt).toBe(first.json.replayedAt);
    expect(await ordersOf(sku)).toEqual([{ reservation_id: poison.reservationId, status: "held", last_seq: 1 }]);
    const missing = await call("POST", "/admin/dead-letters/nope/replay", { admin: true });
    expect(missing.status).toBe(404);
  });

  it("retries a message that is not an event at all, so the queue dead-letters it", async () => {
    const { deadLettered } = await deliver([{ id: "junk-1", body: { hello: "world" }, attempts: 1 }]);
    expect(deadLettered.map((m) => m.id)).toEqual(["junk-1"]);
  });
});
