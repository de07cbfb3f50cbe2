/**
 * The tables of one stock object (one SKU shard), in the object's own SQLite database, made and
 * changed by numbered steps, the way D1's migrations are: {@link migrate} applies each step once,
 * in order, and records the last one in `schema_version`, all in one transaction. Steps are only
 * ever appended. Step 1 is the schema as it was before steps were numbered, written so that it
 * brings an object of any earlier shape up to it (each statement idempotent), since such objects
 * carry no version.
 *
 * The CHECK constraints are the last line of defence: a bug that would oversell or drive a
 * counter negative throws inside the transaction, which then rolls back whole.
 */

/** Step 1, part 1: the tables and the changes made to them in place over time, in that order. */
const BASELINE: readonly string[] = [
  `CREATE TABLE IF NOT EXISTS sku (
     id             INTEGER PRIMARY KEY CHECK (id = 1),
     sku            TEXT    NOT NULL,
     shard          INTEGER NOT NULL,
     shards         INTEGER NOT NULL,
     name           TEXT    NOT NULL,
     status         TEXT    NOT NULL CHECK (status IN ('on_sale', 'paused')),
     per_user_limit INTEGER NOT NULL CHECK (per_user_limit >= 1),
     hold_seconds   INTEGER NOT NULL CHECK (hold_seconds >= 1),
     starts_at      INTEGER,
     ends_at        INTEGER,
     total          INTEGER NOT NULL CHECK (total >= 0),
     held           INTEGER NOT NULL DEFAULT 0 CHECK (held >= 0),
     sold           INTEGER NOT NULL DEFAULT 0 CHECK (sold >= 0),
     seq            INTEGER NOT NULL DEFAULT 0,
     CHECK (held + sold <= total)
   )`,
  `CREATE TABLE IF NOT EXISTS reservations (
     id         TEXT    PRIMARY KEY,
     user_id    TEXT    NOT NULL,
     quantity   INTEGER NOT NULL CHECK (quantity >= 1),
     status     TEXT    NOT NULL,
     nonce      TEXT    UNIQUE,
     created_at INTEGER NOT NULL,
     expires_at INTEGER NOT NULL,
     updated_at INTEGER NOT NULL,
     seq        INTEGER NOT NULL DEFAULT 0
   )`,
  // Only live holds are indexed by expiry: the alarm and the lazy expiry read the head of it.
  `CREATE INDEX IF NOT EXISTS reservations_held_by_expiry ON reservations (expires_at) WHERE status = 'held'`,
  // The seq of each reservation's latest event: reconciliation reads what changed since a watermark.
  `CREATE INDEX IF NOT EXISTS reservations_by_seq ON reservations (seq)`,
  // A user's active quantity (held + sold), the per-user limit's counter.
  `CREATE TABLE IF NOT EXISTS user_quota (
     user_id TEXT    PRIMARY KEY,
     active  INTEGER NOT NULL CHECK (active >= 0)
   )`,
  // Payment events applied before `payment_events` existed (emptied into it below).
  `CREATE TABLE IF NOT EXISTS payments (
     event_id       TEXT PRIMARY KEY,
     reservation_id TEXT NOT NULL,
     outcome        TEXT NOT NULL
   )`,
  // Buyers waiting for released units, served first-fit in FIFO order (position).
  `CREATE TABLE IF NOT EXISTS waitlist (
     position   INTEGER PRIMARY KEY AUTOINCREMENT,
     id         TEXT    NOT NULL UNIQUE,
     user_id    TEXT    NOT NULL UNIQUE,
     quantity   INTEGER NOT NULL CHECK (quantity >= 1),
     created_at INTEGER NOT NULL
   )`,
  // Stock moved between shards of one SKU. Each side records the transfer id, so a retried
  // transfer moves stock once: 'out' rows on the giver, 'in' rows (granted NULL while pending)
  // on the receiver, written before it asks, so the alarm can finish an interrupted transfer.
  `CREATE TABLE IF NOT EXISTS transfers (
     id         TEXT    PRIMARY KEY,
     direction  TEXT    NOT NULL CHECK (direction IN ('in', 'out')),
     peer       INTEGER NOT NULL,
     requested  INTEGER NOT NULL CHECK (requested >= 1),
     granted    INTEGER,
     created_at INTEGER NOT NULL
   )`,
  // Transactional outbox (first form, one row per event; replaced by `outbox_batch` below): events
  // written in the same transaction as the change they describe.
  `CREATE TABLE IF NOT EXISTS outbox (
     seq   INTEGER PRIMARY KEY,
     event TEXT    NOT NULL
   )`,
  // Shard 0 only: the SKU's total over all shards as the operator last set it. PUTs change the
  // SKU's total by the difference from this record, never from a sum of live shards.
  `CREATE TABLE IF NOT EXISTS sku_target (
     id    INTEGER PRIMARY KEY CHECK (id = 1),
     total INTEGER NOT NULL CHECK (total >= 0)
   )`,
  // Whether the SKU's waitlist (kept on shard 0 of a sharded SKU) has buyers: while it does, this
  // shard's units are for the waitlist, not for newcomers. Set by shard 0 on every shard.
  `CREATE TABLE IF NOT EXISTS line_ahead (
     id INTEGER PRIMARY KEY CHECK (id = 1),
     on_ INTEGER NOT NULL CHECK (on_ IN (0, 1))
   )`,
  // The SKU's price (minor units, NULL: no price) and currency; no row: no price, "usd".
  `CREATE TABLE IF NOT EXISTS sku_pricing (
     id       INTEGER PRIMARY KEY CHECK (id = 1),
     price    INTEGER CHECK (price IS NULL OR price >= 0),
     currency TEXT    NOT NULL
   )`,
  // Payment events already applied, with the status they left and their outcome, so each takes
  // effect once and a replay gets the same answer (invariant 6). Replaces `payments`, whose rows
  // are carried over and then removed.
  `CREATE TABLE IF NOT EXISTS payment_events (
     event_id       TEXT    PRIMARY KEY,
     reservation_id TEXT    NOT NULL,
     status         TEXT    NOT NULL,
     outcome        TEXT    NOT NULL CHECK (outcome IN ('applied', 'refund_required')),
     created_at     INTEGER NOT NULL
   )`,
  `INSERT OR IGNORE INTO payment_events (event_id, reservation_id, status, outcome, created_at)
     SELECT event_id, reservation_id, outcome,
            CASE outcome WHEN 'refund_required' THEN 'refund_required' ELSE 'applied' END, 0
       FROM payments`,
  `DELETE FROM payments`,
  // Payment events by outcome, counted in the transaction that decided them.
  `CREATE TABLE IF NOT EXISTS payment_totals (
     outcome TEXT    PRIMARY KEY,
     count   INTEGER NOT NULL
   )`,
  // (Here the index `reservations_nonce_by_time` was made: replaced by the two token indexes of
  // COLUMN_STATEMENTS, which drop it.)
  // Filling the waitlist finds the first entry that fits by quantity, not by reading the waitlist.
  `CREATE INDEX IF NOT EXISTS waitlist_by_quantity ON waitlist (quantity, position)`,
  // Payment event ids are forgotten after their retention, oldest first.
  `CREATE INDEX IF NOT EXISTS payment_events_by_time ON payment_events (created_at)`,
  // Quotas back at 0 are forgotten at every reconciliation visit: found without reading the buyers'.
  `CREATE INDEX IF NOT EXISTS user_quota_idle ON user_quota (user_id) WHERE active = 0`,
  // Nothing reads reservations by user (quotas are in `user_quota`): the index only cost every hold
  // one more b-tree insert. Objects from before drop it.
  `DROP INDEX IF EXISTS reservations_by_user`,
  // The outbox, a row per transaction: its events as one JSON array of [seq, event], written as the
  // engine already serialized it (one insert per transaction, not one row per event re-parsed from
  // JSON by SQLite) and deleted once the queue has all of them. Rows of the per-event table
  // `outbox` (objects from before) move over as one row.
  `CREATE TABLE IF NOT EXISTS outbox_batch (
     first_seq INTEGER PRIMARY KEY,
     last_seq  INTEGER NOT NULL CHECK (last_seq >= first_seq),
     events    TEXT    NOT NULL
   )`,
  `INSERT OR IGNORE INTO outbox_batch (first_seq, last_seq, events)
     SELECT MIN(seq), MAX(seq), json_group_array(json_array(seq, json(event)))
       FROM (SELECT seq, event FROM outbox ORDER BY seq) HAVING COUNT(*) > 0`,
  `DROP TABLE IF EXISTS outbox`,
  // The outbox as queue messages' text: each row is the JSON of up to MAX_EVENTS_PER_MESSAGE
  // events of one transaction, comma-separated (the inside of a JSON array), so a flush joins rows
  // into message bodies as they are, with nothing parsed or serialized again. `count`: its events.
  // Rows of `outbox_batch` (objects from before) move over, split into rows of 32 events at most.
  `CREATE TABLE IF NOT EXISTS outbox_events (
     first_seq INTEGER PRIMARY KEY,
     last_seq  INTEGER NOT NULL CHECK (last_seq >= first_seq),
     count     INTEGER NOT NULL CHECK (count BETWEEN 1 AND 32),
     events    TEXT    NOT NULL
   )`,
  `INSERT OR IGNORE INTO outbox_events (first_seq, last_seq, count, events)
     SELECT MIN(e.value ->> 0), MAX(e.value ->> 0), COUNT(*), group_concat(e.value -> 1, ',' ORDER BY e.key)
       FROM outbox_batch b, json_each(b.events) e
      GROUP BY b.first_seq, e.key / 32`,
  `DROP TABLE IF EXISTS outbox_batch`,
  // The SKU's configuration as a unit (durable-objects/stock/sku-change.ts): `version`, the settings
  // revision (shard 0's seq) this shard's settings came from (a follower applies only newer ones); `fence`, the resize that
  // has staged this shard (no new hold until it commits or is lifted); `plan` and `phase`, on
  // shard 0, the resize it runs, so its alarm finishes or undoes one left half done.
  `CREATE TABLE IF NOT EXISTS config (
     id      INTEGER PRIMARY KEY CHECK (id = 1),
     version INTEGER NOT NULL DEFAULT 0,
     fence   TEXT,
     plan    TEXT,
     phase   TEXT CHECK (phase IS NULL OR phase IN ('preparing', 'committing'))
   )`,
  `INSERT OR IGNORE INTO config (id, version) VALUES (1, 0)`,
  // The SKU's waitlist as shard 0 last told this shard (replaces `line_ahead`): 0 nobody waits; 1 buyers
  // wait and the units are theirs (newcomers are refused); 2 buyers wait but want more than the SKU
  // has, so newcomers may buy what is there, and freed units are still offered to the waitlist.
  `CREATE TABLE IF NOT EXISTS line_state (
     id   INTEGER PRIMARY KEY CHECK (id = 1),
     mode INTEGER NOT NULL CHECK (mode IN (0, 1, 2))
   )`,
  `INSERT OR IGNORE INTO line_state (id, mode) SELECT 1, on_ FROM line_ahead WHERE id = 1`,
];

/**
 * Step 1, part 2: columns added to tables after they were made. SQLite has no `ADD COLUMN IF NOT
 * EXISTS`, so each is added only where `pragma_table_info` lacks it.
 */
const COLUMNS: readonly { table: string; column: string; type: string }[] = [
  // Reservations this shard ever created, kept in the row every hold updates (finished rows are
  // pruned, so the table cannot count them). An object from before counts its rows once.
  { table: "sku", column: "created", type: "INTEGER NOT NULL DEFAULT 0" },
  // The purchase token's own expiry (epoch ms): its reservation is kept until then, whatever the
  // token lifetime is today. NULL: not known (rows from before, holds of the waitlist and the draw).
  { table: "reservations", column: "token_expires_at", type: "INTEGER" },
  // What each payment event said, so the same id saying something else is refused. NULL on rows
  // from before: only their reservation is compared.
  { table: "payment_events", column: "type", type: "TEXT" },
  { table: "payment_events", column: "amount", type: "INTEGER" },
  { table: "payment_events", column: "currency", type: "TEXT" },
];

/** Step 1, part 3: what reads the columns above. */
const COLUMN_STATEMENTS: readonly string[] = [
  // Pruning and the spent-nonce digest read tokens by their own expiry: a prune visit reads what it
  // deletes, the digest the tokens not expired.
  `CREATE INDEX IF NOT EXISTS reservations_token_expiry ON reservations (token_expires_at)
     WHERE nonce IS NOT NULL AND token_expires_at IS NOT NULL`,
  // Nonces whose token expiry is not known, by the time they were taken (the rule of before). A hold
  // goes into one of the two indexes, not both: the index they replace is dropped.
  `CREATE INDEX IF NOT EXISTS reservations_untimed_nonce_by_time ON reservations (created_at)
     WHERE nonce IS NOT NULL AND token_expires_at IS NULL`,
  `DROP INDEX IF EXISTS reservations_nonce_by_time`,
];

/** Step 1, part 4: the fair opening's draw (engine/opening-draw.ts). */
const DRAW: readonly string[] = [
  `CREATE TABLE IF NOT EXISTS draw (
     id         INTEGER PRIMARY KEY CHECK (id = 1),
     window_ms  INTEGER NOT NULL CHECK (window_ms >= 1),
     opens_at   INTEGER NOT NULL,
     seed       TEXT,
     seed_hash  TEXT,
     closed_at  INTEGER,
     decided_at INTEGER,
     told       INTEGER NOT NULL DEFAULT 0,
     entrants   INTEGER
   )`,
  `CREATE TABLE IF NOT EXISTS draw_entrants (
     user_id    TEXT    PRIMARY KEY,
     entry_id   TEXT    UNIQUE,
     nonce      TEXT    NOT NULL,
     quantity   INTEGER NOT NULL CHECK (quantity >= 1),
     home       INTEGER NOT NULL,
     entered_at INTEGER NOT NULL,
     position   INTEGER,
     code       TEXT,
     answer     TEXT
   )`,
  `CREATE INDEX IF NOT EXISTS draw_entrants_by_position ON draw_entrants (position) WHERE position IS NOT NULL`,
  `CREATE TABLE IF NOT EXISTS draw_tokens (
     nonce   TEXT PRIMARY KEY,
     user_id TEXT NOT NULL
   )`,
];

function baseline(sql: SqlStorage): void {
  for (const statement of BASELINE) sql.exec(statement);
  for (const { table, column, type } of COLUMNS) {
    const present = sql.exec("SELECT 1 FROM pragma_table_info(?) WHERE name = ?", table, column).toArray();
    if (present.length > 0) continue;
    sql.exec(`ALTER TABLE ${table} ADD COLUMN ${column} ${type}`);
    // No row was pruned before the count was kept: the largest rowid is the count.
    if (column === "created") sql.exec("UPDATE sku SET created = (SELECT coalesce(MAX(rowid), 0) FROM reservations)");
  }
  for (const statement of COLUMN_STATEMENTS) sql.exec(statement);
  for (const statement of DRAW) sql.exec(statement);
}

/** The steps, numbered from 1 by their place here. Append only; never change a step once deployed. */
const STEPS: readonly ((sql: SqlStorage) => void)[] = [
  baseline,
  // 2. One word for one concept: the state of the SKU's waitlist (it was "the line").
  (sql) => {
    sql.exec(`CREATE TABLE IF NOT EXISTS waitlist_state (
       id   INTEGER PRIMARY KEY CHECK (id = 1),
       mode INTEGER NOT NULL CHECK (mode IN (0, 1, 2))
     )`);
    sql.exec("INSERT OR IGNORE INTO waitlist_state (id, mode) SELECT id, mode FROM line_state");
    sql.exec("DROP TABLE line_state");
  },
  // 3. Why a payment was refund_required, so a replay answers it again (GET /admin/payments lists it).
  // Checked first: an object without `schema_version` (from before the steps) runs every step again.
  (sql) => {
    const present = sql.exec("SELECT 1 FROM pragma_table_info('payment_events') WHERE name = 'reason'").toArray();
    if (present.length === 0) sql.exec("ALTER TABLE payment_events ADD COLUMN reason TEXT");
  },
  // 4. `archived` (DELETE /admin/skus/:sku) is a sale status. SQLite cannot widen a CHECK in place:
  // the one-row table is made anew with it and its row copied over. Checked first: an object without
  // `schema_version` (from before the steps) runs every step again.
  (sql) => {
    const table = sql.exec<{ sql: string }>("SELECT sql FROM sqlite_master WHERE name = 'sku'").toArray()[0];
    if (table?.sql.includes("'archived'")) return;
    sql.exec(`CREATE TABLE sku_next (
       id             INTEGER PRIMARY KEY CHECK (id = 1),
       sku            TEXT    NOT NULL,
       shard          INTEGER NOT NULL,
       shards         INTEGER NOT NULL,
       name           TEXT    NOT NULL,
       status         TEXT    NOT NULL CHECK (status IN ('on_sale', 'paused', 'archived')),
       per_user_limit INTEGER NOT NULL CHECK (per_user_limit >= 1),
       hold_seconds   INTEGER NOT NULL CHECK (hold_seconds >= 1),
       starts_at      INTEGER,
       ends_at        INTEGER,
       total          INTEGER NOT NULL CHECK (total >= 0),
       held           INTEGER NOT NULL DEFAULT 0 CHECK (held >= 0),
       sold           INTEGER NOT NULL DEFAULT 0 CHECK (sold >= 0),
       seq            INTEGER NOT NULL DEFAULT 0,
       created        INTEGER NOT NULL DEFAULT 0,
       CHECK (held + sold <= total)
     )`);
    const columns =
      "id, sku, shard, shards, name, status, per_user_limit, hold_seconds, starts_at, ends_at, total, held, sold, seq, created";
    sql.exec(`INSERT INTO sku_next (${columns}) SELECT ${columns} FROM sku`);
    sql.exec("DROP TABLE sku");
    sql.exec("ALTER TABLE sku_next RENAME TO sku");
  },
  // 5. A late payment decided on the buyer's home shard (engine/payments.ts). On the reservation's
  // shard, the payment waiting for the home shard's answer (one per reservation), recorded before it
  // asks, so the alarm finishes it; on the home shard, the units it granted, once per reservation.
  (sql) => {
    sql.exec(`CREATE TABLE IF NOT EXISTS payment_claims (
       reservation_id TEXT    PRIMARY KEY,
       event_id       TEXT    NOT NULL,
       type           TEXT    NOT NULL,
       amount         INTEGER,
       currency       TEXT,
       user_id        TEXT    NOT NULL,
       quantity       INTEGER NOT NULL CHECK (quantity >= 1),
       created_at     INTEGER NOT NULL
     )`);
    sql.exec(`CREATE TABLE IF NOT EXISTS unit_grants (
       reservation_id TEXT    PRIMARY KEY,
       user_id        TEXT    NOT NULL,
       quantity       INTEGER NOT NULL CHECK (quantity >= 1),
       created_at     INTEGER NOT NULL
     )`);
    sql.exec("CREATE INDEX IF NOT EXISTS unit_grants_by_time ON unit_grants (created_at)");
  },
  // 6. Early access (engine/access.ts): the SKU's tiers as one JSON row on every shard, and on shard
  // 0 the access codes, by SHA-256 only, each with the first user who took it. Idempotent, so it
  // may be renumbered at a merge with another branch's step.
  (sql) => {
    sql.exec(`CREATE TABLE IF NOT EXISTS sku_access (
       id    INTEGER PRIMARY KEY CHECK (id = 1),
       tiers TEXT    NOT NULL
     )`);
    sql.exec(`CREATE TABLE IF NOT EXISTS access_codes (
       hash     TEXT    PRIMARY KEY,
       tier     TEXT    NOT NULL,
       taken_by TEXT,
       taken_at INTEGER
     ) WITHOUT ROWID`);
  },
  // 7. A draw per opening (early access tiers' starts and the public start; engine/opening-draw.ts):
  // one draw row per opening time with its own seed, entrants and tokens keyed by (opening, user);
  // an entry keeps the tier that admitted it (decided later, it is judged by that tier again).
  // The one-row tables are made anew, their rows copied under the one opening there was. Checked
  // first, so it may be renumbered at a merge with another branch's step.
  (sql) => {
    const present = sql.exec("SELECT 1 FROM pragma_table_info('draw_entrants') WHERE name = 'opening'").toArray();
    if (present.length > 0) return;
    sql.exec(`CREATE TABLE draw_next (
       opens_at   INTEGER PRIMARY KEY,
       window_ms  INTEGER NOT NULL CHECK (window_ms >= 1),
       seed       TEXT,
       seed_hash  TEXT,
       closed_at  INTEGER,
       decided_at INTEGER,
       told       INTEGER NOT NULL DEFAULT 0,
       entrants   INTEGER
     )`);
    sql.exec(`INSERT INTO draw_next (opens_at, window_ms, seed, seed_hash, closed_at, decided_at, told, entrants)
       SELECT opens_at, window_ms, seed, seed_hash, closed_at, decided_at, told, entrants FROM draw`);
    sql.exec(`CREATE TABLE draw_entrants_next (
       opening    INTEGER NOT NULL,
       user_id    TEXT    NOT NULL,
       entry_id   TEXT,
       nonce      TEXT    NOT NULL,
       quantity   INTEGER NOT NULL CHECK (quantity >= 1),
       home       INTEGER NOT NULL,
       entered_at INTEGER NOT NULL,
       position   INTEGER,
       code       TEXT,
       answer     TEXT,
       tier       TEXT,
       PRIMARY KEY (opening, user_id)
     )`);
    const opening = "coalesce((SELECT opens_at FROM draw), 0)";
    sql.exec(`INSERT INTO draw_entrants_next
       (opening, user_id, entry_id, nonce, quantity, home, entered_at, position, code, answer)
       SELECT ${opening}, user_id, entry_id, nonce, quantity, home, entered_at, position, code, answer
       FROM draw_entrants`);
    sql.exec(`CREATE TABLE draw_tokens_next (
       nonce   TEXT    PRIMARY KEY,
       opening INTEGER NOT NULL,
       user_id TEXT    NOT NULL
     )`);
    sql.exec(
      `INSERT INTO draw_tokens_next (nonce, opening, user_id) SELECT nonce, ${opening}, user_id FROM draw_tokens`,
    );
    for (const table of ["draw", "draw_entrants", "draw_tokens"]) {
      sql.exec(`DROP TABLE ${table}`);
      sql.exec(`ALTER TABLE ${table}_next RENAME TO ${table}`);
    }
    sql.exec("CREATE INDEX draw_entrants_by_position ON draw_entrants (opening, position) WHERE position IS NOT NULL");
    sql.exec("CREATE INDEX draw_entrants_by_nonce ON draw_entrants (nonce)");
  },
  // 8. A test sale (API.md v1.4 "Test sales"): 1 on a SKU created with `"test": true`, whose events,
  // orders and payments say so. Kept with the price, as it is read with it for every event. Checked
  // first, so it may be renumbered at a merge with another branch's step.
  (sql) => {
    const present = sql.exec("SELECT 1 FROM pragma_table_info('sku_pricing') WHERE name = 'test'").toArray();
    if (present.length === 0) sql.exec("ALTER TABLE sku_pricing ADD COLUMN test INTEGER NOT NULL DEFAULT 0");
  },
  // 9. The most shards the SKU has ever had (shard 0's answer is the truth): a cut leaves shards that
  // keep reservations a late payment or a read still reaches (src/catalog/sku-catalog.ts). Checked
  // first, so it may be renumbered at a merge with another branch's step.
  (sql) => {
    const present = sql.exec("SELECT 1 FROM pragma_table_info('sku') WHERE name = 'shards_ever'").toArray();
    if (present.length === 0) sql.exec("ALTER TABLE sku ADD COLUMN shards_ever INTEGER NOT NULL DEFAULT 0");
    sql.exec("UPDATE sku SET shards_ever = MAX(shards_ever, shards)");
  },
  // 10. Sizes (API.md v1.4 "Sizes (variants)"): this shard's stock per variant, whose sums are the
  // `sku` row's counts; the variant a reservation and a transfer took; shard 0's record of each
  // variant's total as the operator last set it (the base of a later PUT, as `sku_target`).
  (sql) => {
    sql.exec(`CREATE TABLE IF NOT EXISTS variant_stock (
       id       TEXT    PRIMARY KEY,
       name     TEXT    NOT NULL,
       position INTEGER NOT NULL,
       total    INTEGER NOT NULL CHECK (total >= 0),
       held     INTEGER NOT NULL DEFAULT 0 CHECK (held >= 0),
       sold     INTEGER NOT NULL DEFAULT 0 CHECK (sold >= 0),
       CHECK (held + sold <= total)
     )`);
    sql.exec("CREATE TABLE IF NOT EXISTS variant_target (id TEXT PRIMARY KEY, total INTEGER NOT NULL)");
    for (const table of ["reservations", "transfers"]) {
      const present = sql.exec(`SELECT 1 FROM pragma_table_info('${table}') WHERE name = 'variant'`).toArray();
      if (present.length === 0) sql.exec(`ALTER TABLE ${table} ADD COLUMN variant TEXT`);
    }
  },
  // 11. Sizes in the line and the draw: an entry's variants in order of preference (a JSON array;
  // NULL on a SKU without variants).
  (sql) => {
    for (const table of ["waitlist", "draw_entrants"]) {
      const present = sql.exec(`SELECT 1 FROM pragma_table_info('${table}') WHERE name = 'variants'`).toArray();
      if (present.length === 0) sql.exec(`ALTER TABLE ${table} ADD COLUMN variants TEXT`);
    }
  },
  // 12. The verifiable sale: on shard 0, each configuration entry of the SKU's log, written in the
  // change's own transaction and sent by the outbox sender (engine/outbox.ts). `figures` (JSON) is
  // what the entry states; `until`, when every shard had the change (NULL while its plan runs).
  (sql) => {
    sql.exec(`CREATE TABLE IF NOT EXISTS log_outbox (
       id      TEXT    PRIMARY KEY,
       type    TEXT    NOT NULL CHECK (type IN ('config', 'archive')),
       time    INTEGER NOT NULL,
       until   INTEGER,
       figures TEXT    NOT NULL
     )`);
  },
  // 13. Sizes: the list a token's hold of a size was asked with (a JSON array), so that a replay of
  // the token with another list is refused (API.md v1.4); a row only for such a hold, gone with it.
  (sql) => {
    sql.exec(`CREATE TABLE IF NOT EXISTS hold_lists (
       reservation_id TEXT PRIMARY KEY,
       listed         TEXT NOT NULL
     ) WITHOUT ROWID`);
    sql.exec(`CREATE TRIGGER IF NOT EXISTS hold_lists_gone AFTER DELETE ON reservations
       BEGIN DELETE FROM hold_lists WHERE reservation_id = OLD.id; END`);
  },
  // 14. The verifiable sale: each payment answered `refund_required` that changed no reservation, its
  // SKU log's `payment` entry waiting for the outbox sender (engine/payments.ts writes it in the
  // decision's transaction). `id`: `payment:<event id>`, the log's dedupe key; `figures` (JSON):
  // what the entry states, with the buyer's id the log turns into their commitment.
  (sql) => {
    sql.exec(`CREATE TABLE IF NOT EXISTS log_payments (
       id      TEXT    PRIMARY KEY,
       time    INTEGER NOT NULL,
       figures TEXT    NOT NULL
     ) WITHOUT ROWID`);
  },
  // 15. A late payment's refusal on the buyer's home shard, kept once per reservation as a grant is
  // (engine/payments.ts): a claim asked twice at once gets one answer, not a refusal and then a unit.
  (sql) => {
    sql.exec(`CREATE TABLE IF NOT EXISTS unit_refusals (
       reservation_id TEXT    PRIMARY KEY,
       code           TEXT    NOT NULL CHECK (code IN ('LIMIT_EXCEEDED', 'SOLD_OUT')),
       created_at     INTEGER NOT NULL
     ) WITHOUT ROWID`);
    sql.exec("CREATE INDEX IF NOT EXISTS unit_refusals_by_time ON unit_refusals (created_at)");
  },
  // 16. Whether a draw names its entrants by their salted `user` in the sale log (engine/opening-draw.ts),
  // fixed when shard 0 makes it; 0 for one made before, which keeps its ids of `<sku>:<userId>`.
  (sql) => {
    const present = sql.exec("SELECT 1 FROM pragma_table_info('draw') WHERE name = 'salted'").toArray();
    if (present.length === 0) sql.exec("ALTER TABLE draw ADD COLUMN salted INTEGER NOT NULL DEFAULT 0");
  },
];

/** The number of the last step: what a migrated object's `schema_version` reads. */
export const SCHEMA_VERSION = STEPS.length;

/**
 * Applies the steps an object lacks, in order, and records the last one; returns how many ran. Runs
 * in the caller's transaction (a configure's, or the object's first start under newer code), so a
 * failed step leaves the schema as it was.
 */
export function migrate(sql: SqlStorage): number {
  sql.exec(
    "CREATE TABLE IF NOT EXISTS schema_version (id INTEGER PRIMARY KEY CHECK (id = 1), version INTEGER NOT NULL)",
  );
  const current = sql.exec<{ version: number }>("SELECT version FROM schema_version WHERE id = 1").toArray()[0];
  const from = current?.version ?? 0;
  for (let step = from; step < STEPS.length; step++) STEPS[step]?.(sql);
  if (from < STEPS.length) {
    sql.exec(
      "INSERT INTO schema_version (id, version) VALUES (1, ?) ON CONFLICT (id) DO UPDATE SET version = excluded.version",
      STEPS.length,
    );
  }
  return STEPS.length - from;
}

/** Whether the object's schema is up to date (one row read: what a start of a migrated object costs). */
export function schemaCurrent(sql: SqlStorage): boolean {
  const table = sql.exec("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'schema_version'").toArray();
  if (table.length === 0) return false;
  const row = sql.exec<{ version: number }>("SELECT version FROM schema_version WHERE id = 1").toArray()[0];
  return row?.version === STEPS.length;
}
