import { simSeeds } from "./suites/sim-seeds";

// The simulator's seeds 101 to 200 (docs/SIMULATOR.md), a file of its own so they run beside seeds
// 1 to 100 (sim.unit.test.ts).
simSeeds(101, 200);
