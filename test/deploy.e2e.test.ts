import { spawnSync } from "node:child_process";
import { mkdtempSync, rmSync, statSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, describe, expect, it } from "vitest";

/**
 * The production path (docs/DEPLOY.md) without a Cloudflare account: the bundle `wrangler deploy`
 * would upload builds from wrangler.toml alone (no .dev.vars, so no dev-only switch), and
 * `npm run deploy` refuses to start while the D1 id is still the placeholder.
 */

const QUIET = { ...process.env, WRANGLER_SEND_METRICS: "false", CLOUDFLARE_CF_FETCH_ENABLED: "false" };
const outdir = mkdtempSync(join(tmpdir(), "flashgate-bundle-"));
afterAll(() => rmSync(outdir, { recursive: true, force: true }));

describe("deploying", () => {
  it("builds the production bundle with `wrangler deploy --dry-run`, every binding and no dev-only switch", () => {
    const run = spawnSync("npx", ["wrangler", "deploy", "--dry-run", "--outdir", outdir], {
      encoding: "utf8",
      env: QUIET,
    });
    const output = `${run.stdout}${run.stderr}`;
    expect(run.status, output).toBe(0);
    expect(statSync(join(outdir, "index.js")).size).toBeGreaterThan(100_000);
    for (const binding of ["SKU_STOCK (SkuStock)", "METRICS_TOTALS (MetricsTotals)", "ORDER_EVENTS (order-events)"]) {
      expect(output).toContain(`env.${binding}`);
    }
    expect(output).toContain("env.DB (flashgate)");
    expect(output).toContain("env.SHOPPER_RATE_LIMITER");
    for (const devOnly of ["DEV_TOOLS", "CHAOS", "AUTH_SECRET", "ADMIN_TOKEN"]) expect(output).not.toContain(devOnly);
    // Workers' limit on a Worker's compressed size is 3 MB on the Free plan.
    const gzip = /gzip: ([\d.]+) KiB/.exec(output)?.[1];
    expect(Number(gzip)).toBeLessThan(3 * 1024);
  });

  it("`npm run deploy` stops before touching Cloudflare while wrangler.toml has the placeholder D1 id", () => {
    const run = spawnSync("npm", ["run", "-s", "deploy"], { encoding: "utf8", env: QUIET });
    expect(run.status).toBe(2);
    expect(run.stderr).toContain("placeholder D1 database_id");
    expect(run.stdout).not.toContain("migrations");
  });
});
