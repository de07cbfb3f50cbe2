import { runDurableObjectAlarm, runInDurableObject } from "cloudflare:test";
import { env } from "cloudflare:workers";
import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { homeShard } from "../durable-objects/shared/shard-name";
import { forgetSoldOut } from "../src/edge/sold-out-cache";
import { type Answer, call, createSku, reserve, stockShard, uniqueSku } from "./support/client";
import { pay } from "./support/payments";
import { checkoutSession, sendStripe, stripeEvent } from "./support/stripe";

/**
 * Money on sharded SKUs, as a property: random sequences of reservations, payments (on time, late,
 * twice, replayed; by /webhooks/payments and by Stripe's immediate and delayed methods), cancels,
 * expiries and resizes between 1 and 4 shards, through the Worker. After every step: stock adds up on
 * every shard; no buyer holds or bought more than the limit over all shards, and the buyer's home shard
 * counts exactly that; every payment is decided as a new reservation of the buyer would have been just
 * before it (refund_required only with no unit left anywhere or the limit reached); every payment event
 * is applied once or flagged once, and a replay gets its first answer.
 */

const MAX_SHARDS = 4;
const PRICE = 500;
const HOLD_SECONDS = 60;

type Via = "payments" | "stripe" | "stripe-delayed";
type When = "on time" | "late" | "again";
const WHEN: Record<When, string[]> = {
  "on time": ["held"],
  late: ["expired", "cancelled"],
  again: ["paid", "refund_required"],
};
type Op =
  | { kind: "reserve"; user: number; quantity: number }
  /** A payment of a held reservation (`on time`), an expired or cancelled one (`late`), or a paid or flagged one (`again`). */
  | { kind: "pay"; when: When; pick: number; via: Via }
  | { kind: "payTwice"; pick: number }
  | { kind: "replay"; pick: number }
  | { kind: "cancel"; pick: number }
  | { kind: "expire" }
  | { kind: "resize"; shards: number };

const viaArb = fc.constantFrom<Via>("payments", "stripe", "stripe-delayed");
const opArb: fc.Arbitrary<Op> = fc.oneof(
  {
    weight: 5,
    arbitrary: fc.record({
      kind: fc.constant("reserve" as const),
      user: fc.nat(3),
      quantity: fc.integer({ min: 1, max: 2 }),
    }),
  },
  ...(["on time", "late", "again"] as const).map((when) => ({
    weight: when === "late" ? 3 : 1,
    arbitrary: fc.record({ kind: fc.constant("pay" as const), when: fc.constant(when), pick: fc.nat(), via: viaArb }),
  })),
  { weight: 1, arbitrary: fc.record({ kind: fc.constant("payTwice" as const), pick: fc.nat() }) },
  { weight: 1, arbitrary: fc.record({ kind: fc.constant("replay" as const), pick: fc.nat() }) },
  { weight: 3, arbitrary: fc.record({ kind: fc.constant("cancel" as const), pick: fc.nat() }) },
  { weight: 1, arbitrary: fc.record({ kind: fc.constant("expire" as const) }) },
  {
    weight: 3,
    arbitrary: fc.record({ kind: fc.constant("resize" as const), shards: fc.integer({ min: 1, max: MAX_SHARDS }) }),
  },
);
/** Before any payment: holds taken and let go, so that a resize finds nothing held or sold. */
const unpaidArb: fc.Arbitrary<Op> = opArb.filter((op) => op.kind !== "pay" && op.kind !== "payTwice");
const scenarioArb = fc.record({
  total: fc.integer({ min: 1, max: 5 }),
  limit: fc.integer({ min: 1, max: 2 }),
  shards: fc.integer({ min: 1, max: MAX_SHARDS }),
  // Reservations made and let go, every hold expired, a resize, then anything: late payments of the
  // reservations from before the resize come up often.
  ops: fc
    .tuple(
      fc.array(unpaidArb, { minLength: 2, maxLength: 8 }),
      fc.integer({ min: 1, max: MAX_SHARDS }),
      fc.array(opArb, { minLength: 2, maxLength: 12 }),
    )
    .map(([unpaid, shards, rest]): Op[] => [...unpaid, { kind: "expire" }, { kind: "resize", shards }, ...rest]),
});

interface ShardFacts {
  shard: number;
  shards: number;
  stock: { total: number; available: number; held: number; sold: number };
  rows: { id: string; user_id: string; quantity: number; status: string }[];
  quotas: Map<string, number>;
  refunds: number;
}

/** Every shard the SKU ever had (a shrink leaves shards beyond the count, with their reservations). */
async function facts(sku: string): Promise<ShardFacts[]> {
  const all = await Promise.all(
    Array.from({ length: MAX_SHARDS }, (_, shard) =>
      runInDurableObject(stockShard(env, sku, shard), (object, state): ShardFacts | null => {
        const s = object.engine.configuration.state();
        if (!s) return null;
        const sql = state.storage.sql;
        return {
          shard,
          shards: s.shards,
          stock: s.stock,
          rows: sql
            .exec<ShardFacts["rows"][number]>("SELECT id, user_id, quantity, status FROM reservations")
            .toArray(),
          quotas: new Map(
            sql
              .exec<{ user_id: string; active: number }>("SELECT user_id, active FROM user_quota")
              .toArray()
              .map((q) => [q.user_id, q.active]),
          ),
          refunds: object.paymentTotals().refund_required,
        };
      }),
    ),
  );
  return all.filter((f): f is ShardFacts => f !== null);
}

/** What the SKU is, summed over its shards (shard 0's count is the SKU's). */
function summary(shards: ShardFacts[]) {
  const count = shards[0]?.shards ?? 1;
  const used = new Map<string, number>(); // held + paid per user, over every shard
  const status = new Map<string, string>();
  let available = 0;
  let held = 0;
  let sold = 0;
  let total = 0;
  let paidRows = 0;
  for (const f of shards) {
    available += f.stock.available;
    held += f.stock.held;
    sold += f.stock.sold;
    total += f.stock.total;
    for (const r of f.rows) {
      status.set(r.id, r.status);
      if (r.status === "held" || r.status === "paid") used.set(r.user_id, (used.get(r.user_id) ?? 0) + r.quantity);
      if (r.status === "paid") paidRows += r.quantity;
    }
  }
  return {
    count,
    used,
    status,
    available,
    held,
    sold,
    total,
    paidRows,
    refunds: shards.reduce((n, f) => n + f.refunds, 0),
  };
}

type Sent = { answer: Answer; resend: () => Promise<Answer> };

/** A fresh payment event of the reservation's exact price, by one of the three ways money arrives. */
async function payBy(via: Via, id: string, quantity: number): Promise<Sent> {
  const amount = quantity * PRICE;
  if (via === "payments") {
    const eventId = `evt_${crypto.randomUUID()}`;
    const resend = () => pay(id, "payment.succeeded", eventId, { amount });
    return { answer: await resend(), resend };
  }
  const intent = `pi_test_${crypto.randomUUID().replaceAll("-", "")}`;
  const type = via === "stripe" ? "checkout.session.completed" : "checkout.session.async_payment_succeeded";
  const session = checkoutSession(id, amount, { paymentIntent: intent });
  const resend = () => sendStripe(stripeEvent(type, session));
  return { answer: await resend(), resend };
}

type Scenario = typeof scenarioArb extends fc.Arbitrary<infer T> ? T : never;

let sequences = 0;

async function runScenario(scenario: Scenario) {
  const { total, limit } = scenario;
  const sku = uniqueSku("money-prop");
  await createSku(sku, {
    totalStock: total,
    perUserLimit: limit,
    shards: scenario.shards,
    holdSeconds: HOLD_SECONDS,
    price: PRICE,
  });
  // Users of this sequence only (the shopper rate limit counts per user), named by the sequence's
  // number so that their home shards, and so the kinds of step seen, are the same on every run.
  const sequence = ++sequences;
  const users = Array.from({ length: 4 }, (_, i) => `money-prop-${sequence}-m${i}`);
  const reservations: { id: string; user: string; quantity: number }[] = [];
  const events: { sent: Sent; first: unknown }[] = [];
  let flagged = 0;
  let clock = 0; // how far every shard's clock was moved (expiries)
  const setClocks = async () => {
    for (let shard = 0; shard < MAX_SHARDS; shard++) {
      await runInDurableObject(stockShard(env, sku, shard), (object) => {
        object.now = () => Date.now() + clock;
      });
    }
  };
  await setClocks();

  /** What a new reservation of `user` for `quantity` would be answered now: may it take the units? */
  const wouldTake = (before: ReturnType<typeof summary>, user: string, quantity: number) =>
    before.available >= quantity && (before.used.get(user) ?? 0) + quantity <= limit;

  /** The answer a first payment of reservation `r` must get, from the state before it. */
  const expected = (before: ReturnType<typeof summary>, r: (typeof reservations)[number]) => {
    const prior = before.status.get(r.id);
    if (prior === "held") return ["paid", "applied"];
    if ((prior === "expired" || prior === "cancelled") && wouldTake(before, r.user, r.quantity))
      return ["paid", "applied"];
    if (prior === "expired" || prior === "cancelled") return ["refund_required", "refund_required"];
    return [prior, "refund_required"]; // paid or flagged already: never twice
  };

  // What the SKU is before each step: after the first, what the step before it left (read once a step).
  let now = await facts(sku);
  for (const op of scenario.ops) {
    const before = summary(now);
    const pick = (n: number) => reservations[n % Math.max(1, reservations.length)];
    switch (op.kind) {
      case "reserve": {
        forgetSoldOut(sku);
        const user = users[op.user] as string;
        const token = await call("POST", `/api/skus/${sku}/tokens`, { user });
        const answer = token.status === 201 ? await reserve(user, sku, op.quantity, token.json.token) : token;
        expect([201, 202, 409]).toContain(answer.status);
        if (answer.status === 202) reservations.push({ id: answer.json.reservationId, user, quantity: op.quantity });
        // Held only when the buyer may take the units (the rule late payments share); refused for
        // the limit only when it is reached. (A shard may answer SOLD_OUT for a moment after its
        // siblings were found empty, so a refusal for stock is not checked against the counts.)
        const code = answer.json.error?.code;
        expect({ held: answer.status === 202, code }).toEqual({
          held: answer.status === 202 && wouldTake(before, user, op.quantity),
          code:
            code === "LIMIT_EXCEEDED" && (before.used.get(user) ?? 0) + op.quantity <= limit ? "within limit" : code,
        });
        break;
      }
      case "pay": {
        const among = reservations.filter((x) => WHEN[op.when].includes(before.status.get(x.id) ?? ""));
        const r = among[op.pick % Math.max(1, among.length)];
        if (!r) break;
        const sent = await payBy(op.via, r.id, r.quantity);
        const want = expected(before, r);
        seen.add(`pay ${kindOf(before, r)} ${want[1]}`);
        expect([sent.answer.status, sent.answer.json.reservationStatus, sent.answer.json.outcome]).toEqual([
          200,
          ...want,
        ]);
        if (want[1] === "refund_required") flagged++;
        events.push({ sent, first: sent.answer.json });
        break;
      }
      case "payTwice": {
        const r = pick(op.pick);
        if (!r) break;
        const both = await Promise.all([payBy("payments", r.id, r.quantity), payBy("stripe", r.id, r.quantity)]);
        const outcomes = both.map((s) => [s.answer.status, s.answer.json.outcome]).sort();
        // One of them is decided as a single payment would be; the other finds it decided: a refund.
        const first = expected(before, r)[1];
        expect(outcomes).toEqual(
          [
            [200, first],
            [200, "refund_required"],
          ].sort(),
        );
        flagged += first === "refund_required" ? 2 : 1;
        for (const sent of both) events.push({ sent, first: sent.answer.json });
        break;
      }
      case "replay": {
        const event = events[op.pick % Math.max(1, events.length)];
        if (!event) break;
        seen.add("replay");
        const again = await event.sent.resend();
        expect([again.status, again.json]).toEqual([200, event.first]);
        break;
      }
      case "cancel": {
        const r = pick(op.pick);
        if (!r) break;
        const answer = await call("POST", `/api/reservations/${r.id}/cancel`, { user: r.user });
        const prior = before.status.get(r.id);
        expect(answer.status).toBe(prior === "held" || prior === "cancelled" ? 200 : 409);
        break;
      }
      case "expire": {
        clock += HOLD_SECONDS * 1000 + 1;
        await setClocks();
        for (let shard = 0; shard < MAX_SHARDS; shard++) await runDurableObjectAlarm(stockShard(env, sku, shard));
        break;
      }
      case "resize": {
        seen.add(
          `resize ${op.shards === before.count ? "same" : before.held + before.sold === 0 ? "done" : "refused"}`,
        );
        const answer = await call("PUT", `/admin/skus/${sku}`, {
          admin: true,
          body: { totalStock: total, shards: op.shards },
        });
        // Shards change only while nothing is held or sold anywhere.
        const allowed = op.shards === before.count || before.held + before.sold === 0;
        expect([answer.status, answer.json.shards ?? answer.json.error?.code]).toEqual(
          allowed ? [200, op.shards] : [409, "INVALID_STATE"],
        );
        await setClocks(); // shards it made run on the same clock
        break;
      }
    }
    now = await facts(sku);
    checkInvariants(now, users, total, limit);
    const after = summary(now);
    // Every payment event was applied once (sold == Σ paid) or flagged once (counted once).
    expect(after.sold).toBe(after.paidRows);
    expect(after.refunds).toBe(flagged);
  }
}

/** What kind of payment a payment of `r` is: on time, late on the buyer's home shard, late elsewhere, or a second one. */
function kindOf(before: ReturnType<typeof summary>, r: { id: string; user: string }): string {
  const prior = before.status.get(r.id);
  if (prior === "held") return "on time";
  if (prior !== "expired" && prior !== "cancelled") return "again";
  const shard = Number(r.id.split(".")[1]);
  return shard === homeShard(r.user, before.count) ? "late at home" : "late elsewhere";
}

/** The kinds of step the sequences produced: the checks above depend on them coming up. */
const seen = new Set<string>();
const EXERCISED = [
  "pay again refund_required",
  "pay late at home applied",
  "pay late at home refund_required",
  "pay late elsewhere applied",
  "pay late elsewhere refund_required",
  "pay on time applied",
  "replay",
  "resize done",
  "resize refused",
  "resize same",
];

function checkInvariants(shards: ShardFacts[], users: string[], total: number, limit: number): void {
  const s = summary(shards);
  for (const f of shards) {
    const { total: t, available, held, sold } = f.stock;
    expect(available + held + sold, `shard ${f.shard}`).toBe(t);
    expect(Math.min(available, held, sold), `shard ${f.shard}`).toBeGreaterThanOrEqual(0);
  }
  expect(s.total).toBe(total);
  for (const user of users) {
    const used = s.used.get(user) ?? 0;
    expect(used, user).toBeLessThanOrEqual(limit);
    // The buyer's home shard counts everything the buyer holds or bought, on whichever shard.
    const home = shards.find((f) => f.shard === homeShard(user, s.count));
    expect(home?.quotas.get(user) ?? 0, `${user}'s quota on its home shard`).toBe(used);
  }
}

describe("money on sharded SKUs, random operation sequences", () => {
  it("keeps the limit, the stock and every payment's answer across shards and resizes", {
    timeout: 600_000,
  }, async () => {
    await fc.assert(fc.asyncProperty(scenarioArb, runScenario), {
      numRuns: 50,
      seed: 20261203,
      endOnFailure: true,
    });
    expect([...seen].sort()).toEqual(EXERCISED);
  });
});
