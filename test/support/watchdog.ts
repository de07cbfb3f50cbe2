import { writeFileSync } from "node:fs";
import { relative } from "node:path";
import type { Reporter, TestCase, TestModule, TestSpecification, Vitest } from "vitest/node";

/**
 * A vitest reporter that ends a run in which files stopped making progress, rather than letting it wait
 * for ever. vitest waits with no limit for a file's last message from its runner, and a runner can lose
 * one (workers-sdk#14180 and #15498 are two known ways in the workerd pool): a CI run of this suite sat
 * silent after its last result until it was killed at 90 minutes. A test or hook that merely takes long
 * ends at its timeout, so a file with no test begun or ended for longer than the longest test's timeout
 * and a hook's together is not slow but stuck.
 *
 * Once every file still open (queued, collecting or running) is stuck, or none is open and some never
 * began, this names them (with the last test each began or ended), ends the run with exit code 1,
 * and, when `FLASHGATE_STALL_REPORT` names a file, writes there which files never finished or never
 * began and how many failures the files that ended had (scripts/run-suite.mjs runs the unfinished
 * files once more only when there were none).
 */

/** The simulator's test's timeout (test/suites/sim-seeds.ts, 600 s, the suite's longest) and a hook's (120 s). */
export const STALL_MS = Number(process.env.FLASHGATE_STALL_MS) || 720_000;

export interface StallReport {
  /** Files (paths from the root) that began and never finished, or never began. */
  unfinished: string[];
  /** Files that ended failed (a test, a hook, an import) and errors no file caught, by then. */
  failed: number;
}

interface Open {
  since: number;
  last: string;
}

export default class Watchdog implements Reporter {
  #vitest: Vitest | undefined;
  #all = new Set<string>();
  #ended = new Set<string>();
  #failedFiles = new Set<string>();
  #open = new Map<string, Open>();
  /** When anything last happened: a file queued, begun or ended, a test begun or ended. */
  #last = Date.now();
  #timer: NodeJS.Timeout | undefined;

  onInit(vitest: Vitest): void {
    this.#vitest = vitest;
  }

  onTestRunStart(specifications: ReadonlyArray<TestSpecification>): void {
    if (this.#vitest?.config.watch) return;
    for (const spec of specifications) this.#all.add(spec.moduleId);
    this.#last = Date.now();
    this.#timer = setInterval(() => this.#check(), Math.min(10_000, STALL_MS / 4));
    this.#timer.unref();
  }

  onTestModuleQueued(module: TestModule): void {
    this.#touch(module.moduleId, "queued, not begun");
  }

  onTestModuleStart(module: TestModule): void {
    this.#touch(module.moduleId, "no test began");
  }

  onTestCaseReady(test: TestCase): void {
    this.#touch(test.module.moduleId, `began "${test.fullName}"`);
  }

  onTestCaseResult(test: TestCase): void {
    this.#touch(test.module.moduleId, `ended "${test.fullName}"`);
  }

  onTestModuleEnd(module: TestModule): void {
    // Not ok: a test failed, or a hook or the file's import did (their tests then count as skipped).
    if (!module.ok()) this.#failedFiles.add(module.moduleId);
    this.#open.delete(module.moduleId);
    this.#ended.add(module.moduleId);
    this.#last = Date.now();
  }

  onTestRunEnd(): void {
    clearInterval(this.#timer);
  }

  #touch(moduleId: string, last: string): void {
    this.#last = Date.now();
    this.#open.set(moduleId, { since: this.#last, last });
  }

  #check(): void {
    const now = Date.now();
    const open = [...this.#open.entries()];
    const unfinished = [...this.#all].filter((id) => !this.#ended.has(id));
    const stuck =
      open.length > 0
        ? open.every(([, file]) => now - file.since >= STALL_MS)
        : unfinished.length > 0 && now - this.#last >= STALL_MS;
    if (!stuck) return;
    clearInterval(this.#timer);
    const root = this.#vitest?.config.root ?? process.cwd();
    const path = (moduleId: string) => relative(root, moduleId);
    const failed = this.#failedFiles.size + (this.#vitest?.state.getUnhandledErrors().length ?? 0);
    const lines = open.map(
      ([id, file]) => `  ${path(id)}: nothing for ${Math.round((now - file.since) / 1000)} s; last ${file.last}`,
    );
    if (open.length === 0)
      lines.push(`  no file open; nothing happened for ${Math.round((now - this.#last) / 1000)} s`);
    process.stderr.write(
      `\n[watchdog] the run stopped making progress (no test began or ended for ${STALL_MS / 1000} s):\n` +
        `${lines.join("\n")}\n[watchdog] ending the run; ${unfinished.length} file(s) did not finish, ${failed} failure(s) in the files that ended.\n`,
    );
    const report: StallReport = { unfinished: unfinished.map(path), failed };
    if (process.env.FLASHGATE_STALL_REPORT) writeFileSync(process.env.FLASHGATE_STALL_REPORT, JSON.stringify(report));
    process.exitCode = 1;
    // exit() closes what it can and, if that hangs too, ends the process after vitest's teardownTimeout.
    void this.#vitest?.exit(true);
  }
}
