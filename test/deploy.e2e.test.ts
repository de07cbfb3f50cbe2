import { spawnSync } from "node:child_process";
import {
  chmodSync,
  copyFileSync,
  existsSync,
  mkdirSync,
  mkdtempSync,
  readFileSync,
  rmSync,
  statSync,
  writeFileSync,
} from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { unstable_readConfig } from "wrangler";
import {
  type Config,
  type Existing,
  PLACEHOLDER_D1_ID,
  parseD1List,
  parseQueueList,
  plan,
  resourcesTable,
  withD1Id,
  withResourcesTable,
} from "../scripts/deploy-plan";
import { harnessFence } from "./suites/harness-fence";

/**
 * The production path (docs/DEPLOY.md) without a Cloudflare account: the bundle `wrangler deploy`
 * would upload builds from wrangler.toml alone (no .dev.vars, so no dev-only switch), and
 * `npm run deploy` provisions every binding that bundle lists (its plan, checked against the dry
 * run's bindings table and wrangler.toml's queue names), creating only what the account lacks. The
 * harness fence (test/suites/harness-fence.ts) checks that dry run's bundle too.
 */

const QUIET = { ...process.env, WRANGLER_SEND_METRICS: "false", CLOUDFLARE_CF_FETCH_ENABLED: "false" };
const outdir = mkdtempSync(join(tmpdir(), "flashgate-bundle-"));
afterAll(() => rmSync(outdir, { recursive: true, force: true }));

const TOML = readFileSync(new URL("../wrangler.toml", import.meta.url), "utf8");
const config: Config = unstable_readConfig({ config: "wrangler.toml" }, { hideWarnings: true });
/** Every queue wrangler.toml names, read from its text (not through the plan's reader). */
const QUEUES = [...new Set([...TOML.matchAll(/^(?:queue|dead_letter_queue) = "([^"]+)"/gm)].map(([, q]) => q))];
const EMPTY: Existing = { databases: [], queues: [] };
/** wrangler.toml's config with this D1 id in place of the placeholder. */
const withId = (database_id: string) => ({
  ...config,
  d1_databases: config.d1_databases.map((db) => ({ ...db, database_id })),
});

let dryRun = "";
let planned = "";
beforeAll(() => {
  const run = spawnSync("npx", ["wrangler", "deploy", "--dry-run", "--outdir", outdir], {
    encoding: "utf8",
    env: QUIET,
  });
  dryRun = `${run.stdout}${run.stderr}`;
  expect(run.status, dryRun).toBe(0);
  const p = spawnSync("npm", ["run", "-s", "deploy", "--", "--plan"], { encoding: "utf8", env: QUIET });
  planned = `${p.stdout}${p.stderr}`;
  expect(p.status, planned).toBe(0);
});

harnessFence(() => outdir);

describe("deploying", () => {
  it("builds the production bundle with `wrangler deploy --dry-run`, every binding and no dev-only switch", () => {
    expect(statSync(join(outdir, "index.js")).size).toBeGreaterThan(100_000);
    for (const binding of ["SKU_STOCK (SkuStock)", "METRICS_TOTALS (MetricsTotals)", "ORDER_EVENTS (order-events)"]) {
      expect(dryRun).toContain(`env.${binding}`);
    }
    expect(dryRun).toContain("env.DB (flashgate)");
    expect(dryRun).toContain("env.SHOPPER_RATE_LIMITER");
    for (const devOnly of ["DEV_TOOLS", "CHAOS", "AUTH_SECRET", "ADMIN_TOKEN"]) expect(dryRun).not.toContain(devOnly);
    // Workers' limit on a Worker's compressed size is 3 MB on the Free plan.
    const gzip = /gzip: ([\d.]+) KiB/.exec(dryRun)?.[1];
    expect(Number(gzip)).toBeLessThan(3 * 1024);
  });

  it("plans a step or a 'nothing to create' row for every binding the dry run lists", () => {
    const table = dryRun.split("Your Worker has access to the following bindings:")[1] ?? "";
    const listed = [...table.matchAll(/^env\.([A-Z][A-Z0-9_]*)\b/gm)].map(([, name]) => name);
    expect(listed).toContain("WEBHOOK_DELIVERIES");
    const p = plan(config, null);
    const covered = new Set([
      ...p.steps.flatMap((s) => (s.kind === "create" ? s.resource.bindings : [])),
      ...p.present.flatMap((row) => row.resource.bindings),
    ]);
    expect(listed.filter((name) => !covered.has(name ?? ""))).toEqual([]);
  });

  it("`npm run deploy -- --plan` creates every queue wrangler.toml names, then migrates and deploys, asking Cloudflare nothing", () => {
    expect(QUEUES.sort()).toEqual(["order-events", "order-events-dlq", "webhook-deliveries"]);
    for (const queue of QUEUES) expect(planned).toContain(`create if missing: npx wrangler queues create ${queue}\n`);
    expect(planned).toContain("create if missing: npx wrangler d1 create flashgate");
    expect(planned).toMatch(
      /D1 migrations: npx wrangler d1 migrations apply DB --remote\n.*Worker: npx wrangler deploy\n/,
    );
    expect(planned).not.toContain("asking Cloudflare");
  });

  it("creates only what the account lacks, so a second run creates nothing", () => {
    const first = plan(config, EMPTY);
    const created = first.steps.flatMap((s) => (s.kind === "create" ? [s.resource.name] : []));
    expect(created.sort()).toEqual(["flashgate", ...QUEUES].sort());
    // The account after the first run: everything created; wrangler.toml then carries the new id.
    const uuid = "6f1c1d2e-0000-4000-8000-000000000001";
    const after: Existing = { databases: [{ name: "flashgate", uuid }], queues: QUEUES.filter((q) => q !== undefined) };
    const second = plan(withId(uuid), after);
    expect(second.steps.map((s) => s.kind)).toEqual(["run", "run"]);
    expect(second.refusals).toEqual([]);
  });

  it("takes the id of a database that exists while wrangler.toml has the placeholder, and refuses an id the account lacks", () => {
    const uuid = "6f1c1d2e-0000-4000-8000-000000000002";
    const p = plan(config, { databases: [{ name: "flashgate", uuid }], queues: [] });
    expect(p.steps.filter((s) => s.kind === "create" && s.resource.what === "D1 database")).toEqual([]);
    expect(p.steps).toContainEqual({ kind: "write-d1-id", database: "flashgate", uuid });
    expect(withD1Id(TOML, uuid)).toContain(`database_id = "${uuid}"`);
    expect(withD1Id(TOML, uuid)).not.toContain(PLACEHOLDER_D1_ID);
    const stale = plan(withId(uuid), EMPTY);
    expect(stale.refusals.join()).toContain(`database_id ${uuid}`);
  });

  it("reads wrangler 4.86's list outputs: `d1 list --json` and the `queues list` table", () => {
    const d1 = `[\n  {\n    "uuid": "abc-1",\n    "name": "flashgate",\n    "created_at": "2026-12-01T00:00:00Z",\n    "version": "production"\n  }\n]\n`;
    expect(parseD1List(d1)).toEqual([{ name: "flashgate", uuid: "abc-1" }]);
    // As logger.table (cli-table3) prints it, after the banner.
    const queues = [
      " ⛅️ wrangler 4.86.0",
      "───────────────────",
      "┌──────┬────────────────────┬────────────┬─────────────┬───────────┬───────────┐",
      "│ id   │ name               │ created_on │ modified_on │ producers │ consumers │",
      "├──────┼────────────────────┼────────────┼─────────────┼───────────┼───────────┤",
      "│ q1   │ order-events       │ 2026-12-01 │ 2026-12-01  │ 1         │ 1         │",
      "├──────┼────────────────────┼────────────┼─────────────┼───────────┼───────────┤",
      "│ q2   │ order-events-dlq   │ 2026-12-01 │ 2026-12-01  │ 0         │ 1         │",
      "└──────┴────────────────────┴────────────┴─────────────┴───────────┴───────────┘",
    ].join("\n");
    expect(parseQueueList(queues)).toEqual(["order-events", "order-events-dlq"]);
    expect(parseQueueList("┌┐\n└┘\n")).toEqual([]);
  });

  it("docs/DEPLOY.md's 'What to create' table is the plan's list (npm run deploy -- --docs)", () => {
    const doc = readFileSync(new URL("../docs/DEPLOY.md", import.meta.url), "utf8");
    expect(doc).toBe(withResourcesTable(doc, resourcesTable(config)));
    for (const queue of QUEUES) expect(doc).toContain(`\`npx wrangler queues create ${queue}\``);
  });

  it("`npm run deploy` without Cloudflare credentials stops at the listing, having created nothing", () => {
    const env: NodeJS.ProcessEnv = { ...QUIET };
    delete env.CLOUDFLARE_API_TOKEN;
    const run = spawnSync("npm", ["run", "-s", "deploy"], { encoding: "utf8", env, input: "" });
    expect(run.status).toBe(1);
    expect(run.stderr).toContain("listing what exists failed; nothing was created or deployed");
    expect(run.stdout).not.toContain("queues create");
  });
});

/**
 * `npm run deploy` end to end against a stand-in for `npx wrangler` on PATH that answers the six
 * commands the script runs as wrangler 4.86 prints them (`d1 list --json`: its JSON array; `queues list`:
 * logger.table's box-drawn table; read from wrangler-dist/cli.js), keeping the account in files. The
 * tests run in order on that one account.
 */
const FAKE_NPX = `#!/usr/bin/env node
const fs = require("node:fs");
const state = process.env.FAKE_ACCOUNT;
const read = (f) => (fs.existsSync(state + "/" + f) ? JSON.parse(fs.readFileSync(state + "/" + f, "utf8")) : []);
const write = (f, v) => fs.writeFileSync(state + "/" + f, JSON.stringify(v));
const args = process.argv.slice(2);
fs.appendFileSync(state + "/calls", args.join(" ") + "\\n");
const [tool, a, b, c] = args;
if (tool !== "wrangler") process.exit(127);
if (a === "d1" && b === "list") console.log(JSON.stringify(read("dbs"), null, 2));
else if (a === "d1" && b === "create") {
  write("dbs", [...read("dbs"), { uuid: "6f1c1d2e-0000-4000-8000-00000000000" + read("dbs").length, name: c }]);
  console.log("Created your new D1 database.");
} else if (a === "queues" && b === "list") {
  const page = Number(args[args.indexOf("--page") + 1] || 1);
  const rows = page === 1 ? read("queues") : [];
  console.log(rows.length === 0 ? "┌┐\\n└┘" : ["┌─┬─┐", "│ id │ name │ created_on │", "├─┼─┤",
    ...rows.map((q, i) => "│ q" + i + " │ " + q + " │ 2026-12-01 │"), "└─┴─┘"].join("\\n"));
} else if (a === "queues" && b === "create") {
  if (c === process.env.FAKE_FAIL_QUEUE) { console.error("✘ [ERROR] A request to the Cloudflare API failed."); process.exit(1); }
  write("queues", [...read("queues"), c]);
} else if (!(a === "deploy" || (a === "d1" && b === "migrations"))) process.exit(64);
`;

const FIRST_UUID = "6f1c1d2e-0000-4000-8000-000000000000";

describe("`npm run deploy` against a stand-in wrangler", () => {
  const dir = mkdtempSync(join(tmpdir(), "flashgate-deploy-"));
  const bin = join(dir, "bin");
  const account = join(dir, "account");
  afterAll(() => rmSync(dir, { recursive: true, force: true }));
  beforeAll(() => {
    mkdirSync(bin);
    mkdirSync(account);
    writeFileSync(join(bin, "npx"), FAKE_NPX);
    chmodSync(join(bin, "npx"), 0o755);
    copyFileSync(new URL("../wrangler.toml", import.meta.url), join(dir, "wrangler.toml"));
  });
  const deploy = (env: Record<string, string> = {}) => {
    rmSync(join(account, "calls"), { force: true });
    const tsx = new URL("../node_modules/.bin/tsx", import.meta.url).pathname;
    const script = new URL("../scripts/deploy.ts", import.meta.url).pathname;
    const run = spawnSync(tsx, [script], {
      cwd: dir,
      encoding: "utf8",
      env: { ...QUIET, ...env, FAKE_ACCOUNT: account, PATH: `${bin}:${process.env.PATH}` },
    });
    const calls = existsSync(join(account, "calls"))
      ? readFileSync(join(account, "calls"), "utf8").trim().split("\n")
      : [];
    return { status: run.status, stdout: run.stdout, stderr: run.stderr, calls };
  };

  it("stops at a step that fails, says which, and runs nothing after it", () => {
    const run = deploy({ FAKE_FAIL_QUEUE: "webhook-deliveries" });
    expect(run.status, run.stderr).toBe(1);
    expect(run.stderr).toMatch(/step 4\/7 \(Queue webhook-deliveries\) failed: exit 1; nothing after it ran/);
    expect(run.calls.filter((c) => / create /.test(c))).toEqual([
      "wrangler d1 create flashgate",
      "wrangler queues create order-events",
      "wrangler queues create webhook-deliveries",
    ]);
    expect(run.calls.join()).not.toMatch(/migrations|deploy/);
    // What ran before the failure stays done: the new database's id is in wrangler.toml.
    expect(readFileSync(join(dir, "wrangler.toml"), "utf8")).toContain(`database_id = "${FIRST_UUID}"`);
  });

  it("on the next run creates only what is still missing, then migrates and deploys", () => {
    const run = deploy();
    expect(run.status, run.stderr).toBe(0);
    expect(run.calls.filter((c) => / create /.test(c))).toEqual([
      "wrangler queues create webhook-deliveries",
      "wrangler queues create order-events-dlq",
    ]);
    expect(run.stdout).toContain("Queue order-events: exists");
    expect(run.calls.slice(-2)).toEqual(["wrangler d1 migrations apply DB --remote", "wrangler deploy"]);
  });

  it("creates nothing the second time", () => {
    const run = deploy();
    expect(run.status, run.stderr).toBe(0);
    expect(run.calls.filter((c) => c.includes("create"))).toEqual([]);
    expect(run.stdout).toContain(`D1 database flashgate: in wrangler.toml: database_id ${FIRST_UUID}`);
    expect(run.calls.slice(-2)).toEqual(["wrangler d1 migrations apply DB --remote", "wrangler deploy"]);
  });
});
