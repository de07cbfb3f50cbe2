import { describe, expect, it } from "vitest";
import type { Outbox, OutboxRow } from "../durable-objects/engine/outbox";
import type { DueWork } from "../durable-objects/stock/due-work";
import { OutboxSender } from "../durable-objects/stock/outbox-sender";

/**
 * The outbox sender with the sale log (issue #52): a decision's event leaves the stock object's
 * outbox only once both the log and the queue took it, so no acknowledged decision can miss its log
 * entry; a failure of either keeps the events for the alarm's retry, which sends them to both again.
 */

function rows(n: number): OutboxRow[] {
  return Array.from({ length: n }, (_, i) => ({
    lastSeq: i + 1,
    count: 1,
    events: JSON.stringify({ id: `e${i + 1}`, seq: i + 1 }),
  }));
}

function harness(opts: { logFails?: boolean; queueFails?: boolean }) {
  let pending = rows(3);
  const sent: number[] = [];
  const logged: string[][] = [];
  const queued: unknown[][] = [];
  const retries: string[] = [];
  const outbox = {
    hasPending: () => pending.length > 0,
    pendingRows: () => pending,
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
  const log = async (bodies: readonly string[]) => {
    if (opts.logFails) throw new Error("log down");
    logged.push([...bodies]);
  };
  const sender = new OutboxSender(outbox, queue, due, () => 0, log);
  return { sender, sent, logged, queued, retries, pending: () => pending };
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
});
