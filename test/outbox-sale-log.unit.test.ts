import { describe, expect, it } from "vitest";
import type { LogEntryRow, Outbox, OutboxRow, PaymentLogRow } from "../durable-objects/engine/outbox";
import type { ConfigEntry } from "../durable-objects/shared/sale-entries";
import type { DueWork } from "../durable-objects/stock/due-work";
import { OutboxSender } from "../durable-objects/stock/outbox-sender";

/**
 * The outbox sender with the sale log (issue #52): a decision's event leaves the stock object's
 * outbox only once both the log and the queue took it, so no acknowledged decision can miss its log
 * entry; a failure of either keeps the events for the alarm's retry, which sends them to both again.
 * Shard 0's configuration entries (written in the change's transaction) go to the log alone, the same way.
 */

function rows(n: number): OutboxRow[] {
  return Array.from({ length: n }, (_, i) => ({
    lastSeq: i + 1,
    count: 1,
    events: JSON.stringify({ id: `e${i + 1}`, seq: i + 1 }),
  }));
}

const configRow: LogEntryRow = {
  id: "config:7",
  type: "config",
  time: Date.parse("2026-12-05T10:00:00Z"),
  until: Date.parse("2026-12-05T10:00:00.250Z"),
  sku: {
    shards: 2,
    status: "paused",
    perUserLimit: 2,
    holdSeconds: 600,
    startsAt: null,
    endsAt: null,
    stock: { total: 40 },
    price: null,
    currency: "USD",
  },
  draws: [],
};

const paymentRow: PaymentLogRow = {
  id: "payment:evt_1",
  time: Date.parse("2026-12-05T10:00:01Z"),
  payment: {
    reservationId: "r1",
    userId: "u1",
    reason: "already_paid",
    amount: 1500,
    currency: "usd",
  },
};

function harness(opts: {
  logFails?: boolean;
  queueFails?: boolean;
  entries?: LogEntryRow[];
  payments?: PaymentLogRow[];
}) {
  let pending = rows(3);
  let entries = opts.entries ?? [];
  let payments = opts.payments ?? [];
  /** What reached the log, in order: `events` for a flush's bodies, a payment by its dedupe key. */
  const order: string[] = [];
  const configs: { entry: ConfigEntry; dedupe: string }[] = [];
  const sent: number[] = [];
  const logged: string[][] = [];
  const queued: unknown[][] = [];
  const retries: string[] = [];
  const outbox = {
    hasPending: () => pending.length > 0 || entries.length > 0 || payments.length > 0,
    pendingRows: () => pending,
    entriesDue: () => entries,
    paymentsDue: () => payments,
    markPaymentSent: (id: string) => {
      payments = payments.filter((p) => p.id !== id);
    },
    markEntrySent: (id: string) => {
      entries = entries.filter((e) => e.id !== id);
    },
    markSent: (lastSeq: number) => {
      sent.push(lastSeq);
      pending = pending.filter((r) => r.lastSeq > lastSeq);
    },
  } as unknown as Outbox;
  const queue = {
    sendBatch: async (messages: unknown[]) => {
      if (opts.queueFails) throw new Error("queue down");
      queued.push(messages);
    },
  } as unknown as Queue;
  const due = { retry: async (work: string) => void retries.push(work) } as unknown as DueWork;
  const log = {
    append: async (bodies: readonly string[]) => {
      if (opts.logFails) throw new Error("log down");
      logged.push([...bodies]);
      order.push("events");
    },
    appendConfig: async (entry: ConfigEntry, dedupe: string) => {
      if (opts.logFails) throw new Error("log down");
      configs.push({ entry, dedupe });
    },
    appendPayment: async (_payment: unknown, _time: number, dedupe: string) => {
      if (opts.logFails) throw new Error("log down");
      order.push(dedupe);
    },
  };
  const sender = new OutboxSender(outbox, queue, due, () => 0, log);
  return {
    sender,
    sent,
    logged,
    queued,
    retries,
    configs,
    order,
    pending: () => pending,
    entries: () => entries,
    payments: () => payments,
  };
}

describe("the outbox sender and the sale log", () => {
  it("forgets events once both the log and the queue took them", async () => {
    const h = harness({});
    await h.sender.send();
    expect(h.logged).toHaveLength(1);
    expect(h.queued).toHaveLength(1);
    // The log got exactly the queue's message bodies.
    expect(h.logged[0]).toEqual((h.queued[0] as { body: string }[]).map((m) => m.body));
    expect(h.sent).toEqual([3]);
    expect(h.pending()).toEqual([]);
    expect(h.retries).toEqual([]);
  });

  it("keeps every event for the retry when the log fails, even if the queue took them", async () => {
    const h = harness({ logFails: true });
    await h.sender.send();
    expect(h.sent).toEqual([]);
    expect(h.pending()).toHaveLength(3);
    expect(h.retries).toEqual(["outbox"]);
  });

  it("keeps every event for the retry when the queue fails, even if the log took them", async () => {
    const h = harness({ queueFails: true });
    await h.sender.send();
    expect(h.logged).toHaveLength(1);
    expect(h.sent).toEqual([]);
    expect(h.pending()).toHaveLength(3);
    expect(h.retries).toEqual(["outbox"]);
  });

  it("sends shard 0's configuration entries to the log alone, once, with when every shard had the change", async () => {
    const h = harness({ entries: [configRow] });
    await h.sender.send();
    expect(h.configs).toEqual([
      {
        dedupe: "config:7",
        entry: expect.objectContaining({
          type: "config",
          time: "2026-12-05T10:00:00.000Z",
          until: "2026-12-05T10:00:00.250Z",
          status: "paused",
          total: 40,
          shards: 2,
        }),
      },
    ]);
    expect(h.entries()).toEqual([]);
    // The queue carries order events only.
    expect(h.queued.flat().some((m) => JSON.stringify(m).includes("config"))).toBe(false);
  });

  it("keeps a configuration entry for the retry when the log fails", async () => {
    const h = harness({ logFails: true, entries: [configRow] });
    await h.sender.send();
    expect(h.entries()).toEqual([configRow]);
    expect(h.retries).toEqual(["outbox"]);
  });

  it("sends a payment's entry to the log alone, after the events before it, and keeps it for the retry of a failure", async () => {
    const h = harness({ payments: [paymentRow] });
    await h.sender.send();
    expect(h.order).toEqual(["events", "payment:evt_1"]);
    expect(h.payments()).toEqual([]);
    expect(h.queued.flat().some((m) => JSON.stringify(m).includes("evt_1"))).toBe(false);
    // The log or the queue down: it waits for the retry, as the events do.
    for (const fails of [{ logFails: true }, { queueFails: true }]) {
      const down = harness({ ...fails, payments: [paymentRow] });
      await down.sender.send();
      expect(down.order.includes("payment:evt_1")).toBe(false);
      expect(down.payments()).toEqual([paymentRow]);
      expect(down.retries).toEqual(["outbox"]);
    }
  });
});
