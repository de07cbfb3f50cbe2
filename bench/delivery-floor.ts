import { median } from "./lib/log";
import type { HandOffFigures } from "./scenarios/order-hand-off";

/**
 * Issue #53's cut of a delivery's cost toward its floor, in PERFORMANCE.md: the unbatched target
 * (workerd CPU per delivery ÷ the signed-POST floor measured in the same round) and the figures of
 * both hand-off points before and after the cut, measured side by side in `--quick --only` runs and
 * kept in bench/results.json from run to run (`order_pipeline_webhooks_cut`).
 */

/** One `--only order_pipeline_webhooks,order_pipeline_webhook_batches` run's medians. */
export interface CutRun {
  label: string;
  commit: string;
  measured: string;
  rounds: number;
  /** The unbatched point: CPU per order with the endpoint − without, and the floor's CPU per POST. */
  perDeliveryUs: number;
  floorUs: number;
  unbatchedPace: number;
  unbatchedLagP99Ms: number;
  /** CPU per delivery once the sale's rows were all in D1 (deliveries alone), where the run has it. */
  tailUs?: number;
  batchedPace: number;
  batchedLagP99Ms: number;
  batchedCpuOn: number;
  batchedCpuOff: number;
  /** The two CPU targets as the median of each round's own ratio, where the run has them. */
  unbatchedPaired?: number;
  batchedPaired?: number;
}

export interface CutFigures {
  what: string;
  runs: CutRun[];
}

/**
 * The median over the rounds of each round's own ratio: a round's two runs and its floor are
 * measured back to back, so the ratio within a round leaves out what the machine did between rounds
 * (on a shared 2-core machine, a side's CPU per order moved by a fifth from round to round).
 */
export function pairedMedian(
  h: HandOffFigures | undefined,
  ratio: (round: HandOffFigures["rounds"][number]) => number,
) {
  if (!h || h.rounds.length === 0) return Number.NaN;
  return median(h.rounds.map(ratio));
}

/** A round's CPU per delivery (CPU per order, endpoint on − disabled) ÷ its floor's CPU per POST. */
const deliveryOverFloor = (round: HandOffFigures["rounds"][number]) =>
  (round.hooks.cpuUsPerOrderDelivered - round.plain.cpuUsPerOrder) / round.floor.cpuUsPerPost;

/** CPU per delivery ÷ the floor's CPU per POST: the median of the rounds' own ratios. */
export function perDeliveryOverFloor(h: HandOffFigures | undefined): number {
  return pairedMedian(h, deliveryOverFloor);
}

/** A round's workerd CPU per order with the endpoint ÷ without. */
export const onOverOff = (round: HandOffFigures["rounds"][number]) =>
  round.hooks.cpuUsPerOrderDelivered / round.plain.cpuUsPerOrder;

/** Issue #53's unbatched target, from this run's hand-off point. */
export function unbatchedTarget(h: HandOffFigures | undefined) {
  if (!h) return [];
  return [
    {
      what: "unbatched webhooks: workerd CPU per delivery ÷ the signed-POST floor measured in the same round (median of the rounds)",
      value: perDeliveryOverFloor(h),
      target: "≤ 1.3×",
      met: (v: number) => v <= 1.3,
      opts: {},
    },
  ];
}

type Cell = (run: CutRun) => string;

/** The before → after table of the cut (absent until its runs are kept). */
export function cutSection(cut: CutFigures | undefined, n0: (v: number) => string, x2: (v: number) => string) {
  if (!cut || cut.runs.length === 0) return [];
  const rows: [string, Cell][] = [
    ["unbatched: workerd CPU per delivery ÷ the POST floor (≤ 1.3×)", (r) => x2(r.perDeliveryUs / r.floorUs)],
    ["unbatched: workerd CPU µs per delivery (CPU per order, endpoint on − disabled)", (r) => n0(r.perDeliveryUs)],
    ["unbatched: the floor, workerd CPU µs per signed POST", (r) => n0(r.floorUs)],
    [
      "unbatched: CPU µs per delivery once every order was in D1 (deliveries alone)",
      (r) => (r.tailUs === undefined ? "–" : n0(r.tailUs)),
    ],
    ["unbatched: deliveries/s ÷ orders/s", (r) => x2(r.unbatchedPace)],
    ["unbatched: delivery lag p99 ms", (r) => n0(r.unbatchedLagP99Ms)],
    ["batches of 100: events delivered/s ÷ orders/s (≥ 0.95×)", (r) => x2(r.batchedPace)],
    ["batches of 100: delivery lag p99 ms (≤ 2,000)", (r) => n0(r.batchedLagP99Ms)],
    [
      "batches of 100: workerd CPU per order, endpoint on ÷ disabled (≤ 1.3×)",
      (r) => x2(r.batchedCpuOn / r.batchedCpuOff),
    ],
    [
      "unbatched: CPU per delivery ÷ the POST floor, each round's own, median of the rounds",
      (r) => (r.unbatchedPaired === undefined ? "–" : x2(r.unbatchedPaired)),
    ],
    [
      "batches of 100: CPU per order on ÷ disabled, each round's own, median of the rounds",
      (r) => (r.batchedPaired === undefined ? "–" : x2(r.batchedPaired)),
    ],
  ];
  return [
    "### Issue #53: a delivery toward its floor (before → after)",
    "",
    cut.what,
    "",
    `| medians | ${cut.runs.map((r) => `${r.label} (${r.commit}, ${r.measured.slice(0, 10)}, ${r.rounds} rounds)`).join(" | ")} |`,
    `| --- | ${cut.runs.map(() => "---").join(" | ")} |`,
    ...rows.map(([what, cell]) => `| ${what} | ${cut.runs.map(cell).join(" | ")} |`),
    "",
  ];
}
