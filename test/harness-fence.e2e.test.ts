import { execFile } from "node:child_process";
import { mkdtempSync, readdirSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { promisify } from "node:util";
import { afterAll, describe, expect, it } from "vitest";
import { HARNESS_ENTRY } from "../tools/harness";

/**
 * API.md: development helpers "are never reachable in a deployed Worker, whatever its vars say".
 * The proof is the bundle itself: what `wrangler deploy` would upload (its `--dry-run --outdir`
 * output, from wrangler.toml) holds no dev, bench or chaos route, while the harness bundle the
 * local tooling builds from src/harness/index.ts holds all three.
 */

const run = promisify(execFile);
const HARNESS_ONLY = ["/dev/jwt", "/dev/pay", "/bench/engine", "/bench/orders", "/chaos/consumer-faults", "chaosAbort"];

const dirs: string[] = [];
afterAll(() => {
  for (const dir of dirs) rmSync(dir, { recursive: true, force: true });
});

/** The Worker code `wrangler deploy --dry-run` writes (index.js). */
async function bundle(entry?: string): Promise<string> {
  const out = mkdtempSync(join(tmpdir(), "flashgate-bundle-"));
  dirs.push(out);
  const args = ["wrangler", "deploy", "--dry-run", ...(entry ? [entry] : []), "--outdir", out];
  await run("npx", args, { env: { ...process.env, CI: "true", WRANGLER_SEND_METRICS: "false" } });
  // The Worker's code only: the storefront's own script is bundled beside it as a text module (it names
  // /dev/jwt as a URL it may call), which is page content, not a route.
  const files = readdirSync(out, { recursive: true, encoding: "utf8" }).filter((f) => /^index\.m?js$/.test(f));
  expect(files.length).toBeGreaterThan(0);
  return files.map((f) => readFileSync(join(out, f), "utf8")).join("\n");
}

describe("the harness fence", () => {
  it("the production bundle has no dev, bench or chaos route; the harness bundle has them all", async () => {
    const [production, harness] = await Promise.all([bundle(), bundle(HARNESS_ENTRY)]);
    for (const marker of HARNESS_ONLY) {
      expect(production.includes(marker), `production bundle contains ${marker}`).toBe(false);
      expect(harness.includes(marker), `harness bundle lacks ${marker}`).toBe(true);
    }
    for (const prefix of ["/dev/", "/bench/", "/chaos/"]) expect(production).not.toContain(prefix);
    // Both are the same Worker otherwise.
    for (const route of ["/webhooks/stripe", "/api/skus/:sku/reservations", "/admin/reconcile"]) {
      expect(production).toContain(route);
      expect(harness).toContain(route);
    }
  });
});
