import { LAZY_EXPIRY_BATCH, type Ledger } from "./ledger";
import { availableOf } from "./types";
import type { Waitlist } from "./waitlist";

/**
 * Stock moved between the shards of one SKU, exactly once per transfer id. The receiver records its
 * intent before it asks ('in', granted NULL), the giver records what it granted ('out'), and the
 * receiver adds the grant once; a receiver that died in between finishes from its alarm, asking
 * again with the same id and getting the same grant. The shell runs the steps
 * (durable-objects/stock/shard-pulls.ts).
 */

interface PendingTransfer {
  id: string;
  /** The shard asked to give stock. */
  from: number;
  requested: number;
  /** Sizes: the variant moved (units of it only); undefined on a SKU without variants. */
  variant?: string | undefined;
}

export class Transfers {
  constructor(
    private readonly ledger: Ledger,
    private readonly waitlist: Waitlist,
  ) {}

  /**
   * Giver side: takes up to `requested` available units out of this shard's total, once per
   * transfer id (a retry returns what the first call granted, nothing included). Given a variant, only that variant's available units.
   * Null, with nothing recorded, while a resize fences this shard: its commit sets this shard's totals
   * as they were planned, so a unit given now would be counted here again; the receiver asks again.
   * 0 (recorded) to a shard a cut left outside this shard's count.
   */
  give(transferId: string, toShard: number, requested: number, now: number, variant?: string): number | null {
    const ledger = this.ledger;
    if (!ledger.configured) return 0;
    return ledger.run(() => {
      const done = ledger.sql
        .exec<{ granted: number }>("SELECT granted FROM transfers WHERE id = ? AND direction = 'out'", transferId)
        .toArray()[0];
      if (done) return done.granted;
      if (ledger.fenced()) return null;
      ledger.expireDue(now, LAZY_EXPIRY_BATCH);
      const sku = ledger.requireRow();
      // A SKU with sizes moves units of one variant at a time (its total is theirs).
      const sized = ledger.variants().size > 0;
      const stock = variant === undefined ? (sized ? undefined : sku) : ledger.variants().get(variant);
      // A shard outside this one's count (a cut retired it) gets nothing: no token, pass or draw of the
      // count asks it, so a unit there would stay unsold for good (sim seed 282 on 4 shards).
      const retired = toShard >= sku.shards;
      const granted = stock && !retired ? Math.max(0, Math.min(requested, availableOf(stock))) : 0;
      const record = () =>
        ledger.sql.exec(
          "INSERT INTO transfers (id, direction, peer, requested, granted, created_at, variant) VALUES (?, 'out', ?, ?, ?, ?, ?)",
          transferId,
          toShard,
          requested,
          granted,
          now,
          variant ?? null,
        );
      // Nothing to give changes no stock: no new seq, no mirror publish. But the answer is kept: the
      // receiver records the first answer that reaches it, so a later ask of this id (its alarm's, or a
      // delayed copy) must get the same 0, never units freed since, which the receiver would not add.
      if (granted === 0) {
        record();
        return 0;
      }
      sku.total -= granted;
      ledger.shiftVariant(variant, { total: -granted });
      ledger.touch();
      record();
      ledger.bumpSeq();
      return granted;
    });
  }

  /** Receiver side, step 1: the intent, recorded before the giver is asked. */
  begin(transferId: string, fromShard: number, requested: number, now: number, variant?: string): void {
    this.ledger.sql.exec(
      `INSERT INTO transfers (id, direction, peer, requested, granted, created_at, variant) VALUES (?, 'in', ?, ?, NULL, ?, ?)
       ON CONFLICT (id) DO NOTHING`,
      transferId,
      fromShard,
      requested,
      now,
      variant ?? null,
    );
  }

  /** Receiver side, step 2: adds what the giver granted, once; waiting buyers are served first. */
  complete(transferId: string, granted: number, now: number): void {
    const ledger = this.ledger;
    ledger.run(() => {
      const pending = ledger.sql
        .exec<{ variant: string | null }>(
          "SELECT variant FROM transfers WHERE id = ? AND direction = 'in' AND granted IS NULL",
          transferId,
        )
        .toArray()[0];
      if (!pending) return;
      ledger.sql.exec("UPDATE transfers SET granted = ? WHERE id = ?", granted, transferId);
      if (granted === 0) return;
      ledger.requireRow().total += granted;
      ledger.shiftVariant(pending.variant, { total: granted });
      ledger.touch();
      ledger.bumpSeq();
      this.waitlist.fill(now);
    });
  }

  /** Transfers this shard asked for whose answer it never recorded (the alarm finishes them). */
  pending(): PendingTransfer[] {
    if (!this.ledger.configured) return [];
    return this.ledger.sql
      .exec<{ id: string; peer: number; requested: number; variant: string | null }>(
        "SELECT id, peer, requested, variant FROM transfers WHERE direction = 'in' AND granted IS NULL ORDER BY created_at",
      )
      .toArray()
      .map((row) => ({ id: row.id, from: row.peer, requested: row.requested, variant: row.variant ?? undefined }));
  }
}
