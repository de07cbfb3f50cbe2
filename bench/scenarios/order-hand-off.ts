import { PAGE } from "../../src/handoff/endpoint-lane";
import { cpuMeter } from "../../tools/proc";
import { admin, type WorkerServer } from "../../tools/worker";
import type { BareWorker } from "../lib/bare-worker";
import type { Bench } from "../lib/context";
import { benchRoute } from "../lib/engine-route";
import { log, percentile, sleep } from "../lib/log";
import { startPerf } from "../lib/perf-record";
import { type PostFloor, postFloor } from "../lib/post-floor";
import { startProfile } from "../lib/profile";
import type { ReceiverProcess } from "../lib/receiver";
import { get, pipelineRun } from "./order-pipeline";

/** The bench's one endpoint: every event type, at the receiver's `/hooks/<id>`. */
const ENDPOINT = "bench-all";

/** What the receiver says of the endpoint (`GET /control/<id>`; `?counts` leaves out the lags). */
interface ReceiverLog {
  count: number;
  /** Events answered 2xx: one per single delivery, each of a batch. */
  events: number;
  verified: number;
  unverified: number;
  firstAt: number | null;
  lastAt: number | null;
  lagsMs?: number[];
}

/** `GET /bench/deliveries/:sku`: the SKU's order changes in D1 and their deliveries by status. */
interface D1Deliveries {
  changes: number;
  deliveries: Record<string, { count: number; attempts: number; first: number; last: number }>;
}

type PlainRun = Awaited<ReturnType<typeof pipelineRun>>["result"];

/** One sale with the endpoint subscribed: the plain run's figures, and the deliveries'. */
export interface HooksRun extends PlainRun {
  /** Order changes of the sale in D1 (one per order: each is a hold). */
  changes: number;
  /** Deliveries the receiver verified, and requests it got that did not verify (must be 0). */
  delivered: number;
  unverified: number;
  /** Requests beyond one per change (a delivery attempted again); batched: events received beyond one per change. */
  duplicates: number;
  /** POSTs the receiver got (batched: messages, each up to maxEvents events). */
  messages: number;
  /** Delivered ÷ (last receipt − first hold's creation): end to end, as `ordersPerSec`. */
  deliveriesPerSec: number;
  /** Delivered ÷ (last receipt − first receipt): the sender's rate once it started. */
  sendPerSec: number;
  /** Receipt − the change's `data.updatedAt` (the hold's creation), per delivery. */
  deliveryLagP50Ms: number;
  deliveryLagP99Ms: number;
  deliveryLagMaxMs: number;
  /** First hold → last delivery received. */
  deliveredMs: number;
  /** workerd CPU per order from the sale's start to the last delivery (the sender's included). */
  cpuUsPerOrderDelivered: number;
  /** The receiver process's CPU per delivery (Node HTTP + standardwebhooks' verification). */
  receiverCpuUsPerDelivery: number;
}

/** Both sides of the point: each round's runs and the median of each figure over the rounds. */
export interface HandOffFigures {
  endpoint: { url: string; events: string[]; batch?: BatchSetting };
  rounds: {
    first: "plain" | "hooks";
    plain: PlainRun;
    hooks: HooksRun;
    floor: PostFloor;
    floorWide: PostFloor;
    floorKept?: PostFloor;
  }[];
  plain: Record<string, number>;
  hooks: Record<string, number>;
  /** The delivery floor (bench/lib/post-floor.ts) beside each round, and its medians. */
  floor: Record<string, number>;
  /** The same with {@link WIDE} in flight: what the six connections of one invocation cost. */
  floorWide: Record<string, number>;
  /** The same, six in flight, each delivery kept in D1 (absent from runs before it was measured). */
  floorKept?: Record<string, number>;
}

/** The wider floor's POSTs in flight. */
const WIDE = 24;

async function receiverLog(receiver: ReceiverProcess, counts: boolean): Promise<ReceiverLog> {
  return get(async () => (await fetch(`${receiver.url}/control/${ENDPOINT}${counts ? "?counts" : ""}`)).json());
}

async function d1Deliveries(server: WorkerServer, sku: string): Promise<D1Deliveries> {
  return get(() => benchRoute<D1Deliveries>(server, `/bench/deliveries/${sku}`));
}

/** An endpoint's batch setting (API.md v1.4 "Webhook batches"); null: one event a message. */
export type BatchSetting = { maxEvents: number; maxWaitMs: number } | null;

/** The endpoint on or off (off: the triggers write no deliveries, so the run is the plain pipeline). */
async function setEndpoint(server: WorkerServer, url: string, enabled: boolean, batch: BatchSetting = null) {
  return admin<{ secret: string; events: string[] }>(server, "PUT", `/admin/webhooks/${ENDPOINT}`, {
    url,
    enabled,
    batch,
  });
}

/**
 * A sale with the endpoint subscribed: the order pipeline's figures, then, once every order is a
 * row, the wait (bounded) until the receiver has a delivery for every change; then D1's record is
 * read and checked against the receiver's: every change delivered once, every delivery verified.
 */
async function hooksRun(
  bench: Bench,
  server: WorkerServer,
  receiver: ReceiverProcess,
  secret: string,
  batched = false,
) {
  // Events delivered: batched, each message carries several; alone, each verified request is one.
  const eventsOf = (seen: ReceiverLog) => (batched ? seen.events : seen.count);
  const reset = await fetch(`${receiver.url}/control/${ENDPOINT}`, {
    method: "PUT",
    body: JSON.stringify({ secret, keep: false }),
  });
  if (!reset.ok) throw new Error(`the webhook receiver's control: ${reset.status}`);
  const receiverMeter = cpuMeter([receiver.pid]);
  const { result, meter } = await pipelineRun(bench, server);
  const { changes } = await d1Deliveries(server, result.sku);
  const deadline = Date.now() + (bench.mode.quick ? 120_000 : 300_000);
  let seen = await receiverLog(receiver, true);
  let lastLog = Date.now();
  while (eventsOf(seen) < changes && Date.now() < deadline) {
    if (Date.now() - lastLog >= 1000) {
      log(`webhooks: ${eventsOf(seen)}/${changes} deliveries received`);
      lastLog = Date.now();
    }
    await sleep(100);
    seen = await receiverLog(receiver, true);
  }
  const cpu = meter.stop();
  const receiverCpu = receiverMeter.stop();
  // The sender records a page's outcomes after its last answer came: wait for the record too.
  let d1 = await d1Deliveries(server, result.sku);
  for (let i = 0; i < 100 && (d1.deliveries.pending?.count ?? 0) > 0; i++) {
    await sleep(100);
    d1 = await d1Deliveries(server, result.sku);
  }
  const got = await receiverLog(receiver, false);
  const lags = (got.lagsMs ?? []).map((lag) => Math.max(0, lag));
  const delivered = d1.deliveries.delivered;
  const wrong: string[] = [];
  if (changes !== result.rows) wrong.push(`${changes} order changes in D1 for ${result.rows} orders`);
  const events = batched ? got.events : got.verified;
  if (events !== changes) wrong.push(`receiver verified ${events} of ${changes} changes in time`);
  if (got.unverified !== 0) wrong.push(`receiver got ${got.unverified} requests that did not verify`);
  if (delivered?.count !== changes) wrong.push(`D1: ${delivered?.count ?? 0}/${changes} deliveries delivered`);
  for (const status of ["pending", "failed"])
    if (d1.deliveries[status]) wrong.push(`D1: ${d1.deliveries[status]?.count} deliveries ${status}`);
  if (delivered && delivered.attempts !== (batched ? got.events : got.count))
    wrong.push(
      `D1 counts ${delivered.attempts} attempts, the receiver ${batched ? `${got.events} events` : `${got.count} requests`}`,
    );
  if (wrong.length > 0) bench.problems.push(`webhooks (${result.sku}): ${wrong.join("; ")}`);
  const lastAt = got.lastAt ?? Number.NaN;
  const hooks: HooksRun = {
    ...result,
    changes,
    delivered: events,
    unverified: got.unverified,
    duplicates: Math.max(0, (batched ? got.events : got.count) - changes),
    messages: got.count,
    deliveriesPerSec: (events * 1000) / Math.max(1, lastAt - result.firstHoldAt),
    sendPerSec: (events * 1000) / Math.max(1, lastAt - (got.firstAt ?? Number.NaN)),
    deliveryLagP50Ms: percentile(lags, 50),
    deliveryLagP99Ms: percentile(lags, 99),
    deliveryLagMaxMs: percentile(lags, 100),
    deliveredMs: lastAt - result.firstHoldAt,
    cpuUsPerOrderDelivered: cpu / Math.max(1, result.rows),
    receiverCpuUsPerDelivery: receiverCpu / Math.max(1, got.count),
  };
  log(
    `webhooks: ${hooks.delivered}/${changes} delivered in ${hooks.messages} messages (${hooks.unverified} unverified, ${hooks.duplicates} twice), ${hooks.deliveriesPerSec.toFixed(0)}/s (sender ${hooks.sendPerSec.toFixed(0)}/s), delivery lag p50 ${hooks.deliveryLagP50Ms} ms p99 ${hooks.deliveryLagP99Ms} ms; workerd ${hooks.cpuUsPerOrderDelivered.toFixed(0)} µs CPU per order delivered, receiver ${hooks.receiverCpuUsPerDelivery.toFixed(0)} µs per delivery`,
  );
  return hooks;
}

/** The median of each numeric figure of `runs`. */
function medians(runs: object[]): Record<string, number> {
  const out: Record<string, number> = {};
  for (const [key, value] of Object.entries(runs[0] ?? {})) {
    if (typeof value !== "number") continue;
    const values = runs.map((run) => (run as Record<string, number>)[key] ?? Number.NaN).sort((a, b) => a - b);
    const mid = values.length / 2;
    out[key] =
      values.length % 2 ? (values[Math.floor(mid)] as number) : ((values[mid - 1] ?? 0) + (values[mid] ?? 0)) / 2;
  }
  return out;
}

/**
 * The order pipeline with the order hand-off at work (issue #30): one webhook endpoint subscribed to
 * every event type, at a receiver answering 204 in a process of its own (tools/webhook-receiver.ts,
 * checking each signature with `standardwebhooks`). Every order change writes its delivery in the
 * order batch's transaction (migration 0006's triggers); the sender in the same workerd POSTs them.
 * Beside it in each round, the same sale on the same Worker with the endpoint disabled (the plain
 * pipeline: no delivery rows, no wake-ups); which goes first alternates over `rounds`, and the
 * report takes each side's medians.
 */
export async function orderPipelineWebhooks(
  bench: Bench,
  server: WorkerServer,
  receiver: ReceiverProcess,
  floorWorker: BareWorker,
  keptWorker: BareWorker,
  rounds: number,
  /** `order_pipeline_webhook_batches`: the same with the endpoint batched (issue #53). */
  batch: BatchSetting = null,
): Promise<HandOffFigures> {
  const url = `${receiver.url}/hooks/${ENDPOINT}`;
  const endpoint = await setEndpoint(server, url, true, batch);
  // The Worker's first sale pays for its compiled code and warm caches, the sender's too: run one
  // unmeasured with the endpoint on, so that it weighs on neither side of round 1 (with it off, the
  // sender's code was first compiled in round 1's endpoint-on run).
  log("order hand-off: a warm-up sale, endpoint on, not measured");
  await hooksRun(bench, server, receiver, endpoint.secret, batch !== null);
  const runs: HandOffFigures["rounds"] = [];
  for (let round = 0; round < rounds; round++) {
    const first = round % 2 === 0 ? "plain" : "hooks";
    let plain: PlainRun | undefined;
    let hooks: HooksRun | undefined;
    for (const side of first === "plain" ? (["plain", "hooks"] as const) : (["hooks", "plain"] as const)) {
      log(
        `order hand-off round ${round + 1}/${rounds}: ${side === "plain" ? "endpoint disabled" : `one endpoint, every type${batch ? `, batches of up to ${batch.maxEvents}` : ""}`}`,
      );
      await setEndpoint(server, url, side === "hooks", batch);
      if (side === "plain") plain = (await pipelineRun(bench, server)).result;
      else hooks = await hooksRun(bench, server, receiver, endpoint.secret, batch !== null);
    }
    const posts = bench.mode.quick ? 5_000 : 20_000;
    const floor = await postFloor(floorWorker, receiver, endpoint.secret, posts);
    const floorWide = await postFloor(floorWorker, receiver, endpoint.secret, posts, WIDE);
    const floorKept = { ...(await postFloor(keptWorker, receiver, endpoint.secret, posts)), page: PAGE };
    if (plain && hooks) runs.push({ first, plain, hooks, floor, floorWide, floorKept });
  }
  await setEndpoint(server, url, false);
  const figures: HandOffFigures = {
    endpoint: { url, events: endpoint.events, ...(batch ? { batch } : {}) },
    rounds: runs,
    plain: medians(runs.map((r) => r.plain)),
    hooks: medians(runs.map((r) => r.hooks)),
    floor: medians(runs.map((r) => r.floor)),
    floorWide: medians(runs.map((r) => r.floorWide)),
    floorKept: medians(runs.map((r) => r.floorKept ?? {})),
  };
  if (batch) bench.figures.order_pipeline_webhook_batches = figures;
  else bench.figures.order_pipeline_webhooks = figures;
  return figures;
}

/**
 * `--profile`: where a delivery's CPU goes, before changing anything. One sale with the endpoint on
 * (batched with `batch`), on a Worker started with the inspector: the isolate's JavaScript by
 * function (the sender, the order consumer and the stock object share it) and `perf` over the whole
 * workerd (D1's SQLite, fetch's HTTP, the queue and the alarms included).
 */
export async function profiledHandOff(
  bench: Bench,
  server: WorkerServer,
  receiver: ReceiverProcess,
  batch: BatchSetting = null,
) {
  const url = `${receiver.url}/hooks/${ENDPOINT}`;
  const endpoint = await setEndpoint(server, url, true, batch);
  const js = await startProfile(server.inspectorPort ?? 0);
  const perf = startPerf(server.pid, bench.dir);
  const hooks = await hooksRun(bench, server, receiver, endpoint.secret, batch !== null);
  const profile = await perf.stop();
  const functions = await js.stop(40);
  await setEndpoint(server, url, false);
  const figure = { cpuUsPerOrderDelivered: hooks.cpuUsPerOrderDelivered, profile, functions };
  if (batch) bench.figures.order_pipeline_webhook_batches_profile = figure;
  else bench.figures.order_pipeline_webhooks_profile = figure;
}
