import { engineRestarts } from "./suites/stock-engine";
import { inMemory } from "./support/node-place";

// The engine's restart property over SQLite in Node, a file of its own so it runs beside
// stock-engine.unit.test.ts; stock-engine.workerd.test.ts runs it in workerd.
engineRestarts(inMemory);
