import type { StoragePlace } from "../suites/stock-engine";
import { sqliteStorage } from "./sqlite-storage";

/** The Node tier's place for a stock object: a fresh in-memory SQLite database, freed after. */
export const inMemory: StoragePlace = async (_name, body) => {
  const storage = sqliteStorage();
  try {
    return await body(storage);
  } finally {
    storage.close();
  }
};
