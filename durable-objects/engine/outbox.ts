import type { OrderEvent } from "../shared/order-events";
import type { Ledger } from "./ledger";

/**
 * The transactional outbox, read side: the events each transaction wrote beside its change (the
 * ledger writes them), waiting for the `order-events` queue. The sender (durable-objects/stock/outbox-sender.ts)
 * reads rows oldest first, sends them, and marks what the queue took.
 */

/**
 * Unsent outbox events as stored: up to a queue message's events (MAX_EVENTS_PER_MESSAGE) of one
 * transaction, their JSON comma-separated (a JSON array's inside), ready to be joined into a body.
 */
export interface OutboxRow {
  lastSeq: number;
  count: number;
  events: string;
}

interface PendingEvent {
  seq: number;
  event: OrderEvent;
}

export class Outbox {
  constructor(private readonly ledger: Ledger) {}

  /** Whether events wait to be sent (one row read, nothing parsed). */
  hasPending(): boolean {
    if (!this.ledger.configured) return false;
    this.ledger.writePending();
    return this.ledger.sql.exec("SELECT 1 FROM outbox_events LIMIT 1").toArray().length > 0;
  }

  /**
   * Rows not yet sent, oldest first, until they hold at least `limit` events (one more row's worth
   * at most), their text as stored: the sender joins it into message bodies unparsed.
   */
  pendingRows(limit: number): OutboxRow[] {
    if (!this.ledger.configured) return [];
    this.ledger.writePending();
    const out: OutboxRow[] = [];
    let events = 0;
    for (let after = -1; events < limit; ) {
      const rows = this.ledger.sql
        .exec<{ last_seq: number; count: number; events: string }>(
          "SELECT last_seq, count, events FROM outbox_events WHERE first_seq > ? ORDER BY first_seq LIMIT 32",
          after,
        )
        .toArray();
      for (const row of rows) {
        if (events >= limit) return out;
        out.push({ lastSeq: row.last_seq, count: row.count, events: row.events });
        events += row.count;
        after = row.last_seq;
      }
      if (rows.length < 32) break;
    }
    return out;
  }

  /** The events of {@link pendingRows}, parsed: what the outbox holds, as the tests read it. */
  pendingEvents(limit: number): PendingEvent[] {
    return this.pendingRows(limit).flatMap((row) =>
      (JSON.parse(`[${row.events}]`) as OrderEvent[]).map((event) => ({ seq: event.seq, event })),
    );
  }

  /** The oldest event not sent yet, with the rows read to find it (reconciliation's lag). */
  oldestUnsent(): { event: OrderEvent | undefined; rowsRead: number } {
    const cursor = this.ledger.sql.exec<{ events: string }>(
      "SELECT events FROM outbox_events ORDER BY first_seq LIMIT 1",
    );
    const row = cursor.toArray()[0];
    const event = row ? (JSON.parse(`[${row.events}]`) as OrderEvent[])[0] : undefined;
    return { event, rowsRead: cursor.rowsRead };
  }

  /**
   * Forgets rows once the queue has their events: the sender sends oldest first and stops at a
   * failure, so what it confirms is a prefix, up to and including the row ending at `lastSeq`.
   */
  markSent(lastSeq: number): void {
    this.ledger.sql.exec("DELETE FROM outbox_events WHERE last_seq <= ?", lastSeq);
  }
}
