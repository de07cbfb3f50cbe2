import { createExecutionContext, createMessageBatch, getQueueResult } from "cloudflare:test";
import { env } from "cloudflare:workers";
import { describe, expect, it } from "vitest";
import type { OutboxRow } from "../../durable-objects/engine/outbox";
import { eventsOfMessage, MAX_EVENTS_PER_MESSAGE, type OrderEvent } from "../../durable-objects/shared/order-events";
import { MAX_MESSAGE_BYTES, MAX_SEND_BATCH_BYTES, packOutbox } from "../../durable-objects/stock/outbox-messages";
import { type ConsumerFault, withConsumerFault } from "../../src/harness/consumer-fault";
import { consumeDeadLetters, letterRetryDelay } from "../../src/orders/dead-letter-consumer";
import { consumeOrderEvents } from "../../src/orders/order-consumer";
import { applyOrderEvents, D1_MAX_BOUND_PARAMETERS } from "../../src/orders/order-store";
import { call, uniqueSku } from "../support/client";
import { seededRandom, shuffle } from "../support/random";

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

describe("order consumer: waking the webhook senders", () => {
  /** `env` whose sender objects and wake-up queue only record what they are asked (`wake` fails when told). */
  function recording(failWake: boolean) {
    const woken: string[] = [];
    const queued: unknown[] = [];
    const senders = {
      idFromName: (name: string) => name,
      get: (id: string) => ({
        wake: async (endpointId: string) => {
          if (failWake) throw new Error(`${id} unreachable`);
          woken.push(endpointId);
        },
      }),
    };
    const queue = { send: async (body: unknown) => void queued.push(body) };
    return { woken, queued, env: { ...env, WEBHOOK_SENDERS: senders, WEBHOOK_DELIVERIES: queue } as unknown as Env };
  }

  it("wakes the sender of each endpoint its changes are owed to, with no queued wake-up; queues one if a sender is unreachable", async () => {
    const hook = uniqueSku("wake-hook");
    await env.DB.prepare(
      "INSERT INTO webhook_endpoints (id, url, events, enabled, secret, created_at, updated_at) VALUES (?1, 'https://shop.example/hooks', '[\"order.held\"]', 1, 'whsec_x', 0, 0)",
    )
      .bind(hook)
      .run();
    const consume = async (failWake: boolean) => {
      const { woken, queued, env: recorded } = recording(failWake);
      const batch = createMessageBatch("order-events", [
        {
          id: crypto.randomUUID(),
          timestamp: new Date(),
          attempts: 1,
          body: event(uniqueSku("wake"), 1, "reservation.held", 1),
        },
      ]);
      await consumeOrderEvents(batch, recorded);
      return { woken, queued };
    };
    try {
      const reached = await consume(false);
      expect(reached.woken).toContain(hook);
      expect(reached.queued).toEqual([]);
      const unreachable = await consume(true);
      expect(unreachable.woken).toEqual([]);
      expect(unreachable.queued).toEqual([{ due: true }]);
    } finally {
      await env.DB.batch([
        env.DB.prepare("DELETE FROM webhook_deliveries WHERE endpoint_id = ?1").bind(hook),
        env.DB.prepare("DELETE FROM webhook_endpoints WHERE id = ?1").bind(hook),
      ]);
    }
  });
});

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

  it("keeps the hold's time as the order's createdAt when its payment's event is applied first (found in an audit)", async () => {
    const sku = uniqueSku("heldat");
    const heldAt = new Date(Date.now() - 120_000).toISOString();
    const held = { ...event(sku, 5, "reservation.held", 1), occurredAt: heldAt };
    const paid = { ...event(sku, 5, "reservation.paid", 2), userId: held.userId, quantity: held.quantity, heldAt };
    // The hold's message failed and is retried after the payment's went through.
    await deliver([asDelivery(paid)]);
    await deliver([asDelivery(held)]);
    const row = await env.DB.prepare("SELECT status, created_at FROM orders WHERE reservation_id = ?")
      .bind(held.reservationId)
      .first<{ status: string; created_at: number }>();
    expect(row).toEqual({ status: "paid", created_at: Date.parse(heldAt) });
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
    // 60 reservations, each held then finished; both events delivered twice, shuffled.
    const final = new Map<string, string>();
    const events: OrderEvent[] = [];
    for (let r = 0; r < 60; r++) {
      const held = event(sku, r, "reservation.held", 2 * r + 1);
      const type =
        (["reservation.paid", "reservation.cancelled", "reservation.expired"] as const)[r % 3] ?? "reservation.paid";
      const finished = { ...held, id: crypto.randomUUID(), type, seq: 2 * r + 2 };
      events.push(held, finished, held, finished);
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

  it("offers a letter D1 will not take again after a growing delay, and stores it once D1 takes it", async () => {
    const sku = uniqueSku("dlqdown");
    const letters = [1, 2].map((i) => ({
      id: `${sku}-${i}`,
      timestamp: new Date(),
      body: event(sku, i, "reservation.held", 1),
      attempts: i === 1 ? 1 : 4,
    }));
    // D1 refuses the write (a real failed write, in D1 itself), as in the outage that dead-lettered them.
    await env.DB.prepare(
      "CREATE TRIGGER test_dead_letters_down BEFORE INSERT ON dead_letters BEGIN SELECT RAISE(ABORT, 'D1 is down'); END",
    ).run();
    let result: Awaited<ReturnType<typeof getQueueResult>>;
    try {
      const batch = createMessageBatch("order-events-dlq", letters);
      const ctx = createExecutionContext();
      await consumeDeadLetters(batch, env);
      result = await getQueueResult(batch, ctx);
    } finally {
      await env.DB.prepare("DROP TRIGGER test_dead_letters_down").run();
    }
    // Each offered again on its own (the test harness does not report the delay a retry asked for).
    expect(result.explicitAcks).toEqual([]);
    expect(result.retryMessages).toEqual([{ msgId: `${sku}-1` }, { msgId: `${sku}-2` }]);
    expect([1, 2, 4, 8, 100].map(letterRetryDelay)).toEqual([30, 60, 240, 3600, 3600]);
    // Offered again once D1 is back: stored, and acknowledged.
    const again = createMessageBatch(
      "order-events-dlq",
      letters.map((l) => ({ ...l, attempts: l.attempts + 1 })),
    );
    const ctx = createExecutionContext();
    await consumeDeadLetters(again, env);
    expect((await getQueueResult(again, ctx)).explicitAcks.sort()).toEqual([`${sku}-1`, `${sku}-2`]);
    const listed = await call("GET", "/admin/dead-letters?pending=true", { admin: true });
    const ours = listed.json.deadLetters.filter((d: { id: string }) => d.id.startsWith(`${sku}-`));
    expect(ours).toHaveLength(2);
  });

  it("pages the stored dead letters: an operator with more than a page sees and replays every one", async () => {
    const sku = uniqueSku("dlqpages");
    const letters = Array.from({ length: 150 }, (_, i) => ({
      id: `${sku}-${i}`,
      timestamp: new Date(),
      body: event(sku, i, "reservation.held", 1),
      attempts: MAX_RETRIES + 1,
    }));
    // Stored by the DLQ consumer in three deliveries, oldest first.
    for (let i = 0; i < letters.length; i += 50) {
      await consumeDeadLetters(createMessageBatch("order-events-dlq", letters.slice(i, i + 50)), env);
    }
    const ours = (page: { deadLetters: { id: string }[] }) =>
      page.deadLetters.map((d) => d.id).filter((id) => id.startsWith(`${sku}-`));

    const first = await call("GET", "/admin/dead-letters?pending=true", { admin: true });
    expect(first.status).toBe(200);
    expect(first.json.deadLetters).toHaveLength(100);
    expect(typeof first.json.next).toBe("string");
    // Every page after the one before, until an empty page, which still gives `next`.
    const seen = [...ours(first.json)];
    let next = first.json.next as string;
    for (let pages = 0; pages < 20; pages++) {
      const page = await call("GET", `/admin/dead-letters?pending=true&limit=40&after=${encodeURIComponent(next)}`, {
        admin: true,
      });
      expect(page.status).toBe(200);
      expect(page.json.deadLetters.length).toBeLessThanOrEqual(40);
      seen.push(...ours(page.json));
      expect(typeof page.json.next).toBe("string");
      next = page.json.next;
      if (page.json.deadLetters.length === 0) break;
    }
    // Each once, newest stored first.
    expect(seen).toEqual(letters.map((l) => l.id).reverse());

    // The oldest, far past the first page, is replayed and leaves the pending list.
    const oldest = letters[0]?.id as string;
    expect((await call("POST", `/admin/dead-letters/${oldest}/replay`, { admin: true })).status).toBe(200);
    const all = await call("GET", "/admin/dead-letters?pending=true&limit=1000", { admin: true });
    expect(all.status).toBe(200);
    expect(ours(all.json)).toHaveLength(149);
    expect(ours(all.json)).not.toContain(oldest);

    const payments = await call("GET", "/admin/payments?limit=1", { admin: true });
    for (const query of ["limit=0", "limit=1001", "limit=ten", "after=nope", `after=${payments.json.next}`]) {
      const refused = await call("GET", `/admin/dead-letters?${query}`, { admin: true });
      expect([query, refused.status, refused.json.error?.code]).toEqual([query, 400, "INVALID_REQUEST"]);
    }
  });

  it("retries a message that is not an event at all, so the queue dead-letters it", async () => {
    const { deadLettered } = await deliver([{ id: "junk-1", body: { hello: "world" }, attempts: 1 }]);
    expect(deadLettered.map((m) => m.id)).toEqual(["junk-1"]);
  });

  it("applies a multi-event message with duplicates and out-of-order seqs, beside single-event messages", async () => {
    const sku = uniqueSku("multi");
    const held1 = event(sku, 1, "reservation.held", 1);
    const paid1 = { ...event(sku, 1, "reservation.paid", 2), userId: held1.userId, quantity: held1.quantity };
    const held2 = event(sku, 2, "reservation.held", 3);
    const cancelled2 = { ...event(sku, 2, "reservation.cancelled", 4), userId: held2.userId, quantity: held2.quantity };
    const held3 = event(sku, 3, "reservation.held", 5);
    // Newer before older, a duplicate inside the message, the same event again in an old-format message.
    const multi = { events: [paid1, held1, cancelled2, held2, held2] };
    await deliver([{ id: crypto.randomUUID(), body: multi, attempts: 1 }, asDelivery(held3), asDelivery(held2)]);
    expect(await ordersOf(sku)).toEqual([
      { reservation_id: held1.reservationId, status: "paid", last_seq: 2 },
      { reservation_id: held2.reservationId, status: "cancelled", last_seq: 4 },
      { reservation_id: held3.reservationId, status: "held", last_seq: 5 },
    ]);
    const ids = [held1, paid1, held2, cancelled2, held3].map((e) => e.id);
    const { results } = await env.DB.prepare(
      `SELECT event_id, COUNT(*) AS n FROM processed_events WHERE event_id IN (${ids.map(() => "?").join(",")}) GROUP BY event_id`,
    )
      .bind(...ids)
      .all<{ event_id: string; n: number }>();
    expect(results.map((r) => r.n)).toEqual([1, 1, 1, 1, 1]);
  });

  it("reports per event whether it changed its row (duplicates and overtaken events do not)", async () => {
    const sku = uniqueSku("changed");
    const held = event(sku, 1, "reservation.held", 1);
    const paid = { ...event(sku, 1, "reservation.paid", 2), userId: held.userId, quantity: held.quantity };
    expect((await applyOrderEvents(env.DB, [held, held, paid], Date.now())).changed).toEqual([true, false, true]);
    expect((await applyOrderEvents(env.DB, [held, paid], Date.now())).changed).toEqual([false, false]);
  });

  it("writes a delivery of many events in statements of at most 100 bound parameters", async () => {
    const sku = uniqueSku("chunks");
    const events = Array.from({ length: 250 }, (_, r) => event(sku, r, "reservation.held", r + 1));
    // Every statement the apply prepares, with what it binds.
    const bound: number[] = [];
    const spy = new Proxy(env.DB, {
      get(target, prop, receiver) {
        if (prop !== "prepare") return Reflect.get(target, prop, receiver);
        return (query: string) => {
          const statement = target.prepare(query);
          return new Proxy(statement, {
            get(s, p, r) {
              if (p !== "bind") return Reflect.get(s, p, r);
              return (...values: unknown[]) => {
                bound.push(values.length);
                return s.bind(...values);
              };
            },
          });
        };
      },
    });
    await applyOrderEvents(spy, events, Date.now());
    // 250 ids in statements of 33 (3 columns), 250 orders in statements of 9 (11 columns), and the
    // question whether webhook deliveries are due (no parameter: it binds nothing).
    expect(bound.length).toBe(Math.ceil(250 / 33) + Math.ceil(250 / 9) + 0);
    expect(Math.max(...bound)).toBeLessThanOrEqual(D1_MAX_BOUND_PARAMETERS);
    expect(bound.reduce((a, b) => a + b, 0)).toBe(250 * 3 + 250 * 11);
    const rows = await ordersOf(sku);
    expect(rows).toHaveLength(250);
    expect(rows.every((row) => row.status === "held")).toBe(true);
  });

  it("dead-letters a multi-event message whose one event always fails, whole, and replays all its events", async () => {
    const sku = uniqueSku("dlqmulti");
    const good = event(sku, 1, "reservation.held", 1);
    const poison = event(sku, 2, "reservation.held", 2);
    const alwaysFails: ConsumerFault = (e) => {
      if (e.id === poison.id) throw new Error("downstream is broken");
    };
    // As the stock objects send it: the body as JSON text.
    const message = { id: crypto.randomUUID(), body: JSON.stringify({ events: [good, poison] }), attempts: 1 };
    const { deadLettered } = await deliver([message], alwaysFails);
    expect(deadLettered.map((m) => m.id)).toEqual([message.id]);
    // The fault fails the message before the consumer, as a failed write of the whole message would.
    expect(await ordersOf(sku)).toEqual([]);

    await consumeDeadLetters(
      createMessageBatch("order-events-dlq", [
        { ...deadLettered[0], timestamp: new Date() } as Delivery & { timestamp: Date },
      ]),
      env,
    );
    const listed = await call("GET", "/admin/dead-letters?pending=true", { admin: true });
    const mine = listed.json.deadLetters.filter((d: { id: string }) => d.id === message.id);
    expect(mine).toHaveLength(1);
    expect(mine[0].body).toEqual({ events: [good, poison] });
    const replay = await call("POST", `/admin/dead-letters/${message.id}/replay`, { admin: true });
    expect(replay.status).toBe(200);
    expect(await ordersOf(sku)).toEqual([
      { reservation_id: good.reservationId, status: "held", last_seq: 1 },
      { reservation_id: poison.reservationId, status: "held", last_seq: 2 },
    ]);
  });

  it("retries a multi-event message with an invalid event, still applying its valid ones", async () => {
    const sku = uniqueSku("invalid");
    const good = event(sku, 1, "reservation.held", 1);
    const { deadLettered } = await deliver([
      { id: "mixed-1", body: { events: [good, { ...good, id: "not-a-uuid" }] }, attempts: 1 },
      { id: "not-json-1", body: '{"events":[{"id"', attempts: 1 },
    ]);
    expect(deadLettered.map((m) => m.id).sort()).toEqual(["mixed-1", "not-json-1"]);
    expect(await ordersOf(sku)).toEqual([{ reservation_id: good.reservationId, status: "held", last_seq: 1 }]);
  });
});

describe("outbox packing", () => {
  /** Outbox rows as the engine writes them: `perRow` events of one transaction each, as JSON text. */
  const rowsOf = (events: OrderEvent[], perRow: number): OutboxRow[] => {
    const rows: OutboxRow[] = [];
    for (let i = 0; i < events.length; i += perRow) {
      const part = events.slice(i, i + perRow);
      rows.push({
        lastSeq: part.at(-1)?.seq ?? 0,
        count: part.length,
        events: part.map((e) => JSON.stringify(e)).join(","),
      });
    }
    return rows;
  };
  const eventsOf = (sku: string, n: number, userId?: (r: number) => string) =>
    Array.from({ length: n }, (_, r) => {
      const e = event(sku, r, "reservation.held", r + 1);
      return userId ? { ...e, userId: userId(r) } : e;
    });
  const bytes = (text: string) => new TextEncoder().encode(text).byteLength;

  it("joins whole rows in order into messages of at most MAX_EVENTS_PER_MESSAGE, in one sendBatch", () => {
    const events = eventsOf("pack", 100);
    const batches = packOutbox(rowsOf(events, 10));
    expect(batches).toHaveLength(1);
    const bodies = batches[0]?.bodies.map((b) => eventsOfMessage(b)) ?? [];
    expect(MAX_EVENTS_PER_MESSAGE).toBe(32);
    // Rows of 10 stay whole: three to a message (a fourth would make 40).
    expect(bodies.map((b) => [b.events.length, b.invalid])).toEqual([
      [30, null],
      [30, null],
      [30, null],
      [10, null],
    ]);
    expect(bodies.flatMap((b) => b.events)).toEqual(events);
    expect(batches[0]?.lastSeq).toBe(100);
  });

  it("keeps each message and each sendBatch within the Queues byte limits, counting UTF-8 bytes", () => {
    // About 10 KB (ASCII) or 20 KB (two bytes a character) per event, a row each.
    const events = eventsOf("big", 60, (r) => `u${r}-${(r % 2 ? "é" : "x").repeat(10_000)}`);
    const batches = packOutbox(rowsOf(events, 1));
    for (const batch of batches) {
      for (const body of batch.bodies) expect(bytes(body)).toBeLessThanOrEqual(MAX_MESSAGE_BYTES);
      expect(batch.bodies.reduce((n, body) => n + bytes(body), 0)).toBeLessThanOrEqual(MAX_SEND_BATCH_BYTES);
    }
    expect(batches.length).toBeGreaterThan(1);
    expect(batches.flatMap((b) => b.bodies.flatMap((body) => eventsOfMessage(body).events))).toEqual(events);
    expect(batches.map((b) => b.lastSeq)).toEqual([...batches.map((b) => b.lastSeq)].sort((x, y) => x - y));
    expect(batches.at(-1)?.lastSeq).toBe(60);
  });
});
