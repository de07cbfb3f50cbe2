import { connect } from "amqplib";
import { createConnection, type RowDataPacket } from "mysql2/promise";
import { shardTag } from "../../durable-objects/mirror/lua-script";
import { shardKeys } from "../../tools/lua";
import { cpuMeter } from "../../tools/proc";
import { configureRedisSku, type Redis, redisCounts } from "../lib/classic";
import {
  type ConsumerSettings,
  type ConsumerStats,
  type LineChild,
  type ProducerResult,
  type ProducerSettings,
  startLineChild,
} from "../lib/classic-pipeline";
import type { Bench } from "../lib/context";
import { log, percentile } from "../lib/log";
import { ensureService, MARIADB, RABBITMQ } from "../lib/services";

/** The figures of the point, or why it was skipped (a service that was not there and would not start). */
export type ClassicPipelineFigures =
  | { skipped: string }
  | {
      skipped?: undefined;
      reservations: number;
      held: number;
      rows: number;
      /** Rows ÷ (last row's write − first hold), as Flashgate's order_pipeline. */
      ordersPerSec: number;
      /** Rows ÷ (last row − first row): the consumer's rate once it started. */
      persistPerSec: number;
      lagP50Ms: number;
      lagP99Ms: number;
      lagMaxMs: number;
      saleMs: number;
      salePerSec: number;
      rowsAtSaleEnd: number;
      /** CPU µs per persisted order of every process of the pipeline, from the sale's start to the last row. */
      cpuUsPerOrder: number;
      /** The same by process: producer, consumer (Node), redis-server, RabbitMQ (beam.smp), MariaDB (mariadbd). */
      cpuUsPerOrderBy: Record<string, number>;
      /** The services' CPU when idle, µs per second, read just before the sale (part of the above). */
      idleCpuUsPerSec: Record<string, number>;
      consumer: ConsumerStats & { meanBatch: number };
      producer: ProducerResult;
      /** Services the bench had to start (they were not running), and the versions it ran against. */
      started: string[];
      versions: Record<string, string>;
    };

const AMQP_URL = "amqp://guest:guest@127.0.0.1:5672";
const MYSQL = { host: "127.0.0.1", port: 3306, user: "root", password: "", database: "test" };
/** As the Flashgate order pipeline's sale: ≤ 10,000 holds/s, in chunks of 640, 64 at a time. */
const SALE = { rate: 10_000, chunk: 640, group: 64 };

/**
 * The seeds' classic design end to end, with this machine's real services: holds by a Redis Lua
 * script that also writes the order message to an outbox stream in the same script (the seeds'
 * "local transaction" and its record), published to RabbitMQ on a confirm channel (persistent, to a
 * durable queue) by a producer process, its outbox entry deleted on the confirm and published again
 * by a check-back if none came (the seeds' RocketMQ half message and `checkLocalTransaction`), then a
 * consumer process writing each order into MariaDB idempotently by its primary key, acking after the
 * commit. The sale is paced and sized as Flashgate's order_pipeline; measured the same way: orders
 * persisted per second (first hold → last row), CPU µs per persisted order of all the pipeline's
 * processes (/proc), and each row's lag (its write − the hold's time, both in the row), read after.
 */
export async function classicPipeline(
  bench: Bench,
  redis: Redis,
  redisUrl: string,
  redisPid: number,
): Promise<ClassicPipelineFigures> {
  const skip = (reason: string) => {
    log(`classic pipeline skipped: ${reason}`);
    const fig = { skipped: reason };
    bench.figures.classic_pipeline = fig;
    return fig;
  };
  const rabbit = await ensureService(RABBITMQ);
  if (!rabbit.ok) return skip(rabbit.reason);
  const maria = await ensureService(MARIADB);
  if (!maria.ok) return skip(maria.reason);
  const started = [...(rabbit.started ? [RABBITMQ.name] : []), ...(maria.started ? [MARIADB.name] : [])];

  const n = bench.mode.orderReservations;
  const run = `cp${Date.now().toString(36)}`;
  const sku = `classic-pipeline-${run}`;
  const queue = `flashgate-bench-orders-${run}`;
  const table = `flashgate_bench_orders_${run}`;
  const keys = shardKeys(sku, 0);
  const outboxKey = `${shardTag(sku, 0)}:outbox`;

  let db: Awaited<ReturnType<typeof createConnection>>;
  let amqp: Awaited<ReturnType<typeof connect>>;
  try {
    db = await createConnection(MYSQL);
    amqp = await connect(AMQP_URL);
  } catch (err) {
    return skip(`cannot connect to RabbitMQ (${AMQP_URL}) or MariaDB (root@127.0.0.1:3306/test): ${String(err)}`);
  }
  const children: LineChild[] = [];
  try {
    const versions = {
      rabbitmq: String(amqp.connection.serverProperties.version ?? "?"),
      mariadb: String(((await db.query<RowDataPacket[]>("SELECT VERSION() AS v"))[0][0] as { v: string }).v),
    };
    const setup = await amqp.createChannel();
    await setup.assertQueue(queue, { durable: true });
    await db.query(
      `CREATE TABLE \`${table}\` (
        id VARCHAR(128) NOT NULL PRIMARY KEY,
        sku VARCHAR(128) NOT NULL,
        user_id VARCHAR(128) NOT NULL,
        quantity INT NOT NULL,
        created_at BIGINT NOT NULL COMMENT 'the hold, epoch ms (Redis script now)',
        persisted_at BIGINT NOT NULL DEFAULT (ROUND(UNIX_TIMESTAMP(CURRENT_TIMESTAMP(3)) * 1000)) COMMENT 'the INSERT, epoch ms'
      ) ENGINE=InnoDB`,
    );
    await configureRedisSku(redis, sku, n * 2);

    const consumerSettings: ConsumerSettings = {
      amqpUrl: AMQP_URL,
      queue,
      mysql: MYSQL,
      table,
      prefetch: 1024,
      maxBatch: 256,
    };
    const producerSettings: ProducerSettings = {
      redisUrl,
      amqpUrl: AMQP_URL,
      queue,
      sku,
      keys,
      outboxKey,
      reservations: n,
      ...SALE,
      run,
      checkBackMs: 5000,
    };
    const consumer = startLineChild("classic-consumer.ts", consumerSettings);
    children.push(consumer);
    const producer = startLineChild("classic-producer.ts", producerSettings);
    children.push(producer);
    await Promise.all([consumer, producer].map((c) => c.next((m) => m.ready === true, 30_000)));
    let stats: ConsumerStats = { persisted: 0, duplicates: 0, batches: 0 };
    consumer.onLine((m) => {
      if (m.stats) stats = m.stats as ConsumerStats;
    });

    const groups: Record<string, number[]> = {
      producer: [producer.pid],
      consumer: [consumer.pid],
      "redis-server": [redisPid],
      "RabbitMQ (beam.smp)": rabbit.pids,
      "MariaDB (mariadbd)": maria.pids,
    };
    // The services' idle CPU (they are the machine's, and may do work of their own), for the record.
    const idle = Object.entries(groups).map(([name, pids]) => [name, cpuMeter(pids)] as const);
    await new Promise((resolve) => setTimeout(resolve, 1000));
    const idleCpuUsPerSec = Object.fromEntries(idle.map(([name, meter]) => [name, meter.stop()]));

    log(
      `classic pipeline: a sale of ${n} holds (Redis Lua + outbox) paced at ≤ ${SALE.rate}/s, RabbitMQ ${versions.rabbitmq} with confirms, MariaDB ${versions.mariadb}${started.length ? ` (started by the bench: ${started.join(", ")})` : ""}`,
    );
    const meters = Object.entries(groups).map(([name, pids]) => [name, cpuMeter(pids)] as const);
    const done = producer.next<{ done: ProducerResult }>((m) => m.done !== undefined, 120_000);
    producer.send("start");
    const sale = (await done).done;
    const rowsAtSaleEnd = stats.persisted;
    const deadline = Date.now() + (bench.mode.quick ? 60_000 : 180_000);
    let lastLog = 0;
    while (stats.persisted < sale.ok && Date.now() < deadline) {
      if (Date.now() - lastLog >= 1000) {
        log(`classic pipeline: ${stats.persisted}/${sale.ok} order rows in MariaDB`);
        lastLog = Date.now();
      }
      await new Promise((resolve) => setTimeout(resolve, 20));
    }
    const cpu = Object.fromEntries(meters.map(([name, meter]) => [name, meter.stop()]));
    consumer.send("stats");
    stats = (await consumer.next<{ stats: ConsumerStats }>((m) => m.stats !== undefined, 5000)).stats;

    // What was persisted, read after the run (the meters are stopped).
    const [[summary]] = await db.query<RowDataPacket[]>(
      `SELECT COUNT(*) AS n, COUNT(DISTINCT id) AS ids, COUNT(DISTINCT user_id) AS users,
              MIN(created_at) AS firstHold, MIN(persisted_at) AS firstRow, MAX(persisted_at) AS lastRow
         FROM \`${table}\``,
    );
    const s = summary as {
      n: number;
      ids: number;
      users: number;
      firstHold: string;
      firstRow: string;
      lastRow: string;
    };
    const [lagRows] = await db.query<RowDataPacket[]>(`SELECT persisted_at - created_at AS lag FROM \`${table}\``);
    const lags = lagRows.map((r) => Math.max(0, Number((r as { lag: number }).lag)));
    const rows = Number(s.n);
    const firstHold = Number(s.firstHold);
    const firstRow = Number(s.firstRow);
    const lastRow = Number(s.lastRow);
    const counts = await redisCounts(redis, sku);
    const outboxLeft = await redis.xLen(outboxKey);
    const queued = (await setup.checkQueue(queue)).messageCount;

    // Correctness: one row per acknowledged hold, none twice, Redis agreeing, nothing left in flight.
    const problem = (p: string) => bench.problems.push(`classic pipeline: ${p}`);
    if (sale.ok !== n || Object.keys(sale.rejected).length > 0)
      problem(`sale ${sale.ok}/${n} ok, rejected ${JSON.stringify(sale.rejected)}`);
    if (rows !== sale.ok) problem(`${rows} rows in MariaDB for ${sale.ok} holds`);
    if (Number(s.ids) !== rows || Number(s.users) !== rows)
      problem(`${rows} rows, ${s.ids} distinct ids, ${s.users} distinct users`);
    if (counts.held !== sale.ok) problem(`Redis holds ${counts.held}, the producer saw ${sale.ok}`);
    if (sale.confirmed < sale.ok) problem(`${sale.confirmed} confirms for ${sale.ok} holds`);
    if (outboxLeft !== 0) problem(`${outboxLeft} outbox entries left in Redis`);
    if (queued !== 0) problem(`${queued} messages left in the queue`);

    const total = Object.values(cpu).reduce((a, b) => a + b, 0);
    const perOrder = (us: number) => us / Math.max(1, rows);
    const fig: ClassicPipelineFigures = {
      reservations: n,
      held: sale.ok,
      rows,
      ordersPerSec: (rows * 1000) / Math.max(1, lastRow - firstHold),
      persistPerSec: (rows * 1000) / Math.max(1, lastRow - firstRow),
      lagP50Ms: percentile(lags, 50),
      lagP99Ms: percentile(lags, 99),
      lagMaxMs: percentile(lags, 100),
      saleMs: sale.saleMs,
      salePerSec: (n * 1000) / Math.max(1, sale.saleMs),
      rowsAtSaleEnd,
      cpuUsPerOrder: perOrder(total),
      cpuUsPerOrderBy: Object.fromEntries(Object.entries(cpu).map(([name, us]) => [name, perOrder(us)])),
      idleCpuUsPerSec,
      consumer: { ...stats, meanBatch: stats.persisted / Math.max(1, stats.batches) },
      producer: sale,
      started,
      versions,
    };
    log(
      `classic pipeline: ${rows} rows, ${fig.ordersPerSec.toFixed(0)} orders/s (consumer ${fig.persistPerSec.toFixed(0)}/s), lag p50 ${fig.lagP50Ms} ms p99 ${fig.lagP99Ms} ms, ${fig.cpuUsPerOrder.toFixed(0)} µs CPU per order (${Object.entries(
        fig.cpuUsPerOrderBy,
      )
        .map(([name, us]) => `${name} ${us.toFixed(0)}`)
        .join(", ")}), mean batch ${fig.consumer.meanBatch.toFixed(1)}, ${stats.duplicates} duplicates absorbed`,
    );
    bench.figures.classic_pipeline = fig;
    return fig;
  } catch (err) {
    // A failure of the point is a problem of the run, not the end of the bench.
    bench.problems.push(`classic pipeline failed: ${String(err).slice(0, 300)}`);
    const fig = { skipped: `failed: ${String(err).slice(0, 300)}` };
    bench.figures.classic_pipeline = fig;
    return fig;
  } finally {
    for (const child of children) await child.stop();
    const cleanup = await amqp.createChannel().catch(() => undefined);
    await cleanup?.deleteQueue(queue).catch(() => undefined);
    await db.query(`DROP TABLE IF EXISTS \`${table}\``).catch(() => undefined);
    await amqp.close().catch(() => undefined);
    await db.end().catch(() => undefined);
  }
}
