#!/usr/bin/env node
// `npm test`: the static checks (`npm run check`) beside the whole suite (`vitest run`, given this
// script's arguments; scripts/run-suite.mjs). The suite mostly waits on its servers, pages and timers and leaves a core
// idle, which the checks fill; so a run takes about as long as the suite alone. The checks' output is
// printed once they end: at once when they fail (the suite runs on), as one line when they pass.
// The suite's temporary files go to a tmpfs when there is one (scratch(), below).
// Exits 1 when either fails. Node built-ins only.
import { spawn } from "node:child_process";
import { existsSync, mkdirSync } from "node:fs";
import { join } from "node:path";
import { runSuite } from "./run-suite.mjs";

const started = Date.now();
const SHM = "/dev/shm";

/** Runs a command; resolves with its exit code (1 when a signal ended it). Its output goes to `onOutput`. */
function run(command, args, onOutput) {
  return new Promise((resolve) => {
    const child = spawn(command, args, { stdio: ["ignore", "pipe", "pipe"] });
    child.on("error", () => resolve(1));
    child.on("exit", (code) => resolve(code ?? 1));
    child.stdout.on("data", onOutput);
    child.stderr.on("data", onOutput);
  });
}

/**
 * The suite's scratch state (workerd's and wrangler dev's storage, D1 copies, Chromium profiles, all
 * under the OS's temporary directory) in memory when the machine has a tmpfs and no TMPDIR is set:
 * their SQLite commits then sync nothing to disk.
 */
function scratch() {
  if (process.env.TMPDIR || !existsSync(SHM)) return process.env;
  const dir = join(SHM, `flashgate-test-${process.getuid?.() ?? "user"}`);
  try {
    mkdirSync(dir, { recursive: true });
  } catch {
    return process.env; // a tmpfs this user cannot write to: the OS's temporary directory, as before
  }
  return { ...process.env, TMPDIR: dir };
}

let checkOutput = "";
const checked = run("npm", ["run", "-s", "check"], (chunk) => {
  checkOutput += chunk;
}).then((code) => {
  const seconds = ((Date.now() - started) / 1000).toFixed(0);
  if (code !== 0) process.stderr.write(`\nnpm run check FAILED (exit ${code}, ${seconds} s):\n${checkOutput}\n`);
  return { code, seconds };
});
// vitest, and once more the files a stalled runtime left unfinished (scripts/run-suite.mjs).
const tested = runSuite(process.argv.slice(2), scratch());

const [check, tests] = await Promise.all([checked, tested]);
if (check.code === 0) process.stdout.write(`npm run check: passed (${check.seconds} s, beside the tests)\n`);
else process.stderr.write(`npm run check failed (exit ${check.code}): its output is above.\n`);
process.exit(check.code === 0 && tests === 0 ? 0 : 1);
