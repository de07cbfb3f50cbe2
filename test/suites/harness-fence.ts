import { execFile } from "node:child_process";
import { mkdtempSync, readdirSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { promisify } from "node:util";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { HARNESS_ENTRY } from "../../tools/harness";

/**
 * API.md: development helpers "are never reachable in a deployed Worker, whatever its vars say;
 * nor is any page that needs them". The proof is the bundle itself: what `wrangler deploy` would
 * upload (its `--dry-run --outdir` output, from wrangler.toml) holds no dev, bench or chaos route
 * and no file of the demo storefront, while the harness bundle the local tooling builds from
 * src/harness/index.ts holds them all. It runs in test/deploy.e2e.test.ts, whose dry run of
 * wrangler.toml is the production bundle checked here (one bundling fewer, issue #56).
 */

const run = promisify(execFile);
const HARNESS_ONLY = ["/dev/jwt", "/dev/pay", "/bench/engine", "/bench/orders", "/chaos/consumer-faults", "chaosAbort"];
/** A line found only in each file of the demo storefront, which buys through /dev/*. */
const STOREFRONT = {
  "public/index.html": "<title>Flashgate · demo storefront</title>",
  "public/static/storefront.js": "// Demo storefront: a shopper buys through the public API",
};
/**
 * The buy button any shop embeds (API.md v1.4), the proof-of-work solver it runs and the receipt
 * checker it imports, which the storefront shares: in every bundle (src/routes/embed.ts).
 */
const BUY_BUTTON = {
  "public/embed/flashgate.js": "// <flashgate-buy>: the Flashgate buy button any shop page may embed",
  "public/static/pow-worker.js": "// Proof-of-work solver, run in a Web Worker",
  "public/static/receipt-check.js": "// Checks a sale log receipt in the browser",
};

/**
 * What `wrangler deploy --dry-run --outdir out` wrote: the Worker's code (index.js), and everything
 * it uploads, the text modules beside the code included (the pages of public/, the Lua scripts).
 */
function bundleIn(out: string): { code: string; uploaded: string } {
  const files = readdirSync(out, { recursive: true, encoding: "utf8" }).filter((f) => !/\.(map|md)$/.test(f));
  const read = (names: string[]) => names.map((f) => readFileSync(join(out, f), "utf8")).join("\n");
  const code = files.filter((f) => /^index\.m?js$/.test(f));
  expect(code.length).toBeGreaterThan(0);
  return { code: read(code), uploaded: read(files) };
}

type Bundle = ReturnType<typeof bundleIn>;
let production: Bundle;
let harness: Bundle;

/** The suite: `productionOut()` is the `--outdir` of a dry run of wrangler.toml (src/index.ts). */
export function harnessFence(productionOut: () => string) {
  describe("the harness fence", () => {
    const out = mkdtempSync(join(tmpdir(), "flashgate-bundle-"));
    afterAll(() => rmSync(out, { recursive: true, force: true }));
    beforeAll(async () => {
      const args = ["wrangler", "deploy", "--dry-run", HARNESS_ENTRY, "--outdir", out];
      await run("npx", args, { env: { ...process.env, CI: "true", WRANGLER_SEND_METRICS: "false" } });
      harness = bundleIn(out);
      production = bundleIn(productionOut());
    });

    it("the production bundle has no dev, bench or chaos route; the harness bundle has them all", () => {
      for (const marker of HARNESS_ONLY) {
        expect(production.uploaded.includes(marker), `production bundle contains ${marker}`).toBe(false);
        // The harness's code, not its pages: the storefront's script names /dev/jwt as a URL it calls.
        expect(harness.code.includes(marker), `harness bundle lacks ${marker}`).toBe(true);
      }
      for (const prefix of ["/dev/", "/bench/", "/chaos/"]) expect(production.uploaded).not.toContain(prefix);
      // Both are the same Worker otherwise.
      for (const route of ["/webhooks/stripe", "/api/skus/:sku/reservations", "/admin/reconcile"]) {
        expect(production.code).toContain(route);
        expect(harness.code).toContain(route);
      }
    });

    it("the production bundle has no file of the demo storefront; the harness bundle has them all", () => {
      for (const [file, marker] of Object.entries(STOREFRONT)) {
        expect(readFileSync(new URL(`../../${file}`, import.meta.url), "utf8"), `${file} lacks its marker`).toContain(
          marker,
        );
        expect(production.uploaded.includes(marker), `production bundle contains ${file}`).toBe(false);
        expect(harness.uploaded.includes(marker), `harness bundle lacks ${file}`).toBe(true);
      }
      // The operator dashboard is in both, and the buy button with its solver.
      for (const bundled of [production, harness]) expect(bundled.uploaded).toContain("Flashgate · operator dashboard");
      for (const [file, marker] of Object.entries(BUY_BUTTON)) {
        expect(readFileSync(new URL(`../../${file}`, import.meta.url), "utf8"), `${file} lacks its marker`).toContain(
          marker,
        );
        for (const bundled of [production, harness]) expect(bundled.uploaded, `${file} bundled`).toContain(marker);
      }
    });
  });
}
