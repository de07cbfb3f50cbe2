import { runInDurableObject } from "cloudflare:test";
import { env } from "cloudflare:workers";
import { describe, expect, it } from "vitest";
import { homeShard } from "../durable-objects/shared/shard-name";
import { mintPurchaseToken, newNonce } from "../src/edge/purchase-token";
import { CONTRACT_SCHEMAS } from "../src/routes/contract-schemas";
import { call, createSku, reserve, stockShard, tokenFor, uniqueSku } from "./support/client";
import { eventually } from "./support/eventually";
import { pay } from "./support/payments";
// The contract's other suites share this file's workerd (one start-up, issue #56): bad input, answers
// against /openapi.json's schemas, CORS, the public SKU display, SKUs nobody configured, what a
// refusal says (error-messages), the pages each entry serves, the harness's dev-only routes and the
// test runtime's own patch (test-runtime).
import "./suites/bad-input";
import "./suites/openapi";
import "./suites/cors";
import "./suites/sku-display";
import "./suites/unknown-skus";
import "./suites/error-messages";
import "./suites/pages";
import "./suites/dev-routes";
import "./suites/auth";
import "./suites/metrics";
import "./suites/test-runtime";

/**
 * Lines of docs/API.md that no other test asserted, each through the routes as a client sees them.
 * Each test fails if its line stops being true.
 */

const TOKEN_SECRET = "test-token-secret";

/** A validly signed purchase token for a SKU the catalog may not have (the token route would refuse). */
const forgedToken = (user: string, sku: string) =>
  mintPurchaseToken(
    { sku, userId: user, shard: homeShard(user, 1), shards: 1, nonce: newNonce(), expiresAt: Date.now() + 60_000 },
    TOKEN_SECRET,
  );

const orderRow = (id: string) => env.DB.prepare("SELECT status FROM orders WHERE reservation_id = ?").bind(id).first();

describe("contract lines", () => {
  it("tokens, reservations and the waitlist of an unknown SKU: 404 SKU_NOT_FOUND", async () => {
    const sku = uniqueSku("nosku");
    const answers = [
      await call("POST", `/api/skus/${sku}/tokens`, { user: "nia" }),
      await call("POST", `/api/skus/${sku}/reservations`, {
        user: "nia",
        body: { token: await forgedToken("nia", sku), quantity: 1 },
      }),
      await call("POST", `/api/skus/${sku}/waitlist`, { user: "nia", body: { quantity: 1 } }),
    ];
    expect(answers.map((a) => [a.status, a.json.error?.code])).toEqual([
      [404, "SKU_NOT_FOUND"],
      [404, "SKU_NOT_FOUND"],
      [404, "SKU_NOT_FOUND"],
    ]);
  });

  it("a reservation's links.self is its own URL, and the owner can GET it", async () => {
    const sku = uniqueSku("links");
    await createSku(sku, { totalStock: 2 });
    const held = await reserve("lia", sku, 1);
    expect(held.status).toBe(202);
    expect(held.json.links).toEqual({ self: `/api/reservations/${held.json.reservationId}` });
    const self = await call("GET", held.json.links.self, { user: "lia" });
    expect([self.status, self.json.reservationId]).toEqual([200, held.json.reservationId]);
  });

  it("order.persisted is false while the order row does not exist, true with its status once it does", async () => {
    const sku = uniqueSku("persisted");
    await createSku(sku, { totalStock: 2 });
    const id = (await reserve("pia", sku, 1)).json.reservationId as string;
    await eventually(async () => expect(await orderRow(id)).not.toBeNull());
    const view = () => call("GET", `/api/reservations/${id}`, { user: "pia" });
    expect((await view()).json.order).toEqual({ persisted: true, status: "held" });
    // The row is gone (as before the queue delivered it): the reservation says so.
    await env.DB.prepare("DELETE FROM orders WHERE reservation_id = ?").bind(id).run();
    const missing = await view();
    expect([missing.status, missing.json.status, missing.json.order]).toEqual([
      200,
      "held",
      { persisted: false, status: null },
    ]);
    // POST /admin/reconcile finds it through the route and re-emits it.
    const run = await call("POST", "/admin/reconcile", { admin: true });
    expect(run.status).toBe(200);
    expect(CONTRACT_SCHEMAS.ReconcileResult.safeParse(run.json).success).toBe(true);
    expect(run.json.differences.filter((d: { sku: string }) => d.sku === sku)).toEqual([
      expect.objectContaining({ sku, kind: "order_missing", repaired: true }),
    ]);
    await eventually(async () => expect((await view()).json.order).toEqual({ persisted: true, status: "held" }));
  });

  it("POST /admin/reconcile?sku= checks that SKU alone; an unknown SKU is 404, a bad option 400, and neither runs", async () => {
    const [one, other] = [uniqueSku("scoped"), uniqueSku("unscoped")];
    const held: Record<string, string> = {};
    for (const sku of [one, other]) {
      await createSku(sku, { totalStock: 2 });
      held[sku] = (await reserve("sia", sku, 1)).json.reservationId as string;
    }
    await eventually(async () => expect(await orderRow(held[other] as string)).not.toBeNull());
    await eventually(async () => expect(await orderRow(held[one] as string)).not.toBeNull());
    for (const sku of [one, other]) {
      await env.DB.prepare("DELETE FROM orders WHERE reservation_id = ?").bind(held[sku]).run();
    }
    const newestRun = async () =>
      (await call("GET", "/admin/reconcile/runs?limit=1", { admin: true })).json.runs[0]?.runId;
    const before = await newestRun();
    const refused = [
      ["?sku=nope-never-made", 404, "SKU_NOT_FOUND"],
      ["?sku=not%20an%20id", 404, "SKU_NOT_FOUND"],
      [`?sku=${one}&full=yes`, 400, "INVALID_REQUEST"],
    ] as const;
    for (const [query, status, code] of refused) {
      const answer = await call("POST", `/admin/reconcile${query}`, { admin: true });
      expect([answer.status, answer.json.error?.code], query).toEqual([status, code]);
    }
    expect(await newestRun()).toBe(before); // a refused request runs nothing
    const letters = await call("GET", "/admin/dead-letters?pending=yes", { admin: true });
    expect([letters.status, letters.json.error?.details?.fields]).toEqual([
      400,
      [{ path: "pending", message: "true or false" }],
    ]);
    const run = await call("POST", `/admin/reconcile?sku=${one}`, { admin: true });
    expect([run.status, run.json.skusChecked]).toEqual([200, 1]);
    expect(run.json.differences).toEqual([
      expect.objectContaining({ sku: one, kind: "order_missing", repaired: true }),
    ]);
    await eventually(async () => expect(await orderRow(held[one] as string)).not.toBeNull());
    expect(await orderRow(held[other] as string)).toBeNull(); // the other SKU was not looked at
    const rest = await call("POST", `/admin/reconcile?sku=${other}&full=false`, { admin: true });
    expect(rest.json.differences).toEqual([expect.objectContaining({ sku: other, kind: "order_missing" })]);
  });

  it("GET /api/me/reservations lists the user's reservations newest first", async () => {
    const sku = uniqueSku("newest");
    await createSku(sku, { totalStock: 5, perUserLimit: 3 });
    const ids: string[] = [];
    const t0 = Date.now();
    for (let i = 0; i < 3; i++) {
      // Each hold a second after the one before, on the object's clock (no two share a millisecond).
      await runInDurableObject(stockShard(env, sku, 0), (object) => {
        object.now = () => t0 + i * 1_000;
      });
      const held = await reserve("mia", sku, 1);
      expect(held.status).toBe(202);
      ids.push(held.json.reservationId as string);
    }
    // The list is read from D1's order rows, which the queue writes a moment later.
    await eventually(async () => {
      for (const id of ids) expect(await orderRow(id)).not.toBeNull();
    });
    const later = await call("GET", "/api/me/reservations", { user: "mia" });
    expect(later.status).toBe(200);
    expect(
      (later.json.reservations as { reservationId: string; sku: string }[])
        .filter((r) => r.sku === sku)
        .map((r) => r.reservationId),
    ).toEqual([...ids].reverse());
  });

  it("409 INSUFFICIENT_STOCK when some stock is left but less than asked; SOLD_OUT when none", async () => {
    const sku = uniqueSku("insufficient");
    await createSku(sku, { totalStock: 3, perUserLimit: 3 });
    const late = await tokenFor("ic", sku); // before the sell-out, so the reservation route answers it
    expect((await reserve("ia", sku, 2)).status).toBe(202);
    const more = await reserve("ib", sku, 2);
    expect([more.status, more.json.error?.code]).toEqual([409, "INSUFFICIENT_STOCK"]);
    expect((await reserve("ib", sku, 1)).status).toBe(202);
    const none = await reserve("ic", sku, 1, late);
    expect([none.status, none.json.error?.code]).toEqual([409, "SOLD_OUT"]);
  });

  it("PUT /admin/skus/:sku defaults: no price, usd, limit 1, 900 s holds, no window, 1 shard, on sale; mirror null when off", async () => {
    const sku = uniqueSku("defaults");
    const created = await call("PUT", `/admin/skus/${sku}`, { admin: true, body: { totalStock: 4 } });
    expect(created.status).toBe(200);
    expect(created.json).toMatchObject({
      sku,
      status: "on_sale",
      perUserLimit: 1,
      holdSeconds: 900,
      startsAt: null,
      endsAt: null,
      shards: 1,
      price: null,
      currency: "usd",
      openingWindowMs: 0,
      stock: { total: 4, available: 4, held: 0, sold: 0 },
      // This project runs the Worker with the mirror off (UPSTASH_* unset).
      mirror: null,
    });
    const before = Date.now();
    const held = await reserve("dia", sku, 1);
    expect(held.status).toBe(202);
    const holdMs = Date.parse(held.json.expiresAt) - before;
    expect(holdMs).toBeGreaterThan(890_000);
    expect(holdMs).toBeLessThanOrEqual(900_000 + 5_000);
    // perUserLimit 1: a second unit for the same buyer is refused.
    const second = await reserve("dia", sku, 1, await tokenFor("dia", sku));
    expect([second.status, second.json.error?.code]).toEqual([409, "LIMIT_EXCEEDED"]);
    // No price: the amount is not checked.
    const paid = await pay(held.json.reservationId, "payment.succeeded", undefined, { amount: 1 });
    expect([paid.status, paid.json.outcome]).toEqual([200, "applied"]);
    const view = await call("GET", `/admin/skus/${sku}`, { admin: true });
    expect(view.json.mirror).toBeNull();
  });

  it("GET /admin/reconcile/runs?limit: 1..50 (default 10); anything else 400 INVALID_REQUEST", async () => {
    for (const limit of ["0", "51", "abc", "1.5", "-1", ""]) {
      const answer = await call("GET", `/admin/reconcile/runs?limit=${limit}`, { admin: true });
      expect([answer.status, answer.json.error?.code], `limit=${limit}`).toEqual([400, "INVALID_REQUEST"]);
    }
    const sku = uniqueSku("runs");
    await createSku(sku, { totalStock: 1 });
    // Runs of one SKU: eleven runs over the whole catalog would cost what every other suite here left.
    for (let i = 0; i < 11; i++) {
      expect((await call("POST", `/admin/reconcile?sku=${sku}`, { admin: true })).status).toBe(200);
    }
    const runs = await call("GET", "/admin/reconcile/runs", { admin: true });
    expect(runs.status).toBe(200);
    expect(CONTRACT_SCHEMAS.ReconcileRuns.safeParse(runs.json).success).toBe(true);
    expect(runs.json.runs).toHaveLength(10);
    const started = runs.json.runs.map((r: { startedAt: string }) => r.startedAt);
    expect(started).toEqual([...started].sort().reverse()); // newest first
    for (const limit of [1, 50]) {
      const answer = await call("GET", `/admin/reconcile/runs?limit=${limit}`, { admin: true });
      expect(answer.status).toBe(200);
      expect(answer.json.runs.length).toBeLessThanOrEqual(limit);
      expect(answer.json.runs.length).toBeGreaterThanOrEqual(Math.min(limit, 11));
    }
  });
});
