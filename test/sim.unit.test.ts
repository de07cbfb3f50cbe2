import { execFile } from "node:child_process";
import { promisify } from "node:util";
import { expect, test } from "vitest";
import { simulate } from "../tools/sim/simulate";
import { simSeeds } from "./suites/sim-seeds";

// The simulator in the unit tier (docs/SIMULATOR.md): seeds 1 to 100 here, 101 to 200 in
// sim-101-200.unit.test.ts, which runs beside this file.
simSeeds(1, 100);

const run = promisify(execFile);

test("a seed replays byte for byte", async () => {
  const first = await simulate({ seed: 7, steps: 120, shards: 4 });
  const again = await simulate({ seed: 7, steps: 120, shards: 4 });
  expect(again.trace.join("\n")).toBe(first.trace.join("\n"));
  expect(first.trace.length).toBeGreaterThan(120);
});

test("`npm run sim` names a bad option and runs nothing; a sweep ends with how many failed", async () => {
  const sim = (...args: string[]) =>
    run(process.execPath, ["--import", "tsx", "scripts/sim.ts", ...args]).then(
      ({ stdout, stderr }) => ({ code: 0, stdout, stderr }),
      (err: { code: number; stdout: string; stderr: string }) => err,
    );
  const bad = await sim("--shards", "9");
  expect([bad.code, bad.stdout]).toEqual([2, ""]);
  expect(bad.stderr).toContain('--shards must be a whole number from 1 to 4, got "9"');
  const sweep = await sim("--seed", "3", "--seeds", "2", "--steps", "40", "--quiet");
  expect([sweep.code, sweep.stdout.trim().split("\n").at(-1)]).toEqual([0, "2 seeds, 0 failed"]);
});
