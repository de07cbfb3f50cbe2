import { runInDurableObject } from "cloudflare:test";
import type { SkuStock } from "../../durable-objects/stock/sku-stock";

/**
 * Counts what a running stock object does with its storage from now on: transactions begun and rows
 * read by its SQL statements (each cursor's `rowsRead`). It wraps that instance's own storage, so
 * the engine inside is measured as it runs (a restart of the object drops the wrapper).
 */

export interface StorageCount {
  transactions: number;
  rowsRead: number;
}

type Cursor = SqlStorageCursor<Record<string, SqlStorageValue>>;

const counters = new WeakMap<DurableObjectStorage, { transactions: number; cursors: Cursor[] }>();

/** Starts counting on the object behind `stub` (once; later calls keep the same counts). */
export async function countStorage(stub: DurableObjectStub<SkuStock>): Promise<void> {
  await runInDurableObject(stub, (_object, state) => {
    const storage = state.storage;
    if (counters.has(storage)) return;
    const counter = { transactions: 0, cursors: [] as Cursor[] };
    counters.set(storage, counter);
    const transactionSync = storage.transactionSync.bind(storage);
    storage.transactionSync = (<T>(fn: () => T): T => {
      counter.transactions++;
      return transactionSync(fn);
    }) as typeof storage.transactionSync;
    const sql = storage.sql;
    const exec = sql.exec.bind(sql);
    sql.exec = ((query: string, ...bindings: SqlStorageValue[]) => {
      const cursor = exec(query, ...bindings);
      counter.cursors.push(cursor);
      return cursor;
    }) as typeof sql.exec;
  });
}

/** The counts so far on the object behind `stub` (zero before {@link countStorage}). */
export function storageCount(stub: DurableObjectStub<SkuStock>): Promise<StorageCount> {
  return runInDurableObject(stub, (_object, state) => {
    const counter = counters.get(state.storage);
    return {
      transactions: counter?.transactions ?? 0,
      rowsRead: counter?.cursors.reduce((sum, cursor) => sum + cursor.rowsRead, 0) ?? 0,
    };
  });
}
