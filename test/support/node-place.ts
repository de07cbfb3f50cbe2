import { migrate } from "../../durable-objects/engine/schema";
import { sqliteStorage } from "../../tools/sqlite-storage";
import type { StoragePlace } from "../suites/stock-engine";

/** The Node tier's place for a stock object: a fresh in-memory SQLite database, freed after. */
export const inMemory: StoragePlace = async (_name, body) => {
  const storage = sqliteStorage();
  try {
    return await body(storage);
  } finally {
    storage.close();
  }
};

/** The schema's tables, made once per worker thread (files share it): copying a database's bytes is far cheaper than the steps. */
let schemaImage: Uint8Array | undefined;

function migratedImage(): Uint8Array {
  if (!schemaImage) {
    const storage = sqliteStorage();
    storage.transactionSync(() => migrate(storage.sql));
    schemaImage = storage.export();
  }
  return schemaImage;
}

/**
 * For tests that make many objects and configure each first: an object whose tables are made already
 * (and `deleteAll` brings it back to that), so the engine's schema code runs and finds nothing to do.
 * Such an object counts as configured before its first configure; the path from an empty object is
 * held by {@link inMemory}'s tests, test/stock-schema.unit.test.ts and the workerd copy of the engine
 * suite (test/suites/stock-engine-workerd.ts).
 */
export const inMigrated: StoragePlace = async (_name, body) => {
  const storage = sqliteStorage(migratedImage());
  try {
    return await body(storage);
  } finally {
    storage.close();
  }
};
