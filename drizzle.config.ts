import { defineConfig } from "drizzle-kit";

// `npx drizzle-kit generate` writes flat NNNN_name.sql files into migrations/, as wrangler reads them.
export default defineConfig({
  dialect: "sqlite",
  schema: "./src/db/schema.ts",
  out: "./migrations",
  migrations: { prefix: "index" },
});
