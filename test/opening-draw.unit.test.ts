import { drawBaselines, drawStatistics } from "./suites/opening-draw";

// Fair opening at the engine level (test/suites/opening-draw.ts): draws 1 to 20 with a window, and
// the baselines; draws 21 to 40 are opening-draw-21-40.unit.test.ts, to run beside this file.
drawStatistics(1, 20);
drawBaselines();
