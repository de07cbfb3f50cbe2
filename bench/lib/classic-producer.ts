// The classic pipeline's producer (bench point `classic_pipeline`), in a Node process of its own:
// holds in Redis by one Lua script that also writes the order message to the shard's outbox stream,
// then publishes each message to RabbitMQ on a confirm channel (persistent, durable queue) and, once
// the broker confirms it, deletes its outbox entry. A check-back (the seeds' RocketMQ broker asking
// `checkLocalTransaction`) publishes again any outbox entry older than `checkBackMs`: a message whose
// publish or confirm was lost is recovered from Redis, and the consumer's unique key absorbs a repeat.
// Run: node --import tsx bench/lib/classic-producer.ts '<ProducerSettings JSON>'; writes {"ready":true},
// waits for "start" on stdin, runs the sale, writes {"done":…ProducerResult}; exits when stdin ends.
import { createInterface } from "node:readline";
import { connect } from "amqplib";
import { createClient } from "redis";
import {
  HOLD_WITH_OUTBOX,
  HOLD_WITH_OUTBOX_SHA1,
  type OrderMessage,
  type ProducerResult,
  type ProducerSettings,
} from "./classic-pipeline";

const settings = JSON.parse(process.argv[2] ?? "{}") as ProducerSettings;
const write = (msg: object) => process.stdout.write(`${JSON.stringify(msg)}\n`);
const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

const redis = createClient({ url: settings.redisUrl });
await redis.connect();
if ((await redis.scriptLoad(HOLD_WITH_OUTBOX)) !== HOLD_WITH_OUTBOX_SHA1)
  throw new Error("SCRIPT LOAD: unexpected SHA1");
const amqp = await connect(settings.amqpUrl);
const channel = await amqp.createConfirmChannel();
await channel.checkQueue(settings.queue);

const result: ProducerResult = {
  ok: 0,
  rejected: {},
  published: 0,
  confirmed: 0,
  nacked: 0,
  republished: 0,
  firstHoldAt: 0,
  saleMs: 0,
  confirmedMs: 0,
};
/** Outbox entries whose message the broker confirmed: deleted from the stream once per group. */
let confirmedIds: string[] = [];
const inFlight = new Set<Promise<void>>();

/** Publishes one order message, persistent, and on the broker's confirm marks its outbox entry done. */
async function publish(outboxId: string, body: string): Promise<void> {
  const id = (JSON.parse(body) as OrderMessage).id;
  let ok = true;
  const confirm = new Promise<void>((resolve) => {
    ok = channel.sendToQueue(
      settings.queue,
      Buffer.from(body),
      { persistent: true, messageId: id, contentType: "application/json" },
      (err) => {
        if (err)
          result.nacked++; // left in the outbox: the check-back publishes it again
        else {
          result.confirmed++;
          confirmedIds.push(outboxId);
        }
        resolve();
      },
    );
  });
  result.published++;
  inFlight.add(confirm);
  void confirm.then(() => inFlight.delete(confirm));
  // The channel's buffer is full: wait for it to drain before the next publish (back-pressure).
  if (!ok) await new Promise<void>((drained) => channel.once("drain", () => drained()));
}

async function deleteConfirmed(): Promise<void> {
  if (confirmedIds.length === 0) return;
  const ids = confirmedIds;
  confirmedIds = [];
  await redis.xDel(settings.outboxKey, ids);
}

/** The check-back: outbox entries older than `checkBackMs` (stream ids are ms timestamps) published again. */
async function checkBack(olderThanMs: number): Promise<void> {
  const stale = await redis.xRange(settings.outboxKey, "-", String(Date.now() - olderThanMs), { COUNT: 1000 });
  for (const entry of stale) {
    const body = entry.message.m;
    if (typeof body !== "string") continue;
    result.republished++;
    await publish(entry.id, body);
  }
}

async function hold(i: number): Promise<void> {
  const now = Date.now();
  if (result.firstHoldAt === 0) result.firstHoldAt = now;
  const id = `${settings.sku}.0.${settings.run}${i.toString(36).padStart(6, "0")}`;
  const user = `u-${settings.run}-${i}`;
  const raw = await redis.evalSha(HOLD_WITH_OUTBOX_SHA1, {
    keys: [...settings.keys, settings.outboxKey],
    arguments: [String(now), id, user, `n-${settings.run}-${i}`, "1"],
  });
  const answer = JSON.parse(String(raw)) as { ok: boolean; code?: string; outbox?: string; body?: string };
  if (!answer.ok) {
    const code = answer.code ?? "?";
    result.rejected[code] = (result.rejected[code] ?? 0) + 1;
    return;
  }
  result.ok++;
  if (answer.outbox && answer.body) await publish(answer.outbox, answer.body);
}

/** The sale, paced as the Flashgate order pipeline's (bench/scenarios/order-pipeline.ts `pacedSale`). */
async function sale(): Promise<void> {
  const t0 = Date.now();
  let lastCheck = t0;
  const n = settings.reservations;
  for (let i = 0; i < n; i += settings.chunk) {
    const due = t0 + (i * 1000) / settings.rate;
    if (Date.now() < due) await sleep(due - Date.now());
    const end = Math.min(n, i + settings.chunk);
    for (let g = i; g < end; g += settings.group) {
      const group: Promise<void>[] = [];
      for (let k = g; k < Math.min(end, g + settings.group); k++) group.push(hold(k));
      await Promise.all(group); // node-redis pipelines the group's EVALSHAs on its one connection
      await deleteConfirmed();
    }
    if (Date.now() - lastCheck >= 1000) {
      lastCheck = Date.now();
      await checkBack(settings.checkBackMs);
    }
  }
  result.saleMs = Date.now() - t0;
  while (inFlight.size > 0) await Promise.all([...inFlight]);
  result.confirmedMs = Date.now() - t0;
  await deleteConfirmed();
  // What is left in the outbox had no confirm: the check-back's last pass publishes it, at any age.
  await checkBack(0);
  while (inFlight.size > 0) await Promise.all([...inFlight]);
  await deleteConfirmed();
}

const lines = createInterface({ input: process.stdin });
lines.on("line", (line) => {
  if (line.trim() !== "start") return;
  sale().then(
    () => write({ done: result }),
    (err: unknown) => write({ error: String(err) }),
  );
});
lines.on("close", async () => {
  await channel.close().catch(() => undefined);
  await amqp.close().catch(() => undefined);
  await redis.close().catch(() => undefined);
  process.exit(0);
});
write({ ready: true });
