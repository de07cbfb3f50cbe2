// `npm run deploy`: the one way to ship Flashgate (docs/DEPLOY.md).
//   1. refuses to start while wrangler.toml still has the placeholder D1 id (a deploy would fail later,
//      after the migrations step had already asked Cloudflare for a database that does not exist);
//   2. applies the D1 migrations not applied yet (`wrangler d1 migrations apply DB --remote`): first,
//      because the code being deployed may read what they add, and the old code keeps running until
//      the deploy finishes, so every migration must work with both;
//   3. deploys the Worker (`wrangler deploy`), passing extra arguments through
//      (`npm run deploy -- --dry-run` builds the bundle and uploads nothing, after step 2).
// It stops at the first step that fails and says which.
import { spawnSync } from "node:child_process";
import { readFileSync } from "node:fs";

const PLACEHOLDER_ID = "00000000-0000-0000-0000-000000000000";
const passThrough = process.argv.slice(2);
const log = (line: string) => console.log(`[deploy] ${line}`);

const STEPS = [
  { what: "D1 migrations", args: ["wrangler", "d1", "migrations", "apply", "DB", "--remote"] },
  { what: "Worker", args: ["wrangler", "deploy", ...passThrough] },
];

if (readFileSync("wrangler.toml", "utf8").includes(PLACEHOLDER_ID)) {
  console.error(
    "[deploy] wrangler.toml still has the placeholder D1 database_id: run `npx wrangler d1 create flashgate` " +
      "and put the id it prints in [[d1_databases]] (docs/DEPLOY.md, step 2).",
  );
  process.exit(2);
}
for (const [n, step] of STEPS.entries()) {
  log(`${n + 1}/${STEPS.length} ${step.what}: npx ${step.args.join(" ")}`);
  const run = spawnSync("npx", step.args, { stdio: "inherit" });
  if (run.status !== 0) {
    console.error(`[deploy] ${step.what} failed (exit ${run.status ?? run.signal}); nothing after it ran.`);
    process.exit(run.status ?? 1);
  }
}
log("done: migrations applied, Worker deployed. Smoke-check it: docs/DEPLOY.md, step 9.");
