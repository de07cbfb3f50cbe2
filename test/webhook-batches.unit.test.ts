import { describe, expect, it } from "vitest";
import { batchIdOf, batchMessagesOf, type Due, formMessages, MAX_MESSAGE_BYTES } from "../src/handoff/batches";
import type { Taken } from "../src/handoff/deliveries";

/**
 * How a batched endpoint's due rows become messages (src/handoff/batches.ts, API.md v1.4 "Webhook
 * batches"); test/suites/webhook-batches.ts sends them through the real Worker.
 */

const fresh = (position: number, written = 0): Due => ({ position, batch_id: null, written_at: written });
const BATCH = { maxEvents: 3, maxWaitMs: 1000 };

describe("forming batch messages", () => {
  it("sends full batches in feed order and holds a short one until its oldest waited maxWaitMs", () => {
    const rows = [fresh(5, 100), fresh(2, 50), fresh(9, 300), fresh(7, 200)];
    const held = formMessages(rows, false, BATCH, 1000, 64);
    expect(held).toEqual({ messages: [[2, 5, 7]], holdUntil: 1300, more: false });
    const due = formMessages(rows, false, BATCH, 1300, 64);
    expect(due).toEqual({ messages: [[2, 5, 7], [9]], holdUntil: null, more: false });
    expect(formMessages(rows, false, { maxEvents: 100, maxWaitMs: 0 }, 300, 64).messages).toEqual([[2, 5, 7, 9]]);
  });

  it("sends a batch tried before whole again, cut to a smaller maxEvents", () => {
    const rows: Due[] = [
      { position: 4, batch_id: "b", written_at: 0 },
      fresh(10, 5000),
      { position: 3, batch_id: "b", written_at: 0 },
      { position: 8, batch_id: "b", written_at: 0 },
    ];
    expect(formMessages(rows, false, { maxEvents: 10, maxWaitMs: 1000 }, 5000, 64)).toEqual({
      messages: [[3, 4, 8]],
      holdUntil: 6000,
      more: false,
    });
    expect(formMessages(rows, false, { maxEvents: 2, maxWaitMs: 1000 }, 5000, 64).messages).toEqual([[3, 4], [8]]);
  });

  it("leaves what it may not have read whole for the next round", () => {
    const rows = [fresh(1), fresh(2), fresh(3), fresh(4), { position: 5, batch_id: "x", written_at: 0 }];
    expect(formMessages(rows, true, BATCH, 10_000, 64)).toEqual({ messages: [[1, 2, 3]], holdUntil: null, more: true });
    expect(formMessages([fresh(1), fresh(2), fresh(3), fresh(4)], false, BATCH, 10_000, 1)).toEqual({
      messages: [[1, 2, 3]],
      holdUntil: null,
      more: true,
    });
  });

  it("names a batch by its endpoint and positions: the same rows, the same id", () => {
    expect(batchIdOf("shop", [1, 2, 3])).toBe(batchIdOf("shop", [1, 2, 3]));
    expect(batchIdOf("shop", [1, 2, 3])).toMatch(/^msg_batch_1_3_[0-9a-f]{8}_shop$/);
    expect(batchIdOf("shop", [1, 2, 4])).not.toBe(batchIdOf("shop", [1, 2, 3]));
    expect(batchIdOf("erp", [1, 2, 3])).not.toBe(batchIdOf("shop", [1, 2, 3]));
    expect(batchIdOf("shop", [-7, 1])).toMatch(/^msg_batch_pay7_2_/);
  });

  // "ü" is two bytes in UTF-8: a cut by characters would let such a message grow past the limit.
  it.each([
    ["ASCII", "u".repeat(4000)],
    ["wider than ASCII", "ü".repeat(4000)],
  ])("cuts a batch whose events would pass 256 KiB into messages that fit (user ids in %s)", (_, userId) => {
    const row = (position: number): Taken => ({
      attempts: 0,
      batch_id: null,
      due_at: 0,
      written_at: 0,
      seen_at: 0,
      type: "order.held",
      position,
      status: "held",
      changed_at: 1_800_000_000_000 + position,
      reservation_id: `sku.0.${position}`,
      sku: "sku",
      user_id: userId,
      quantity: 1,
      amount: 100,
      currency: "usd",
      test: 0,
      variant: null,
      created_at: 1_800_000_000_000,
    });
    const rows = Array.from({ length: 100 }, (_, i) => row(i + 1));
    const messages = batchMessagesOf("shop", [rows.map((r) => r.position)], rows);
    expect(messages.length).toBeGreaterThan(1);
    expect(messages.flatMap((m) => m.rows.map((r) => r.position))).toEqual(rows.map((r) => r.position));
    for (const message of messages) {
      expect(new TextEncoder().encode(message.body).length).toBeLessThanOrEqual(MAX_MESSAGE_BYTES);
      const body = JSON.parse(message.body);
      expect(body.type).toBe("batch");
      expect(body.data.events.map((e: { id: string }) => e.id)).toEqual(
        message.rows.map((r) => `msg_${r.position}_shop`),
      );
      expect(message.id).toBe(
        batchIdOf(
          "shop",
          message.rows.map((r) => r.position),
        ),
      );
      expect(body.timestamp).toBe(body.data.events.at(-1).timestamp);
    }
  });
});
