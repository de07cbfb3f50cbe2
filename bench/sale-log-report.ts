import type { SaleLogFigures } from "./sale-log";

/**
 * docs/PERFORMANCE.md's section on the verifiable sale's log (issue #52), from the figures
 * `bench/sale-log.ts --write` keeps in bench/results.json: this run's, and the figures before the
 * log's rework beside them when kept (`--before`).
 */

const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)] ?? Number.NaN;
const n0 = (v: number) => (Number.isFinite(v) ? Math.round(v).toLocaleString("en-US") : "–");
const x2 = (v: number) => (Number.isFinite(v) ? `${v.toFixed(2)}×` : "–");

type EngineRound = SaleLogFigures["engine"]["rounds"][number][number];
type HotRound = SaleLogFigures["hotSkuDirect"]["rounds"][number][number];

function engineMedian(f: SaleLogFigures, mode: EngineRound["mode"], pick: (r: EngineRound) => number): number {
  return median(f.engine.rounds.flat().flatMap((r) => (r.mode === mode ? [pick(r)] : [])));
}

/** The median over rounds of `mode`'s CPU per reservation less the same round's with the log off. */
function engineAdded(f: SaleLogFigures, mode: EngineRound["mode"]): number {
  return median(
    f.engine.rounds.flatMap((round) => {
      const with_ = round.find((r) => r.mode === mode);
      const off = round.find((r) => r.mode === "off");
      return with_ && off ? [with_.cpuUsPerReservation - off.cpuUsPerReservation] : [];
    }),
  );
}

function hotMedian(f: SaleLogFigures, mode: HotRound["mode"], pick: (r: HotRound) => number): number {
  return median(f.hotSkuDirect.rounds.flat().flatMap((r) => (r.mode === mode ? [pick(r)] : [])));
}

/** The rows of one run: [what, value] in the order of the table. */
function rows(f: SaleLogFigures): string[] {
  const cpu = (mode: EngineRound["mode"]) => engineMedian(f, mode, (r) => r.cpuUsPerReservation);
  const rate = (mode: EngineRound["mode"]) => engineMedian(f, mode, (r) => r.perSecond);
  return [
    `${n0(rate("off"))} / ${n0(rate("floor"))} / ${n0(rate("on"))}`,
    `${n0(cpu("off"))} / ${n0(cpu("floor"))} / ${n0(cpu("on"))}`,
    `${n0(engineAdded(f, "floor"))} / ${n0(engineAdded(f, "on"))}`,
    `${x2(f.engine.medianRatioToOff.floor.perSecond)} / ${x2(f.engine.medianRatioToOff.on.perSecond)}`,
    `${x2(f.engine.medianRatioToOff.floor.cpuPerReservation)} / ${x2(f.engine.medianRatioToOff.on.cpuPerReservation)}`,
    `${n0(hotMedian(f, "off", (r) => r.cpuUsPerRequest))} / ${n0(hotMedian(f, "on", (r) => r.cpuUsPerRequest))}`,
    x2(f.hotSkuDirect.medianRatioOnOff.cpuPerRequest),
    `${n0(hotMedian(f, "off", (r) => r.drainedCpuUsPerReservation))} / ${n0(hotMedian(f, "on", (r) => r.drainedCpuUsPerReservation))} (${x2(f.hotSkuDirect.medianRatioOnOff.drainedCpuPerReservation)})`,
    `${n0(f.receipts.receiptLagMs.p50)} / ${n0(f.receipts.receiptLagMs.p99)}`,
    `${n0(f.receipts.log.bytesPerEntry)} (${n0(f.receipts.log.entries)} entries)`,
    `${x2(f.engine.medianRatioToOff.hashes?.perSecond ?? Number.NaN)} / ${x2(f.engine.medianRatioToOff.hashes?.cpuPerReservation ?? Number.NaN)} (${n0(engineAdded(f, "hashes"))} µs added)`,
    x2(f.hotSkuDirect.medianRatioHashesOff?.cpuPerRequest ?? Number.NaN),
  ];
}

const WHAT = [
  "engine core reservations/s, log off / floor / on (medians)",
  "engine core workerd CPU µs per reservation, off / floor / on",
  "added CPU µs per reservation, floor / log (median of the rounds' differences)",
  "reservations/s ÷ off, floor / log (median of the rounds' ratios)",
  "CPU per reservation ÷ off, floor / log",
  "hot SKU direct, CPU µs per request, off / on",
  "hot SKU direct, CPU per request on ÷ off (median of the pairs' ratios)",
  "hot SKU direct, CPU µs per reservation until drained, off / on (ratio)",
  "receipt lag ms at sale pace, p50 / p99",
  "the log's SQLite bytes per entry",
  "engine core, the format's floor (each batch as one row after every entry's hashes): reservations/s ÷ off / CPU ÷ off",
  "hot SKU direct, the format's floor (the edge's salt, the log's hashes, a row a batch): CPU per request ÷ off",
];

const about = (f: SaleLogFigures) =>
  `${f.commit}${f.dirty ? " with uncommitted changes" : ""}, ${f.measured.slice(0, 16).replace("T", " ")} UTC, ${f.engine.rounds.length} rounds`;

export function saleLogSection(now: SaleLogFigures | undefined, before: SaleLogFigures | undefined): string[] {
  if (!now) return [];
  const after = rows(now);
  const was = before ? rows(before) : undefined;
  const head = was ? ["", `before (${about(before as SaleLogFigures)})`, `after (${about(now)})`] : ["", about(now)];
  const hot = now.hotSkuDirect.medianRatioOnOff.cpuPerRequest;
  const hotHashes = now.hotSkuDirect.medianRatioHashesOff?.cpuPerRequest ?? Number.NaN;
  const rate = now.engine.medianRatioToOff.on.perSecond;
  const floorRate = now.engine.medianRatioToOff.floor.perSecond;
  const hashesRate = now.engine.medianRatioToOff.hashes?.perSecond ?? Number.NaN;
  return [
    "## The verifiable sale's log (issue #52)",
    "",
    `\`npx tsx bench/sale-log.ts --rounds ${now.engine.rounds.length} --count ${now.engine.count} --write\`. Engine core: ${now.engine.count} fresh reservations through the stock object's reserve RPC (batches of 16, 8 in flight, the order pipeline in the same workerd), workerd's CPU from /proc until the outbox drained, with the log off (no key), the floor (SALE_LOG_FLOOR: the log object commits each batch as one row and does nothing else: an RPC and a transaction a batch, the least an append costs), the format's floor (SALE_LOG_FLOOR=hashes: the same after the hashing the log's format asks of each entry, through the log's own functions: the buyer's salt, an HMAC, and commitment, the leaf hash and one interior node; nothing stored per entry) and the log on, the order rotating each round. Hot SKU: the \`hot_sku\` point directly (quick timing), off, the format's floor and on, the order rotating each round. Locally the log object runs in the same workerd thread as the stock object and the Worker, so its whole cost lands in these figures; on Cloudflare it is an object of its own. The machine is shared (2 cores, other benches and tests running): absolute figures move between rounds, the ratios and differences are taken within each round. A "before" column was measured from a worktree of the commit it names, with this bench and its floor harness copied in.`,
    "",
    `| ${head.join(" | ")} |`,
    `|${head.map(() => " --- ").join("|")}|`,
    ...WHAT.map((what, i) => `| ${[what, ...(was ? [was[i] ?? ""] : []), after[i] ?? ""].join(" | ")} |`),
    "",
    `Issue #52's targets, this run: hot SKU CPU per reservation (direct) with the log ≤ 1.10× without: ${x2(hot)}, **${hot <= 1.1 ? "met" : "not met"}** (the format's floor: ${x2(hotHashes)}${hotHashes > 1.1 ? ", over the target" : ""}); engine core reservations/s with the log ≥ 0.90× without: ${x2(rate)}, **${rate >= 0.9 ? "met" : "not met"}** (the floor alone: ${x2(floorRate)}; the format's floor, its hashes and one row a batch: ${x2(hashesRate)}${hashesRate < 0.9 ? ", under the target" : ""}); receipt lag p99 ${n0(now.receipts.receiptLagMs.p99)} ms at ${now.receipts.pace} holds/s (within 2 s: ${now.receipts.receiptLagMs.p99 <= 2000 ? "yes" : "no"}).`,
    "",
  ];
}
