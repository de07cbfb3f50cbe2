import { engineSequences, engineUnits } from "./suites/stock-engine";
import { inMemory, inMigrated } from "./support/node-place";

// The engine's suite over SQLite in Node (the restarts part is stock-engine-restarts.unit.test.ts,
// to run beside it); suites/stock-engine-workerd.ts runs the whole suite in workerd. The 1,000
// sequences' objects start with the schema made (see inMigrated), the other tests' from empty.
engineSequences(inMigrated);
engineUnits(inMemory);
