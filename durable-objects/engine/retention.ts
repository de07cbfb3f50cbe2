import { fnv1a } from "../shared/fnv1a";
import type { Ledger } from "./ledger";
import type { SpentDigest } from "./types";

/**
 * What a stock object keeps, and for how long. A finished reservation stays while its purchase token
 * can still be replayed (the edge's sold-out cache learns those tokens from the spent-nonce digest)
 * and until reconciliation found its latest event in D1; then D1 keeps it (src/orders/finished.ts).
 * The rest that no decision needs (quotas at 0, finished transfers, old payment event ids, a decided
 * draw's expired tokens) goes too.
 * So a shard's storage follows its open work, not its history.
 */

/** How long a giver keeps a finished transfer's record, so a receiver's retry gets the same grant. */
const TRANSFER_RECORD_RETENTION_MS = 3600 * 1000;
/** How long payment event ids are remembered (Stripe retries an event for up to 3 days). */
const PAYMENT_EVENT_RETENTION_MS = 7 * 24 * 3600 * 1000;

/** Which tokens can still be replayed, and what reconciliation found in D1. */
interface PruneWindow {
  /** Reconciliation's watermark: every event at or below it is in D1. */
  watermark: number;
  /** A token without a recorded expiry counts as replayable when its reservation was made since. */
  replayableSince: number;
  /** A token with a recorded expiry counts as replayable until it expired before this. */
  expiredBefore: number;
  now: number;
  /** Reservations forgotten per call at most. */
  limit: number;
}

/** What {@link Retention.prune} removed. */
export interface Pruned {
  reservations: number;
  quotas: number;
  transfers: number;
  payments: number;
  /** Tokens of decided draws, expired. */
  drawTokens: number;
  /** Rows the deletes read (what "bounded" is measured in). */
  rowsRead: number;
}

export const NOTHING_PRUNED: Readonly<Pruned> = {
  reservations: 0,
  quotas: 0,
  transfers: 0,
  payments: 0,
  drawTokens: 0,
  rowsRead: 0,
};

export class Retention {
  #rowsRead = 0;

  constructor(private readonly ledger: Ledger) {}

  /**
   * The shard's spent-nonce digest: FNV-1a hashes of the nonces whose token can still be replayed,
   * and the seq it was read at. Each half reads its own index: the tokens it returns. Every token
   * that entered a fair opening's draw (`draw_tokens`) is spent too: it is answered with its entry's
   * result, a hold or a 409 carrying `draw`, never with the edge's bare SOLD_OUT. Such a token was
   * minted before its window closed: those of a window closed a token lifetime ago have expired.
   * A token whose hold stands is spent too (once each), however long ago it expired: it holds a
   * reservation, so it is checked in full (TOKEN_EXPIRED), never answered SOLD_OUT (API.md "Sold out
   * comes first"); read through the held rows' index (`expires_at > 0` names it), not every reservation.
   */
  spentNonces(since: number, expiredBefore: number): SpentDigest {
    const row = this.ledger.row();
    if (!row) return { seq: 0, nonces: [] };
    const nonces = this.ledger.sql
      .exec<{ nonce: string }>(
        `SELECT nonce FROM reservations
          WHERE nonce IS NOT NULL AND token_expires_at IS NOT NULL AND token_expires_at >= ?
         UNION ALL
         SELECT nonce FROM reservations WHERE nonce IS NOT NULL AND token_expires_at IS NULL AND created_at >= ?
         UNION ALL
         SELECT t.nonce FROM draw_tokens t JOIN draw d ON d.opens_at = t.opening
          WHERE d.opens_at + d.window_ms >= ?
         UNION ALL
         SELECT nonce FROM reservations WHERE status = 'held' AND expires_at > 0 AND nonce IS NOT NULL
            AND CASE WHEN token_expires_at IS NULL THEN created_at < ? ELSE token_expires_at < ? END`,
        expiredBefore,
        since,
        since,
        since,
        expiredBefore,
      )
      .toArray()
      .map((r) => fnv1a(r.nonce));
    return { seq: row.seq, nonces };
  }

  /**
   * Forgets, in one transaction, finished reservations (not held) at or below the watermark whose token can no
   * longer be replayed, at most `window.limit`; then quota rows at 0, finished transfers (a giver's
   * record after its retention) and old payment event ids. Open holds, quotas, nonces of tokens not
   * expired and unfinished transfers stay.
   */
  prune(window: PruneWindow): Pruned {
    const ledger = this.ledger;
    if (!ledger.configured) return { ...NOTHING_PRUNED };
    return ledger.run(() => {
      this.#rowsRead = 0;
      const reservations = this.#pruneReservations(window);
      const quotas = this.#delete(ledger.sql.exec("DELETE FROM user_quota WHERE active = 0"));
      const transfers = this.#delete(
        ledger.sql.exec(
          "DELETE FROM transfers WHERE granted IS NOT NULL AND (direction = 'in' OR created_at < ?)",
          window.now - TRANSFER_RECORD_RETENTION_MS,
        ),
      );
      // A decided draw's tokens once its window closed a token lifetime ago: expired, so no retry of
      // one reaches this object (the digest reads none of them either); its entries stay for /draw.
      const drawTokens = this.#delete(
        ledger.sql.exec(
          `DELETE FROM draw_tokens WHERE opening IN (
             SELECT opens_at FROM draw WHERE decided_at IS NOT NULL AND opens_at + window_ms < ?)`,
          window.replayableSince,
        ),
      );
      const payments =
        this.#delete(
          ledger.sql.exec("DELETE FROM payment_events WHERE created_at < ?", window.now - PAYMENT_EVENT_RETENTION_MS),
        ) +
        // A home shard's grants to late payments: as long as the payments' own ids are kept.
        this.#delete(
          ledger.sql.exec("DELETE FROM unit_grants WHERE created_at < ?", window.now - PAYMENT_EVENT_RETENTION_MS),
        ) +
        this.#delete(
          ledger.sql.exec("DELETE FROM unit_refusals WHERE created_at < ?", window.now - PAYMENT_EVENT_RETENTION_MS),
        );
      return { reservations, quotas, transfers, payments, drawTokens, rowsRead: this.#rowsRead };
    });
  }

  /**
   * Found through the token indexes: what is read is what goes, plus the expired rows that stay
   * (open holds, rows changed after the watermark), not the rows of tokens still replayable.
   */
  #pruneReservations({ watermark, replayableSince, expiredBefore, limit }: PruneWindow): number {
    const sql = this.ledger.sql;
    let pruned = this.#delete(
      sql.exec(
        `DELETE FROM reservations WHERE id IN (
           SELECT id FROM reservations
            WHERE nonce IS NOT NULL AND token_expires_at IS NOT NULL AND token_expires_at < ?
              AND seq <= ? AND status != 'held' AND NOT EXISTS (SELECT 1 FROM payment_claims c WHERE c.reservation_id = reservations.id)
            ORDER BY token_expires_at LIMIT ?)`,
        expiredBefore,
        watermark,
        limit,
      ),
    );
    // Tokens whose expiry is not known (rows from before, holds of the draw and of a sharded
    // waitlist): by the token lifetime of now.
    pruned += this.#delete(
      sql.exec(
        `DELETE FROM reservations WHERE id IN (
           SELECT id FROM reservations
            WHERE nonce IS NOT NULL AND token_expires_at IS NULL AND created_at < ? AND seq <= ? AND status != 'held' AND NOT EXISTS (SELECT 1 FROM payment_claims c WHERE c.reservation_id = reservations.id)
            ORDER BY created_at LIMIT ?)`,
        replayableSince,
        watermark,
        Math.max(0, limit - pruned),
      ),
    );
    // Rows put back for a late payment (no nonce: no token to replay), through the nonce index.
    pruned += this.#delete(
      sql.exec(
        `DELETE FROM reservations WHERE id IN (
           SELECT id FROM reservations WHERE nonce IS NULL AND seq <= ? AND status != 'held' AND NOT EXISTS (SELECT 1 FROM payment_claims c WHERE c.reservation_id = reservations.id) LIMIT ?)`,
        watermark,
        Math.max(0, limit - pruned),
      ),
    );
    return pruned;
  }

  /** Runs a delete to its end; counts the rows it read, returns the rows it removed. */
  #delete(cursor: SqlStorageCursor<Record<string, SqlStorageValue>>): number {
    cursor.toArray();
    this.#rowsRead += cursor.rowsRead;
    return cursor.rowsWritten;
  }
}
