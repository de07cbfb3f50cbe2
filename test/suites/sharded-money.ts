import { runDurableObjectAlarm, runInDurableObject } from "cloudflare:test";
import { env } from "cloudflare:workers";
import { describe, expect, it } from "vitest";
import { homeShard } from "../../durable-objects/shared/shard-name";
import { forgetSoldOut } from "../../src/edge/sold-out-cache";
import { type Answer, call, createSku, reserve, stockShard, uniqueSku } from "../support/client";
import { pay } from "../support/payments";
import { checkoutSession, sendStripe, stripeEvent } from "../support/stripe";

/**
 * Money on sharded SKUs through the Worker: one scripted sale of reservations, payments (on time,
 * late on the buyer's home shard and elsewhere, twice, replayed; by /webhooks/payments and by
 * Stripe's immediate and delayed methods), cancels, expiries and resizes between 1 and 2 shards.
 * After every step: stock adds up on every shard; no buyer holds or bought more than the limit over
 * all shards, and the buyer's home shard counts exactly that; every payment is decided as a new
 * reservation of the buyer would have been just before it (refund_required only with no unit left
 * anywhere or the limit reached); every payment event is applied once or flagged once, and a replay
 * gets its first answer. Random sequences of these steps are the simulator's (late payments after
 * resizes, sent twice and replayed; the stock, the limit and each event's answer checked after every
 * step: docs/SIMULATOR.md); this file meets each kind of step once, through the Worker's routes.
 */

const MAX_SHARDS = 2;
const PRICE = 500;
const HOLD_SECONDS = 60;

type Via = "payments" | "stripe" | "stripe-delayed";
/** `r` is a reservation by the order they were made in; `user` a buyer by number. */
type Op =
  | { kind: "reserve"; user: number }
  | { kind: "pay"; r: number; via: Via }
  | { kind: "payTwice"; r: number }
  | { kind: "replay"; event: number }
  | { kind: "cancel"; r: number }
  | { kind: "expire" }
  | { kind: "resize"; shards: number };

/**
 * Three units, a limit of 1, on 2 shards. Buyers 0 and 2 live on shard 1 of 2 and buyers 1 and 3 on
 * shard 0; on 1 shard everyone lives on shard 0, so a reservation buyer 0 or 2 made before the cut
 * is paid "elsewhere" after it. (The kinds of step the script meets are checked at the end.)
 */
const SCRIPT: Op[] = [
  { kind: "reserve", user: 0 }, // r0, shard 1
  { kind: "reserve", user: 1 }, // r1, shard 0
  { kind: "reserve", user: 2 }, // r2, shard 1
  { kind: "cancel", r: 0 },
  { kind: "expire" }, // r1, r2 expired
  { kind: "resize", shards: 2 }, // the same count
  { kind: "resize", shards: 1 }, // nothing held or sold: done
  { kind: "reserve", user: 3 }, // r3
  { kind: "resize", shards: 2 }, // r3 held: refused
  { kind: "pay", r: 3, via: "stripe" }, // on time
  { kind: "pay", r: 0, via: "stripe-delayed" }, // late, elsewhere, a unit left: applied
  { kind: "reserve", user: 2 }, // r4: buyer 2 at the limit, the last unit held
  { kind: "pay", r: 2, via: "payments" }, // late, elsewhere, over the limit: refund
  { kind: "pay", r: 1, via: "payments" }, // late, at home, nothing left: refund
  { kind: "cancel", r: 4 },
  { kind: "pay", r: 4, via: "stripe" }, // late, at home, a unit left: applied
  { kind: "pay", r: 3, via: "payments" }, // again: refund
  { kind: "payTwice", r: 0 }, // both again: refunds
  { kind: "replay", event: 1 },
  { kind: "replay", event: 3 },
];

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

type Summary = ReturnType<typeof summary>;

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

describe("money on sharded SKUs", () => {
  it("keeps the limit, the stock and every payment's answer across shards and resizes", async () => {
    const total = 3;
    const limit = 1;
    const sku = uniqueSku("money");
    await createSku(sku, {
      totalStock: total,
      perUserLimit: limit,
      shards: 2,
      holdSeconds: HOLD_SECONDS,
      price: PRICE,
    });
    const users = Array.from({ length: 4 }, (_, i) => `money-prop-1-m${i}`);
    const reservations: { id: string; user: string; quantity: number }[] = [];
    const events: { sent: Sent; first: unknown }[] = [];
    const seen = new Set<string>();
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
    const wouldTake = (before: Summary, user: string, quantity: number) =>
      before.available >= quantity && (before.used.get(user) ?? 0) + quantity <= limit;

    /** The answer a first payment of reservation `r` must get, from the state before it. */
    const expected = (before: Summary, r: (typeof reservations)[number]) => {
      const prior = before.status.get(r.id);
      if (prior === "held") return ["paid", "applied"];
      if ((prior === "expired" || prior === "cancelled") && wouldTake(before, r.user, r.quantity))
        return ["paid", "applied"];
      if (prior === "expired" || prior === "cancelled") return ["refund_required", "refund_required"];
      return [prior, "refund_required"]; // paid or flagged already: never twice
    };
    const reservation = (r: number) => {
      const found = reservations[r];
      if (!found) throw new Error(`the script names reservation ${r}, and ${reservations.length} were made`);
      return found;
    };

    // What the SKU is before each step: after the first, what the step before it left (read once a step).
    let now = await facts(sku);
    for (const op of SCRIPT) {
      const before = summary(now);
      switch (op.kind) {
        case "reserve": {
          forgetSoldOut(sku);
          const user = users[op.user] as string;
          const token = await call("POST", `/api/skus/${sku}/tokens`, { user });
          const answer = token.status === 201 ? await reserve(user, sku, 1, token.json.token) : token;
          // Held only when the buyer may take the unit (the rule late payments share).
          expect([answer.status, answer.json.error?.code]).toEqual(
            wouldTake(before, user, 1) ? [202, undefined] : [409, "LIMIT_EXCEEDED"],
          );
          if (answer.status === 202) reservations.push({ id: answer.json.reservationId, user, quantity: 1 });
          break;
        }
        case "pay": {
          const r = reservation(op.r);
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
          const r = reservation(op.r);
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
          const event = events[op.event];
          if (!event) throw new Error(`the script replays event ${op.event}, and ${events.length} were sent`);
          seen.add("replay");
          const again = await event.sent.resend();
          expect([again.status, again.json]).toEqual([200, event.first]);
          break;
        }
        case "cancel": {
          const r = reservation(op.r);
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
    // The script meets every kind of step (were a reservation to land elsewhere, it would not).
    expect([...seen].sort()).toEqual(EXERCISED);
  });
});

/** What kind of payment a payment of `r` is: on time, late on the buyer's home shard, late elsewhere, or a second one. */
function kindOf(before: Summary, r: { id: string; user: string }): string {
  const prior = before.status.get(r.id);
  if (prior === "held") return "on time";
  if (prior !== "expired" && prior !== "cancelled") return "again";
  const shard = Number(r.id.split(".")[1]);
  return shard === homeShard(r.user, before.count) ? "late at home" : "late elsewhere";
}

/** The kinds of step the script meets. */
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

describe("payments owed back after a cut", () => {
  it("are still counted in the admin view when the shard that decided them is left out", async () => {
    const sku = uniqueSku("owed-cut");
    await createSku(sku, { totalStock: 4, shards: 2, perUserLimit: 1, price: PRICE, currency: "usd" });
    const user = Array.from({ length: 50 }, (_, i) => `owed${i}`).find((u) => homeShard(u, 2) === 1) as string;
    const held = await reserve(user, sku);
    expect(held.json.reservationId.split(".")[1]).toBe("1");
    // A wrong amount: shard 1 flags the money owed back.
    const paid = await pay(held.json.reservationId, "payment.succeeded", `evt_${crypto.randomUUID()}`, { amount: 5 });
    expect(paid.json.outcome).toBe("refund_required");
    expect((await call("POST", `/api/reservations/${held.json.reservationId}/cancel`, { user })).status).toBe(200);
    const view = async () => (await call("GET", `/admin/skus/${sku}`, { admin: true })).json.payments;
    expect(await view()).toEqual({ refund_required: 1 });
    const cut = await call("PUT", `/admin/skus/${sku}`, { admin: true, body: { shards: 1 } });
    expect(cut.status).toBe(200);
    expect(await view()).toEqual({ refund_required: 1 });
  });
});
