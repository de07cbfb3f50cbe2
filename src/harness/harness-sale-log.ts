import { SaleLog } from "../../durable-objects/log/sale-log";
import { leafHash, nodeHash } from "../../durable-objects/shared/merkle";
import { entryEventsOf, saltSecret, userCommitment, userSalt } from "../../durable-objects/shared/sale-entries";

const encoder = new TextEncoder();

/**
 * The sale log as the harness runs it (exported as `SaleLog`, the binding's class), with the bench's
 * floors (bench/sale-log.ts measures the real log against them), by the var SALE_LOG_FLOOR:
 * - "on": `append` commits each batch as one row and does nothing else, the least an append costs;
 * - "hashes": the same, after the hashing the log's format asks of every entry and nothing else: the
 *   buyer's salt (an HMAC) and commitment, the leaf hash and one interior node (an append makes about
 *   one), through the same functions the log calls.
 */
export class HarnessSaleLog extends SaleLog {
  #secret: Uint8Array | undefined;

  override async append(shard: number, bodies: readonly string[]): Promise<number> {
    const floor = (this.env as { SALE_LOG_FLOOR?: string }).SALE_LOG_FLOOR;
    if (floor !== "on" && floor !== "hashes") return super.append(shard, bodies);
    if (floor === "hashes") {
      this.#secret ??= saltSecret(this.env.LOG_SIGNING_KEY ?? "");
      let last = leafHash(new Uint8Array());
      for (const body of bodies) {
        for (const event of entryEventsOf(body).events) {
          const user = userCommitment(await userSalt(this.#secret, event.sku, event.userId), event.userId);
          const leaf = leafHash(encoder.encode(JSON.stringify({ ...event, userId: user })));
          last = nodeHash(last, leaf);
        }
      }
    }
    const sql = this.ctx.storage.sql;
    this.ctx.storage.transactionSync(() => {
      sql.exec("CREATE TABLE IF NOT EXISTS floor (id INTEGER PRIMARY KEY, shard INTEGER, bodies TEXT NOT NULL)");
      sql.exec("INSERT INTO floor (shard, bodies) VALUES (?, ?)", shard, bodies.join("\n"));
    });
    return 0;
  }
}
