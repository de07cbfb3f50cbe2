import { execFile } from "node:child_process";
import { createHash } from "node:crypto";
import { cpSync, existsSync, mkdtempSync, readdirSync, readFileSync, renameSync, rmSync, writeFileSync } from "node:fs";
import { createRequire } from "node:module";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { promisify } from "node:util";

/**
 * A local D1 database with every migration applied, laid out as `wrangler dev --persist-to <state>`
 * and Miniflare's `defaultPersistRoot` read it. Migrating starts a wrangler process and a workerd,
 * and the result depends only on the migrations, wrangler.toml and wrangler's version: it is made
 * once per such content, in the system's temporary directory, and copied for every server after
 * that (the end-to-end tests start a dozen).
 */
export async function migrateInto(state: string, root: string): Promise<void> {
  const template = join(tmpdir(), `flashgate-d1-${contentKey(root)}`);
  if (!existsSync(join(template, READY))) await makeTemplate(template, root);
  cpSync(template, state, { recursive: true, filter: (source) => !source.endsWith(READY) });
}

const READY = ".migrated";
const run = promisify(execFile);

function contentKey(root: string): string {
  const hash = createHash("sha256");
  const wrangler = createRequire(join(root, "package.json"))("wrangler/package.json") as { version: string };
  hash.update(wrangler.version);
  hash.update(readFileSync(join(root, "wrangler.toml")));
  const migrations = join(root, "migrations");
  const files = readdirSync(migrations).filter((name) => name.endsWith(".sql")); // not meta/
  for (const name of files.sort()) {
    hash.update(name);
    hash.update(readFileSync(join(migrations, name)));
  }
  return hash.digest("hex").slice(0, 16);
}

async function makeTemplate(template: string, root: string): Promise<void> {
  const work = mkdtempSync(join(tmpdir(), "flashgate-d1-new-"));
  try {
    const args = ["wrangler", "d1", "migrations", "apply", "DB", "--local", "--persist-to", work];
    await run("npx", args, { cwd: root, env: { ...process.env, CI: "true", WRANGLER_SEND_METRICS: "false" } });
  } catch (error) {
    rmSync(work, { recursive: true, force: true });
    const { stdout = "", stderr = "" } = error as { stdout?: string; stderr?: string };
    throw new Error(`D1 migrations failed:\n${stdout}\n${stderr}`);
  }
  writeFileSync(join(work, READY), "");
  try {
    renameSync(work, template); // atomic: a reader sees the whole template or none
  } catch {
    rmSync(work, { recursive: true, force: true }); // another process made it first
  }
}
