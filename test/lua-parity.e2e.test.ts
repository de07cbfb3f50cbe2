import fc from "fast-check";
import { describe, expect, it } from "vitest";
import type { SkuSettings } from "../durable-objects/engine/configuration";
import { StockEngine } from "../durable-objects/engine/stock-engine";
import type { SaleStatus } from "../durable-objects/engine/types";
import { LUA_SHA1, type LuaScriptName } from "../tools/lua";
import type { TestStorage } from "./suites/stock-engine";
import { inMigrated } from "./support/node-place";
import { scriptedRedis } from "./support/scripted-redis";

/**
 * Parity of the stock engine (durable-objects/engine/stock-engine.ts, the code the stock objects run,
 * here over SQLite in Node as in the unit tier; the engine suite runs the same sequences in workerd's
 * SQLite and in Node's, test/suites/stock-engine.ts) with the classic Lua scripts (lua/*.lua, by
 * EVALSHA on a real redis-server of this file's own). Every random sequence of configure / reserve /
 * cancel / pay / expire runs against both, step by step; each step must give the same answer (code,
 * and for successes the same reservation, replay flag and counts), and the final stock, seq,
 * reservation statuses and per-user quotas must be equal. On a divergence fast-check shrinks to the
 * shortest sequence and prints it.
 */

const redis = scriptedRedis();

const USERS = ["ann", "ben", "cat"];
const T0 = 1_900_000_000_000;
const RUNS = 1_000;

type Window = "open" | "ended" | "later";
type Op =
  | { kind: "configure"; total: number; perUserLimit: number; status: SaleStatus; window: Window }
  | { kind: "reserve"; user: number; nonce: number; quantity: number }
  | { kind: "cancel"; pick: number; asOwner: boolean }
  | { kind: "pay"; pick: number; succeeded: boolean; eventId: number }
  | { kind: "expire"; ms: number; sweep: boolean };

const opArb: fc.Arbitrary<Op> = fc.oneof(
  {
    weight: 1,
    arbitrary: fc.record({
      kind: fc.constant("configure" as const),
      total: fc.nat(12),
      perUserLimit: fc.integer({ min: 1, max: 4 }),
      status: fc.constantFrom<SaleStatus>("on_sale", "on_sale", "paused"),
      window: fc.constantFrom<Window>("open", "open", "ended", "later"),
    }),
  },
  {
    weight: 6,
    arbitrary: fc.record({
      kind: fc.constant("reserve" as const),
      user: fc.nat(USERS.length - 1),
      nonce: fc.nat(7),
      quantity: fc.integer({ min: 1, max: 3 }),
    }),
  },
  { weight: 2, arbitrary: fc.record({ kind: fc.constant("cancel" as const), pick: fc.nat(), asOwner: fc.boolean() }) },
  {
    weight: 2,
    arbitrary: fc.record({
      kind: fc.constant("pay" as const),
      pick: fc.nat(),
      succeeded: fc.boolean(),
      eventId: fc.nat(4),
    }),
  },
  {
    weight: 2,
    arbitrary: fc.record({ kind: fc.constant("expire" as const), ms: fc.nat(120_000), sweep: fc.boolean() }),
  },
);

const scenarioArb = fc.record({
  total: fc.nat(10),
  perUserLimit: fc.integer({ min: 1, max: 3 }),
  holdSeconds: fc.integer({ min: 10, max: 90 }),
  ops: fc.array(opArb, { minLength: 1, maxLength: 40, size: "medium" }),
});
type Scenario = { total: number; perUserLimit: number; holdSeconds: number; ops: Op[] };

let runCounter = 0;

/** JSON round trip: the engine's answers as the scripts' cjson would shape them. */
const plain = (value: unknown): unknown => JSON.parse(JSON.stringify(value));

interface Step {
  label: string;
  engine: unknown;
  script: LuaScriptName;
  args: Array<string | number>;
}

/**
 * Runs a sequence on the engine first, noting each answer and the script call that mirrors the step
 * (the scripts' arguments depend only on the engine's answers, never on Redis's), then sends every
 * script call of the sequence, in order, as EVALSHAs of one pipeline (one connection, run back to
 * back) followed by the final-state reads, and compares step by step.
 */
async function runScenario(storage: TestStorage, scenario: Scenario): Promise<void> {
  await storage.deleteAll();
  const sku = `parity-${++runCounter}`;
  const tag = `{fg:${sku}:0}`;
  const keys = [`${tag}:sku`, `${tag}:holds`, `${tag}:quota`, `${tag}:nonces`, `${tag}:payments`, `${tag}:res:`];
  let ids = 0;
  const engine = new StockEngine(storage, () => `00000000-0000-4000-8000-${String(++ids).padStart(12, "0")}`);
  let now = T0;
  const reservationIds: string[] = [];
  const steps: Step[] = [];

  const configure = (label: string, total: number, perUserLimit: number, status: SaleStatus, window: Window) => {
    const settings: SkuSettings = {
      sku,
      shard: 0,
      shards: 1,
      totalStock: total,
      perUserLimit,
      holdSeconds: scenario.holdSeconds,
      status,
      startsAt: window === "later" ? now + 60_000 : null,
      endsAt: window === "ended" ? now - 1 : null,
    };
    steps.push({
      label,
      engine: engine.configuration.configure(settings),
      script: "configure",
      args: [JSON.stringify(settings)],
    });
  };

  configure("configure (initial)", scenario.total, scenario.perUserLimit, "on_sale", "open");
  for (const [index, op] of scenario.ops.entries()) {
    const label = `step ${index} ${JSON.stringify(op)}`;
    const pick = (n: number) => reservationIds[n % Math.max(reservationIds.length, 1)] ?? `${sku}.0.none`;
    if (op.kind === "configure") {
      configure(label, op.total, op.perUserLimit, op.status, op.window);
    } else if (op.kind === "reserve") {
      const userId = USERS[op.user] ?? "ann";
      const nonce = `n${op.nonce}`;
      const [answer] = engine.holds.reserve([{ userId, nonce, quantity: op.quantity }], now);
      // The script takes the id of a new hold from its caller: the engine's id when it created one,
      // else an id nobody has (so a hold the engine refused would still show up as a divergence).
      const created = answer?.ok && !answer.value.replayed ? answer.value.reservation.id : undefined;
      if (created) reservationIds.push(created);
      const id = created ?? `${sku}.0.lua${index}`;
      steps.push({ label, engine: answer, script: "reserve", args: [now, id, userId, nonce, op.quantity] });
    } else if (op.kind === "cancel") {
      const id = pick(op.pick);
      const userId = op.asOwner ? (engine.holds.reservation(id)?.userId ?? "ann") : "stranger";
      steps.push({
        label,
        engine: engine.holds.cancel(id, userId, now),
        script: "release",
        args: ["cancel", now, id, userId],
      });
    } else if (op.kind === "pay") {
      const id = pick(op.pick);
      const type = op.succeeded ? "payment.succeeded" : "payment.failed";
      const eventId = `evt_${op.eventId}`;
      const answer = engine.payments.apply({ eventId, type, reservationId: id }, now);
      steps.push({ label, engine: answer, script: "confirm", args: [now, eventId, type, id] });
    } else {
      // Time passes; with `sweep` the alarm's expiry runs, else the next calls' lazy expiry does it.
      now += op.ms;
      if (op.sweep) {
        const released = { ok: true, value: engine.holds.expireDue(now) };
        steps.push({ label, engine: released, script: "release", args: ["expire", now] });
      }
    }
  }

  const pipeline = redis().multi();
  for (const step of steps) pipeline.evalSha(LUA_SHA1[step.script], { keys, arguments: step.args.map(String) });
  for (const field of ["total", "held", "sold", "seq"]) pipeline.hGet(keys[0] ?? "", field);
  for (const id of reservationIds) pipeline.hGet(`${tag}:res:${id}`, "status");
  for (const user of USERS) pipeline.hGet(`${tag}:quota`, user);
  const replies: unknown[] = await pipeline.execAsPipeline();

  // Every step: the same answer (toEqual: whatever the key order, which cjson does not keep).
  const trace: string[] = [];
  for (const [i, step] of steps.entries()) {
    trace.push(`${step.label} -> ${JSON.stringify(step.engine)}`);
    const reply = replies[i];
    const lua: unknown = typeof reply === "string" ? JSON.parse(reply) : reply;
    expect(lua, `engine and Lua diverge at ${step.label}; trace:\n  ${trace.join("\n  ")}\n`).toEqual(
      plain(step.engine),
    );
  }
  // The final state: counts and seq, every reservation's status, every user's quota.
  const [total = 0, held = 0, sold = 0, seq = 0] = replies.slice(steps.length, steps.length + 4).map(Number);
  const state = engine.configuration.state();
  expect({ stock: state?.stock, seq: state?.seq }, trace.join("\n")).toEqual({
    stock: { total, available: total - held - sold, held, sold },
    seq,
  });
  const quotas = storage.sql
    .exec<{ user_id: string; active: number }>("SELECT user_id, active FROM user_quota")
    .toArray();
  expect(replies.slice(steps.length + 4), trace.join("\n")).toEqual([
    ...reservationIds.map((id) => engine.holds.reservation(id)?.status),
    ...USERS.map((user) => {
      const active = quotas.find((q) => q.user_id === user)?.active ?? 0;
      return active === 0 ? null : String(active);
    }),
  ]);
}

describe("stock engine ↔ Lua scripts parity", () => {
  it(`gives the same answers and final state on ${RUNS} random sequences, on a real redis-server`, async () => {
    let runs = 0;
    let steps = 0;
    await inMigrated("lua-parity", async (storage) => {
      await fc.assert(
        fc.asyncProperty(scenarioArb, async (scenario) => {
          runs++;
          steps += scenario.ops.length;
          await runScenario(storage, scenario);
        }),
        { numRuns: RUNS, seed: 20260415, endOnFailure: false },
      );
    });
    console.log(`lua parity: ${runs} sequences, ${steps} steps, all equal`);
    expect(runs).toBeGreaterThanOrEqual(RUNS);
  }, 300_000);
});
