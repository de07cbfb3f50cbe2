import { runInDurableObject } from "cloudflare:test";
import { env } from "cloudflare:workers";
import { describe, expect, it } from "vitest";
import { homeShard } from "../../durable-objects/shared/shard-name";
import { forgetSoldOut } from "../../src/edge/sold-out-cache";
import { Scrape } from "../../tools/prometheus";
import { type Answer, call, createSku, stockCallsTo, stockShard, tokenFor, uniqueSku } from "../support/client";
import { setClock } from "../support/draw-window";
import { eventually } from "../support/eventually";
import { conforms } from "../support/handoff";
import { pay } from "../support/payments";
import { differencesOf, reconcileNow } from "../support/reconcile";
// Sizes against a model on 1 to 4 shards shares this file's workerd (one start-up, issue #56).
import "./sizes-model";

/**
 * API.md v1.4 "Sizes (variants)" through the Worker, on 1 and on 4 shards: one product, its sizes,
 * one per-user limit across them, a buyer's preferences, a variant cut and a variant added mid-sale,
 * a late payment whose size is gone, what D1, the feed and the payments list say, and bad input.
 */

type Variants = { id: string; name?: string; totalStock: number }[];

async function sized(shards: number, variants: Variants, extra: Record<string, unknown> = {}) {
  const sku = uniqueSku(`sizes${shards}`);
  const created = await createSku(sku, { shards, perUserLimit: 1, price: 900, variants, ...extra });
  return { sku, created };
}

async function reserveSizes(
  user: string,
  sku: string,
  variants: unknown,
  quantity = 1,
  token?: string,
  env?: Partial<Env>,
): Promise<Answer> {
  return call("POST", `/api/skus/${sku}/reservations`, {
    user,
    body: { token: token ?? (await tokenFor(user, sku)), quantity, variants },
    ...(env ? { env } : {}),
  });
}

/** The sold-out memory kept a minute (wrangler.toml: a second), for the requests given it. */
const LONG_MEMORY = { SOLD_OUT_CACHE_TTL_MS: "60000" } as unknown as Partial<Env>;

/** Each variant's stock as the admin view shows it, by id. */
async function variantStock(sku: string) {
  const view = await call("GET", `/admin/skus/${sku}`, { admin: true });
  expect(view.status).toBe(200);
  conforms("AdminSku", view.json);
  const variants = view.json.variants as { id: string; stock: Record<string, number> }[];
  return Object.fromEntries(variants.map((v) => [v.id, v.stock]));
}

const fieldsOf = (answer: Answer) =>
  ((answer.json.error?.details?.fields ?? []) as { path: string }[]).map((f) => f.path);

describe.each([1, 4])("sizes on %i shard(s)", (shards) => {
  it("shows each size, takes the first listed size with stock, and counts the limit across sizes", async () => {
    const { sku, created } = await sized(shards, [
      { id: "42", name: "EU 42", totalStock: 1 },
      { id: "42.5", name: "EU 42.5", totalStock: 2 },
      { id: "43", totalStock: 3 },
    ]);
    expect(created.json).toMatchObject({ stock: { total: 6, available: 6, held: 0, sold: 0 } });
    expect(created.json.variants).toEqual([
      { id: "42", name: "EU 42", stock: { total: 1, available: 1, held: 0, sold: 0 } },
      { id: "42.5", name: "EU 42.5", stock: { total: 2, available: 2, held: 0, sold: 0 } },
      { id: "43", name: "43", stock: { total: 3, available: 3, held: 0, sold: 0 } },
    ]);
    const shown = await call("GET", `/api/skus/${sku}`);
    conforms("PublicSku", shown.json);
    expect(shown.json.variants).toEqual([
      { id: "42", name: "EU 42", available: 1, held: 0 },
      { id: "42.5", name: "EU 42.5", available: 2, held: 0 },
      { id: "43", name: "43", available: 3, held: 0 },
    ]);

    const ana = await reserveSizes("ana", sku, ["42", "43"]);
    expect(ana.status, JSON.stringify(ana.json)).toBe(202);
    conforms("Reservation", ana.json);
    expect(ana.json.variant).toBe("42");
    // One per customer across sizes: ana cannot take a 43 beside her 42.
    const again = await reserveSizes("ana", sku, ["43"]);
    expect(again.status).toBe(409);
    expect(again.json.error).toMatchObject({ code: "LIMIT_EXCEEDED", details: { perUserLimit: 1, held: 1 } });
    // 42 is gone: ben's second choice serves him.
    const ben = await reserveSizes("ben", sku, ["42", "42.5"]);
    expect(ben.status, JSON.stringify(ben.json)).toBe(202);
    expect(ben.json.variant).toBe("42.5");
    // Only 42 listed, and it is gone: SOLD_OUT with what each listed size has; 2 of 42.5 is short.
    const cleo = await reserveSizes("cleo", sku, ["42"]);
    expect(cleo.status).toBe(409);
    expect(cleo.json.error).toMatchObject({ code: "SOLD_OUT", details: { variants: { "42": 0 } } });
    const many = await createSku(sku, { perUserLimit: 5 });
    expect(many.status).toBe(200);
    const eve = await reserveSizes("eve", sku, ["42", "42.5"], 2);
    expect(eve.status).toBe(409);
    expect(eve.json.error).toMatchObject({ code: "INSUFFICIENT_STOCK", details: { variants: { "42": 0, "42.5": 1 } } });
    expect(await variantStock(sku)).toEqual({
      "42": { total: 1, available: 0, held: 1, sold: 0 },
      "42.5": { total: 2, available: 1, held: 1, sold: 0 },
      "43": { total: 3, available: 3, held: 0, sold: 0 },
    });
    // /metrics samples the SKU per size: flashgate_stock{sku,state,variant}, their sum the SKU's.
    const metrics = await call("GET", "/metrics", { admin: true });
    const scrape = new Scrape((metrics.json as { text: string }).text);
    const held = ["42", "42.5", "43"].map((variant) => scrape.find("flashgate_stock", { sku, state: "held", variant }));
    expect(held.map((samples) => samples.map((x) => x.value))).toEqual([[1], [1], [0]]);
    expect(scrape.find("flashgate_stock", { sku, state: "held" }).map((x) => x.labels.variant)).toEqual([
      "42",
      "42.5",
      "43",
    ]);

    // The reservation's own read, the user's list, D1, the feed and the payments list carry the size.
    const read = await call("GET", `/api/reservations/${ana.json.reservationId}`, { user: "ana" });
    expect(read.json).toMatchObject({ variant: "42" });
    const paid = await pay(ana.json.reservationId as string, "payment.succeeded", undefined, { amount: 900 });
    expect(paid.status, JSON.stringify(paid.json)).toBe(200);
    await eventually(async () => {
      const row = await env.DB.prepare("SELECT variant, status FROM orders WHERE reservation_id = ?")
        .bind(ana.json.reservationId)
        .first();
      expect(row).toEqual({ variant: "42", status: "paid" });
    });
    const lookup = await call("GET", `/admin/orders/${ana.json.reservationId}`, { admin: true });
    conforms("OrderObject", lookup.json);
    expect(lookup.json).toMatchObject({ variant: "42", status: "paid" });
    const mine = await call("GET", "/api/me/reservations", { user: "ana" });
    expect(mine.json.reservations).toEqual(
      expect.arrayContaining([expect.objectContaining({ reservationId: ana.json.reservationId, variant: "42" })]),
    );
    const payments = await call("GET", "/admin/payments?limit=1000", { admin: true });
    conforms("PaymentList", payments.json);
    const payment = (payments.json.payments as { reservationId: string; variant: string | null }[]).find(
      (p) => p.reservationId === ana.json.reservationId,
    );
    expect(payment?.variant).toBe("42");
  });

  it("refuses a cut below a size's held + sold naming it, changes nothing, and adds a size mid-sale", async () => {
    const { sku } = await sized(shards, [
      { id: "s", totalStock: 2 },
      { id: "m", totalStock: 2 },
    ]);
    expect((await reserveSizes("fay", sku, ["m"])).status).toBe(202);
    expect((await reserveSizes("gus", sku, ["m"])).status).toBe(202);
    const before = await variantStock(sku);
    const cut = await call("PUT", `/admin/skus/${sku}`, {
      admin: true,
      body: { variants: [{ id: "m", totalStock: 1 }] },
    });
    expect(cut.status).toBe(409);
    expect(cut.json.error).toMatchObject({
      code: "INVALID_STATE",
      details: { variant: "m", totalStock: 1, heldOrSold: 2 },
    });
    expect(cut.json.error.message).toContain("Variant m");
    expect(await variantStock(sku)).toEqual(before);
    // A cut the size can take (its available units) is applied; the rest keep theirs.
    const fine = await call("PUT", `/admin/skus/${sku}`, {
      admin: true,
      body: { variants: [{ id: "s", totalStock: 1 }] },
    });
    expect(fine.status, JSON.stringify(fine.json)).toBe(200);
    expect(fine.json.stock).toMatchObject({ total: 3, held: 2 });
    // A size added while the sale runs: on sale at once, the SKU's total grows with it.
    const added = await call("PUT", `/admin/skus/${sku}`, {
      admin: true,
      body: { variants: [{ id: "l", name: "Large", totalStock: 4 }] },
    });
    expect(added.status, JSON.stringify(added.json)).toBe(200);
    expect(added.json.stock).toMatchObject({ total: 7, available: 3 + 2 });
    const hal = await reserveSizes("hal", sku, ["m", "l"]);
    expect(hal.json.variant).toBe("l");
    expect(await variantStock(sku)).toEqual({
      s: { total: 1, available: 1, held: 0, sold: 0 },
      m: { total: 2, available: 0, held: 2, sold: 0 },
      l: { total: 4, available: 3, held: 1, sold: 0 },
    });
  });

  it("applies one PUT that cuts several sizes, each within its available units, whichever shards hold them", async () => {
    const { sku } = await sized(shards, [
      { id: "a", totalStock: 8 },
      { id: "b", totalStock: 8 },
      { id: "c", totalStock: 8 },
    ]);
    expect((await reserveSizes("ida", sku, ["b"])).status).toBe(202);
    const cut = await call("PUT", `/admin/skus/${sku}`, {
      admin: true,
      body: {
        variants: [
          { id: "a", totalStock: 1 },
          { id: "b", totalStock: 1 },
          { id: "c", totalStock: 2 },
        ],
      },
    });
    expect(cut.status, JSON.stringify(cut.json)).toBe(200);
    expect(await variantStock(sku)).toEqual({
      a: { total: 1, available: 1, held: 0, sold: 0 },
      b: { total: 1, available: 0, held: 1, sold: 0 },
      c: { total: 2, available: 2, held: 0, sold: 0 },
    });
  });

  it("a late payment takes its own size again, or owes the money back when that size is gone", async () => {
    const { sku } = await sized(shards, [
      { id: "40", totalStock: 1 },
      { id: "41", totalStock: 4 },
    ]);
    const ida = await reserveSizes("ida", sku, ["40"]);
    expect(ida.json.variant).toBe("40");
    const cancel = await call("POST", `/api/reservations/${ida.json.reservationId}/cancel`, { user: "ida" });
    expect(cancel.status).toBe(200);
    // The released 40 is taken by another buyer; ida's money arrives after.
    expect((await reserveSizes("jon", sku, ["40"])).json.variant).toBe("40");
    const late = await pay(ida.json.reservationId as string, "payment.succeeded", undefined, { amount: 900 });
    expect(late.status, JSON.stringify(late.json)).toBe(200);
    expect(late.json).toMatchObject({ outcome: "refund_required" });
    const owed = await call("GET", "/admin/payments?limit=1000", { admin: true });
    const record = (owed.json.payments as { reservationId: string }[]).find(
      (p) => p.reservationId === ida.json.reservationId,
    );
    expect(record).toMatchObject({ outcome: "refund_required", reason: "too_late", variant: "40" });
    // A late payment whose size still has units is applied.
    const kim = await reserveSizes("kim", sku, ["41"]);
    await call("POST", `/api/reservations/${kim.json.reservationId}/cancel`, { user: "kim" });
    const applied = await pay(kim.json.reservationId as string, "payment.succeeded", undefined, { amount: 900 });
    expect(applied.json).toMatchObject({ outcome: "applied" });
    expect(await variantStock(sku)).toEqual({
      "40": { total: 1, available: 0, held: 1, sold: 0 },
      "41": { total: 4, available: 3, held: 0, sold: 1 },
    });
  });
});

describe.each([1, 4])("sizes in the line on %i shard(s)", (shards) => {
  it("a released size serves the first entry that listed it, even second; unitsAhead counts rivals only", async () => {
    const { sku } = await sized(shards, [
      { id: "42", totalStock: 1 },
      { id: "42.5", totalStock: 1 },
      { id: "44", totalStock: 1 },
    ]);
    const ana = await reserveSizes("ana", sku, ["42"]);
    const ben = await reserveSizes("ben", sku, ["42.5"]);
    expect([ana.json.variant, ben.json.variant]).toEqual(["42", "42.5"]);
    // 44 has a unit: a buyer who lists it buys instead of waiting.
    const early = await call("POST", `/api/skus/${sku}/waitlist`, {
      user: "cleo",
      body: { quantity: 1, variants: ["42", "44"] },
    });
    expect(early.status).toBe(409);
    expect(early.json.error).toMatchObject({ code: "STOCK_AVAILABLE", details: { available: 1 } });
    const dora = await call("POST", `/api/skus/${sku}/waitlist`, {
      user: "dora",
      body: { quantity: 1, variants: ["42"] },
    });
    expect(dora.status, JSON.stringify(dora.json)).toBe(202);
    const cleo = await call("POST", `/api/skus/${sku}/waitlist`, {
      user: "cleo",
      body: { quantity: 1, variants: ["42", "42.5"] },
    });
    expect(cleo.status, JSON.stringify(cleo.json)).toBe(202);
    const emil = await call("POST", `/api/skus/${sku}/waitlist`, {
      user: "emil",
      body: { quantity: 1, variants: ["42.5"] },
    });
    expect(emil.status).toBe(202);
    const bad = await call("POST", `/api/skus/${sku}/waitlist`, {
      user: "fred",
      body: { quantity: 1, variants: ["41"] },
    });
    expect(bad.status).toBe(400);
    expect(fieldsOf(bad)).toContain("variants");
    // An unknown size beside one with a unit (44) is the same 400, not a 409 to buy the other.
    const beside = await call("POST", `/api/skus/${sku}/waitlist`, {
      user: "fred",
      body: { quantity: 1, variants: ["44", "41"] },
    });
    expect([beside.status, fieldsOf(beside)]).toEqual([400, ["variants"]]);
    // No sizes listed for a SKU that has them (44 has a unit): the same 400 on any shard count, never
    // a 409 that says to buy what the request could not name. And sizes listed for a SKU without them.
    const none = await call("POST", `/api/skus/${sku}/waitlist`, { user: "fred", body: { quantity: 1 } });
    expect([none.status, fieldsOf(none)]).toEqual([400, ["variants"]]);
    const plain = uniqueSku(`plain${shards}`);
    await createSku(plain, { shards, totalStock: 4, perUserLimit: 1 });
    const listed = await call("POST", `/api/skus/${plain}/waitlist`, {
      user: "fred",
      body: { quantity: 1, variants: ["42"] },
    });
    expect([listed.status, fieldsOf(listed)]).toEqual([400, ["variants"]]);
    // Emil competes with cleo only (42.5); cleo with dora (42).
    const place = await call("GET", `/api/skus/${sku}/waitlist`, { user: "emil" });
    conforms("WaitlistPlace", place.json);
    expect(place.json).toMatchObject({ position: 3, unitsAhead: 1, variants: ["42.5"] });
    expect((await call("GET", `/api/skus/${sku}/waitlist`, { user: "cleo" })).json).toMatchObject({
      position: 2,
      unitsAhead: 1,
      variants: ["42", "42.5"],
    });
    // Ben lets 42.5 go: dora (42 only) cannot take it; cleo, who listed it second, is served.
    expect((await call("POST", `/api/reservations/${ben.json.reservationId}/cancel`, { user: "ben" })).status).toBe(
      200,
    );
    const served = await eventually(async () => {
      const mine = await call("GET", "/api/me/reservations", { user: "cleo" });
      const held = (mine.json.reservations as { sku: string; status: string; variant: string }[]).filter(
        (r) => r.sku === sku && r.status === "held",
      );
      expect(held).toHaveLength(1);
      return held[0];
    });
    expect(served?.variant).toBe("42.5");
    expect((await call("GET", `/api/skus/${sku}/waitlist`, { user: "dora" })).json).toMatchObject({ position: 1 });
    expect((await call("GET", `/api/skus/${sku}/waitlist`, { user: "emil" })).json).toMatchObject({
      position: 2,
      unitsAhead: 0,
    });
    expect(await variantStock(sku)).toEqual({
      "42": { total: 1, available: 0, held: 1, sold: 0 },
      "42.5": { total: 1, available: 0, held: 1, sold: 0 },
      "44": { total: 1, available: 1, held: 0, sold: 0 },
    });
  });
});

describe.each([1, 3])("sold out per size on %i shard(s)", (shards) => {
  it("answers a request whose sizes are all sold out before its JWT, from the isolate's memory; others go on", async () => {
    const { sku } = await sized(shards, [
      { id: "a", totalStock: 1 },
      { id: "b", totalStock: 2 },
    ]);
    expect((await reserveSizes("ola", sku, ["a"])).json.variant).toBe("a");
    const token = await tokenFor("pia", sku);
    // The sold-out memory kept a minute, not wrangler.toml's second, for the requests that teach it and
    // read it: the count of stock calls below must not depend on the next request starting within a
    // second of the one that taught it (a loaded machine can take longer).
    const first = await reserveSizes("pia", sku, ["a"], 1, token, LONG_MEMORY);
    expect(first.json.error).toMatchObject({ code: "SOLD_OUT", details: { variants: { a: 0 } } });
    // Learnt: a request for size a alone is refused without a JWT or a stock object call; b still sells.
    const calls = Array.from({ length: shards }, (_, i) => stockCallsTo(sku, i)).reduce((n, c) => n + c, 0);
    const stranger = await call("POST", `/api/skus/${sku}/reservations`, {
      body: { token: "x", quantity: 1, variants: ["a"] },
      env: LONG_MEMORY,
    });
    // Said as the stock object says it: each listed size and its units (API.md v1.4 "Sizes").
    const goneA = { code: "SOLD_OUT", details: { variants: { a: 0 }, requested: 1 } };
    expect([stranger.status, stranger.json.error]).toMatchObject([409, goneA]);
    const again = await reserveSizes("pia", sku, ["a"], 1, token, LONG_MEMORY);
    expect(again.json.error).toMatchObject(goneA);
    const after = Array.from({ length: shards }, (_, i) => stockCallsTo(sku, i)).reduce((n, c) => n + c, 0);
    expect(after).toBe(calls);
    // An isolate that never saw it (its memory forgotten) answers the same, from the SKU's display.
    forgetSoldOut(sku);
    const fresh = await call("POST", `/api/skus/${sku}/reservations`, {
      body: { token: "x", quantity: 1, variants: ["a"] },
    });
    expect(fresh.json.error).toMatchObject(goneA);
    const other = await call("POST", `/api/skus/${sku}/reservations`, {
      body: { token: "x", quantity: 1, variants: ["a", "b"] },
    });
    expect(other.status).toBe(401);
    // A replayed token of a hold of size a still gets its hold back.
    const olaToken = await tokenFor("ola2", sku);
    const b = await reserveSizes("ola2", sku, ["b"], 1, olaToken);
    expect(b.status).toBe(202);
    const replay = await reserveSizes("ola2", sku, ["b"], 1, olaToken);
    expect(replay.json.reservationId).toBe(b.json.reservationId);
  });

  it("names the listed sizes only for a list the contract takes, of sizes the SKU has", async () => {
    const { sku } = await sized(shards, [{ id: "a", totalStock: 1 }]);
    expect((await reserveSizes("uma", sku, ["a"])).status).toBe(202);
    const ask = (variants: unknown) =>
      call("POST", `/api/skus/${sku}/reservations`, { body: { token: "x", quantity: 1, variants } });
    // The whole SKU is sold out: a list the contract takes is told its sizes' units; one it would
    // refuse gets the bare answer, not echoed back.
    expect((await ask(["a"])).json.error).toMatchObject({ code: "SOLD_OUT", details: { variants: { a: 0 } } });
    for (const list of [["a", "a"], ["a", "b", "c", "d", "e", "f"], ["a b"]]) {
      const answer = await ask(list);
      expect([answer.status, answer.json.error?.code, answer.json.error?.details], list.join()).toEqual([
        409,
        "SOLD_OUT",
        undefined,
      ]);
    }
    // An isolate that never saw it answers from the display, which knows the sizes: zz is not one.
    forgetSoldOut(sku);
    const fresh = await ask(["a", "zz"]);
    expect([fresh.status, fresh.json.error?.code, fresh.json.error?.details]).toEqual([409, "SOLD_OUT", undefined]);
  });
});

describe("sizes given to a sharded SKU that has none", () => {
  it("are refused while a sibling holds a unit, changing nothing, and given on every shard once none is held", async () => {
    const sku = uniqueSku("plain4");
    await createSku(sku, { totalStock: 8, shards: 4, perUserLimit: 1 });
    // The hold is on a sibling: shard 0 itself holds and sold nothing.
    // A name of this test's own: the shopper rate limit is kept per user across the file's tests.
    const buyer = Array.from({ length: 16 }, (_, i) => `${sku}-b${i}`).find((u) => homeShard(u, 4) !== 0) as string;
    const held = await call("POST", `/api/skus/${sku}/reservations`, {
      user: buyer,
      body: { token: await tokenFor(buyer, sku), quantity: 1 },
    });
    expect(held.status).toBe(202);
    const sizes = await call("PUT", `/admin/skus/${sku}`, {
      admin: true,
      body: { variants: [{ id: "s", totalStock: 4 }] },
    });
    expect([sizes.status, sizes.json.error?.code, sizes.json.error?.details?.heldOrSold]).toEqual([
      409,
      "INVALID_STATE",
      1,
    ]);
    const view = await call("GET", `/admin/skus/${sku}`, { admin: true });
    expect([view.json.variants, view.json.stock.total, view.json.stock.held]).toEqual([undefined, 8, 1]);
    const paused = await call("PUT", `/admin/skus/${sku}`, { admin: true, body: { status: "paused" } });
    expect([paused.status, paused.json.status]).toEqual([200, "paused"]);
    // Once nothing is held, the sizes are given on every shard, and a sibling's buyer gets one.
    const id = held.json.reservationId as string;
    expect((await call("POST", `/api/reservations/${id}/cancel`, { user: buyer })).status).toBe(200);
    const given = await call("PUT", `/admin/skus/${sku}`, {
      admin: true,
      body: { status: "on_sale", variants: [{ id: "s", totalStock: 4 }] },
    });
    expect([given.status, given.json.stock.total]).toEqual([200, 4]);
    const again = await call("POST", `/api/skus/${sku}/reservations`, {
      user: buyer,
      body: { token: await tokenFor(buyer, sku), quantity: 1, variants: ["s"] },
    });
    expect([again.status, again.json.variant]).toEqual([202, "s"]);
    expect(await variantStock(sku)).toEqual({ s: { total: 4, available: 3, held: 1, sold: 0 } });
  });
});

describe("a size cut short of its units in flight between siblings", () => {
  it("answers 503 BUSY, not 409 naming a size whose held + sold it does not go below", async () => {
    const { sku } = await sized(3, [{ id: "a", totalStock: 9 }]);
    // Shard 2 pulled 2 units of a from shard 1 and lost the answer: given there, not added there yet.
    await runInDurableObject(stockShard(env, sku, 2), async (object, state) => {
      object.engine.transfers.begin("t-sizeflight", 1, 2, Date.now(), "a");
      await state.storage.setAlarm(Date.now() + 60_000);
    });
    expect(await stockShard(env, sku, 1).giveStock("t-sizeflight", 2, 2, "a")).toBe(2);
    const cut = await call("PUT", `/admin/skus/${sku}`, {
      admin: true,
      body: { variants: [{ id: "a", totalStock: 0 }] },
    });
    expect([cut.status, cut.json.error?.code, cut.json.error?.details?.variant]).toEqual([503, "BUSY", undefined]);
  });

  it("a size whose total shard 0 recorded drifted from its shards' is 500 naming it, not 503 for ever", async () => {
    const { sku } = await sized(3, [{ id: "a", totalStock: 9 }]);
    // Shard 1 lost 2 units of a (as a bug would make it): the shards hold 7 of the 9 recorded, none moving.
    await runInDurableObject(stockShard(env, sku, 1), (object, state) => {
      state.storage.sql.exec("UPDATE variant_stock SET total = total - 2 WHERE id = 'a'");
      state.storage.sql.exec("UPDATE sku SET total = total - 2 WHERE id = 1");
      object.engine.forget();
    });
    for (let attempt = 0; attempt < 2; attempt++) {
      const cut = await call("PUT", `/admin/skus/${sku}`, {
        admin: true,
        body: { variants: [{ id: "a", totalStock: 1 }] },
      });
      expect([cut.status, cut.json.error?.code, cut.headers.get("Retry-After")]).toEqual([500, "INTERNAL", null]);
      expect(cut.json.error?.message).toContain("variant a: shard 0 recorded 9 units; its shards hold 7");
    }
  });
});

describe("sizes under reconciliation", () => {
  it("reports a size whose units over the shards drifted from its total (variant_totals)", async () => {
    const { sku } = await sized(4, [
      { id: "p", totalStock: 8 },
      { id: "q", totalStock: 4 },
    ]);
    expect(differencesOf(await reconcileNow({ sku }), sku)).toEqual([]);
    // Two units of q appear on shard 2 behind the operator's back (as a bug in a transfer would leave them).
    await runInDurableObject(stockShard(env, sku, 2), (object, state) => {
      state.storage.sql.exec("UPDATE variant_stock SET total = total + 2 WHERE id = 'q'");
      state.storage.sql.exec("UPDATE sku SET total = total + 2");
      object.engine.forget();
    });
    const found = differencesOf(await reconcileNow({ sku }), sku);
    expect(found.map((d) => [d.kind, JSON.parse(d.expected), JSON.parse(d.actual), d.repaired])).toEqual([
      ["shard_totals", { total: 12 }, { sumOfShards: 14 }, false],
      ["variant_totals", { variant: "q", total: 4 }, { variant: "q", sumOfShards: 6 }, false],
    ]);
  });
});

describe("a size shard 0 added and a sibling has not heard of", () => {
  it("is learnt by the sibling from shard 0 when a buyer lists it, and pulled: held, not refused as unknown", async () => {
    const { sku } = await sized(4, [{ id: "a", totalStock: 4 }]);
    const added = await call("PUT", `/admin/skus/${sku}`, {
      admin: true,
      body: { variants: [{ id: "late", totalStock: 2 }] },
    });
    expect(added.status).toBe(200);
    // The hand-off to shard 2 was lost (as a failed call leaves it until the alarm hands it again).
    await runInDurableObject(stockShard(env, sku, 2), (object, state) => {
      state.storage.sql.exec("DELETE FROM variant_stock WHERE id = 'late'");
      object.engine.forget();
    });
    const buyer = Array.from({ length: 50 }, (_, i) => `lag-${i}`).find((u) => homeShard(u, 4) === 2) as string;
    const held = await reserveSizes(buyer, sku, ["late"]);
    expect(held.status, JSON.stringify(held.json)).toBe(202);
    expect(held.json.variant).toBe("late");
    // A size no shard has is still refused, naming the field.
    const bogus = await reserveSizes(`${buyer}-b`, sku, ["nope"]);
    expect(bogus.status).toBe(400);
    expect(fieldsOf(bogus)).toContain("variants");
    expect(await variantStock(sku)).toEqual({
      a: { total: 4, available: 4, held: 0, sold: 0 },
      late: { total: 2, available: 1, held: 1, sold: 0 },
    });
  });
});

describe("sizes: bad input changes nothing", () => {
  it("answers 400 naming the field for ids, duplicates, lists and totals that do not fit", async () => {
    const { sku } = await sized(1, [
      { id: "a", totalStock: 3 },
      { id: "b", totalStock: 3 },
    ]);
    const plain = uniqueSku("plain");
    await createSku(plain, { totalStock: 3 });
    const cases: [string, unknown, string][] = [
      [sku, ["zz"], "variants"],
      [sku, undefined, "variants"],
      [plain, ["a"], "variants"],
      [sku, ["a", "a"], "variants"],
      [sku, ["a", "b", "c", "d", "e", "f"], "variants"],
      [sku, ["bad id!"], "variants.0"],
      [sku, [], "variants"],
    ];
    for (const [target, variants, path] of cases) {
      const answer = await reserveSizes("lea", target, variants);
      expect(answer.status, JSON.stringify(variants)).toBe(400);
      expect(answer.json.error.code).toBe("INVALID_REQUEST");
      expect(fieldsOf(answer)).toContain(path);
    }
    const puts: [unknown, string][] = [
      [{ variants: [{ id: "a", totalStock: 1 }], totalStock: 99 }, "totalStock"],
      [{ variants: [{ id: "x y", totalStock: 1 }] }, "variants.0.id"],
      [
        {
          variants: [
            { id: "c", totalStock: 1 },
            { id: "c", totalStock: 2 },
          ],
        },
        "variants",
      ],
      [{ variants: Array.from({ length: 101 }, (_, i) => ({ id: `v${i}`, totalStock: 1 })) }, "variants"],
      [{ variants: Array.from({ length: 99 }, (_, i) => ({ id: `v${i}`, totalStock: 1 })) }, "variants"],
      [{ variants: [{ id: "c", totalStock: -1 }] }, "variants.0.totalStock"],
      [{ variants: [{ id: "c", totalStock: 1, colour: "red" }] }, "variants.0"],
    ];
    const before = await call("GET", `/admin/skus/${sku}`, { admin: true });
    for (const [body, path] of puts) {
      const answer = await call("PUT", `/admin/skus/${sku}`, { admin: true, body });
      expect(answer.status, JSON.stringify(body).slice(0, 80)).toBe(400);
      expect(
        [...fieldsOf(answer), ...((answer.json.error?.details?.unknownFields ?? []) as string[])].join(" "),
      ).toContain(path);
    }
    const after = await call("GET", `/admin/skus/${sku}`, { admin: true });
    expect(after.json.variants).toEqual(before.json.variants);
    expect(after.json.version).toBe(before.json.version);
    // Variants come to a SKU without them only while nothing is held or sold.
    expect(
      (
        await call("POST", `/api/skus/${plain}/reservations`, {
          user: "max",
          body: { token: await tokenFor("max", plain), quantity: 1 },
        })
      ).status,
    ).toBe(202);
    const late = await call("PUT", `/admin/skus/${plain}`, {
      admin: true,
      body: { variants: [{ id: "a", totalStock: 3 }] },
    });
    expect(late.status).toBe(409);
    expect(late.json.error).toMatchObject({ code: "INVALID_STATE", details: { heldOrSold: 1 } });
    expect((await call("GET", `/admin/skus/${plain}`, { admin: true })).json.variants).toBeUndefined();
  });

  it.each([1, 2])(
    "are refused while buyers wait in the line of a SKU of %i shard(s) (409 naming variants), changing nothing",
    async (shards) => {
      const sku = uniqueSku(`line${shards}`);
      await createSku(sku, { totalStock: 0, shards, perUserLimit: 1 });
      const waiter = `${sku}-w`;
      expect((await call("POST", `/api/skus/${sku}/waitlist`, { user: waiter, body: { quantity: 1 } })).status).toBe(
        202,
      );
      const sizes = { admin: true, body: { variants: [{ id: "a", totalStock: 2 }] } };
      const refused = await call("PUT", `/admin/skus/${sku}`, sizes);
      expect(refused.status).toBe(409);
      expect(refused.json.error).toMatchObject({
        code: "INVALID_STATE",
        details: { heldOrSold: 0, waiting: 1, fields: [{ path: "variants" }] },
      });
      expect(refused.json.error.message).toContain("1 buyer waiting");
      expect((await call("GET", `/admin/skus/${sku}`, { admin: true })).json.variants).toBeUndefined();
      expect((await call("DELETE", `/api/skus/${sku}/waitlist`, { user: waiter })).status).toBe(200);
      const given = await call("PUT", `/admin/skus/${sku}`, sizes);
      expect([given.status, given.json.stock.total]).toEqual([200, 2]);
    },
  );

  it.each([1, 2])(
    "are refused while an opening draw of a SKU of %i shard(s) is pending (409 draw_pending), changing nothing",
    async (shards) => {
      const sku = uniqueSku(`drawn${shards}`);
      const opensAt = Date.now() + 60_000;
      await createSku(sku, {
        totalStock: 4,
        shards,
        perUserLimit: 1,
        startsAt: new Date(opensAt).toISOString(),
        openingWindowMs: 1_500,
      });
      await setClock(sku, shards, opensAt + 1); // the stock objects' window is open
      const refused = await call("PUT", `/admin/skus/${sku}`, {
        admin: true,
        body: { variants: [{ id: "a", totalStock: 4 }] },
      });
      expect(refused.status).toBe(409);
      expect(refused.json.error).toMatchObject({
        code: "INVALID_STATE",
        details: { state: "draw_pending", heldOrSold: 0, waiting: 0, fields: [{ path: "variants" }] },
      });
      expect(refused.json.error.message).toContain("opening draw is not decided yet");
      expect((await call("GET", `/admin/skus/${sku}`, { admin: true })).json.variants).toBeUndefined();
    },
  );

  it("a replayed token with other sizes is 422 IDEMPOTENCY_MISMATCH; with its own, the same hold", async () => {
    const { sku } = await sized(1, [
      { id: "a", totalStock: 3 },
      { id: "b", totalStock: 3 },
    ]);
    const token = await tokenFor("ned", sku);
    const first = await reserveSizes("ned", sku, ["a"], 1, token);
    expect(first.status).toBe(202);
    const same = await reserveSizes("ned", sku, ["a"], 1, token);
    expect(same.status).toBe(202);
    expect(same.json.reservationId).toBe(first.json.reservationId);
    const other = await reserveSizes("ned", sku, ["b"], 1, token);
    expect(other.status).toBe(422);
    expect(other.json.error.code).toBe("IDEMPOTENCY_MISMATCH");
    // Another list that names the size taken is another request too: reordered, longer or shorter.
    const both = await tokenFor("nia", sku);
    const held = await reserveSizes("nia", sku, ["a", "b"], 1, both);
    expect([held.status, held.json.variant]).toEqual([202, "a"]);
    const again = await reserveSizes("nia", sku, ["a", "b"], 1, both);
    expect(again.json.reservationId).toBe(held.json.reservationId);
    for (const list of [["b", "a"], ["a"]]) {
      const replayed = await reserveSizes("nia", sku, list, 1, both);
      expect([replayed.status, replayed.json.error?.code], list.join()).toEqual([422, "IDEMPOTENCY_MISMATCH"]);
    }
  });
});

describe("sizes given by PUTs that cross", () => {
  it("two PUTs each adding 60 sizes at once: one 200, the other 400 naming variants; never over 100", async () => {
    for (const shards of [1, 2]) {
      const sku = uniqueSku(`cross${shards}`);
      await createSku(sku, { shards, totalStock: 0 });
      const sizes = (from: number) => Array.from({ length: 60 }, (_, i) => ({ id: `v${from + i}`, totalStock: 1 }));
      const answers = await Promise.all(
        [0, 60].map((from) => call("PUT", `/admin/skus/${sku}`, { admin: true, body: { variants: sizes(from) } })),
      );
      expect(answers.map((a) => a.status).sort(), `${shards} shard(s)`).toEqual([200, 400]);
      const refused = answers.find((a) => a.status === 400);
      expect(refused?.json.error.code).toBe("INVALID_REQUEST");
      expect(fieldsOf(refused as Answer)).toEqual(["variants"]);
      const after = await call("GET", `/admin/skus/${sku}`, { admin: true });
      expect([after.json.variants.length, after.json.stock.total]).toEqual([60, 60]);
    }
  });
});
