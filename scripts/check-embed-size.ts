// The buy button's size budget (issue #54): what a shop's page downloads for <flashgate-buy>, gzipped,
// must stay within 25 KB: the element's module, the proof-of-work solver it fetches when a SKU asks
// for one, and the receipt checker it imports once the hold's receipt is there. Fails (exit 1) over budget; prints the figures either way.
import { readFileSync } from "node:fs";
import { gzipSync } from "node:zlib";

const BUDGET_BYTES = 25 * 1024;
const FILES = ["public/embed/flashgate.js", "public/static/pow-worker.js", "public/static/receipt-check.js"];

let total = 0;
for (const file of FILES) {
  const raw = readFileSync(file);
  const gzipped = gzipSync(raw, { level: 9 }).length;
  total += gzipped;
  console.log(`${file}: ${raw.length} bytes, ${gzipped} gzipped`);
}
const verdict = total <= BUDGET_BYTES ? "within" : "OVER";
console.log(`buy button: ${total} bytes gzipped, ${verdict} the budget of ${BUDGET_BYTES}`);
if (total > BUDGET_BYTES) process.exit(1);
