#!/usr/bin/env node
// `vitest run` with the watchdog's one second chance (test/support/watchdog.ts): when files stop making
// progress and nothing has failed, the run is ended and those files, with any that never began, run
// once more on their own. A file that stalls again, or any failure, fails the suite. The workerd pool
// can lose a file's last message (workers-sdk#14180, #15498): one such loss should cost a few minutes,
// not the whole run. Usage: node scripts/run-suite.mjs [vitest arguments]; `npm test` calls runSuite.
// The second run keeps the first's --config, --root, --project and -t, and names the unfinished files.
// Node built-ins only.
import { spawn } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { createRequire } from "node:module";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

// vitest's own bin, with this node: no npx or npm process in front of it.
const VITEST = join(dirname(createRequire(import.meta.url).resolve("vitest/package.json")), "vitest.mjs");

/** Runs vitest with these arguments; resolves with its exit code and the watchdog's report, if it wrote one. */
function vitest(args, env) {
  const dir = mkdtempSync(join(tmpdir(), "flashgate-watchdog-"));
  const reportPath = join(dir, "stall.json");
  return new Promise((resolve) => {
    const child = spawn(process.execPath, [VITEST, "run", ...args], {
      stdio: "inherit",
      env: { ...env, FLASHGATE_STALL_REPORT: reportPath },
    });
    const done = (code) => {
      let report;
      try {
        report = JSON.parse(readFileSync(reportPath, "utf8"));
      } catch {
        report = undefined; // no stall
      }
      rmSync(dir, { recursive: true, force: true });
      resolve({ code, report });
    };
    // Stopped (Ctrl-C, a CI job cancelled): vitest is stopped too, not left running on its own.
    const forward = (signal) => child.kill(signal);
    process.on("SIGINT", forward);
    process.on("SIGTERM", forward);
    child.on("error", () => done(1));
    child.on("exit", (code) => {
      process.off("SIGINT", forward);
      process.off("SIGTERM", forward);
      done(code ?? 1);
    });
  });
}

/** Options with a value the second run keeps: which configuration, projects and tests to run. */
const KEPT = ["--config", "-c", "--root", "-r", "--project", "--testNamePattern", "-t"];

/** Of these vitest arguments, those the second run keeps (it names its files itself). */
function keptArgs(args) {
  const kept = [];
  for (let i = 0; i < args.length; i++) {
    if (KEPT.some((option) => option.startsWith("--") && args[i].startsWith(`${option}=`))) kept.push(args[i]);
    else if (KEPT.includes(args[i]) && i + 1 < args.length) kept.push(args[i], args[++i]);
  }
  return kept;
}

/** The suite with these vitest arguments; resolves with its exit code. */
export async function runSuite(args, env = process.env) {
  const first = await vitest(args, env);
  if (first.code === 0 || !first.report) return first.code;
  const { unfinished, failed } = first.report;
  if (failed > 0 || unfinished.length === 0) return first.code;
  process.stderr.write(
    `\n[watchdog] nothing failed; running the ${unfinished.length} unfinished file(s) once more: ${unfinished.join(" ")}\n\n`,
  );
  const second = await vitest([...keptArgs(args), ...unfinished], env);
  if (second.code !== 0) process.stderr.write("\n[watchdog] the second run of the unfinished files failed too.\n");
  return second.code;
}

if (process.argv[1] === fileURLToPath(import.meta.url)) process.exit(await runSuite(process.argv.slice(2)));
