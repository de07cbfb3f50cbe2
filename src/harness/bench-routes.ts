import { Hono } from "hono";
import { z } from "zod";
import {
  type Outcome,
  type ReserveAnswer,
  type ReserveRequest,
  shardName,
} from "../../durable-objects/stock/stock-model";
import { gathererName } from "../edge/gather-name";
import { checkProofOfWork } from "../edge/proof-of-work";
import { newNonce } from "../edge/purchase-token";
import { readJson } from "../http/body";
import type { AppEnv } from "../http/context";
import { ApiError } from "../http/errors";
import { SKU_ID, stockShard } from "../stock/stock-client";
import type { HarnessStock } from "./harness-stock";

/**
 * Bench-only routes for `npm run bench` (bench/): measurements that must run inside workerd, next
 * to the stock objects. Gated exactly like the dev routes: every `/bench/*` path answers
 * `404 NOT_FOUND` unless the var `DEV_TOOLS` is "true" (.dev.vars only, never in production).
 *
 * - `POST /bench/engine`: drives `count` fresh reservations (distinct users, one unit each) through the
 *   stock object's `reserve(requests[])` RPC in batches of `batch`, `concurrency` RPCs in flight, no
 *   HTTP in between, and returns the elapsed time and every RPC's duration. `via: "gatherer"` sends
 *   each batch through the shard's gatherer instead (bench/scenarios/gather-core.ts: its cost per call).
 * - `GET /bench/orders/:sku`: when each D1 order row of a SKU was first written (the consumer's
 *   `processed_events.processed_at`) and when its hold was created, to measure the lag from hold to row.
 * - `GET /bench/deliveries/:sku`: the order changes of a SKU's orders in D1 and their webhook deliveries
 *   by status (with attempts made and the first row's and last outcome's time), to check that every
 *   change was delivered once (bench/scenarios/order-pipeline.ts).
 * - `GET /bench/stock/:sku/:shard/stats`: a stock object's rows read and SQL statements so far, database
 *   size and rows per table (scripts/soak.ts, the engine core).
 * - `POST /bench/pow-check`: checks one solved proof of work `count` times (and, with `floor`, only
 *   parses the header as many times), so the bench reads the Worker's CPU per check from /proc.
 * - `POST /bench/stock/:sku/:shard/fill`: fills a stock object with live holds or paid users' quotas
 *   (the bench's memory figures; see `harnessFill` in harness-stock.ts).
 */
export const bench = new Hono<AppEnv>();

const EngineRequest = z.object({
  sku: z.string().regex(/^[A-Za-z0-9_-]{1,64}$/),
  shard: z.int().min(0).max(63).default(0),
  count: z.int().min(1).max(200_000),
  batch: z.int().min(1).max(256),
  concurrency: z.int().min(1).max(256),
  /** Distinguishes the users of one run from another's (per-user limits). */
  run: z.string().regex(/^[A-Za-z0-9_-]{1,32}$/),
  /** "gatherer": each batch through the shard's gatherer (GATHER), which passes it on as one RPC. */
  via: z.enum(["stock", "gatherer"]).default("stock"),
});

bench.use("/bench/*", async (c, next) => {
  if (c.env.DEV_TOOLS !== "true") throw new ApiError("NOT_FOUND");
  await next();
});

const PowCheckRequest = z.object({
  header: z.string().max(1024),
  userId: z.string().max(128),
  sku: z.string().max(64),
  bits: z.int().min(0).max(28),
  count: z.int().min(1).max(1_000_000),
  /** Only split the header as the check does first: the loop's own cost. */
  floor: z.boolean().default(false),
});

bench.post("/bench/pow-check", async (c) => {
  const body = await readJson(c, PowCheckRequest);
  const expected = { userId: body.userId, sku: body.sku, bits: body.bits };
  const now = Date.now();
  let passed = 0;
  for (let i = 0; i < body.count; i++) {
    if (body.floor) passed += body.header.lastIndexOf(":") > 0 ? 1 : 0;
    else if (await checkProofOfWork(body.header, c.env.TOKEN_SECRET, expected, now)) passed++;
  }
  return c.json({ passed });
});

bench.post("/bench/engine", async (c) => {
  const body = await readJson(c, EngineRequest);
  const stock = shardName(body.sku, body.shard);
  const gatherer = c.env.GATHERER.getByName(gathererName(stock, undefined));
  const stub = stockShard(c.env, body.sku, body.shard);
  const reserve = (requests: ReserveRequest[]): Promise<Outcome<ReserveAnswer>[]> =>
    body.via === "gatherer" ? gatherer.reserve(stock, requests) : stub.reserve(requests);
  const batches: ReserveRequest[][] = [];
  for (let i = 0; i < body.count; i += body.batch) {
    const size = Math.min(body.batch, body.count - i);
    batches.push(
      Array.from({ length: size }, (_, k) => ({ userId: `${body.run}-${i + k}`, nonce: newNonce(), quantity: 1 })),
    );
  }
  const codes: Record<string, number> = {};
  const rpcMs: number[] = [];
  let ok = 0;
  let next = 0;
  const lane = async () => {
    for (let b = next++; b < batches.length; b = next++) {
      const requests = batches[b] ?? [];
      const t0 = performance.now();
      const answers = await reserve(requests);
      rpcMs.push(performance.now() - t0);
      // Let workerd's event loop go idle once per batch: its timers fire only then, and Miniflare's
      // queue broker sets one per message sent (its limit is 10,000 active), so a loop of RPCs that
      // never idles fills it with the outbox's messages and the broker fails every send after.
      await scheduler.wait(0);
      for (const answer of answers) {
        if (answer.ok) ok++;
        else codes[answer.code] = (codes[answer.code] ?? 0) + 1;
      }
    }
  };
  const started = performance.now();
  await Promise.all(Array.from({ length: Math.min(body.concurrency, batches.length) }, lane));
  const elapsedMs = performance.now() - started;
  return c.json({ elapsedMs, ok, rejected: codes, rpcs: batches.length, rpcMs });
});

const DrawRequest = z.object({
  sku: z.string().regex(/^[A-Za-z0-9_-]{1,64}$/),
  shard: z.int().min(0).max(63).default(0),
  phase: z.enum(["enter", "decide", "wait", "close", "start", "answers"]),
  count: z.int().min(1).max(200_000).default(1),
  run: z
    .string()
    .regex(/^[A-Za-z0-9_-]{1,32}$/)
    .default("draw"),
});

/**
 * Bench points `draw_decide` and `draw_decide_sharded` (bench/scenarios/draw.ts), on shard `shard`:
 * `enter` fills a SKU's opening window with `count` entrants, `decide` decides its draw as the alarm
 * would; the driver times each call and reads workerd's CPU and memory around it. For a sharded
 * draw with waiting requests: `wait` starts one per entrant of a run, `close` sets a sibling's clock
 * to the close, `start` starts shard 0's alarm without waiting for it, `answers` counts the answers.
 */
bench.post("/bench/draw", async (c) => {
  const body = await readJson(c, DrawRequest);
  const stub = stockShard(c.env, body.sku, body.shard) as unknown as DurableObjectStub<HarnessStock>;
  switch (body.phase) {
    case "enter":
      return c.json({ entered: await stub.benchDrawEnter(body.run, body.count) });
    case "wait":
      return c.json({ waiting: await stub.benchDrawWait(body.run, body.count) });
    case "close":
      await stub.benchDrawClose();
      return c.json({ closed: true });
    case "start":
      await stub.benchDrawStart();
      return c.json({ started: true });
    case "answers":
      return c.json(await stub.benchDrawAnswers());
    case "decide":
      return c.json(await stub.benchDrawDecide());
  }
});

bench.get("/bench/orders/:sku", async (c) => {
  const sku = c.req.param("sku");
  const { results } = await c.env.DB.prepare(
    `SELECT o.reservation_id AS id, MIN(p.processed_at) AS at, o.created_at AS created
       FROM orders o JOIN processed_events p ON p.reservation_id = o.reservation_id
      WHERE o.sku = ?1 GROUP BY o.reservation_id`,
  )
    .bind(sku)
    .all<{ id: string; at: number; created: number }>();
  return c.json({ rows: results });
});

bench.get("/bench/deliveries/:sku", async (c) => {
  const sku = c.req.param("sku");
  const [changes, deliveries] = await c.env.DB.batch<Record<string, number | string>>([
    c.env.DB.prepare(
      `SELECT COUNT(*) AS n FROM order_changes c JOIN orders o ON o.reservation_id = c.reservation_id WHERE o.sku = ?1`,
    ).bind(sku),
    c.env.DB.prepare(
      `SELECT d.status, COUNT(*) AS n, SUM(d.attempts) AS attempts, MIN(d.created_at) AS first, MAX(d.updated_at) AS last
         FROM webhook_deliveries d JOIN orders o ON o.reservation_id = d.reservation_id
        WHERE o.sku = ?1 GROUP BY d.status`,
    ).bind(sku),
  ]);
  return c.json({
    changes: Number(changes?.results[0]?.n ?? 0),
    deliveries: Object.fromEntries(
      (deliveries?.results ?? []).map((row) => [
        String(row.status),
        { count: Number(row.n), attempts: Number(row.attempts), first: Number(row.first), last: Number(row.last) },
      ]),
    ),
  });
});

const FillRequest = z.object({
  run: z.string().regex(/^[A-Za-z0-9_-]{1,32}$/),
  holds: z.int().min(0).max(200_000).default(0),
  paidUsers: z.int().min(0).max(2_000_000).default(0),
  from: z.int().min(0).max(10_000_000).default(0),
});

bench.post("/bench/stock/:sku/:shard/fill", async (c) => {
  const sku = c.req.param("sku");
  const shard = Number(c.req.param("shard"));
  if (!SKU_ID.test(sku) || !Number.isInteger(shard) || shard < 0 || shard > 63) throw new ApiError("NOT_FOUND");
  const body = await readJson(c, FillRequest);
  const stub = stockShard(c.env, sku, shard) as unknown as DurableObjectStub<HarnessStock>;
  return c.json(await stub.harnessFill(body));
});

bench.get("/bench/stock/:sku/:shard/stats", async (c) => {
  const sku = c.req.param("sku");
  const shard = Number(c.req.param("shard"));
  if (!SKU_ID.test(sku) || !Number.isInteger(shard) || shard < 0 || shard > 63) throw new ApiError("NOT_FOUND");
  const stub = stockShard(c.env, sku, shard) as unknown as DurableObjectStub<HarnessStock>;
  return c.json(await stub.harnessStats());
});
