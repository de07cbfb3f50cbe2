import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { build } from "esbuild";

const bundles = new Map<string, Promise<string>>();

/**
 * A script of scripts/ bundled once per test process into one .mjs that node runs as it is: the same
 * code as `node --import tsx <script>` runs, for a test that runs it many times (0.09 CPU-s a run,
 * where tsx's loader costs 0.39: issue #56). Its path, removed when the process exits.
 */
export function bundledScript(script: string): Promise<string> {
  let bundle = bundles.get(script);
  if (!bundle) {
    const dir = mkdtempSync(join(tmpdir(), "flashgate-script-"));
    process.once("exit", () => rmSync(dir, { recursive: true, force: true }));
    const outfile = join(dir, `${script.replace(/\W+/g, "-")}.mjs`);
    bundle = build({
      entryPoints: [script],
      bundle: true,
      platform: "node",
      format: "esm",
      target: "node20",
      outfile,
      logLevel: "warning",
    }).then(() => outfile);
    bundles.set(script, bundle);
  }
  return bundle;
}
