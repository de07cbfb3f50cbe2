import type { OrderEvent } from "../shared/order-events";
import type { ConfiguredSku, DrawCommitment, RefundEntryEvent } from "../shared/sale-entries";
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

/** A configuration entry waiting for the SKU's log: what it states, when, and until when. */
export interface LogEntryRow {
  id: string;
  type: "config" | "archive";
  time: number;
  until: number;
  sku: ConfiguredSku;
  draws: DrawCommitment[];
}

/** A payment's `payment` entry waiting for the SKU's log (engine/payments.ts writes it): its dedupe key, when, what. */
export interface PaymentLogRow {
  id: string;
  time: number;
  payment: RefundEntryEvent;
}

interface PendingEvent {
  seq: number;
  event: OrderEvent;
}

export class Outbox {
  constructor(private readonly ledger: Ledger) {}

  /** Whether events, or configuration entries ready for the log, wait to be sent. */
  hasPending(): boolean {
    if (!this.ledger.configured) return false;
    this.ledger.writePending();
    return (
      this.ledger.sql.exec("SELECT 1 FROM outbox_events LIMIT 1").toArray().length > 0 ||
      this.ledger.sql.exec("SELECT 1 FROM log_outbox WHERE until IS NOT NULL LIMIT 1").toArray().length > 0 ||
      this.ledger.sql.exec("SELECT 1 FROM log_payments LIMIT 1").toArray().length > 0
    );
  }

  /**
   * Shard 0: the SKU's configuration entries whose change every shard has (engine/configuration.ts
   * writes them), oldest first, for the SKU's log alone (the queue never sees them).
   */
  entriesDue(): LogEntryRow[] {
    return this.ledger.sql
      .exec<{ id: string; type: "config" | "archive"; time: number; until: number; figures: string }>(
        "SELECT id, type, time, until, figures FROM log_outbox WHERE until IS NOT NULL ORDER BY time",
      )
      .toArray()
      .map(({ figures, ...row }) => ({ ...row, ...(JSON.parse(figures) as Pick<LogEntryRow, "sku" | "draws">) }));
  }

  /** Forgets a configuration entry once the log has it. */
  markEntrySent(id: string): void {
    this.ledger.sql.exec("DELETE FROM log_outbox WHERE id = ?", id);
  }

  /** The `payment` entries waiting for the SKU's log, oldest first (for the log alone, like configurations). */
  paymentsDue(): PaymentLogRow[] {
    if (!this.ledger.configured) return [];
    return this.ledger.sql
      .exec<{ id: string; time: number; figures: string }>(
        "SELECT id, time, figures FROM log_payments ORDER BY time, id",
      )
      .toArray()
      .map(({ id, time, figures }) => ({ id, time, payment: JSON.parse(figures) as RefundEntryEvent }));
  }

  /** Forgets a `payment` entry once the log has it. */
  markPaymentSent(id: string): void {
    this.ledger.sql.exec("DELETE FROM log_payments WHERE id = ?", id);
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
