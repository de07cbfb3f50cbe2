// `npm run deploy`: the one way to ship Flashgate (docs/DEPLOY.md).
//   1. reads wrangler.toml as wrangler does and lists what it binds (scripts/deploy-plan.ts): the D1
//      database and every queue a producer, consumer or dead_letter_queue names;
//   2. asks the account what exists (`wrangler d1 list --json`, `wrangler queues list`) and creates
//      only what is missing, so a second run creates nothing; a new D1 database's id goes into
//      wrangler.toml in place of the placeholder;
//   3. applies the D1 migrations not applied yet (`wrangler d1 migrations apply DB --remote`): before
//      the code, which may read what they add (the old code keeps running until the deploy finishes);
//   4. deploys the Worker (`wrangler deploy`), passing other arguments through.
// `npm run deploy -- --plan` prints the steps without calling Cloudflare; `-- --docs` rewrites
// DEPLOY.md's "What to create" table from wrangler.toml. It stops at the first step that fails and says so.
import { spawn } from "node:child_process";
import { readFileSync, writeFileSync } from "node:fs";
import { unstable_readConfig } from "wrangler";
import {
  describePlan,
  type Existing,
  parseD1List,
  parseQueueList,
  plan,
  resourcesTable,
  withD1Id,
  withResourcesTable,
} from "./deploy-plan";

const CONFIG = "wrangler.toml";
const DOC = "docs/DEPLOY.md";
const args = process.argv.slice(2);
const planOnly = args.includes("--plan");
const docsOnly = args.includes("--docs");
const deployArgs = args.filter((a) => a !== "--plan" && a !== "--docs");
const log = (line: string) => console.log(`[deploy] ${line}`);

const readConfig = () => unstable_readConfig({ config: CONFIG }, { hideWarnings: true });

/** Runs `npx <args>`; output to the terminal unless captured (then returned). Never blocks the loop. */
function npx(argv: string[], capture: boolean): Promise<{ code: number; stdout: string; stderr: string }> {
  return new Promise((resolve, reject) => {
    const child = spawn("npx", argv, { stdio: capture ? ["ignore", "pipe", "pipe"] : "inherit" });
    let stdout = "";
    let stderr = "";
    child.stdout?.on("data", (d: Buffer) => {
      stdout += d.toString();
    });
    child.stderr?.on("data", (d: Buffer) => {
      stderr += d.toString();
    });
    child.on("error", reject);
    child.on("close", (code, signal) => resolve({ code: code ?? (signal ? 1 : 0), stdout, stderr }));
  });
}

class StepFailed extends Error {}

async function captured(argv: string[]): Promise<string> {
  const run = await npx(argv, true);
  if (run.code !== 0)
    throw new StepFailed(`npx ${argv.join(" ")} failed (exit ${run.code}):\n${run.stderr}${run.stdout}`);
  return run.stdout;
}

async function databases(): Promise<Existing["databases"]> {
  return parseD1List(await captured(["wrangler", "d1", "list", "--json"]));
}

/** Every page of `wrangler queues list`, until a page adds no name. */
async function queues(): Promise<string[]> {
  const names = new Set<string>();
  for (let page = 1; page <= 100; page++) {
    const before = names.size;
    for (const name of parseQueueList(await captured(["wrangler", "queues", "list", "--page", String(page)]))) {
      names.add(name);
    }
    if (names.size === before) break;
  }
  return [...names];
}

async function main(): Promise<number> {
  let config: ReturnType<typeof readConfig>;
  try {
    config = readConfig();
  } catch (error) {
    console.error(`[deploy] ${CONFIG} could not be read; nothing ran.\n${(error as Error).message}`);
    return 2;
  }
  if (docsOnly) {
    writeFileSync(DOC, withResourcesTable(readFileSync(DOC, "utf8"), resourcesTable(config)));
    log(`${DOC}: "What to create" table written from ${CONFIG}`);
    return 0;
  }
  if (planOnly) {
    log(`plan from ${CONFIG} (Cloudflare not asked, so every resource reads "create if missing"):`);
    for (const line of describePlan(plan(config, null, deployArgs), false)) log(line);
    return 0;
  }

  log("asking Cloudflare what exists: npx wrangler d1 list --json; npx wrangler queues list");
  let existing: Existing;
  try {
    existing = { databases: await databases(), queues: await queues() };
  } catch (error) {
    console.error(`[deploy] listing what exists failed; nothing was created or deployed.\n${(error as Error).message}`);
    return 1;
  }
  const p = plan(config, existing, deployArgs);
  for (const refusal of p.refusals) console.error(`[deploy] ${refusal}`);
  if (p.refusals.length > 0) return 2;
  for (const line of describePlan(p, true)) log(line);

  for (const [i, step] of p.steps.entries()) {
    const n = `${i + 1}/${p.steps.length}`;
    const name =
      step.kind === "create"
        ? `${step.resource.what} ${step.resource.name}`
        : step.kind === "run"
          ? step.what
          : `D1 id of ${step.database}`;
    try {
      if (step.kind === "write-d1-id") {
        const uuid = step.uuid ?? (await databases()).find((d) => d.name === step.database)?.uuid;
        if (!uuid)
          throw new StepFailed(`D1 database ${step.database} is not in \`wrangler d1 list\` after its creation`);
        writeFileSync(CONFIG, withD1Id(readFileSync(CONFIG, "utf8"), uuid));
        log(`${n} ${CONFIG}: database_id = "${uuid}" (commit it)`);
        continue;
      }
      log(`${n} ${name}: npx ${step.args.join(" ")}`);
      const run = await npx(step.args, false);
      if (run.code !== 0) throw new StepFailed(`exit ${run.code}`);
    } catch (error) {
      console.error(`[deploy] step ${n} (${name}) failed: ${(error as Error).message}; nothing after it ran.`);
      return 1;
    }
  }
  log("done: resources there, migrations applied, Worker deployed. Smoke-check it: docs/DEPLOY.md, step 9.");
  return 0;
}

process.exitCode = await main();
