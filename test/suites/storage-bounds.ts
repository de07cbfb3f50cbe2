import { runDurableObjectAlarm, runInDurableObject } from "cloudflare:test";
import { env } from "cloudflare:workers";
import { describe, expect, it } from "vitest";
import { StockEngine } from "../../durable-objects/engine/stock-engine";
import { fnv1a } from "../../durable-objects/shared/fnv1a";
import { mintPurchaseToken, newNonce } from "../../src/edge/purchase-token";
import { forgetSoldOut } from "../../src/edge/sold-out-cache";
import { reconcile } from "../../src/reconcile/reconcile";
import { call, createSku, reserve, stockOf, stockShard, uniqueSku } from "../support/client";
import { eventually } from "../support/eventually";
import { pay } from "../support/payments";
import { ordersOf, reconcileNow } from "../support/reconcile";

/**
 * Finished rows leave the stock object once D1 has them (reconciliation's watermark passed them and
 * their tokens can no longer be replayed); what the object forgot is read from D1.
 */

const TOKEN_LIFETIME_MS = 300_000 + 60_000; // PURCHASE_TOKEN_TTL_SECONDS and the clock margin

const rowsOf = (sku: string) =>
  runInDurableObject(stockShard(env, sku, 0), (_object, state) => ({
    reservations: state.storage.sql.exec<{ n: number }>("SELECT COUNT(*) AS n FROM reservations").one().n,
    quotas: state.storage.sql.exec<{ n: number }>("SELECT COUNT(*) AS n FROM user_quota").one().n,
  }));

/** A purchase token of `userId` for shard 0 of a one-shard SKU, valid for `ttlMs` (signed as the edge does). */
async function longToken(sku: string, userId: string, ttlMs: number): Promise<{ token: string; nonce: string }> {
  const nonce = newNonce();
  const claims = { sku, userId, shard: 0, shards: 1, nonce, expiresAt: Date.now() + ttlMs };
  return { token: await mintPurchaseToken(claims, "test-token-secret"), nonce };
}

/** Moves the object's clock `ms` ahead of the wall clock. */
const shiftClock = (sku: string, ms: number) =>
  runInDurableObject(stockShard(env, sku, 0), (object) => {
    object.now = () => Date.now() + ms;
  });

describe("stock object storage", () => {
  it("forgets finished reservations once reconciled; owners, cancels and late payments are answered from D1", async () => {
    const sku = uniqueSku("prune");
    await createSku(sku, { totalStock: 10, perUserLimit: 1, holdSeconds: 60, price: 500 });
    const users = Array.from({ length: 8 }, (_, i) => `pruner-${i}`);
    const held = await Promise.all(users.map((u) => reserve(u, sku, 1)));
    const ids = held.map((h) => h.json.reservationId as string);
    // Two paid, three cancelled, three left to expire.
    for (const id of ids.slice(0, 2))
      expect((await pay(id, "payment.succeeded", undefined, { amount: 500 })).status).toBe(200);
    for (const [i, id] of ids.slice(2, 5).entries()) {
      expect((await call("POST", `/api/reservations/${id}/cancel`, { user: users[i + 2] })).status).toBe(200);
    }
    await shiftClock(sku, TOKEN_LIFETIME_MS + 1_000); // holds expired, tokens past replay
    expect(await runDurableObjectAlarm(stockShard(env, sku, 0))).toBe(true); // expires the holds, sends the events
    await eventually(async () =>
      expect((await ordersOf(sku)).map((o) => o.status).sort()).toEqual([
        "cancelled",
        "cancelled",
        "cancelled",
        "expired",
        "expired",
        "expired",
        "paid",
        "paid",
      ]),
    );
    expect((await rowsOf(sku)).reservations).toBe(8);

    // Reconciliation on the object's clock (which is ahead): the watermark passes them, and the next
    // visit prunes below it.
    await reconcile(env, { trigger: "admin", sku, now: Date.now() + TOKEN_LIFETIME_MS + 1_000 });
    await reconcile(env, { trigger: "admin", sku, now: Date.now() + TOKEN_LIFETIME_MS + 1_000 });
    expect(await rowsOf(sku)).toEqual({ reservations: 0, quotas: 2 }); // the buyers' quotas stay
    expect(await stockOf(sku)).toEqual({ total: 10, available: 8, held: 0, sold: 2 });
    // The object still counts the reservations it pruned: its count equals D1's, so a later run
    // finds nothing to recheck (no order_count difference), and a new hold counts from there.
    const quiet = await reconcile(env, { trigger: "admin", sku, now: Date.now() + TOKEN_LIFETIME_MS + 1_000 });
    expect(quiet.differences.filter((d) => d.sku === sku)).toEqual([]);
    const audit = await runInDurableObject(stockShard(env, sku, 0), (object) => object.audit(0, 1));
    expect(audit?.created).toBe(8);

    // The owner still sees each one, from D1; anyone else gets 404.
    const mine = await call("GET", `/api/reservations/${ids[0]}`, { user: users[0] });
    expect([mine.status, mine.json.status, mine.json.order]).toEqual([
      200,
      "paid",
      { persisted: true, status: "paid" },
    ]);
    expect((await call("GET", `/api/reservations/${ids[0]}`, { user: users[1] })).status).toBe(404);
    // Cancelling a cancelled one again is 200, a paid one 409, as before.
    expect((await call("POST", `/api/reservations/${ids[2]}/cancel`, { user: users[2] })).json.status).toBe(
      "cancelled",
    );
    const paidCancel = await call("POST", `/api/reservations/${ids[0]}/cancel`, { user: users[0] });
    expect([paidCancel.status, paidCancel.json.error?.code]).toEqual([409, "INVALID_STATE"]);
    // Read from D1 (the object forgot it), it says the same as the object would.
    expect(paidCancel.json.error.message).toBe(
      `Reservation ${ids[0]} is paid: only a held reservation can be cancelled.`,
    );

    // A late payment for a forgotten expired hold still re-takes the stock; one for a paid one is a refund.
    forgetSoldOut(sku);
    const late = await pay(ids[5] as string, "payment.succeeded", "evt_late_pruned", { amount: 500 });
    expect(late.json).toEqual({ received: true, reservationStatus: "paid", outcome: "applied" });
    const again = await pay(ids[1] as string, "payment.succeeded", "evt_again_pruned", { amount: 500 });
    expect(again.json).toEqual({ received: true, reservationStatus: "paid", outcome: "refund_required" });
    expect(await stockOf(sku)).toEqual({ total: 10, available: 7, held: 0, sold: 3 });
    // An id nobody has is still unknown.
    expect((await pay(`${sku}.0.${"f".repeat(32)}`)).status).toBe(404);
  });

  it("a full reconciliation (?full=true) reports an order row deleted after its reservation was forgotten", async () => {
    const sku = uniqueSku("prunefull");
    await createSku(sku, { totalStock: 5, perUserLimit: 1 });
    const users = ["prunefull-0", "prunefull-1"];
    const ids = (await Promise.all(users.map((u) => reserve(u, sku, 1)))).map((h) => h.json.reservationId as string);
    for (const [i, id] of ids.entries()) {
      expect((await call("POST", `/api/reservations/${id}/cancel`, { user: users[i] })).status).toBe(200);
    }
    await eventually(async () =>
      expect((await ordersOf(sku)).map((o) => o.status)).toEqual(["cancelled", "cancelled"]),
    );
    const later = Date.now() + TOKEN_LIFETIME_MS + 1_000;
    await shiftClock(sku, TOKEN_LIFETIME_MS + 1_000);
    await reconcile(env, { trigger: "admin", sku, now: later });
    await reconcile(env, { trigger: "admin", sku, now: later });
    expect((await rowsOf(sku)).reservations).toBe(0); // the object forgot both: D1 is their only record
    // A hurried operator's DELETE (or an older D1 backup restored): one order row is gone.
    await env.DB.prepare("DELETE FROM orders WHERE reservation_id = ?").bind(ids[0]).run();
    // The ordinary run says so (it cannot restore the row: nobody holds it any more).
    const ordinary = await reconcile(env, { trigger: "admin", sku, now: later });
    expect(ordinary.differences.filter((d) => d.sku === sku).map((d) => [d.kind, d.repaired])).toEqual([
      ["order_count", false],
    ]);
    // The operator's "recheck everything" must not answer that all is well.
    const full = await reconcile(env, { trigger: "admin", sku, now: later, full: true });
    expect(full.differences.filter((d) => d.sku === sku).map((d) => [d.kind, d.repaired])).toEqual([
      ["order_count", false],
    ]);
  });

  it("a late payment for a forgotten hold of a size takes that size again while units of it are left", async () => {
    const sku = uniqueSku("prunesize");
    await createSku(sku, {
      variants: [
        { id: "s", totalStock: 2 },
        { id: "m", totalStock: 5 },
      ],
      perUserLimit: 1,
      holdSeconds: 60,
      price: 500,
    });
    const user = "prunesize-u";
    const token = (await longToken(sku, user, 60_000)).token;
    const held = await call("POST", `/api/skus/${sku}/reservations`, {
      user,
      body: { token, quantity: 1, variants: ["m"] },
    });
    const id = held.json.reservationId as string;
    expect((await call("POST", `/api/reservations/${id}/cancel`, { user })).status).toBe(200);
    await eventually(async () => expect((await ordersOf(sku)).map((o) => o.status)).toEqual(["cancelled"]));
    const later = Date.now() + TOKEN_LIFETIME_MS + 1_000;
    await shiftClock(sku, TOKEN_LIFETIME_MS + 1_000);
    await reconcile(env, { trigger: "admin", sku, now: later });
    await reconcile(env, { trigger: "admin", sku, now: later });
    expect((await rowsOf(sku)).reservations).toBe(0); // forgotten: the payment's row comes from D1
    const late = await pay(id, "payment.succeeded", undefined, { amount: 500 });
    expect(late.json).toEqual({ received: true, reservationStatus: "paid", outcome: "applied" });
    const view = await call("GET", `/admin/skus/${sku}`, { admin: true });
    expect(view.json.variants.map((v: { id: string; stock: { sold: number } }) => [v.id, v.stock.sold])).toEqual([
      ["s", 0],
      ["m", 1],
    ]);
  });

  it("keeps pace with a long sale: each run confirms every page since its watermark and forgets it at once", async () => {
    const sku = uniqueSku("pace");
    await createSku(sku, { totalStock: 1_000, perUserLimit: 1, holdSeconds: 3600 });
    const stub = stockShard(env, sku, 0);
    const CYCLES = 120;
    const PAGE = 25; // a run crosses several pages (production pages are 1,000)
    let shift = 0;
    let user = 0;
    for (let round = 1; round <= 3; round++) {
      // A round of the sale: reserve → cancel cycles, straight at the object (the edge adds nothing here).
      const requests = Array.from({ length: CYCLES }, () => ({
        userId: `pacer-${user++}`,
        nonce: crypto.randomUUID(),
        quantity: 1,
      }));
      const held = await stub.reserve(requests);
      for (const [i, answer] of held.entries()) {
        if (!answer.ok) throw new Error(`hold refused: ${answer.code}`);
        const cancelled = await stub.cancel(answer.value.reservation.id, requests[i]?.userId as string);
        expect(cancelled.ok).toBe(true);
      }
      await eventually(async () =>
        expect((await ordersOf(sku)).filter((o) => o.status === "cancelled")).toHaveLength(round * CYCLES),
      );
      // Their tokens can no longer be replayed; one run on that clock confirms all of them in D1…
      shift += TOKEN_LIFETIME_MS + 1_000;
      await shiftClock(sku, shift);
      const report = await reconcile(env, { trigger: "admin", sku, now: Date.now() + shift, page: PAGE });
      expect(report.differences.filter((d) => d.sku === sku)).toEqual([]);
      // …and the object forgets them in the same run: it never holds more than one round.
      expect(await rowsOf(sku)).toEqual({ reservations: 0, quotas: 0 });
    }
    expect(await stockOf(sku)).toEqual({ total: 1_000, available: 1_000, held: 0, sold: 0 });
    const audit = await runInDurableObject(stub, (object) => object.audit(0, 1));
    expect(audit?.created).toBe(3 * CYCLES);
  });

  it("keeps open holds and replayable tokens whatever the watermark", async () => {
    const sku = uniqueSku("keep");
    await createSku(sku, { totalStock: 5, perUserLimit: 1, holdSeconds: 3600 });
    const held = await reserve("keeper", sku, 1);
    const cancelled = await reserve("quitter", sku, 1);
    await call("POST", `/api/reservations/${cancelled.json.reservationId}/cancel`, { user: "quitter" });
    await eventually(async () => expect(await ordersOf(sku)).toHaveLength(2));
    await reconcileNow({ sku });
    await reconcileNow({ sku });
    // The cancelled one's token could still be replayed: both rows stay.
    expect((await rowsOf(sku)).reservations).toBe(2);
    await shiftClock(sku, TOKEN_LIFETIME_MS + 1_000);
    await reconcileNow({ sku });
    expect((await rowsOf(sku)).reservations).toBe(1); // the open hold
    expect((await call("GET", `/api/reservations/${held.json.reservationId}`, { user: "keeper" })).json.status).toBe(
      "held",
    );
  });

  it("keeps a reservation as long as its own token can be replayed, whatever today's token lifetime", async () => {
    const sku = uniqueSku("longtoken");
    await createSku(sku, { totalStock: 5, perUserLimit: 1, holdSeconds: 60 });
    // Minted under a longer PURCHASE_TOKEN_TTL_SECONDS than today's (an hour, not 300 s).
    const HOUR = 3600_000;
    const { token } = await longToken(sku, "patient", HOUR);
    const held = await reserve("patient", sku, 1, token);
    expect(held.status).toBe(202);
    const id = held.json.reservationId as string;
    expect((await call("POST", `/api/reservations/${id}/cancel`, { user: "patient" })).status).toBe(200);
    await eventually(async () => expect(await ordersOf(sku)).toEqual([{ reservation_id: id, status: "cancelled" }]));

    // Past today's token lifetime, inside the token's own: reconciliation's prune passes it by, and it stays.
    const shift = TOKEN_LIFETIME_MS + 1_000;
    await shiftClock(sku, shift);
    await reconcile(env, { trigger: "admin", sku, now: Date.now() + shift });
    await reconcile(env, { trigger: "admin", sku, now: Date.now() + shift });
    expect((await rowsOf(sku)).reservations).toBe(1);
    // The replay is the same reservation, not a second hold.
    const replay = await reserve("patient", sku, 1, token);
    expect([replay.status, replay.headers.get("Idempotent-Replayed"), replay.json.reservationId]).toEqual([
      202,
      "true",
      id,
    ]);
    expect(await stockOf(sku)).toEqual({ total: 5, available: 5, held: 0, sold: 0 });

    // Once its own token has expired (plus the clock margin), it goes like any other.
    const later = HOUR + 61_000;
    await shiftClock(sku, later);
    await reconcile(env, { trigger: "admin", sku, now: Date.now() + later });
    expect((await rowsOf(sku)).reservations).toBe(0);
  });

  it("the spent-nonce digest of a sold-out SKU holds every token that has not expired", async () => {
    const sku = uniqueSku("longdigest");
    await createSku(sku, { totalStock: 1, perUserLimit: 1, holdSeconds: 3600 });
    const { token, nonce } = await longToken(sku, "early", 3600_000);
    const id = (await reserve("early", sku, 1, token)).json.reservationId as string;
    expect((await pay(id)).json.reservationStatus).toBe("paid");
    await shiftClock(sku, TOKEN_LIFETIME_MS + 1_000); // past today's token lifetime, inside its own
    // A newcomer's sold-out answer carries the digest the edge's sold-out cache refuses by.
    const [late] = await stockShard(env, sku, 0).reserve([{ userId: "late", nonce: newNonce(), quantity: 1 }]);
    expect(late?.soldOut).toBe(true);
    expect(late?.spent?.nonces).toContain(fnv1a(nonce));
    // So a replay of the early token is answered with its reservation, not SOLD_OUT.
    forgetSoldOut(sku);
    const newcomer = await longToken(sku, "late", 3600_000);
    expect((await reserve("late", sku, 1, newcomer.token)).json.error?.code).toBe("SOLD_OUT");
    const replay = await reserve("early", sku, 1, token);
    expect([replay.status, replay.headers.get("Idempotent-Replayed"), replay.json.reservationId]).toEqual([
      202,
      "true",
      id,
    ]);
  });

  it("an object from before gets the token expiry column; its rows keep the rule of before", async () => {
    const sku = uniqueSku("oldrows");
    await createSku(sku, { totalStock: 2, holdSeconds: 3600 });
    const held = await reserve("elder", sku, 1);
    expect((await call("POST", `/api/reservations/${held.json.reservationId}/cancel`, { user: "elder" })).status).toBe(
      200,
    );
    await runInDurableObject(stockShard(env, sku, 0), (_object, state) => {
      const sql = state.storage.sql;
      // As an object written before the column would hold it: no column, the old nonce index.
      sql.exec("DROP INDEX reservations_token_expiry");
      sql.exec("DROP INDEX reservations_untimed_nonce_by_time");
      sql.exec("ALTER TABLE reservations DROP COLUMN token_expires_at");
      for (const column of ["type", "amount", "currency"]) sql.exec(`ALTER TABLE payment_events DROP COLUMN ${column}`);
      sql.exec("CREATE INDEX reservations_nonce_by_time ON reservations (created_at) WHERE nonce IS NOT NULL");
      sql.exec("DROP TABLE schema_version"); // objects from before numbered steps have none

      const restarted = new StockEngine(state.storage, () => crypto.randomUUID());
      const indexes = sql
        .exec<{ name: string }>("SELECT name FROM sqlite_master WHERE type = 'index' AND tbl_name = 'reservations'")
        .toArray()
        .map((r) => r.name);
      expect(indexes).toContain("reservations_token_expiry");
      expect(indexes).not.toContain("reservations_nonce_by_time");
      expect(sql.exec("SELECT token_expires_at FROM reservations").toArray()).toEqual([{ token_expires_at: null }]);
      const createdAt = sql.exec<{ t: number }>("SELECT created_at AS t FROM reservations").one().t;
      // Without its token's expiry, a row stays while it was made within the lifetime of now…
      const watermark = Number.MAX_SAFE_INTEGER;
      expect(
        restarted.retention.prune({
          watermark,
          replayableSince: createdAt,
          expiredBefore: createdAt + 3600_000,
          now: createdAt,
          limit: 10,
        }).reservations,
      ).toBe(0);
      // …and goes after it, as before.
      expect(
        restarted.retention.prune({
          watermark,
          replayableSince: createdAt + 1,
          expiredBefore: 0,
          now: createdAt,
          limit: 10,
        }).reservations,
      ).toBe(1);
    });
  });
});
