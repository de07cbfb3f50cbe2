import { execFile } from "node:child_process";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { promisify } from "node:util";
import { afterAll, describe, expect, it } from "vitest";

/**
 * The suite's watchdog (test/support/watchdog.ts, scripts/run-suite.mjs) on a suite of its own
 * (test/fixtures/stall/): a file that stops making progress ends the run instead of hanging it, names
 * itself, and runs once more alone when nothing failed. A stall here is 1.5 s (FLASHGATE_STALL_MS).
 */

const dir = mkdtempSync(join(tmpdir(), "flashgate-stall-"));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

async function suite(files: string[], env: Record<string, string>): Promise<{ code: number; output: string }> {
  const args = ["scripts/run-suite.mjs", "--config", "test/fixtures/stall/vitest.config.mjs", ...files];
  const options = { env: { ...process.env, FLASHGATE_STALL_MS: "1500", NO_COLOR: "1", ...env }, timeout: 60_000 };
  try {
    const { stdout, stderr } = await promisify(execFile)(process.execPath, args, options);
    return { code: 0, output: stdout + stderr };
  } catch (error) {
    const { code, stdout, stderr } = error as { code: number; stdout: string; stderr: string };
    return { code, output: stdout + stderr };
  }
}

const secondRuns = (output: string) =>
  output.match(/running the 1 unfinished file\(s\) once more: stalls\.check\.ts/g)?.length ?? 0;

describe("a suite whose file stops making progress", () => {
  it("ends instead of hanging, names the file and its last test, and fails when it stalls again", async () => {
    const { code, output } = await suite(["passes", "stalls"], { STALL: "always" });
    expect(code).toBe(1);
    expect(output).toContain("✓ passes.check.ts");
    expect(output).toMatch(/stalls\.check\.ts: nothing for \d+ s; last began "waits for an answer that never comes"/);
    expect(secondRuns(output)).toBe(1);
    expect(output).toContain("the second run of the unfinished files failed too");
  });

  it("passes when the file it runs once more finishes", async () => {
    const marker = join(dir, "stalled-once");
    const { code, output } = await suite(["passes", "stalls"], { STALL: "once", STALL_MARKER: marker });
    expect(output).toContain("1 file(s) did not finish, 0 failure(s) in the files that ended");
    expect(secondRuns(output)).toBe(1);
    expect(code).toBe(0);
  });

  it("runs nothing more when a test had failed: the failure stands", async () => {
    const { code, output } = await suite(["fails", "stalls"], { STALL: "always" });
    expect(output).toContain("1 file(s) did not finish, 1 failure(s) in the files that ended");
    expect(secondRuns(output)).toBe(0);
    expect(code).toBe(1);
  });

  it("does not run the stalled file again when a describe's hook had failed (its tests skipped, not failed)", async () => {
    const marker = join(dir, "stalled-once-hook");
    const { code, output } = await suite(["setup-throws", "stalls"], { STALL: "once", STALL_MARKER: marker });
    expect(output).toContain("1 file(s) did not finish, 1 failure(s) in the files that ended");
    expect(secondRuns(output)).toBe(0);
    expect(code).toBe(1);
  });

  it("ends a run whose file never got past its import, and names it", async () => {
    const { code, output } = await suite(["passes", "hangs-import"], { STALL: "always" });
    expect(output).toMatch(/hangs-import\.check\.ts: nothing for \d+ s; last queued, not begun/);
    expect(code).toBe(1);
  });
});
