import { engineSequences, engineUnits } from "./suites/stock-engine";
import { inMemory } from "./support/node-place";

// The engine's suite over SQLite in Node (the restarts part is stock-engine-restarts.unit.test.ts,
// to run beside it); stock-engine.workerd.test.ts runs the whole suite in workerd.
engineSequences(inMemory);
engineUnits(inMemory);
