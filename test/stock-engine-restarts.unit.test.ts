import { engineRestarts } from "./suites/stock-engine";
import { inMigrated } from "./support/node-place";

// The engine's restart property over SQLite in Node, a file of its own so it runs beside
// stock-engine.unit.test.ts; suites/stock-engine-workerd.ts runs it in workerd. Its 600 objects start
// with the schema made (see inMigrated).
engineRestarts(inMigrated);
