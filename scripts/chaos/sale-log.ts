import { execFile } from "node:child_process";
import { promisify } from "node:util";

const run = promisify(execFile);

/**
 * The verifiable sale (API.md v1.4, issue #52) after a chaos run: `npm run verify-sale` on every SKU,
 * as a buyer would run it (a child process, nothing shared with the Worker), once the system settled:
 * each SKU's log must check out (signature, tiles, root, the sale's rules replayed). Failures name
 * the SKU and the first broken entry.
 */
export async function verifySaleLogs(
  baseUrl: string,
  skus: readonly string[],
  log: (line: string) => void,
): Promise<{ failures: string[]; summary: string }> {
  // The last entries reach a signed checkpoint within LOG_CHECKPOINT_SECONDS of their flush.
  await new Promise((resolve) => setTimeout(resolve, 2_000));
  const failures: string[] = [];
  let entries = 0;
  for (const sku of skus) {
    try {
      const { stdout } = await run("npx", ["tsx", "scripts/verify-sale.ts", baseUrl, sku], { timeout: 120_000 });
      const summary = JSON.parse(stdout) as { size: number };
      entries += summary.size;
    } catch (err) {
      const e = err as { stdout?: string; stderr?: string; message?: string };
      let why = e.stderr?.trim().split("\n").at(-1) ?? e.message ?? String(err);
      try {
        why = (JSON.parse(e.stdout ?? "") as { broken?: string }).broken ?? why;
      } catch {
        // not a summary: the log could not be read
      }
      failures.push(`sale log of ${sku}: ${why}`);
      log(`VIOLATION (sale log): ${sku}: ${why}`);
    }
  }
  return {
    failures,
    summary: `${skus.length - failures.length}/${skus.length} SKUs' logs verify (${entries} entries)`,
  };
}
