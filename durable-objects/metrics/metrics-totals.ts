import { DurableObject } from "cloudflare:workers";

/** One sample line: the series name (a metric, or a histogram's `_bucket`/`_sum`/`_count`), labels rendered, value. */
export interface Sample {
  name: string;
  labels: string;
  value: number;
}

/**
 * The totals of the Worker's counters and histograms, summed over every isolate
 * (src/observability/metrics.ts). One instance ("global"); each isolate adds its deltas at most
 * once a second, so its load grows with the number of isolates, not with traffic.
 */
const BATCH_MEMORY_MS = 60 * 60 * 1000;

export class MetricsTotals extends DurableObject<Env> {
  readonly #sql: SqlStorage;

  constructor(ctx: DurableObjectState, env: Env) {
    super(ctx, env);
    this.#sql = ctx.storage.sql;
    this.#sql.exec(
      `CREATE TABLE IF NOT EXISTS samples (
         name   TEXT NOT NULL,
         labels TEXT NOT NULL,
         value  REAL NOT NULL,
         PRIMARY KEY (name, labels)
       )`,
    );
    // Batches applied in the last hour, so a batch sent again (its first answer was lost) counts once.
    this.#sql.exec("CREATE TABLE IF NOT EXISTS batches (id TEXT PRIMARY KEY, at INTEGER NOT NULL)");
    this.#sql.exec("CREATE INDEX IF NOT EXISTS batches_by_time ON batches (at)");
  }

  /** Adds a batch of deltas to the totals, all or none, once per batch id. */
  add(batchId: string, deltas: readonly Sample[]): void {
    const now = Date.now();
    this.ctx.storage.transactionSync(() => {
      this.#sql.exec("DELETE FROM batches WHERE at < ?", now - BATCH_MEMORY_MS);
      if (this.#sql.exec("SELECT 1 FROM batches WHERE id = ?", batchId).toArray().length > 0) return;
      this.#sql.exec("INSERT INTO batches (id, at) VALUES (?, ?)", batchId, now);
      for (const { name, labels, value } of deltas) {
        this.#sql.exec(
          `INSERT INTO samples (name, labels, value) VALUES (?, ?, ?)
           ON CONFLICT (name, labels) DO UPDATE SET value = value + excluded.value`,
          name,
          labels,
          value,
        );
      }
    });
  }

  samples(): Sample[] {
    return this.#sql
      .exec<{ name: string; labels: string; value: number }>("SELECT name, labels, value FROM samples")
      .toArray();
  }
}
