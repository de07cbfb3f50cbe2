// `npm run dev`: the whole system on one machine with one command.
//   1. .dev.vars from .dev.vars.example when missing;
//   2. D1 migrations applied to the local database;
//   3. wrangler dev on 127.0.0.1:8787 (extra arguments are passed through: `npm run dev -- --port 9000`).
// Everything it starts stops with it (Ctrl-C).
import { type ChildProcess, spawn } from "node:child_process";
import { ensureDevVars } from "./lib/dev-vars";

const passThrough = process.argv.slice(2);
const children: ChildProcess[] = [];
const log = (line: string) => console.log(`[dev] ${line}`);

function run(command: string, args: string[]): Promise<void> {
  return new Promise((resolve, reject) => {
    const child = spawn(command, args, { stdio: "inherit" });
    child.once("error", reject);
    child.once("exit", (code) =>
      code === 0 ? resolve() : reject(new Error(`${command} ${args.join(" ")} exited ${code}`)),
    );
  });
}

let stopping = false;
async function stop(code: number): Promise<never> {
  if (!stopping) {
    stopping = true;
    for (const child of children) if (child.exitCode === null) child.kill("SIGTERM");
  }
  process.exit(code);
}
process.on("SIGINT", () => void stop(0));
process.on("SIGTERM", () => void stop(0));

try {
  if (ensureDevVars()) log("created .dev.vars from .dev.vars.example (local secrets)");

  log("applying D1 migrations to the local database");
  await run("npx", ["wrangler", "d1", "migrations", "apply", "DB", "--local"]);

  const args = ["wrangler", "dev", ...passThrough];
  if (!passThrough.includes("--port")) args.push("--port", "8787");
  if (!passThrough.includes("--ip")) args.push("--ip", "127.0.0.1");
  log(`starting ${args.join(" ")}`);
  const wrangler = spawn("npx", args, { stdio: "inherit" });
  children.push(wrangler);
  wrangler.once("exit", (code) => void stop(code ?? 0));
} catch (err) {
  console.error(`[dev] ${err instanceof Error ? err.message : String(err)}`);
  await stop(1);
}
