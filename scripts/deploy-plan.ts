// What `npm run deploy` (scripts/deploy.ts) must provision, derived from wrangler.toml as wrangler
// itself reads it, and the plan: a pure function of (config, what the account already has), so the
// tests check coverage and idempotence without a Cloudflare account. docs/DEPLOY.md's "What to
// create" table is `resourcesTable` of the same list (test/deploy.e2e.test.ts compares them).
import type { Unstable_Config } from "wrangler";

export const PLACEHOLDER_D1_ID = "00000000-0000-0000-0000-000000000000";

export type Config = Pick<
  Unstable_Config,
  "d1_databases" | "queues" | "durable_objects" | "ratelimits" | "vars" | "triggers"
>;

/** Something the config binds or names: created by a step, or there once `wrangler deploy` has run. */
export interface Resource {
  what: string;
  name: string;
  /** The `env.X` names `wrangler deploy --dry-run` lists for it (none for a queue only consumed). */
  bindings: string[];
  /** Why the config needs it, for the plan and the docs. */
  usedBy: string;
  /** The command that creates it, or null: then `nothingToCreate` says why. */
  create: string[] | null;
  nothingToCreate?: string;
  /** DEPLOY.md section that covers it. */
  step: number;
}

/** What the account has, from `wrangler d1 list --json` and `wrangler queues list`. */
export interface Existing {
  databases: { name: string; uuid: string }[];
  queues: string[];
}

export type Step =
  | { kind: "create"; resource: Resource; args: string[] }
  | { kind: "write-d1-id"; database: string; uuid: string | null }
  | { kind: "run"; what: string; args: string[] };

export interface Plan {
  steps: Step[];
  /** Resources that need no step: nothing to create, or already in the account. */
  present: { resource: Resource; because: string }[];
  /** Why the deploy cannot go ahead (a config naming a database the account does not have). */
  refusals: string[];
}

const code = (s: string) => `\`${s}\``;

export function resourcesOf(config: Config): Resource[] {
  const out: Resource[] = [];
  for (const db of config.d1_databases) {
    const name = db.database_name ?? db.binding;
    out.push({
      what: "D1 database",
      name,
      bindings: [db.binding],
      usedBy: `binding ${code(db.binding)}`,
      create: ["wrangler", "d1", "create", name],
      step: 2,
    });
  }
  // A queue may be named by a producer, a consumer and a consumer's dead_letter_queue: one entry each name.
  const queues = new Map<string, { bindings: string[]; uses: string[] }>();
  const queue = (name: string) => {
    const entry = queues.get(name) ?? { bindings: [], uses: [] };
    queues.set(name, entry);
    return entry;
  };
  for (const p of config.queues.producers ?? []) {
    queue(p.queue).bindings.push(p.binding);
    queue(p.queue).uses.push(`producer ${code(p.binding)}`);
  }
  for (const c of config.queues.consumers ?? []) {
    queue(c.queue).uses.push("consumer");
    if (c.dead_letter_queue) queue(c.dead_letter_queue).uses.push(`dead-letter queue of ${code(c.queue)}`);
  }
  for (const [name, { bindings, uses }] of queues) {
    out.push({
      what: uses.some((u) => u.startsWith("dead-letter")) ? "Dead-letter queue" : "Queue",
      name,
      bindings,
      usedBy: uses.join(", "),
      create: ["wrangler", "queues", "create", name],
      step: 3,
    });
  }
  const objects = config.durable_objects.bindings;
  if (objects.length > 0) {
    out.push({
      what: "Durable Object classes",
      name: objects.map((o) => code(o.class_name)).join(", "),
      bindings: objects.map((o) => o.name),
      usedBy: objects.map((o) => `binding ${code(o.name)}`).join(", "),
      create: null,
      nothingToCreate: "`wrangler deploy` applies `[[migrations]]`",
      step: 8,
    });
  }
  for (const c of config.queues.consumers ?? []) {
    out.push({
      what: "Queue consumer",
      name: `${code(c.queue)} → Worker`,
      bindings: [],
      usedBy: "`[[queues.consumers]]`",
      create: null,
      nothingToCreate: "`wrangler deploy` registers it",
      step: 8,
    });
  }
  for (const r of config.ratelimits ?? []) {
    out.push({
      what: "Rate limit",
      name: code(r.name),
      bindings: [r.name],
      usedBy: `${r.simple.limit} requests / ${r.simple.period} s`,
      create: null,
      nothingToCreate: "`[[ratelimits]]` in `wrangler.toml`",
      step: 8,
    });
  }
  for (const cron of config.triggers.crons ?? []) {
    out.push({
      what: "Cron trigger",
      name: code(cron),
      bindings: [],
      usedBy: "`[triggers]`",
      create: null,
      nothingToCreate: "`wrangler deploy` registers it",
      step: 10,
    });
  }
  const vars = Object.keys(config.vars ?? {});
  if (vars.length > 0) {
    out.push({
      what: "Vars",
      name: `${vars.length} in \`[vars]\``,
      bindings: vars,
      usedBy: "[CONFIGURATION.md](CONFIGURATION.md)",
      create: null,
      nothingToCreate: "`wrangler deploy` uploads them",
      step: 8,
    });
  }
  return out;
}

/**
 * The steps of a deploy. With `existing` null (plan mode: Cloudflare not asked) every resource gets
 * its create step, run only if missing; with the account's lists, only what is missing does, so a
 * second run creates nothing.
 */
export function plan(config: Config, existing: Existing | null, deployArgs: string[] = []): Plan {
  const steps: Step[] = [];
  const present: Plan["present"] = [];
  const refusals: string[] = [];
  for (const resource of resourcesOf(config)) {
    if (resource.create === null) {
      present.push({ resource, because: `nothing to create: ${resource.nothingToCreate}` });
      continue;
    }
    if (resource.what === "D1 database") {
      const db = config.d1_databases.find((d) => (d.database_name ?? d.binding) === resource.name);
      const id = db?.database_id ?? PLACEHOLDER_D1_ID;
      const found = existing?.databases.find((d) => d.name === resource.name);
      if (id !== PLACEHOLDER_D1_ID) {
        if (existing && !existing.databases.some((d) => d.uuid === id)) {
          refusals.push(
            `wrangler.toml's database_id ${id} (${resource.name}) is not among this account's D1 databases (\`wrangler d1 list\`): check \`wrangler whoami\`, or put back the placeholder to create it.`,
          );
        }
        present.push({ resource, because: `in wrangler.toml: database_id ${id}` });
        continue;
      }
      if (found) present.push({ resource, because: `exists (${found.uuid}): its id goes into wrangler.toml` });
      else steps.push({ kind: "create", resource, args: resource.create });
      steps.push({ kind: "write-d1-id", database: resource.name, uuid: found?.uuid ?? null });
      continue;
    }
    if (existing?.queues.includes(resource.name)) present.push({ resource, because: "exists" });
    else steps.push({ kind: "create", resource, args: resource.create });
  }
  const migrated = config.d1_databases.find((d) => d.migrations_dir !== undefined) ?? config.d1_databases[0];
  if (migrated) {
    steps.push({
      kind: "run",
      what: "D1 migrations",
      args: ["wrangler", "d1", "migrations", "apply", migrated.binding, "--remote"],
    });
  }
  steps.push({ kind: "run", what: "Worker", args: ["wrangler", "deploy", ...deployArgs] });
  return { steps, present, refusals };
}

/** One line per step, then the rows with nothing to do: what `--plan` prints. */
export function describePlan(p: Plan, known: boolean): string[] {
  const lines = p.steps.map((step, i) => {
    const n = `${i + 1}/${p.steps.length}`;
    if (step.kind === "create") {
      const { what, name, usedBy } = step.resource;
      const when = known ? "create" : "create if missing";
      return `${n} ${what} ${name} (${usedBy.replaceAll("`", "")}): ${when}: npx ${step.args.join(" ")}`;
    }
    if (step.kind === "write-d1-id") {
      return `${n} D1 database ${step.database}: write its id${step.uuid ? ` ${step.uuid}` : ""} into wrangler.toml [[d1_databases]]`;
    }
    return `${n} ${step.what}: npx ${step.args.join(" ")}`;
  });
  for (const { resource, because } of p.present) {
    lines.push(`-   ${resource.what} ${resource.name.replaceAll("`", "")}: ${because.replaceAll("`", "")}`);
  }
  return lines;
}

/** DEPLOY.md's rows of what wrangler.toml binds (the secrets' rows follow them, by hand). */
export function resourcesTable(config: Config): string {
  const rows = resourcesOf(config).map((r) => {
    const how = r.create
      ? `${code(`npx ${r.create.join(" ")}`)}${r.what === "D1 database" ? ", its id into `wrangler.toml`" : ""}`
      : `nothing to create: ${r.nothingToCreate}`;
    const name = r.name.includes("`") ? r.name : code(r.name);
    return `| ${r.what} | ${name} (${r.usedBy}) | ${how} | ${r.step} |`;
  });
  return ["| what | name | how | step |", "| --- | --- | --- | --- |", ...rows].join("\n");
}

const TABLE_START = "<!-- deploy:resources -->";
const TABLE_END = "<!-- /deploy:resources -->";

/** DEPLOY.md with its generated table replaced by `table`. */
export function withResourcesTable(markdown: string, table: string): string {
  const start = markdown.indexOf(TABLE_START);
  const end = markdown.indexOf(TABLE_END);
  if (start < 0 || end < start) throw new Error(`DEPLOY.md has no ${TABLE_START} … ${TABLE_END} marks`);
  return `${markdown.slice(0, start + TABLE_START.length)}\n${table}\n${markdown.slice(end)}`;
}

/** wrangler.toml with the placeholder D1 id replaced, comments and layout kept. */
export function withD1Id(toml: string, uuid: string): string {
  const placeholder = `database_id = "${PLACEHOLDER_D1_ID}"`;
  if (toml.split(placeholder).length !== 2) throw new Error(`wrangler.toml must have exactly one ${placeholder}`);
  return toml.replace(placeholder, `database_id = "${uuid}"`);
}

// biome-ignore lint/suspicious/noControlCharactersInRegex: ANSI colour codes
const ANSI = /\u001b\[[0-9;]*m/g;

/** `wrangler d1 list --json`: a JSON array of {uuid, name, …}, after any line wrangler prints first. */
export function parseD1List(stdout: string): Existing["databases"] {
  const text = stdout.replace(ANSI, "");
  const start = text.indexOf("[");
  if (start < 0) throw new Error(`no JSON array in \`wrangler d1 list --json\`:\n${text.slice(0, 500)}`);
  const list: unknown = JSON.parse(text.slice(start));
  if (!Array.isArray(list)) throw new Error("`wrangler d1 list --json` is not an array");
  return list.flatMap((d: { name?: unknown; uuid?: unknown }) =>
    typeof d.name === "string" && typeof d.uuid === "string" ? [{ name: d.name, uuid: d.uuid }] : [],
  );
}

/**
 * `wrangler queues list` (4.86 has no --json): a box-drawn table whose header names its columns
 * (id, name, created_on, …). The `name` column of every row after the header.
 */
export function parseQueueList(stdout: string): string[] {
  const rows = stdout
    .replace(ANSI, "")
    .split("\n")
    .map((line) => line.trim())
    .filter((line) => line.startsWith("│") || line.startsWith("|"))
    .map((line) =>
      line
        .slice(1, -1)
        .split(/[│|]/)
        .map((cell) => cell.trim()),
    );
  const header = rows.findIndex((cells) => cells.includes("name"));
  if (header < 0) return [];
  const column = rows[header]?.indexOf("name") ?? -1;
  return rows.slice(header + 1).flatMap((cells) => (cells[column] ? [cells[column]] : []));
}
