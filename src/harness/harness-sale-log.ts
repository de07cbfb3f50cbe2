import { SaleLog } from "../../durable-objects/log/sale-log";

/**
 * The sale log as the harness runs it (exported as `SaleLog`, the binding's class): with the var
 * SALE_LOG_FLOOR="on", `append` commits each batch as one row and does nothing else, the least an
 * append can cost; bench/sale-log.ts measures the real log against it.
 */
export class HarnessSaleLog extends SaleLog {
  override async append(shard: number, bodies: readonly string[]): Promise<number> {
    if ((this.env as { SALE_LOG_FLOOR?: string }).SALE_LOG_FLOOR !== "on") return super.append(shard, bodies);
    const sql = this.ctx.storage.sql;
    this.ctx.storage.transactionSync(() => {
      sql.exec("CREATE TABLE IF NOT EXISTS floor (id INTEGER PRIMARY KEY, shard INTEGER, bodies TEXT NOT NULL)");
      sql.exec("INSERT INTO floor (shard, bodies) VALUES (?, ?)", shard, bodies.join("\n"));
    });
    return 0;
  }
}
