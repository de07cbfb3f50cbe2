import { drawStatistics } from "./suites/opening-draw";

// Fair opening at the engine level (test/suites/opening-draw.ts): draws 21 to 40 with a window, a
// file of its own so they run beside draws 1 to 20 (opening-draw.unit.test.ts).
drawStatistics(21, 40);
