import { mkdtempSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { startProfile } from "./lib/profile";
import { reservationRequests } from "./lib/shoppers";
import { createSku, startWorker } from "./lib/worker";
import { runWrk } from "./lib/wrk";

const what = process.argv[2] ?? "hot";
const w = await startWorker("prof", { GROUP_COMMIT: "on" }, { inspect: true });
const file = join(mkdtempSync(join(tmpdir(), "prof-")), "r");
try {
  const sku = `p-${Date.now().toString(36)}`;
  await createSku(w, sku, what === "soldout" ? 0 : 1_000_000);
  const reqs = await reservationRequests(sku, sku, 1, 30000);
  await runWrk({ url: w.url, requests: reqs.slice(0, 6000), connections: 50, seconds: 2, file });
  const p = await startProfile(w.inspectorPort as number);
  const r = await runWrk({ url: w.url, requests: reqs.slice(6000), connections: 50, seconds: 5, file });
  const lines = await p.stop(45);
  console.log(r.rps.toFixed(0), JSON.stringify(r.statuses));
  for (const l of lines) console.log(`${l.selfPct.toFixed(1).padStart(5)}%  ${l.fn}  ${l.where}`);
} finally {
  await w.stop();
}
process.exit(0);
