import type { ReservationStatus } from "../shared/order-events";
import type { Configuration } from "./configuration";
import type { Ledger } from "./ledger";
import type { Outbox } from "./outbox";
import { type SkuState, toState } from "./types";

/**
 * What reconciliation (src/reconcile/reconcile.ts) reads of a shard to compare it with D1 and the
 * mirror, and its one repair inside the object: events written again for what D1 lacks.
 */

/** A reservation as reconciliation sees it: its status and the seq of its latest event. */
export interface AuditedReservation {
  id: string;
  status: ReservationStatus;
  seq: number;
  updatedAt: number;
}

export interface Audit {
  state: SkuState;
  /** Reservations whose latest event is after the watermark, oldest first (one page). */
  changed: AuditedReservation[];
  /** Seq and time of the oldest outbox event not yet sent, or null. */
  oldestUnsent: { seq: number; occurredAt: number } | null;
  /** Holds past their expiry that no alarm has released yet. */
  overdueHolds: number;
  /** Transfers this shard asked for and never completed, and late payments' claims it never finished. */
  pendingTransfers: number;
  /**
   * Reservations this shard ever created (kept in the SKU row by every hold, since finished rows are
   * pruned), read with the SKU row. Compared with D1's order counts.
   */
  created: number;
  /** Shard 0: the SKU's total as the last PUT set it (see configuration.ts); else null. */
  skuTotal: number | null;
  /** Sizes: this shard's variants' counts by id (empty without variants). */
  variants: Record<string, { total: number; held: number; sold: number }>;
  /** Sizes, shard 0: each variant's total as the last PUT set it (empty: none recorded). */
  variantTotals: Record<string, number>;
  /** Rows this audit read from the object's SQLite database. */
  rowsRead: number;
}

export class Audits {
  constructor(
    private readonly ledger: Ledger,
    private readonly outbox: Outbox,
    private readonly configuration: Configuration,
  ) {}

  /**
   * One page of what changed after `afterSeq`, read through the seq index (its cost follows the
   * changes, not the history), and the shard's open work. Only reads.
   */
  audit(afterSeq: number, limit: number, now: number): Audit | null {
    const ledger = this.ledger;
    const sku = ledger.row();
    if (!sku) return null;
    let rowsRead = 1;
    const read = <T extends Record<string, SqlStorageValue>>(cursor: SqlStorageCursor<T>): T[] => {
      const rows = cursor.toArray();
      rowsRead += cursor.rowsRead;
      return rows;
    };
    const changed = read(
      ledger.sql.exec<{ id: string; status: string; seq: number; updated_at: number }>(
        "SELECT id, status, seq, updated_at FROM reservations WHERE seq > ? ORDER BY seq LIMIT ?",
        afterSeq,
        limit,
      ),
    ).map((r) => ({ id: r.id, status: r.status as ReservationStatus, seq: r.seq, updatedAt: r.updated_at }));
    const unsent = this.outbox.oldestUnsent();
    rowsRead += unsent.rowsRead;
    const [overdue] = read(
      ledger.sql.exec<{ n: number }>(
        "SELECT COUNT(*) AS n FROM reservations WHERE status = 'held' AND expires_at <= ?",
        now,
      ),
    );
    const [transfers] = read(
      ledger.sql.exec<{ n: number }>(
        `SELECT (SELECT COUNT(*) FROM transfers WHERE direction = 'in' AND granted IS NULL)
              + (SELECT COUNT(*) FROM payment_claims) AS n`,
      ),
    );
    return {
      state: toState(sku, ledger.pricing()),
      changed,
      oldestUnsent: unsent.event ? { seq: unsent.event.seq, occurredAt: Date.parse(unsent.event.occurredAt) } : null,
      overdueHolds: overdue?.n ?? 0,
      pendingTransfers: transfers?.n ?? 0,
      created: sku.created,
      skuTotal: this.configuration.skuTarget(),
      variants: Object.fromEntries(
        [...ledger.variants().values()].map((v) => [v.id, { total: v.total, held: v.held, sold: v.sold }]),
      ),
      variantTotals: Object.fromEntries(this.configuration.variantTargets()),
      rowsRead,
    };
  }

  /**
   * The check-back's repair: writes a fresh event with the current status of each reservation
   * (a higher seq, so the consumer applies it over whatever D1 holds). Returns how many.
   */
  reemit(reservationIds: readonly string[], now: number): number {
    const ledger = this.ledger;
    if (!ledger.configured) return 0;
    return ledger.run(() => {
      let count = 0;
      for (const id of reservationIds) {
        const row = ledger.reservationRow(id);
        if (!row) continue;
        ledger.emit(ledger.toReservation(row), now);
        count++;
      }
      return count;
    });
  }
}
