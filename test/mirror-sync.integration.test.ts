import { env } from "cloudflare:workers";
import { Redis } from "@upstash/redis/cloudflare";
import { describe, expect, inject, it } from "vitest";
import { MIRROR_READ_TIMEOUT_MS, MIRROR_WRITE_TIMEOUT_MS, RedisMirror } from "../durable-objects/mirror/redis-mirror";
import { type Answer, call, createSku, reserve, stockShard, tokenFor, uniqueSku } from "./support/client";
import { eventually } from "./support/eventually";
// Reconciliation of the mirror, the mirror's client and lua/mirror.lua, and its publisher share this
// file's workerd (one start-up, issue #56). They run first (imports come first), before this file
// stops, restarts and freezes the project's redis-server.
import "./suites/reconcile-mirror";
import "./suites/redis-mirror";
import "./suites/mirror-publisher";

/**
 * The Redis mirror through the Worker (project "workers-mirror": UPSTASH_REDIS_REST_URL/_TOKEN are bound
 * to this project's own redis-server behind the Upstash bridge, which these tests stop, restart and
 * freeze through the control server of test/support/redis-global-setup.ts). Convergence is awaited by
 * polling the admin view, never by fixed sleeps.
 */

const { bridgeUrl, token, controlUrl } = inject("redis");

async function control(operation: "stop" | "start" | "pause" | "resume"): Promise<void> {
  const response = await fetch(`${controlUrl}/redis/${operation}`, { method: "POST" });
  if (!response.ok) throw new Error(`redis ${operation} failed: ${response.status} ${await response.text()}`);
}

interface View {
  version: number;
  stock: { total: number; available: number; held: number; sold: number };
  mirror: { available: number; held: number; sold: number; version: number } | null;
}

/** This SKU's mirror lag and the count of unreadable snapshots, as GET /metrics reports them. */
async function mirrorGauges(sku: string): Promise<{ lag: number | null; unreadable: number | null }> {
  const text = (await call<{ text: string }>("GET", "/metrics", { admin: true })).json.text;
  const value = (pattern: RegExp) => {
    const match = pattern.exec(text);
    return match ? Number(match[1]) : null;
  };
  return {
    lag: value(new RegExp(`^flashgate_mirror_lag_changes\\{sku="${sku}"\\} (\\d+)$`, "m")),
    unreadable: value(/^flashgate_mirror_unreadable (\d+)$/m),
  };
}

async function adminView(sku: string): Promise<View> {
  const answer = await call<View>("GET", `/admin/skus/${sku}`, { admin: true });
  if (answer.status !== 200) throw new Error(`admin view of ${sku}: ${answer.status}`);
  return answer.json;
}

/** Polls until the mirror holds exactly the stock object's snapshot; returns it and the time it took. */
async function converged(sku: string, timeoutMs = 20_000): Promise<{ view: View; ms: number }> {
  const started = Date.now();
  const view = await eventually(
    async () => {
      const view = await adminView(sku);
      const { available, held, sold } = view.stock;
      expect(view.mirror).toEqual({ available, held, sold, version: view.version });
      return view;
    },
    timeoutMs,
    25,
  );
  return { view, ms: Date.now() - started };
}

/** Reservations of one unit by fresh users, all at once; tokens first. Returns answers and latencies. */
async function burst(sku: string, users: string[]): Promise<{ answers: Answer[]; latencies: number[] }> {
  const tokens = await Promise.all(users.map((user) => tokenFor(user, sku)));
  const latencies: number[] = [];
  const answers = await Promise.all(
    users.map(async (user, i) => {
      const started = performance.now();
      const answer = await reserve(user, sku, 1, tokens[i]);
      latencies.push(performance.now() - started);
      return answer;
    }),
  );
  return { answers, latencies };
}

/** The same, one reservation after the other: latencies free of queueing behind each other. */
async function oneByOne(sku: string, users: string[]): Promise<{ answers: Answer[]; latencies: number[] }> {
  const answers: Answer[] = [];
  const latencies: number[] = [];
  for (const user of users) {
    const token = await tokenFor(user, sku);
    const started = performance.now();
    answers.push(await reserve(user, sku, 1, token));
    latencies.push(performance.now() - started);
  }
  return { answers, latencies };
}

const usersOf = (sku: string, from: number, count: number) =>
  Array.from({ length: count }, (_, i) => `${sku}-u${from + i}`);
const statuses = (answers: Answer[]) => answers.map((a) => a.status);
const max = (values: number[]) => Math.round(Math.max(...values));
const median = (values: number[]) => Math.round([...values].sort((a, b) => a - b)[Math.floor(values.length / 2)] ?? 0);

/** Calls of EVALSHA and EVAL Redis has served so far (INFO commandstats). */
async function scriptCalls(): Promise<number> {
  const redis = new Redis({ url: bridgeUrl, token, retry: false, enableTelemetry: false, enableAutoPipelining: false });
  const info = String(await redis.exec<unknown>(["INFO", "commandstats"]));
  let calls = 0;
  for (const match of info.matchAll(/^cmdstat_(?:evalsha|eval):calls=(\d+)/gm)) calls += Number(match[1]);
  return calls;
}

describe("Redis mirror through the Worker", () => {
  it("converges to the stock object's snapshot after a burst, and serves stock displays", async () => {
    const sku = uniqueSku("mirror-burst");
    await createSku(sku, { name: "Mirror burst", totalStock: 120, perUserLimit: 1 });
    await converged(sku);

    const before = await scriptCalls();
    const { answers } = await burst(sku, usersOf(sku, 0, 150));
    expect(statuses(answers).filter((s) => s === 202)).toHaveLength(120);
    const { view, ms } = await converged(sku);
    const writes = (await scriptCalls()) - before;
    expect(view.stock).toEqual({ total: 120, available: 0, held: 120, sold: 0 });
    expect(view.mirror).toEqual({ available: 0, held: 120, sold: 0, version: view.version });
    // /metrics says the mirror is in step (what the MirrorLagging alert of ops/prometheus watches).
    expect((await mirrorGauges(sku)).lag).toBe(0);
    // Commits were coalesced: fewer mirror writes than reservations (each write carries the newest state).
    expect(writes).toBeLessThanOrEqual(120);
    console.log(`mirror burst: 150 requests, 120 holds, converged ${ms} ms after the burst, ${writes} mirror writes`);

    const display = await call("GET", `/api/skus/${sku}`);
    expect(display.status).toBe(200);
    expect(display.headers.get("x-stock-source")).toBe("mirror");
    expect(display.headers.get("cache-control")).toBe("public, max-age=1");
    expect(display.json).toMatchObject({ sku, name: "Mirror burst", status: "on_sale", available: 0 });
    // A SKU that does not exist is not in the mirror: the stock object answers 404.
    expect((await call("GET", `/api/skus/${uniqueSku("nothing")}`)).status).toBe(404);
  }, 60_000);

  it("follows an archive: the mirror takes the status, and the public view from it answers 404", async () => {
    const sku = uniqueSku("mirror-archived");
    await createSku(sku, { totalStock: 5, shards: 2 });
    await converged(sku);
    expect((await call("GET", `/api/skus/${sku}`)).headers.get("x-stock-source")).toBe("mirror");
    expect((await call("DELETE", `/admin/skus/${sku}`, { admin: true })).json.status).toBe("archived");
    await converged(sku);
    // Within the display's second of lag (API.md: the mirror may lag a moment), then for good.
    await eventually(async () => {
      const display = await call("GET", `/api/skus/${sku}`);
      expect([display.status, display.json.error?.code]).toEqual([404, "SKU_NOT_FOUND"]);
    });
  });

  it("carries the line: the public view from the mirror shows held and waiting, and follows a leave", async () => {
    const sku = uniqueSku("mirror-line");
    await createSku(sku, { totalStock: 2, shards: 2, perUserLimit: 2 });
    const { answers } = await oneByOne(sku, usersOf(sku, 0, 2));
    expect(statuses(answers)).toEqual([202, 202]);
    for (const user of usersOf(sku, 10, 3)) {
      expect((await call("POST", `/api/skus/${sku}/waitlist`, { user, body: { quantity: 1 } })).status).toBe(202);
    }
    const publicView = () =>
      eventually(async () => {
        const display = await call("GET", `/api/skus/${sku}`);
        expect(display.headers.get("x-stock-source")).toBe("mirror");
        return display.json;
      });
    await eventually(async () => expect(await publicView()).toMatchObject({ available: 0, held: 2, waiting: 3 }));
    const [leaver] = usersOf(sku, 11, 1);
    expect((await call("DELETE", `/api/skus/${sku}/waitlist`, { user: leaver })).status).toBe(200);
    await eventually(async () => expect(await publicView()).toMatchObject({ held: 2, waiting: 2 }));
    await converged(sku);
  });

  it("keeps selling while redis-server is stopped mid-burst, and the mirror catches up when it is back", async () => {
    const sku = uniqueSku("mirror-down");
    await createSku(sku, { totalStock: 200, perUserLimit: 1 });
    await converged(sku);

    const baseline = await oneByOne(sku, usersOf(sku, 100, 10));
    const first = await burst(sku, usersOf(sku, 0, 40));
    // The server goes away while the second wave is in flight.
    const [second] = await Promise.all([burst(sku, usersOf(sku, 40, 40)), control("stop")]);
    const third = await oneByOne(sku, usersOf(sku, 80, 20));
    for (const wave of [baseline, first, second, third])
      expect(statuses(wave.answers).every((s) => s === 202)).toBe(true);
    // Nothing waited on Redis: with it gone, a reservation takes what it takes with Redis up.
    expect(median(third.latencies)).toBeLessThan(MIRROR_WRITE_TIMEOUT_MS);
    expect(max(third.latencies)).toBeLessThan(max(baseline.latencies) + MIRROR_WRITE_TIMEOUT_MS);

    // While it is down: the admin view has no mirror, displays come from the stock object, and
    // /metrics counts the SKU's snapshot as unreadable (no lag figure for it).
    expect((await adminView(sku)).mirror).toBeNull();
    const down = await mirrorGauges(sku);
    expect(down.lag).toBeNull();
    expect(down.unreadable).toBeGreaterThanOrEqual(1);
    const display = await call("GET", `/api/skus/${sku}`);
    expect(display.headers.get("x-stock-source")).toBe("stock-object");
    expect(display.json.available).toBe(90);

    await control("start");
    // No new commit: the stock object's alarm retries the publish on its own.
    const { view, ms } = await converged(sku);
    expect(view.mirror).toEqual({ available: 90, held: 110, sold: 0, version: view.version });
    console.log(
      `mirror outage: 110 holds, all 202; reservation latency with redis down median ${median(third.latencies)} ms, ` +
        `max ${max(third.latencies)} ms (up: median ${median(baseline.latencies)} ms, max ${max(baseline.latencies)} ms); ` +
        `converged ${ms} ms after redis-server restarted`,
    );
  }, 90_000);

  it("a frozen Redis (accepts, never answers) costs reservations nothing; reads and writes give up in time", async () => {
    const sku = uniqueSku("mirror-frozen");
    await createSku(sku, { totalStock: 50, perUserLimit: 1 });
    await converged(sku);

    await control("pause");
    try {
      const frozen = await oneByOne(sku, usersOf(sku, 0, 10));
      expect(statuses(frozen.answers).every((s) => s === 202)).toBe(true);
      // Had a sale waited on the frozen Redis, each would have taken the whole write timeout.
      expect(median(frozen.latencies)).toBeLessThan(MIRROR_WRITE_TIMEOUT_MS);
      const started = performance.now();
      expect((await adminView(sku)).mirror).toBeNull();
      const adminMs = performance.now() - started;
      expect(adminMs).toBeLessThan(MIRROR_READ_TIMEOUT_MS + 1_000);
      console.log(
        `mirror frozen: 10 reservations, median ${median(frozen.latencies)} ms, max ${max(frozen.latencies)} ms; ` +
          `admin view gave up on the mirror ` +
          `in ${Math.round(adminMs)} ms`,
      );
    } finally {
      await control("resume");
    }
    const { view, ms } = await converged(sku);
    expect(view.mirror).toEqual({ available: 40, held: 10, sold: 0, version: view.version });
    console.log(`mirror frozen: converged ${ms} ms after redis-server resumed`);
  }, 60_000);

  it("never lets an older snapshot overwrite a newer one", async () => {
    const sku = uniqueSku("mirror-order");
    await createSku(sku, { totalStock: 10, perUserLimit: 1 });
    await burst(sku, usersOf(sku, 0, 4));
    const { view } = await converged(sku);
    const state = await stockShard(env, sku, 0).state();
    if (!state) throw new Error("no state");
    expect(state.seq).toBe(view.version);

    // What a late write of an earlier commit (one that timed out on its way) would carry.
    const writer = new RedisMirror({ url: bridgeUrl, token, timeoutMs: 2_000 });
    const stale = { ...state, seq: state.seq - 2, stock: { total: 10, available: 8, held: 2, sold: 0 } };
    expect(await writer.publish(stale, Date.now())).toEqual({ applied: false, seq: state.seq });
    // The same seq again (a restarted object republishing) changes nothing either.
    const same = { ...state, stock: { total: 10, available: 10, held: 0, sold: 0 } };
    expect(await writer.publish(same, Date.now())).toEqual({ applied: false, seq: state.seq });
    expect((await adminView(sku)).mirror).toEqual({ available: 6, held: 4, sold: 0, version: state.seq });

    // The next commit moves it forward.
    expect(statuses((await burst(sku, usersOf(sku, 4, 1))).answers)).toEqual([202]);
    const after = await converged(sku);
    expect(after.view.version).toBeGreaterThan(state.seq);
    expect(after.view.mirror).toEqual({ available: 5, held: 5, sold: 0, version: after.view.version });
  }, 60_000);

  it("a Redis that reads but refuses writes (out of memory) does not keep serving an old stock display", async () => {
    const sku = uniqueSku("mirror-oom");
    await createSku(sku, { totalStock: 1, perUserLimit: 1 });
    await converged(sku);
    expect((await call("GET", `/api/skus/${sku}`)).json).toMatchObject({ available: 1 });
    const redis = new Redis({
      url: bridgeUrl,
      token,
      retry: false,
      enableTelemetry: false,
      enableAutoPipelining: false,
    });
    await redis.exec(["CONFIG", "SET", "maxmemory", "1"]);
    try {
      // Writes now fail (OOM), reads still answer: the last unit sells, then the SKU is archived.
      expect(statuses((await oneByOne(sku, usersOf(sku, 0, 1))).answers)).toEqual([202]);
      await eventually(async () => {
        const display = await call("GET", `/api/skus/${sku}`);
        expect(display.json).toMatchObject({ available: 0 });
      }, 5_000);
      expect((await call("DELETE", `/admin/skus/${sku}`, { admin: true })).status).toBe(200);
      await eventually(async () => expect((await call("GET", `/api/skus/${sku}`)).status).toBe(404), 5_000);
    } finally {
      await redis.exec(["CONFIG", "SET", "maxmemory", "0"]);
    }
  }, 60_000);
});
