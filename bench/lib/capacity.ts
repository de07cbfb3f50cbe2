import { readFileSync } from "node:fs";
import { fileURLToPath } from "node:url";
import { MAX_EVENTS_PER_MESSAGE } from "../../durable-objects/shared/order-events";
import { type CapacitySimulation, capacitySimulation, simulationLines } from "./capacity-sim";
import { log } from "./log";

/**
 * The capacity model: what one SKU of N shards (by simulation, bench/lib/capacity-sim.ts), one queue
 * and one D1 database sustain on Cloudflare, from this run's measured figures (engine core, the
 * hot-SKU point, order pipeline) and the documented platform limits below. Printed by the bench, kept in bench/results.json (`capacity`),
 * rendered into docs/PERFORMANCE.md by bench/report.ts.
 */

/** A documented limit the model rests on, with the page that documents it. */
export interface Limit {
  value: number;
  unit: string;
  what: string;
  source: string;
}

export const LIMITS = {
  objectRequestsPerSec: {
    value: 1_000,
    unit: "requests/s",
    what: "Durable Object: soft limit per individual object (one thread; an overloaded object queues, then answers `overloaded`)",
    source: "https://developers.cloudflare.com/durable-objects/platform/limits/",
  },
  queueMessagesPerSec: {
    value: 5_000,
    unit: "messages/s",
    what: "Queues: message throughput per queue (beyond it send()/sendBatch() throw Too Many Requests)",
    source: "https://developers.cloudflare.com/queues/platform/limits/",
  },
  queueBatchMessages: {
    value: 100,
    unit: "messages",
    what: "Queues: maximum consumer batch size (max_batch_size); also messages per sendBatch (or 256 KB)",
    source: "https://developers.cloudflare.com/queues/platform/limits/",
  },
  queueMessageBytes: {
    value: 128_000,
    unit: "bytes",
    what: "Queues: message size",
    source: "https://developers.cloudflare.com/queues/platform/limits/",
  },
  queueConcurrency: {
    value: 250,
    unit: "invocations",
    what: "Queues: concurrent consumer invocations (push consumers; max_concurrency caps it lower)",
    source: "https://developers.cloudflare.com/queues/configuration/consumer-concurrency/",
  },
  d1BoundParameters: {
    value: 100,
    unit: "parameters",
    what: "D1: bound parameters per statement (each statement of a batch)",
    source: "https://developers.cloudflare.com/d1/platform/limits/",
  },
  d1QueriesPerInvocation: {
    value: 1_000,
    unit: "queries",
    what: "D1: queries per Worker invocation (Workers Paid)",
    source: "https://developers.cloudflare.com/d1/platform/limits/",
  },
  d1Threads: {
    value: 1,
    unit: "thread",
    what: "D1: each database is single-threaded and runs one query (a batch: one transaction) at a time, so its throughput is 1 ÷ the time per write",
    source: "https://developers.cloudflare.com/d1/platform/limits/",
  },
} satisfies Record<string, Limit>;

/** Reservations per second per SKU the model sizes shards for (issue 15). */
export const TARGET_PER_SKU = 100_000;

/** The consumer settings of `order-events` in wrangler.toml (the model uses what is deployed). */
function consumerSettings(): { maxBatchSize: number; maxConcurrency: number | null } {
  const toml = readFileSync(fileURLToPath(new URL("../../wrangler.toml", import.meta.url)), "utf8");
  const block =
    toml
      .split("[[queues.consumers]]")
      .slice(1)
      .find((b) => /queue\s*=\s*"order-events"/.test(b)) ?? "";
  const num = (key: string) => {
    const m = new RegExp(`^${key}\\s*=\\s*(\\d+)`, "m").exec(block);
    return m ? Number(m[1]) : null;
  };
  return { maxBatchSize: num("max_batch_size") ?? 10, maxConcurrency: num("max_concurrency") };
}

interface EngineFigures {
  /** Wall-clock rate in this run (shown beside; the model uses CPU per reservation). */
  perSec: number;
  cpuUsPerReservation: number;
  batch: number;
}
interface PipelineFigures {
  persistPerSec: number;
  pipelineCpuUsPerOrder: number;
  rows: number;
}

export interface Capacity {
  target: number;
  limits: typeof LIMITS;
  inputs: {
    engine: EngineFigures | null;
    pipeline: PipelineFigures | null;
    eventsPerMessage: number;
    consumer: { maxBatchSize: number; maxConcurrency: number | null };
  };
  /** A spike on one SKU of 1–64 shards, simulated (replaces the static one-object table). */
  simulation: CapacitySimulation;
  queue: {
    messagesPerSec: number;
    eventsPerMessage: number;
    eventsPerSec: number;
    /** The same queue if every event were its own message (the format before). */
    eventsPerSecOneEventPerMessage: number;
    eventsPerDelivery: number;
    /** Messages/s the target's held events need, and whether one queue carries them. */
    messagesForTarget: number;
    oneQueueCarriesTarget: boolean;
  };
  d1: {
    /** Orders/s one database's single thread takes: 1e6 ÷ the pipeline's CPU µs per order here. */
    ordersPerSec: number;
    /** The consumer's wall-clock rate in this run (the machine's other load included). */
    measuredOrdersPerSec: number;
    cpuUsPerOrder: number;
    /** Statements one full delivery writes (ids 33 a statement, orders 11), within the invocation's queries. */
    statementsPerDelivery: number;
    /** Seconds D1 takes to persist one second of the target (the queue holds the rest meanwhile). */
    secondsToPersistOneSecondAtTarget: number;
  } | null;
}

export function capacityModel(figures: Record<string, unknown>, points: Record<string, unknown> = {}): Capacity {
  // The engine core as the object runs on Cloudflare: alone in its workerd, its commit not waiting
  // for a local fsync (bench/run.ts).
  const engine = (figures.engine_core as EngineFigures | undefined) ?? null;
  // The pipeline's CPU per order needs the object's share measured in the same run (the engine core).
  const measured = figures.order_pipeline as PipelineFigures | undefined;
  const pipeline = measured && Number.isFinite(measured.pipelineCpuUsPerOrder) ? measured : null;
  const consumer = consumerSettings();
  const eventsPerMessage = MAX_EVENTS_PER_MESSAGE;

  const simulation = capacitySimulation(figures, points, LIMITS.objectRequestsPerSec.value);

  const eventsPerDelivery = consumer.maxBatchSize * eventsPerMessage;
  const queue = {
    messagesPerSec: LIMITS.queueMessagesPerSec.value,
    eventsPerMessage,
    eventsPerSec: LIMITS.queueMessagesPerSec.value * eventsPerMessage,
    eventsPerSecOneEventPerMessage: LIMITS.queueMessagesPerSec.value,
    eventsPerDelivery,
    messagesForTarget: Math.ceil(TARGET_PER_SKU / eventsPerMessage),
    oneQueueCarriesTarget: TARGET_PER_SKU / eventsPerMessage <= LIMITS.queueMessagesPerSec.value,
  };
  // D1 is one thread too: the local pipeline's CPU per order (queue broker, consumer and D1's SQLite
  // together, so an upper bound of D1's own share) gives what one thread's worth of it persists.
  const d1Rate = pipeline ? 1e6 / pipeline.pipelineCpuUsPerOrder : Number.NaN;
  const d1 = pipeline
    ? {
        ordersPerSec: d1Rate,
        measuredOrdersPerSec: pipeline.persistPerSec,
        cpuUsPerOrder: pipeline.pipelineCpuUsPerOrder,
        statementsPerDelivery: Math.ceil(eventsPerDelivery / 33) + Math.ceil(eventsPerDelivery / 11),
        secondsToPersistOneSecondAtTarget: TARGET_PER_SKU / d1Rate,
      }
    : null;
  return {
    target: TARGET_PER_SKU,
    limits: LIMITS,
    inputs: { engine, pipeline, eventsPerMessage, consumer },
    simulation,
    queue,
    d1,
  };
}

const n0 = (v: number) => Math.round(v).toLocaleString("en-US");

/** The model as lines for the bench's output. */
export function printCapacity(c: Capacity): void {
  log("capacity model (Cloudflare), from this run's figures and the documented limits:");
  for (const line of simulationLines(c.simulation)) log(`  ${line}`);
  log(
    `  one queue: ${n0(c.queue.messagesPerSec)} messages/s × ${c.queue.eventsPerMessage} events = ${n0(c.queue.eventsPerSec)} events/s (one event per message: ${n0(c.queue.eventsPerSecOneEventPerMessage)}); ${n0(c.target)} holds/s need ${n0(c.queue.messagesForTarget)} messages/s`,
  );
  if (c.d1)
    log(
      `  one D1 database (single-threaded): ~${n0(c.d1.ordersPerSec)} orders/s (1e6 ÷ ${c.d1.cpuUsPerOrder.toFixed(0)} µs workerd CPU per order; ${n0(c.d1.measuredOrdersPerSec)}/s wall-clock here); one second at ${n0(c.target)}/s takes ${c.d1.secondsToPersistOneSecondAtTarget.toFixed(1)} s to persist (the queue holds the backlog)`,
    );
  else log("  D1: order_pipeline not measured in this run");
}
