import { integer, sqliteTable, text } from "drizzle-orm/sqlite-core";

/**
 * The SKU catalog: which SKUs exist and over how many shards. Stock itself lives in the stock
 * objects; this table lets the admin list SKUs and the reconciliation walk them.
 */
export const skus = sqliteTable("skus", {
  sku: text("sku").primaryKey(),
  name: text("name").notNull(),
  shards: integer("shards").notNull(),
  createdAt: integer("created_at").notNull(),
  updatedAt: integer("updated_at").notNull(),
});
