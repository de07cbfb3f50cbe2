import { writeFileSync } from "node:fs";
import { relative } from "node:path";
import type { Reporter, TestCase, TestModule, TestSpecification, Vitest } from "vitest/node";

/**
 * A vitest reporter that ends a run in which files stopped making progress, rather than letting it wait
 * for ever. vitest waits with no limit for a file's last message from its runner, and a runner can lose
 * one (workers-sdk#14180 and #15498 are two known ways in the workerd pool): a CI run of this suite sat
 * silent after its last result until it was killed at 90 minutes. A test or hook that merely takes long
 * ends at its timeout (vitest.config.ts: at most 120 s each), so a file with no test begun or ended for
 * longer than a hook and a test together is not slow but stuck.
 *
 * Once every file still open is stuck, this names them (with the last test each began or ended), ends
 * the run with exit code 1, and, when `FLASHGATE_STALL_REPORT` names a file, writes there which files
 * never finished or never began and how many tests had failed (scripts/run-suite.mjs runs those files
 * once more when none had).
 */
export const STALL_MS = Number(process.env.FLASHGATE_STALL_MS) || 300_000;

export interface StallReport {
  /** Files (paths from the root) that began and never finished, or never began. */
  unfinished: string[];
  /** Tests and files that had failed by then. */
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
  #open = new Map<string, Open>();
  #failed = 0;
  #timer: NodeJS.Timeout | undefined;

  onInit(vitest: Vitest): void {
    this.#vitest = vitest;
  }

  onTestRunStart(specifications: ReadonlyArray<TestSpecification>): void {
    if (this.#vitest?.config.watch) return;
    for (const spec of specifications) this.#all.add(spec.moduleId);
    this.#timer = setInterval(() => this.#check(), Math.min(10_000, STALL_MS / 4));
    this.#timer.unref();
  }

  onTestModuleStart(module: TestModule): void {
    this.#open.set(module.moduleId, { since: Date.now(), last: "no test began" });
  }

  onTestCaseReady(test: TestCase): void {
    this.#touch(test.module.moduleId, `began "${test.fullName}"`);
  }

  onTestCaseResult(test: TestCase): void {
    if (test.result().state === "failed") this.#failed++;
    this.#touch(test.module.moduleId, `ended "${test.fullName}"`);
  }

  onTestModuleEnd(module: TestModule): void {
    if (module.state() === "failed" && module.errors().length > 0) this.#failed++;
    this.#open.delete(module.moduleId);
    this.#ended.add(module.moduleId);
  }

  onTestRunEnd(): void {
    clearInterval(this.#timer);
  }

  #touch(moduleId: string, last: string): void {
    this.#open.set(moduleId, { since: Date.now(), last });
  }

  #check(): void {
    const now = Date.now();
    const open = [...this.#open.entries()];
    if (open.length === 0 || open.some(([, file]) => now - file.since < STALL_MS)) return;
    clearInterval(this.#timer);
    const root = this.#vitest?.config.root ?? process.cwd();
    const path = (moduleId: string) => relative(root, moduleId);
    const unfinished = [...this.#all].filter((id) => !this.#ended.has(id)).map(path);
    const lines = open.map(
      ([id, file]) => `  ${path(id)}: nothing for ${Math.round((now - file.since) / 1000)} s; last ${file.last}`,
    );
    process.stderr.write(
      `\n[watchdog] ${open.length} test file(s) stopped making progress (no test began or ended for ${STALL_MS / 1000} s):\n` +
        `${lines.join("\n")}\n[watchdog] ending the run; ${unfinished.length} file(s) did not finish, ${this.#failed} test(s) had failed.\n`,
    );
    const report: StallReport = { unfinished, failed: this.#failed };
    if (process.env.FLASHGATE_STALL_REPORT) writeFileSync(process.env.FLASHGATE_STALL_REPORT, JSON.stringify(report));
    process.exitCode = 1;
    // exit() closes what it can and, if that hangs too, ends the process after vitest's teardownTimeout.
    void this.#vitest?.exit(true);
  }
}
