import { DurableObject } from "cloudflare:workers";
import type { Sample } from "../src/observability/metrics";

/**
 * The totals of the Worker's counters and histograms, summed over every isolate
 * (src/observability/metrics.ts). One instance ("global"); each isolate adds its deltas at most
 * once a second, so its load grows with the number of isolates, not with traffic.
 */
export class Telemetry extends DurableObject<Env> {
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
  }

  /** Adds deltas to the totals, all or none. */
  add(deltas: readonly Sample[]): void {
    this.ctx.storage.transactionSync(() => {
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
