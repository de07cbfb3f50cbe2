// The classic pipeline's consumer (bench point `classic_pipeline`), in a Node process of its own:
// takes order messages from RabbitMQ (manual acks, a prefetch window), writes them into MariaDB in
// multi-row INSERTs, each one autocommit transaction (InnoDB, a log flush per commit as configured),
// idempotent by the primary key (ON DUPLICATE KEY UPDATE id = id: a repeat changes nothing), and
// acknowledges the batch only after its commit. One INSERT at a time: what arrives meanwhile is the
// next batch (a group commit, as Flashgate's queue consumer writes D1 a batch at a time).
// Run: node --import tsx bench/lib/classic-consumer.ts '<ConsumerSettings JSON>'; writes {"ready":true},
// then {"stats":…ConsumerStats} at most every 100 ms while it writes and on a "stats" line; exits when stdin ends.
import { createInterface } from "node:readline";
import { type ConsumeMessage, connect } from "amqplib";
import { createConnection, type ResultSetHeader } from "mysql2/promise";
import type { ConsumerSettings, ConsumerStats, OrderMessage } from "./classic-pipeline";

const settings = JSON.parse(process.argv[2] ?? "{}") as ConsumerSettings;
const write = (msg: object) => process.stdout.write(`${JSON.stringify(msg)}\n`);

// Without FOUND_ROWS, a duplicate that ON DUPLICATE KEY leaves unchanged counts 0 affected rows.
const db = await createConnection({ ...settings.mysql, flags: ["-FOUND_ROWS"] });
const amqp = await connect(settings.amqpUrl);
const channel = await amqp.createChannel();
await channel.prefetch(settings.prefetch);

const stats: ConsumerStats = { persisted: 0, duplicates: 0, batches: 0 };
const sql = `INSERT INTO \`${settings.table}\` (id, sku, user_id, quantity, created_at) VALUES ? ON DUPLICATE KEY UPDATE id = id`;
let pending: ConsumeMessage[] = [];
let writing = false;
let lastReport = 0;
let trailing: NodeJS.Timeout | undefined;

/** The stats at most every 100 ms, and once more 100 ms after the last batch (the bench waits for it). */
function report(): void {
  if (trailing) return;
  const wait = Math.max(0, lastReport + 100 - Date.now());
  trailing = setTimeout(() => {
    trailing = undefined;
    lastReport = Date.now();
    write({ stats });
  }, wait);
}

async function drain(): Promise<void> {
  writing = true;
  try {
    while (pending.length > 0) {
      const batch = pending.slice(0, settings.maxBatch);
      pending = pending.slice(batch.length);
      const rows = batch.map((m) => {
        const o = JSON.parse(m.content.toString()) as OrderMessage;
        return [o.id, o.sku, o.userId, o.quantity, o.createdAt];
      });
      const [header] = await db.query<ResultSetHeader>(sql, [rows]);
      // Committed (autocommit): now, and only now, the broker may forget these messages. Deliveries
      // are in order on this one channel and batches are written in order, so `allUpTo` acks exactly
      // this batch and the ones before it, all committed.
      const last = batch[batch.length - 1];
      if (last) channel.ack(last, true);
      stats.persisted += batch.length;
      stats.duplicates += batch.length - header.affectedRows;
      stats.batches++;
      report();
    }
  } catch (err) {
    write({ error: String(err) });
  } finally {
    writing = false;
  }
}

await channel.consume(
  settings.queue,
  (msg) => {
    if (!msg) return;
    pending.push(msg);
    if (!writing) setImmediate(() => void (writing ? undefined : drain()));
  },
  { noAck: false },
);

const lines = createInterface({ input: process.stdin });
lines.on("line", (line) => {
  if (line.trim() === "stats") write({ stats });
});
lines.on("close", async () => {
  await channel.close().catch(() => undefined);
  await amqp.close().catch(() => undefined);
  await db.end().catch(() => undefined);
  process.exit(0);
});
write({ ready: true });
