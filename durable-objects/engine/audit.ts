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

/** What a shard has left to do: what reconciliation repairs, and checks again after the repair. */
export interface OpenWork {
  /** Seq and time of the oldest outbox event not yet sent, or null. */
  oldestUnsent: { seq: number; occurredAt: number } | null;
  /** Holds past their expiry that no alarm has released yet. */
  overdueHolds: number;
  /** Transfers this shard asked for and never completed, and late payments' claims it never finished. */
  pendingTransfers: number;
}

export interface Audit extends OpenWork {
  state: SkuState;
  /** Reservations whose latest event is after the watermark, oldest first (one page). */
  changed: AuditedReservation[];
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
    const work = this.openWork(now);
    rowsRead += work.rowsRead;
    return {
      state: toState(sku, ledger.pricing()),
      changed,
      oldestUnsent: work.oldestUnsent,
      overdueHolds: work.overdueHolds,
      pendingTransfers: work.pendingTransfers,
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
   * The shard's open work: the oldest event not sent, the holds past expiry at `now`, the transfers
   * and claims not finished. The audit reads it before a repair, the repair after (what it left).
   */
  openWork(now: number): OpenWork & { rowsRead: number } {
    const ledger = this.ledger;
    if (!ledger.configured) return { oldestUnsent: null, overdueHolds: 0, pendingTransfers: 0, rowsRead: 0 };
    const unsent = this.outbox.oldestUnsent();
    let rowsRead = unsent.rowsRead;
    const count = (cursor: SqlStorageCursor<{ n: number }>): number => {
      const n = cursor.toArray()[0]?.n ?? 0;
      rowsRead += cursor.rowsRead;
      return n;
    };
    const overdueHolds = count(
      ledger.sql.exec<{ n: number }>(
        "SELECT COUNT(*) AS n FROM reservations WHERE status = 'held' AND expires_at <= ?",
        now,
      ),
    );
    const pendingTransfers = count(
      ledger.sql.exec<{ n: number }>(
        `SELECT (SELECT COUNT(*) FROM transfers WHERE direction = 'in' AND granted IS NULL)
              + (SELECT COUNT(*) FROM payment_claims) AS n`,
      ),
    );
    return {
      oldestUnsent: unsent.event ? { seq: unsent.event.seq, occurredAt: Date.parse(unsent.event.occurredAt) } : null,
      overdueHolds,
      pendingTransfers,
      rowsRead,
    };
  }

  /**
   * The check-back's repair: writes a fresh event with the current status of each reservation
   * (a higher seq, so the consumer applies it over whatever D1 holds). Returns each re-emitted
   * reservation with its event's seq (one the object no longer holds is left out).
   */
  reemit(reservationIds: readonly string[], now: number): { id: string; seq: number }[] {
    const ledger = this.ledger;
    if (!ledger.configured) return [];
    return ledger.run(() => {
      const emitted: { id: string; seq: number }[] = [];
      for (const id of reservationIds) {
        const row = ledger.reservationRow(id);
        if (!row) continue;
        emitted.push({ id, seq: ledger.emit(ledger.toReservation(row), now) });
      }
      return emitted;
    });
  }
}
