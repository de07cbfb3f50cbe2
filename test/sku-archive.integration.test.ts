import { runDurableObjectAlarm, runInDurableObject } from "cloudflare:test";
import { env } from "cloudflare:workers";
import { describe, expect, it } from "vitest";
import { homeShard } from "../durable-objects/shared/shard-name";
import { forgetSoldOut } from "../src/edge/sold-out-cache";
import { locateReservation } from "../src/stock/stock-client";
import { type Answer, call, createSku, overTheLimit, reserve, stockShard, tokenFor, uniqueSku } from "./support/client";
import { eventually } from "./support/eventually";
import { pay } from "./support/payments";
// The operator's other changes (a refused PUT, a resize under load, far dates) share this file's
// workerd (one start-up, issue #56).
import "./suites/operator-changes";
import "./suites/reconcile";

/**
 * API.md v1.3 "SKUs: partial updates and archiving", on one shard and on three: a PUT keeps every
 * field left out (`totalStock` included), a SKU is created only with a `totalStock`, and
 * `DELETE /admin/skus/:sku` archives a SKU (no longer sold; its holds keep their course).
 */

const put = (sku: string, body: Record<string, unknown>) => call("PUT", `/admin/skus/${sku}`, { admin: true, body });
const archive = (sku: string) => call("DELETE", `/admin/skus/${sku}`, { admin: true });
const adminView = (sku: string) => call("GET", `/admin/skus/${sku}`, { admin: true });
const listed = async (query = "") =>
  ((await call("GET", `/admin/skus${query}`, { admin: true })).json.skus as { sku: string }[]).map((s) => s.sku);
/** Vars set for one request (wrangler's generated types pin each var to its configured value). */
const POW = { POW_BITS: "4" } as unknown as Partial<Env>;

/** What a stock object holds of a SKU, every shard: what a refused or partial PUT must not move. */
async function shardStates(sku: string, shards: number) {
  return Promise.all(
    Array.from({ length: shards }, (_, shard) =>
      runInDurableObject(stockShard(env, sku, shard), (object) => {
        const state = object.engine.configuration.state();
        if (!state) throw new Error(`shard ${shard} of ${sku} is not configured`);
        const { name, status, perUserLimit, holdSeconds, startsAt, endsAt, shards: count, price, currency } = state;
        return { name, status, perUserLimit, holdSeconds, startsAt, endsAt, shards: count, price, currency };
      }),
    ),
  );
}

/** The D1 catalog row of a SKU. */
const catalogRow = (sku: string) =>
  env.DB.prepare("SELECT sku, shards, total_stock AS totalStock FROM skus WHERE sku = ?").bind(sku).first();

/** The D1 order status of a reservation, once the queue has written it. */
async function orderStatus(user: string, id: string, status: string): Promise<void> {
  await eventually(async () => {
    const answer = await call("GET", `/api/reservations/${id}`, { user });
    expect([answer.json.status, answer.json.order]).toEqual([status, { persisted: true, status }]);
  });
}

/** Moves a reservation's stock object past its expiry and runs its alarm (no sleep). */
async function expireByAlarm(reservation: Answer): Promise<void> {
  const where = locateReservation(reservation.json.reservationId);
  if (!where) throw new Error("not a reservation id");
  const stub = stockShard(env, where.sku, where.shard);
  const expiresAt = Date.parse(reservation.json.expiresAt);
  await runInDurableObject(stub, (object) => {
    object.now = () => expiresAt + 1;
  });
  await runDurableObjectAlarm(stub);
  await runInDurableObject(stub, (object) => {
    object.now = () => Date.now();
  });
}

/** Users whose home is each shard in turn, so a sharded SKU's holds land on every shard. */
function spread(prefix: string, shards: number, count: number): string[] {
  const users: string[] = [];
  for (let i = 0; users.length < count; i++) {
    const user = `${prefix}-${i}`;
    if (homeShard(user, shards) === users.length % shards) users.push(user);
  }
  return users;
}

const error = (a: Answer) => [a.status, a.json.error?.code];

describe.each([1, 3])("a SKU of %i shard(s)", (shards) => {
  const settings = {
    name: "Sneaker",
    totalStock: 30,
    shards,
    perUserLimit: 2,
    holdSeconds: 120,
    price: 1999,
    currency: "eur",
    startsAt: "2020-01-01T00:00:00.000Z",
    endsAt: "2099-01-01T00:00:00.000Z",
  };

  describe("partial PUT", () => {
    it("pauses with one field and changes nothing else, the stock included", async () => {
      const sku = uniqueSku("partial");
      await createSku(sku, settings);
      const holds = await Promise.all(spread("pp", shards, 3).map((user) => reserve(user, sku)));
      expect(holds.map((a) => a.status)).toEqual([202, 202, 202]);
      const before = (await adminView(sku)).json;
      const shardsBefore = await shardStates(sku, shards);

      const paused = await put(sku, { status: "paused" });
      expect(paused.status).toBe(200);
      expect(paused.json).toMatchObject({
        status: "paused",
        name: "Sneaker",
        perUserLimit: 2,
        holdSeconds: 120,
        price: 1999,
        currency: "eur",
        startsAt: settings.startsAt,
        endsAt: settings.endsAt,
        shards,
        stock: before.stock,
      });
      expect(before.stock).toEqual({ total: 30, available: 27, held: 3, sold: 0 });
      expect(await shardStates(sku, shards)).toEqual(shardsBefore.map((s) => ({ ...s, status: "paused" })));
      expect(await catalogRow(sku)).toEqual({ sku, shards, totalStock: 30 });
      const refused = await call("POST", `/api/skus/${sku}/tokens`, { user: "pp-new" });
      expect(error(refused)).toEqual([403, "SALE_NOT_ACTIVE"]);

      // Back on sale with one field: the stock is still the whole 30, as set before.
      const resumed = await put(sku, { status: "on_sale" });
      expect(resumed.json).toMatchObject({ status: "on_sale", stock: { total: 30, held: 3 } });
      expect((await reserve("pp-new", sku)).status).toBe(202);
      // A later total still counts from the total set, not from a sum of shards.
      expect((await put(sku, { totalStock: 40 })).json.stock).toMatchObject({ total: 40, held: 4 });
      expect(await catalogRow(sku)).toEqual({ sku, shards, totalStock: 40 });
    });

    it("two partial PUTs at once are each checked as the SKU it leaves: never a window that ends first, nor a late tier", async () => {
      const at = (minutes: number) => new Date(Date.now() + minutes * 60_000).toISOString();
      const put = (sku: string, body: Record<string, unknown>) =>
        call("PUT", `/admin/skus/${sku}`, { admin: true, body });
      for (let round = 0; round < 3; round++) {
        // Each PUT is sound against the stored SKU; applied both, the sale would end before it starts.
        const sku = uniqueSku("window-race");
        await createSku(sku, { ...settings, startsAt: at(60), endsAt: at(180) });
        const window = await Promise.all([put(sku, { startsAt: at(150) }), put(sku, { endsAt: at(120) })]);
        expect(window.map((a) => a.status).sort()).toEqual([200, 400]);
        const left = (await adminView(sku)).json;
        expect(Date.parse(left.endsAt)).toBeGreaterThan(Date.parse(left.startsAt));
        // The same for a tier and the public start moved before it.
        const tiered = uniqueSku("tier-race");
        await createSku(tiered, { ...settings, startsAt: at(120), endsAt: null });
        const tier = await Promise.all([
          put(tiered, { startsAt: at(60) }),
          put(tiered, { access: [{ name: "vip", startsAt: at(90) }] }),
        ]);
        expect(tier.map((a) => a.status).sort()).toEqual([200, 400]);
        const view = (await adminView(tiered)).json;
        for (const t of view.access ?? []) expect(Date.parse(t.startsAt)).toBeLessThan(Date.parse(view.startsAt));
        // Two PUTs that each create the SKU: the second is checked against the SKU the first made.
        const created = uniqueSku("create-race");
        const creates = await Promise.all([
          put(created, { totalStock: 5, shards, startsAt: at(120) }),
          put(created, { totalStock: 5, shards, endsAt: at(60) }),
        ]);
        expect(creates.map((a) => a.status).sort()).toEqual([200, 400]);
        const made = (await adminView(created)).json;
        // As the PUT that won left it: a start and no end, or an end and no start.
        expect([made.startsAt === null, made.endsAt === null].sort()).toEqual([false, true]);
      }
    });

    it("resizes an idle SKU with only `shards` and keeps its total", async () => {
      const sku = uniqueSku("partial-resize");
      await createSku(sku, settings);
      const resized = await put(sku, { shards: shards + 1 });
      expect(resized.status).toBe(200);
      expect(resized.json).toMatchObject({ shards: shards + 1, status: "on_sale", perUserLimit: 2, price: 1999 });
      expect(resized.json.stock).toEqual({ total: 30, available: 30, held: 0, sold: 0 });
      expect(await catalogRow(sku)).toEqual({ sku, shards: shards + 1, totalStock: 30 });
      // The next total counts from the 30 in force.
      expect((await put(sku, { totalStock: 31 })).json.stock).toMatchObject({ total: 31 });
    });

    it("refuses to create a SKU without totalStock (400 naming it) and stores nothing", async () => {
      const sku = uniqueSku("nototal");
      const refused = await put(sku, { status: "paused", shards });
      expect(refused.status).toBe(400);
      expect(refused.json.error).toEqual({
        code: "INVALID_REQUEST",
        message: `SKU ${sku} does not exist yet: creating it needs totalStock.`,
        details: { fields: [{ path: "totalStock", message: "required to create a SKU" }] },
      });
      expect(error(await adminView(sku))).toEqual([404, "SKU_NOT_FOUND"]);
      expect(await catalogRow(sku)).toBeNull();
      expect(
        await runInDurableObject(stockShard(env, sku, 0), (object) => object.engine.configuration.state()),
      ).toBeNull();
      expect(await listed()).not.toContain(sku);
    });
  });

  describe("archiving", () => {
    it("answers 200 archived; the SKU is no longer sold on any public route; the admin view keeps it", async () => {
      const sku = uniqueSku("arch");
      await createSku(sku, settings);
      const [buyer = "", other = ""] = spread("ar", shards, 2);
      const buyerToken = await tokenFor(buyer, sku);
      const held = await reserve(buyer, sku, 1, buyerToken);
      expect(held.status).toBe(202);
      const spareToken = await tokenFor(other, sku); // minted before the archive
      expect(await listed()).toContain(sku);

      const archived = await archive(sku);
      expect(archived.status).toBe(200);
      expect(archived.json).toMatchObject({
        sku,
        status: "archived",
        phase: "ended",
        name: "Sneaker",
        shards,
        stock: { total: 30, available: 29, held: 1, sold: 0 },
      });
      expect((await shardStates(sku, shards)).map((s) => s.status)).toEqual(Array(shards).fill("archived"));

      const notFound = [
        await call("GET", `/api/skus/${sku}`),
        await call("POST", `/api/skus/${sku}/tokens`, { user: other }),
        await call("GET", `/api/skus/${sku}/challenge`, { user: other, env: POW }),
        await reserve(other, sku, 1, spareToken),
        await call("POST", `/api/skus/${sku}/waitlist`, { user: other, body: { quantity: 1 } }),
        // Refused at the edge before any object is asked (found in an audit: a challenge was asked for,
        // which the challenge route answers 404): not found comes first, as sold out does.
        await call("POST", `/api/skus/${sku}/tokens`, { user: other, env: POW }),
        await call("POST", `/api/skus/${sku}/tokens`),
      ];
      expect(notFound.map(error)).toEqual(Array(7).fill([404, "SKU_NOT_FOUND"]));
      // A token's replay still answers the hold it made (holds keep their course); it holds nothing more.
      const replay = await reserve(buyer, sku, 1, buyerToken);
      expect([replay.status, replay.headers.get("Idempotent-Replayed"), replay.json.reservationId]).toEqual([
        202,
        "true",
        held.json.reservationId,
      ]);
      expect((await adminView(sku)).json).toMatchObject({ status: "archived", stock: { held: 1 } });

      expect(await listed()).not.toContain(sku);
      expect(await listed("?archived=true")).toContain(sku);
      expect(await listed("?archived=false")).not.toContain(sku);
      const bad = await call("GET", "/admin/skus?archived=yes", { admin: true });
      expect(error(bad)).toEqual([400, "INVALID_REQUEST"]);
      expect(await catalogRow(sku)).toEqual({ sku, shards, totalStock: 30 });
      // Its holder over the rate limit is told so, not that the SKU does not exist: the hold stands.
      expect(error(await overTheLimit(buyer, () => reserve(buyer, sku, 1, buyerToken)))).toEqual([429, "RATE_LIMITED"]);
    });

    it("never takes a change again (409, nothing changed); archiving again is 200 unchanged", async () => {
      const sku = uniqueSku("arch-put");
      await createSku(sku, settings);
      await archive(sku);
      const before = (await adminView(sku)).json;
      const shardsBefore = await shardStates(sku, shards);
      for (const body of [{ status: "on_sale" }, { totalStock: 50 }, { name: "Again" }, { shards: shards + 1 }]) {
        const refused = await put(sku, body);
        expect(refused.status).toBe(409);
        expect(refused.json.error).toEqual({
          code: "INVALID_STATE",
          message: `SKU ${sku} is archived: it takes no change, and its id is not reused (configure a new SKU id instead).`,
          details: { state: "archived" },
        });
      }
      expect(await shardStates(sku, shards)).toEqual(shardsBefore);
      const again = await archive(sku);
      expect(again.status).toBe(200);
      expect(again.json).toEqual({ ...before, mirror: again.json.mirror });
      expect((await adminView(sku)).json.version).toBe(before.version);
      expect(await catalogRow(sku)).toEqual({ sku, shards, totalStock: 30 });
    });

    it("answers 404 SKU_NOT_FOUND for a SKU never configured, and stores nothing", async () => {
      const sku = uniqueSku("arch-unknown");
      // Its token route too with challenges on: nobody can get its challenge (found in an audit).
      expect(error(await call("POST", `/api/skus/${sku}/tokens`, { user: "u1", env: POW }))).toEqual([
        404,
        "SKU_NOT_FOUND",
      ]);
      expect(error(await archive(sku))).toEqual([404, "SKU_NOT_FOUND"]);
      expect(error(await call("DELETE", "/admin/skus/bad.id", { admin: true }))).toEqual([404, "SKU_NOT_FOUND"]);
      expect(await catalogRow(sku)).toBeNull();
      expect(
        await runInDurableObject(stockShard(env, sku, 0), (object) => object.engine.configuration.state()),
      ).toBeNull();
    });

    it("lets its holds be paid, cancelled and expired as usual; a late payment is refund_required", async () => {
      const sku = uniqueSku("arch-holds");
      await createSku(sku, { ...settings, price: null });
      const users = spread("ah", shards, 4);
      const holds = await Promise.all(users.map((user) => reserve(user, sku)));
      expect(holds.map((a) => a.status)).toEqual([202, 202, 202, 202]);
      const [toPay, toCancel, toExpire, late] = holds.map((h) => h.json.reservationId as string);
      const [payer = "", canceller = "", expirer = "", latecomer = ""] = users;
      await call("POST", `/api/reservations/${late}/cancel`, { user: latecomer });
      await orderStatus(latecomer, late ?? "", "cancelled");
      expect((await archive(sku)).status).toBe(200);

      expect((await pay(toPay ?? "")).json).toMatchObject({ outcome: "applied", reservationStatus: "paid" });
      const cancelled = await call("POST", `/api/reservations/${toCancel}/cancel`, { user: canceller });
      expect([cancelled.status, cancelled.json.status]).toEqual([200, "cancelled"]);
      await expireByAlarm(holds[2] as Answer);
      // The late payment would be a new sale; an archived SKU makes none.
      expect((await pay(late ?? "")).json).toMatchObject({
        outcome: "refund_required",
        reservationStatus: "refund_required",
      });

      await orderStatus(payer, toPay ?? "", "paid");
      await orderStatus(canceller, toCancel ?? "", "cancelled");
      await orderStatus(expirer, toExpire ?? "", "expired");
      await orderStatus(latecomer, late ?? "", "refund_required");
      const view = (await adminView(sku)).json;
      expect(view).toMatchObject({ status: "archived", stock: { total: 30, available: 29, held: 0, sold: 1 } });
      expect(view.orders).toMatchObject({ paid: 1, cancelled: 1, expired: 1, refund_required: 1 });

      // Reconciliation still checks the archived SKU and finds D1 in step.
      const run = await call("POST", "/admin/reconcile?full=true", { admin: true });
      expect(run.status).toBe(200);
      expect(run.json.differences.filter((d: { sku: string }) => d.sku === sku)).toEqual([]);
    });

    it("empties its waitlist: nobody waits for a SKU that will never be sold", async () => {
      const sku = uniqueSku("arch-wait");
      await createSku(sku, { ...settings, totalStock: shards, perUserLimit: 1 });
      const users = spread("aw", shards, shards);
      const holds = await Promise.all(users.map((user) => reserve(user, sku)));
      expect(holds.map((a) => a.status)).toEqual(users.map(() => 202));
      const joined = await call("POST", `/api/skus/${sku}/waitlist`, { user: "aw-waiting", body: { quantity: 1 } });
      expect(joined.status).toBe(202);
      expect((await adminView(sku)).json.waitlist).toBe(1);

      expect((await archive(sku)).json).toMatchObject({ status: "archived", waitlist: 0 });
      // A unit freed later goes to nobody: it stays available, unsold.
      const first = holds[0] as Answer;
      const cancelled = await call("POST", `/api/reservations/${first.json.reservationId}/cancel`, { user: users[0] });
      expect(cancelled.status).toBe(200);
      const view = (await adminView(sku)).json;
      expect(view).toMatchObject({ waitlist: 0, stock: { available: 1, held: shards - 1 } });
    });

    it("answers its waitlist routes 404 SKU_NOT_FOUND, to a shopper who waited as to one who never did", async () => {
      const sku = uniqueSku("arch-line");
      await createSku(sku, { ...settings, totalStock: 1, perUserLimit: 1 });
      expect((await reserve("al-buyer", sku)).status).toBe(202);
      const joined = await call("POST", `/api/skus/${sku}/waitlist`, { user: "al-waiting", body: { quantity: 1 } });
      expect(joined.status).toBe(202);
      expect((await archive(sku)).status).toBe(200);
      const answers = [];
      for (const user of ["al-waiting", "al-never"]) {
        answers.push(await call("GET", `/api/skus/${sku}/waitlist`, { user }));
        answers.push(await call("DELETE", `/api/skus/${sku}/waitlist`, { user }));
        answers.push(await call("POST", `/api/skus/${sku}/waitlist`, { user, body: { quantity: 1 } }));
      }
      expect(answers.map(error)).toEqual(Array(6).fill([404, "SKU_NOT_FOUND"]));
    });
  });
});

// Found by a helper comparing a warm isolate with a fresh one: a reservation answered SALE_NOT_ACTIVE
// on a paused sold-out SKU (or a replay on an archived one) came back flagged sold out, so this isolate
// answered the next token requests 409 SOLD_OUT, each retry renewing it, where a fresh isolate (whose
// own check asks whether the sale is on) answers 403 SALE_NOT_ACTIVE or 404. Only a sale that is on
// is sold out.
describe("a sale that stopped is not sold out in an isolate's memory", () => {
  it.each([
    ["paused", 403],
    ["archived", 404],
  ])("%s: the token route answers %i on a warm isolate as on a fresh one", async (stopped, code) => {
    const sku = uniqueSku(`stopped-${stopped}`);
    await createSku(sku, { totalStock: 1, perUserLimit: 1 });
    const token = await tokenFor("stop-a", sku);
    expect(
      (await call("POST", `/api/skus/${sku}/reservations`, { user: "stop-a", body: { token, quantity: 1 } })).status,
    ).toBe(202);
    expect((stopped === "paused" ? await put(sku, { status: "paused" }) : await archive(sku)).status).toBe(200);
    forgetSoldOut(sku); // past the memory's second, as a fresh isolate
    // A's client sends its reservation again (its answer was lost): it reaches the stock object.
    const again = await call("POST", `/api/skus/${sku}/reservations`, { user: "stop-a", body: { token, quantity: 1 } });
    expect(again.status).toBe(202); // its hold, replayed
    const warm = await call("POST", `/api/skus/${sku}/tokens`, { user: "stop-c" });
    forgetSoldOut(sku);
    const fresh = await call("POST", `/api/skus/${sku}/tokens`, { user: "stop-c" });
    expect([warm.status, fresh.status]).toEqual([code, code]);
  });
});
