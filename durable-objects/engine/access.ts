import type { Ledger } from "./ledger";
import type { AccessTier, SkuRow } from "./types";

/**
 * Early access (API.md "Early access"): the SKU's tiers, kept on every shard so a buyer's home shard
 * can judge a tier's opening itself, and the access codes, kept on shard 0 only.
 *
 * Why codes live in shard 0's SQLite rather than D1: "first user wins" must be atomic, and a stock
 * object decides one request at a time, so a lookup and a conditional write in one `transactionSync`
 * is atomic without a lock, and the token route already calls shard 0 (a code costs no extra round
 * trip: `SkuStock.tokenState` answers the state and the code's verdict in one call). Only SHA-256
 * hashes are stored: codes have 80 random bits, so a hash without salt cannot be reversed.
 */
/**
 * The opened tier whose JWT claim admits a shopper at `now`, if any: the claim `name` equal to the
 * tier's `value`, or an array of strings holding it. The edge admits by it before any code, and shard
 * 0 asks it before taking a code: a code is taken only by a shopper nothing else admits.
 */
export function claimTier(
  tiers: readonly AccessTier[] | undefined,
  claims: Readonly<Record<string, unknown>>,
  now: number,
): AccessTier | undefined {
  return tiers?.find((t) => {
    if (!t.claim || t.startsAt > now) return false;
    const value = claims[t.claim.name];
    return value === t.claim.value || (Array.isArray(value) && value.includes(t.claim.value));
  });
}

/** Whether two tiers admit alike: the same name and the same claim (a draw's entries name their tier). */
export function sameAdmission(a: AccessTier, b: AccessTier): boolean {
  return a.name === b.name && a.claim?.name === b.claim?.name && a.claim?.value === b.claim?.value;
}

export class Access {
  readonly #ledger: Ledger;
  /** The tiers as stored (undefined: not read yet). Small: at most 8. */
  #tiers: AccessTier[] | undefined;

  constructor(ledger: Ledger) {
    this.#ledger = ledger;
  }

  /** The SKU's tiers, earliest first ([] without any, or before the first configure). */
  tiers(): AccessTier[] {
    if (this.#tiers) return this.#tiers;
    if (!this.#ledger.configured) return [];
    const row = this.#ledger.sql.exec<{ tiers: string }>("SELECT tiers FROM sku_access WHERE id = 1").toArray()[0];
    this.#tiers = row ? (JSON.parse(row.tiers) as AccessTier[]) : [];
    return this.#tiers;
  }

  /**
   * Replaces the tiers, in the caller's (configure's) transaction. A tier left out takes its codes
   * with it: codes are keyed by tier name, so a later tier of the same name would else revive codes
   * handed out (or leaked) for the removed one.
   */
  set(tiers: readonly AccessTier[]): void {
    const sorted = [...tiers].sort((a, b) => a.startsAt - b.startsAt);
    const names = sorted.map((t) => t.name);
    if (this.tiers().some((t) => !names.includes(t.name))) {
      this.#ledger.sql.exec(
        "DELETE FROM access_codes WHERE tier NOT IN (SELECT value FROM json_each(?))",
        JSON.stringify(names),
      );
    }
    this.#ledger.sql.exec(
      "INSERT INTO sku_access (id, tiers) VALUES (1, ?) ON CONFLICT (id) DO UPDATE SET tiers = excluded.tiers",
      JSON.stringify(sorted),
    );
    this.#tiers = sorted;
  }

  /** Reads the tiers again (after a rolled-back configure). */
  reload(): void {
    this.#tiers = undefined;
  }

  /**
   * Whether a reservation before the public start is admitted: the token names a tier that exists
   * and has opened at `now`, and the sale is on and not over. Never true for a token without a tier.
   */
  admits(tier: string | undefined, row: SkuRow, now: number): boolean {
    if (tier === undefined || row.status !== "on_sale") return false;
    if (row.ends_at !== null && now >= row.ends_at) return false;
    return this.tiers().some((t) => t.name === tier && t.startsAt <= now);
  }

  /**
   * Shard 0: stores codes of `tier` by their hashes, in one statement. False: no such tier (a PUT
   * removed it meanwhile).
   */
  addCodes(tier: string, hashes: readonly string[]): boolean {
    const ledger = this.#ledger;
    if (!ledger.configured) return false;
    return ledger.run(() => {
      if (!this.tiers().some((t) => t.name === tier)) return false;
      ledger.sql.exec(
        "INSERT OR IGNORE INTO access_codes (hash, tier) SELECT value, ? FROM json_each(?)",
        tier,
        JSON.stringify(hashes),
      );
      return true;
    });
  }

  /**
   * Shard 0: the tier a code admits `userId` to at `now`, taking the code for them if nobody has,
   * else null: unknown, of a tier that has not opened (or was removed), or taken by another user.
   * One indexed read, and one write the first time; a user presenting their own code again is
   * admitted again (a new token after the first lapsed).
   */
  redeem(hash: string, userId: string, now: number): string | null {
    return this.redeemMany([{ hash, userId }], now)[0] ?? null;
  }

  /**
   * {@link redeem} for many presentations in arrival order, in one transaction: a code taken by an
   * earlier one of them is taken for the later ones. One commit for the lot, not one per code: the
   * commit, not the lookup, is what a code costs the object (bench point `tokens_code`). An ask with
   * `take: false` is judged alike but takes nothing (its request gets no token: the SKU has no unit).
   */
  redeemMany(asks: readonly { hash: string; userId: string; take?: boolean }[], now: number): (string | null)[] {
    const ledger = this.#ledger;
    if (!ledger.configured) return asks.map(() => null);
    // The reads and the writes in one transaction, and one synchronous turn of the object: no other
    // request runs between them, so of users presenting one code at once exactly one takes it.
    return ledger.run(() => {
      const taken = new Map<string, string>();
      return asks.map(({ hash, userId, take = true }) => {
        const row = ledger.sql
          .exec<{ tier: string; taken_by: string | null }>(
            "SELECT tier, taken_by FROM access_codes WHERE hash = ?",
            hash,
          )
          .toArray()[0];
        if (!row) return null;
        const holder = taken.get(hash) ?? row.taken_by;
        if (holder !== null && holder !== userId) return null;
        if (!this.tiers().some((t) => t.name === row.tier && t.startsAt <= now)) return null;
        if (holder === null && take) {
          ledger.sql.exec("UPDATE access_codes SET taken_by = ?, taken_at = ? WHERE hash = ?", userId, now, hash);
          taken.set(hash, userId);
        }
        return row.tier;
      });
    });
  }

  /** Codes of each tier, and how many are taken (for the admin and the tests). */
  codeCounts(): { tier: string; codes: number; taken: number }[] {
    if (!this.#ledger.configured) return [];
    return this.#ledger.sql
      .exec<{ tier: string; codes: number; taken: number }>(
        "SELECT tier, COUNT(*) AS codes, COUNT(taken_by) AS taken FROM access_codes GROUP BY tier ORDER BY tier",
      )
      .toArray();
  }
}
