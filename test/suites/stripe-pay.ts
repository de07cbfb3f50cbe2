import { env } from "cloudflare:workers";
import { describe, expect, inject, it, vi } from "vitest";
import { ApiError } from "../../src/http/errors";
import { checkout } from "../../src/payments/checkout";
import { STRIPE_FAULT_KEYS, STRIPE_TEST_KEY } from "../../tools/stripe-api";
import { call, createSku, reserve, uniqueSku } from "../support/client";
import { pay } from "../support/payments";
import { checkoutSession, sendStripe, stripeEvent } from "../support/stripe";

/**
 * API.md v1.4 "Paying and refunding through Stripe", against a stand-in of Stripe's documented API
 * (tools/stripe-api.ts, started by the tests' globalSetup): a Checkout Session for a hold, and the
 * money owed back refunded through Stripe's refund API or marked refunded.
 */

const { apiUrl } = inject("stripe");
const stripeVars = (key: string = STRIPE_TEST_KEY) =>
  ({ STRIPE_SECRET_KEY: key, STRIPE_API_URL: apiUrl }) as unknown as Partial<Env>;
const withStripe = stripeVars();
const BACK = { successUrl: "http://flashgate.test/thanks", cancelUrl: "http://flashgate.test/?sku=x" };

interface StandInRequest {
  method: string;
  path: string;
  params: Record<string, string>;
  key: string | null;
}

/** What the stand-in received for `path` whose parameters name `id` (a reservation or a payment intent). */
async function stripeGot(path: string, id: string): Promise<StandInRequest[]> {
  const { requests } = (await (await fetch(`${apiUrl}/__standin/requests`)).json()) as { requests: StandInRequest[] };
  return requests.filter((r) => r.path === path && Object.values(r.params).includes(id));
}

/** `db`, but every write into `checkout_sessions` fails: a session Stripe made whose store is lost. */
function losingSessions(db: D1Database): D1Database {
  const lost = () => Promise.reject(new Error("D1 lost the write of the session"));
  const failing = { bind: () => failing, run: lost, first: lost, all: lost, raw: lost };
  return new Proxy(db, {
    get(target, prop) {
      if (prop === "prepare") {
        return (sql: string) => (/INTO\s+checkout_sessions/i.test(sql) ? failing : target.prepare(sql));
      }
      if (prop === "batch") {
        return (statements: unknown[]) =>
          statements.includes(failing) ? lost() : target.batch(statements as D1PreparedStatement[]);
      }
      const value = Reflect.get(target, prop);
      return typeof value === "function" ? value.bind(target) : value;
    },
  });
}

async function heldOn(sku: string, user: string, quantity = 1): Promise<string> {
  const held = await reserve(user, sku, quantity);
  expect(held.status).toBe(202);
  return held.json.reservationId as string;
}

describe("a Checkout Session for a hold", () => {
  it("names the size held in the line item of a SKU in sizes (API.md v1.4: the SKU's name and variant)", async () => {
    const sku = uniqueSku("checkoutsize");
    await createSku(sku, {
      name: "Court Classic",
      price: 1500,
      currency: "eur",
      variants: [
        { id: "42", name: "EU 42", totalStock: 1 },
        { id: "43", name: "EU 43", totalStock: 1 },
      ],
    });
    const token = (await call("POST", `/api/skus/${sku}/tokens`, { user: "dina" })).json.token;
    const held = await call("POST", `/api/skus/${sku}/reservations`, {
      user: "dina",
      body: { token, quantity: 1, variants: ["43"] },
    });
    expect(held.json.variant).toBe("43");
    const id = held.json.reservationId as string;
    const made = await call("POST", `/api/reservations/${id}/checkout`, { user: "dina", body: BACK, env: withStripe });
    expect(made.status).toBe(201);
    const [asked] = await stripeGot("/v1/checkout/sessions", id);
    expect(asked?.params).toMatchObject({
      "line_items[0][price_data][product_data][name]": "Court Classic (EU 43)",
      "metadata[variant]": "43",
      "line_items[0][quantity]": "1",
    });
  });

  it("pays a hold the whole way: hold, Checkout, Stripe's signed checkout.session.completed, paid", async () => {
    const sku = uniqueSku("checkout");
    await createSku(sku, { name: "Court Classic", totalStock: 5, perUserLimit: 2, price: 1500, currency: "eur" });
    const id = await heldOn(sku, "cleo", 2);
    const made = await call("POST", `/api/reservations/${id}/checkout`, { user: "cleo", body: BACK, env: withStripe });
    expect(made.status).toBe(201);
    expect(made.json).toEqual({
      url: expect.stringContaining(made.json.sessionId),
      sessionId: expect.stringMatching(/^cs_/),
    });
    // Asked again while it is open: the same session, and Stripe is not asked again.
    const again = await call("POST", `/api/reservations/${id}/checkout`, { user: "cleo", body: BACK, env: withStripe });
    expect([again.status, again.json]).toEqual([200, made.json]);
    const [asked, ...more] = await stripeGot("/v1/checkout/sessions", id);
    expect(more).toEqual([]);
    expect(asked?.params).toMatchObject({
      mode: "payment",
      client_reference_id: id,
      "metadata[reservationId]": id,
      "line_items[0][price_data][currency]": "eur",
      "line_items[0][price_data][unit_amount]": "1500",
      "line_items[0][price_data][product_data][name]": "Court Classic",
      "line_items[0][quantity]": "2",
      success_url: BACK.successUrl,
    });
    const expiresIn = Number(asked?.params.expires_at) - Date.now() / 1000;
    expect(expiresIn).toBeGreaterThanOrEqual(30 * 60);
    expect(expiresIn).toBeLessThan(32 * 60);
    expect(asked?.key).toMatch(/^flashgate-checkout:/);

    // Stripe's side: the session the stand-in made, completed and paid, signed as Stripe signs it.
    const session = (await (
      await fetch(`${apiUrl}/v1/checkout/sessions/${made.json.sessionId}`, {
        headers: { authorization: `Bearer ${STRIPE_TEST_KEY}` },
      })
    ).json()) as Record<string, unknown>;
    const completed = { ...session, status: "complete", payment_status: "paid", payment_intent: "pi_test_whole_way" };
    const paid = await sendStripe(stripeEvent("checkout.session.completed", completed));
    expect(paid.json).toMatchObject({ received: true, outcome: "applied", reservationStatus: "paid" });
    const read = await call("GET", `/api/reservations/${id}`, { user: "cleo" });
    expect(read.json.status).toBe("paid");
  });

  it("refuses what it cannot sell, says why, and stores nothing", async () => {
    const sku = uniqueSku("checkout-no");
    const free = uniqueSku("checkout-free");
    await createSku(sku, { totalStock: 5, perUserLimit: 3, price: 900 });
    await createSku(free, { totalStock: 5 });
    const id = await heldOn(sku, "remy");
    const post = (user: string, body: unknown, vars: Partial<Env> = withStripe, reservation = id) =>
      call("POST", `/api/reservations/${reservation}/checkout`, { user, body, env: vars });
    const codeOf = (a: { status: number; json: { error?: { code: string } } }) => [a.status, a.json.error?.code];

    expect(codeOf(await post("remy", BACK, {}))).toEqual([404, "NOT_FOUND"]); // Stripe not configured
    expect(codeOf(await post("someone-else", BACK))).toEqual([404, "RESERVATION_NOT_FOUND"]);
    const elsewhere = await post("remy", { ...BACK, successUrl: "https://evil.example/thanks" });
    expect(codeOf(elsewhere)).toEqual([400, "INVALID_REQUEST"]);
    expect(elsewhere.json.error.details.fields[0].path).toBe("successUrl");
    expect(codeOf(await post("remy", { ...BACK, cancelUrl: "javascript:alert(1)" }))).toEqual([400, "INVALID_REQUEST"]);
    const unpriced = await post("remy", BACK, withStripe, await heldOn(free, "remy"));
    expect(codeOf(unpriced)).toEqual([409, "INVALID_STATE"]);
    expect(unpriced.json.error.details.state).toBe("no_price");
    // Stripe down, then too slow: 503 with Retry-After, and nothing stored.
    const down = await post("remy", BACK, stripeVars(STRIPE_FAULT_KEYS.down));
    expect(codeOf(down)).toEqual([503, "BUSY"]);
    expect(down.headers.get("retry-after")).toBe("1");
    expect(codeOf(await post("remy", BACK, stripeVars(STRIPE_FAULT_KEYS.slow)))).toEqual([503, "BUSY"]);
    const stored = await env.DB.prepare("SELECT COUNT(*) AS n FROM checkout_sessions WHERE reservation_id = ?")
      .bind(id)
      .first<{ n: number }>();
    expect(stored?.n).toBe(0);
    // A page of an allowed origin may be the way back (another hold: this one's request is claimed).
    const shop = { ...withStripe, ALLOWED_ORIGINS: "https://shop.example" } as unknown as Partial<Env>;
    const other = await heldOn(sku, "remy");
    const fromShop = await post(
      "remy",
      { successUrl: "https://shop.example/ok", cancelUrl: "https://shop.example/" },
      shop,
      other,
    );
    expect(fromShop.status).toBe(201);
    const [sent] = await stripeGot("/v1/checkout/sessions", other);
    expect(sent?.params.success_url).toBe("https://shop.example/ok");
    // A hold no longer held.
    const cancelled = await heldOn(sku, "remy");
    expect((await call("POST", `/api/reservations/${cancelled}/cancel`, { user: "remy" })).status).toBe(200);
    const late = await post("remy", BACK, withStripe, cancelled);
    expect([...codeOf(late), late.json.error.details.state]).toEqual([409, "INVALID_STATE", "cancelled"]);
  }, 30_000);
  it("makes one session for two requests of one hold in flight at once, seconds apart (two tabs, a double submit)", async () => {
    const sku = uniqueSku("checkout-twice");
    await createSku(sku, { totalStock: 5, perUserLimit: 2, price: 700 });
    const id = await heldOn(sku, "tabs");
    const vars = { ...env, ...withStripe } as Env;
    const ask = (now: number) =>
      checkout(vars, { url: "http://flashgate.test/", userId: "tabs", reservationId: id, ...BACK }, now);
    // Both read no session stored: the second is asked while the first is still with Stripe.
    const minute = Math.floor(Date.now() / 60_000) * 60_000;
    const [first, second] = await Promise.all([ask(minute + 1_000), ask(minute + 4_000)]);
    expect(second.sessionId).toBe(first.sessionId);
    const stored = await env.DB.prepare("SELECT session_id FROM checkout_sessions WHERE reservation_id = ?1")
      .bind(id)
      .all<{ session_id: string }>();
    expect(stored.results.map((r) => r.session_id)).toEqual([first.sessionId]);
  });

  it("makes one session for two requests of one hold in flight at once on either side of a minute boundary", async () => {
    const sku = uniqueSku("checkout-minute");
    await createSku(sku, { totalStock: 5, perUserLimit: 2, price: 700 });
    const id = await heldOn(sku, "edge");
    const vars = { ...env, ...withStripe } as Env;
    const ask = (now: number) =>
      checkout(vars, { url: "http://flashgate.test/", userId: "edge", reservationId: id, ...BACK }, now);
    // 59 s into a minute and 1 s into the next: the expiry each would pick is a minute apart.
    const minute = Math.floor(Date.now() / 60_000) * 60_000;
    const [first, second] = await Promise.all([ask(minute + 59_000), ask(minute + 61_000)]);
    expect(second.sessionId).toBe(first.sessionId);
    const asked = await stripeGot("/v1/checkout/sessions", id);
    // Every request for the hold went to Stripe as one request: one key, one expiry.
    expect(new Set(asked.map((r) => r.key)).size).toBe(1);
    expect(new Set(asked.map((r) => r.params.expires_at)).size).toBe(1);
    const stored = await env.DB.prepare("SELECT session_id FROM checkout_sessions WHERE reservation_id = ?1")
      .bind(id)
      .all<{ session_id: string }>();
    expect(stored.results.map((r) => r.session_id)).toEqual([first.sessionId]);
  });

  it("answers the session Stripe made when its store was lost, asked again in a later minute (not a second session)", async () => {
    const sku = uniqueSku("checkout-lost");
    await createSku(sku, { totalStock: 5, perUserLimit: 2, price: 700 });
    const id = await heldOn(sku, "lou");
    const vars = { ...env, ...withStripe } as Env;
    const ask = (now: number, over: Partial<Env> = {}) =>
      checkout({ ...vars, ...over }, { url: "http://flashgate.test/", userId: "lou", reservationId: id, ...BACK }, now);
    const minute = Math.floor(Date.now() / 60_000) * 60_000;
    // Stripe makes the session; the Worker's write of it to D1 is lost (an error, a Worker ended).
    await expect(ask(minute + 30_000, { DB: losingSessions(env.DB) })).rejects.toThrow(/lost/);
    const [made] = await stripeGot("/v1/checkout/sessions", id);
    const peek = await fetch(`${apiUrl}/v1/checkout/sessions`, {
      method: "POST",
      headers: { authorization: `Bearer ${STRIPE_TEST_KEY}`, "idempotency-key": made?.key as string },
      body: new URLSearchParams(made?.params),
    });
    const session = (await peek.json()) as { id: string };
    // The buyer asks again a minute and a half later: the session Stripe made, not a second one.
    const again = await ask(minute + 90_000);
    expect(again.sessionId).toBe(session.id);
    const asked = await stripeGot("/v1/checkout/sessions", id);
    expect(new Set(asked.map((r) => r.key)).size).toBe(1);
    const stored = await env.DB.prepare("SELECT session_id FROM checkout_sessions WHERE reservation_id = ?1")
      .bind(id)
      .all<{ session_id: string }>();
    expect(stored.results.map((r) => r.session_id)).toEqual([session.id]);
  });

  it("makes the session once Stripe answers again after a slow call whose session Stripe made (503 then 201)", async () => {
    const sku = uniqueSku("checkout-slow");
    await createSku(sku, { totalStock: 5, perUserLimit: 2, price: 700 });
    const id = await heldOn(sku, "sly");
    const post = (vars: Partial<Env>) =>
      call("POST", `/api/reservations/${id}/checkout`, { user: "sly", body: BACK, env: vars });
    // Stripe makes the session but answers after the Worker gave up: 503, nothing stored.
    expect((await post(stripeVars(STRIPE_FAULT_KEYS.slow))).status).toBe(503);
    // The session Stripe made under that key, as it holds it once the slow call lands (its replay).
    const [lost] = await stripeGot("/v1/checkout/sessions", id);
    const landed = await fetch(`${apiUrl}/v1/checkout/sessions`, {
      method: "POST",
      headers: { authorization: `Bearer ${STRIPE_TEST_KEY}`, "idempotency-key": lost?.key as string },
      body: new URLSearchParams(lost?.params),
    });
    expect([landed.status, landed.headers.get("idempotent-replayed")]).toEqual([200, "true"]);
    const made = (await landed.json()) as { id: string };
    // Stripe answers again: the buyer's retry, seconds later, gets the session Stripe made, not another.
    const retried = await post(withStripe);
    expect([retried.status, retried.json.error?.code]).toEqual([201, undefined]);
    expect(retried.json.sessionId).toBe(made.id);
    const keys = (await stripeGot("/v1/checkout/sessions", id)).map((r) => r.key);
    expect(new Set(keys)).toEqual(new Set([lost?.key]));
  }, 30_000);

  it("answers 503 BUSY, not a second session, while Stripe still executes the hold's request (409 in progress)", async () => {
    const sku = uniqueSku("checkout-stalled");
    await createSku(sku, { totalStock: 5, perUserLimit: 2, price: 700 });
    const id = await heldOn(sku, "sid");
    const ask = (now: number, key?: string) =>
      checkout(
        { ...env, ...stripeVars(key) } as Env,
        { url: "http://flashgate.test/", userId: "sid", reservationId: id, ...BACK },
        now,
      );
    const minute = Math.floor(Date.now() / 60_000) * 60_000;
    // Stripe takes 6 s over the first request: the Worker gives up after 5 s (503), Stripe goes on.
    const first = ask(minute + 30_000, STRIPE_FAULT_KEYS.stalled).catch((err: unknown) => err);
    await expect.poll(() => stripeGot("/v1/checkout/sessions", id)).toHaveLength(1);
    // Asked again in the next minute while Stripe is still at it: Stripe's 409 for the key, 503 BUSY.
    const second = await ask(minute + 90_000).catch((err: unknown) => err);
    expect(second).toBeInstanceOf(ApiError);
    expect([(second as ApiError).code, (second as ApiError).headers["Retry-After"]]).toEqual(["BUSY", "1"]);
    const gaveUp = await first;
    expect((gaveUp as ApiError).code).toBe("BUSY");
    // Once Stripe has made it, the buyer's next retry is that session; Stripe never had a second key.
    const done = await vi.waitFor(() => ask(minute + 100_000), { timeout: 5_000, interval: 200 });
    const [sent] = await stripeGot("/v1/checkout/sessions", id);
    const replay = await fetch(`${apiUrl}/v1/checkout/sessions`, {
      method: "POST",
      headers: { authorization: `Bearer ${STRIPE_TEST_KEY}`, "idempotency-key": sent?.key as string },
      body: new URLSearchParams(sent?.params),
    });
    expect(done.sessionId).toBe(((await replay.json()) as { id: string }).id);
    const keys = (await stripeGot("/v1/checkout/sessions", id)).map((r) => r.key);
    expect(new Set(keys)).toEqual(new Set([sent?.key]));
  }, 30_000);
  it("a request Stripe refused for its parameters does not keep a later one from the SKU's corrected price (second reading)", async () => {
    const sku = uniqueSku("checkout-refused");
    // Below Stripe's minimum charge (50 cents in usd): Stripe refuses the session, having made nothing.
    await createSku(sku, { totalStock: 5, perUserLimit: 2, price: 20 });
    const id = await heldOn(sku, "rae");
    const vars = { ...env, ...withStripe } as Env;
    const ask = () =>
      checkout(vars, { url: "http://flashgate.test/", userId: "rae", reservationId: id, ...BACK }, Date.now());
    const real = globalThis.fetch;
    const spy = vi.spyOn(globalThis, "fetch").mockImplementation(async (input, init) => {
      const url = String(input instanceof Request ? input.url : input);
      if (url.endsWith("/v1/checkout/sessions") && init?.body instanceof URLSearchParams) {
        const amount =
          Number(init.body.get("line_items[0][price_data][unit_amount]")) *
          Number(init.body.get("line_items[0][quantity]"));
        if (amount < 50) {
          const error = {
            type: "invalid_request_error",
            code: "amount_too_small",
            message: "The Checkout Session's total amount due must add up to at least $0.50 usd",
            param: "line_items[0][price_data][unit_amount]",
          };
          return new Response(JSON.stringify({ error }), { status: 400 });
        }
      }
      return real(input, init);
    });
    try {
      const refused = await ask().catch((err: unknown) => err);
      expect((refused as ApiError).code).toBe("BUSY");
      // The operator sets a price Stripe takes; the buyer asks again a few seconds later.
      expect((await call("PUT", `/admin/skus/${sku}`, { admin: true, body: { price: 700 } })).status).toBe(200);
      const made = await ask();
      expect(made.again).toBe(false);
      const asked = await stripeGot("/v1/checkout/sessions", id);
      expect(asked.at(-1)?.params["line_items[0][price_data][unit_amount]"]).toBe("700");
    } finally {
      spy.mockRestore();
    }
  });
});

describe("payments owed back, refunded", () => {
  /** A Stripe payment flagged refund_required (the hold paid twice), and its event id. */
  async function owedByStripe(sku: string, user: string, intent: string): Promise<string> {
    const id = await heldOn(sku, user);
    const first = await sendStripe(stripeEvent("checkout.session.completed", checkoutSession(id, 1000)));
    expect(first.json.outcome).toBe("applied");
    const second = await sendStripe(
      stripeEvent("checkout.session.completed", checkoutSession(id, 1000, { paymentIntent: intent })),
    );
    expect(second.json.outcome).toBe("refund_required");
    return `stripe:paid:${intent}`;
  }

  const refund = (eventId: string, vars: Partial<Env> = withStripe) =>
    call("POST", `/admin/payments/${encodeURIComponent(eventId)}/refund`, { admin: true, env: vars });

  it("refunds a Stripe payment through Stripe once, idempotently, and lists it as refunded", async () => {
    const sku = uniqueSku("refund");
    await createSku(sku, { totalStock: 5, perUserLimit: 5, price: 1000 });
    const intent = `pi_test_${crypto.randomUUID().replaceAll("-", "")}`;
    const eventId = await owedByStripe(sku, "rita", intent);

    // Stripe failing (500): 503, nothing recorded. An error Stripe answered spends its key (Stripe would
    // replay a saved one to every retry of it), so the retry asks under the next key: Stripe refunds a
    // payment intent once whichever key asks (a second is `charge_already_refunded`).
    expect((await refund(eventId, stripeVars(STRIPE_FAULT_KEYS.down))).status).toBe(503);
    const done = await refund(eventId);
    expect(done.status).toBe(200);
    expect(done.json).toMatchObject({
      eventId,
      outcome: "refund_required",
      refund: { status: "refunded", via: "stripe", id: expect.stringMatching(/^re_/) },
    });
    const again = await refund(eventId);
    expect([again.status, again.json.error.details.state]).toEqual([409, "refunded"]);
    const marked = await call("POST", `/admin/payments/${encodeURIComponent(eventId)}/refunded`, {
      admin: true,
      body: {},
    });
    expect(marked.status).toBe(409);
    const asked = await stripeGot("/v1/refunds", intent);
    expect(asked.map((r) => r.params.payment_intent)).toEqual([intent, intent]);
    expect(new Set(asked.map((r) => r.key)).size).toBe(2);

    const listed = async (refunded: string) =>
      (await call("GET", `/admin/payments?outcome=refund_required&refunded=${refunded}&limit=1000`, { admin: true }))
        .json.payments as { eventId: string }[];
    expect((await listed("true")).map((p) => p.eventId)).toContain(eventId);
    expect((await listed("false")).map((p) => p.eventId)).not.toContain(eventId);
    expect((await call("GET", "/admin/payments?refunded=maybe", { admin: true })).status).toBe(400);
  });

  it("marks refunded what was paid elsewhere, and refuses what is not owed", async () => {
    const sku = uniqueSku("refund-mark");
    await createSku(sku, { totalStock: 5, perUserLimit: 5, price: 1000 });
    const id = await heldOn(sku, "mona");
    const applied = `evt_${crypto.randomUUID()}`;
    const owed = `evt_${crypto.randomUUID()}`;
    expect((await pay(id, "payment.succeeded", applied, { amount: 1000 })).json.outcome).toBe("applied");
    expect((await pay(id, "payment.succeeded", owed, { amount: 1000 })).json.outcome).toBe("refund_required");
    const mark = (eventId: string, body: unknown = {}) =>
      call("POST", `/admin/payments/${encodeURIComponent(eventId)}/refunded`, { admin: true, body });

    // Not through Stripe: Stripe cannot refund it.
    const viaStripe = await refund(owed);
    expect([viaStripe.status, viaStripe.json.error.details.state]).toEqual([409, "not_stripe"]);
    expect((await mark(owed, { note: 42 })).status).toBe(400);
    expect((await mark(owed, { nope: true })).status).toBe(400);
    const done = await mark(owed, { note: "bank transfer 2026-12-04" });
    expect(done.json.refund).toMatchObject({ status: "refunded", via: "marked", id: null });
    expect([(await mark(owed)).status, (await refund(owed)).status]).toEqual([409, 409]);
    const notOwed = await mark(applied);
    expect([notOwed.status, notOwed.json.error.details.state]).toEqual([409, "applied"]);
    expect((await mark("evt_nobody")).status).toBe(404);
    expect((await refund("stripe:paid:pi_nobody")).status).toBe(404);
    expect((await refund(owed, {})).status).toBe(404); // Stripe not configured
  });

  it("pays the money back once when a refund through Stripe and a mark, or two refunds, are sent at once", async () => {
    const sku = uniqueSku("refund-race");
    await createSku(sku, { totalStock: 10, perUserLimit: 10, price: 1000 });
    const mark = (eventId: string) =>
      call("POST", `/admin/payments/${encodeURIComponent(eventId)}/refunded`, { admin: true, body: { note: "bank" } });
    for (const [i, rival] of [mark, refund, mark].entries()) {
      const intent = `pi_test_${crypto.randomUUID().replaceAll("-", "")}`;
      const eventId = await owedByStripe(sku, `race${i}`, intent);
      const answers = await Promise.all([refund(eventId), rival(eventId)]);
      expect(answers.map((a) => a.status).sort(), JSON.stringify(answers.map((a) => a.json))).toEqual([200, 409]);
      const won = answers.find((a) => a.status === 200)?.json;
      const asked = await stripeGot("/v1/refunds", intent);
      // Stripe was asked only by a refund that won, and the record says who paid the money back.
      expect([asked.length, won.refund.via]).toEqual(won.refund.via === "stripe" ? [1, "stripe"] : [0, "marked"]);
    }
  });

  it("refunds a payment whose claim Stripe never answered, once the claim is a minute old; a mark meanwhile is 409", async () => {
    const sku = uniqueSku("refund-stale");
    await createSku(sku, { totalStock: 5, perUserLimit: 5, price: 1000 });
    const intent = `pi_test_${crypto.randomUUID().replaceAll("-", "")}`;
    const eventId = await owedByStripe(sku, "sam", intent);
    // A Worker that claimed the refund and died before Stripe's answer was recorded.
    const claim = (at: number) =>
      env.DB.prepare(
        "UPDATE payments SET refund_status = 'pending', refund_via = 'stripe', refund_id = NULL, refund_at = ?2 WHERE event_id = ?1",
      )
        .bind(eventId, at)
        .run();
    await claim(Date.now());
    const fresh = await refund(eventId);
    expect([fresh.status, fresh.json.error?.details?.state]).toEqual([409, "pending"]);
    await claim(Date.now() - 61_000);
    const marked = await call("POST", `/admin/payments/${encodeURIComponent(eventId)}/refunded`, {
      admin: true,
      body: {},
    });
    expect([marked.status, marked.json.error?.details?.state]).toEqual([409, "pending"]);
    const done = await refund(eventId);
    expect([done.status, done.json.refund]).toMatchObject([
      200,
      { status: "refunded", via: "stripe", id: expect.stringMatching(/^re_/) },
    ]);
    expect(await stripeGot("/v1/refunds", intent)).toHaveLength(1);
  });

  it("a claim taken over that Stripe refuses is owed again, so a mark can settle it", async () => {
    const sku = uniqueSku("refund-refused");
    await createSku(sku, { totalStock: 5, perUserLimit: 5, price: 1000 });
    const eventId = await owedByStripe(sku, "tod", `pi_test_${crypto.randomUUID().replaceAll("-", "")}`);
    await env.DB.prepare(
      "UPDATE payments SET refund_status = 'pending', refund_via = 'stripe', refund_id = NULL, refund_at = ?2 WHERE event_id = ?1",
    )
      .bind(eventId, Date.now() - 61_000)
      .run();
    const refused = await refund(eventId, stripeVars(STRIPE_FAULT_KEYS.disputed));
    expect([refused.status, refused.json.error?.details?.state]).toEqual([409, "stripe_refused"]);
    const marked = await call("POST", `/admin/payments/${encodeURIComponent(eventId)}/refunded`, {
      admin: true,
      body: { note: "paid back by bank transfer" },
    });
    expect([marked.status, marked.json.refund]).toMatchObject([200, { status: "refunded", via: "marked" }]);
  });

  it("a refund Stripe is still executing under its key (409) stays pending: a mark meanwhile is 409, not a second refund (second reading)", async () => {
    const sku = uniqueSku("refund-inflight");
    await createSku(sku, { totalStock: 5, perUserLimit: 5, price: 1000 });
    const intent = `pi_test_${crypto.randomUUID().replaceAll("-", "")}`;
    const eventId = await owedByStripe(sku, "ivo", intent);
    // Stripe takes 6 s over the refund: the Worker gives up after 5 s (503), Stripe goes on with it.
    const first = await refund(eventId, stripeVars(STRIPE_FAULT_KEYS.stalled));
    expect(first.status).toBe(503);
    // Asked again while Stripe is still at it: Stripe's 409 for the key, 503 BUSY.
    const second = await refund(eventId);
    expect(second.status).toBe(503);
    expect(await stripeGot("/v1/refunds", intent)).toHaveLength(2);
    // Stripe is making that refund: the payment is not owed meanwhile, so it is not paid back twice.
    const marked = await call("POST", `/admin/payments/${encodeURIComponent(eventId)}/refunded`, {
      admin: true,
      body: { note: "bank transfer" },
    });
    expect([marked.status, marked.json.error?.details?.state]).toEqual([409, "pending"]);
    // A minute on, /refund takes the claim over under the same key: Stripe's one refund, recorded.
    await new Promise((resolve) => setTimeout(resolve, 1_500));
    await env.DB.prepare("UPDATE payments SET refund_at = refund_at - 61000 WHERE event_id = ?1").bind(eventId).run();
    const done = await refund(eventId);
    expect([done.status, done.json.refund]).toMatchObject([
      200,
      { status: "refunded", via: "stripe", id: expect.stringMatching(/^re_/) },
    ]);
    expect(new Set((await stripeGot("/v1/refunds", intent)).map((r) => r.key)).size).toBe(1);
  }, 30_000);

  it("a claim taken over that Stripe answers 500 (saved under the key, replayed to every retry) is owed again, so a mark can settle it (second reading)", async () => {
    const sku = uniqueSku("refund-down");
    await createSku(sku, { totalStock: 5, perUserLimit: 5, price: 1000 });
    const eventId = await owedByStripe(sku, "una", `pi_test_${crypto.randomUUID().replaceAll("-", "")}`);
    await env.DB.prepare(
      "UPDATE payments SET refund_status = 'pending', refund_via = 'stripe', refund_id = NULL, refund_at = ?2 WHERE event_id = ?1",
    )
      .bind(eventId, Date.now() - 61_000)
      .run();
    expect((await refund(eventId, stripeVars(STRIPE_FAULT_KEYS.down))).status).toBe(503);
    const marked = await call("POST", `/admin/payments/${encodeURIComponent(eventId)}/refunded`, {
      admin: true,
      body: { note: "paid back by bank transfer" },
    });
    expect([marked.status, marked.json.refund]).toMatchObject([200, { status: "refunded", via: "marked" }]);
  });

  it("a refund Stripe answered 500 (saved under its key, replayed to every retry of it) is made under the next key once Stripe is well: not 503 for a day", async () => {
    const sku = uniqueSku("refund-5xx");
    await createSku(sku, { totalStock: 10, perUserLimit: 10, price: 1000 });
    const failing = stripeVars(STRIPE_FAULT_KEYS.failing);
    const refunded = { status: "refunded", via: "stripe", id: expect.stringMatching(/^re_/) };
    // Stripe began the refund and failed: 503, the payment still owed (no refund recorded).
    const intent = `pi_test_${crypto.randomUUID().replaceAll("-", "")}`;
    const eventId = await owedByStripe(sku, "wes", intent);
    expect((await refund(eventId, failing)).status).toBe(503);
    const owed = await call("GET", "/admin/payments?outcome=refund_required&refunded=false&limit=1000", {
      admin: true,
    });
    expect(owed.json.payments.find((p: { eventId: string }) => p.eventId === eventId)?.refund).toBeNull();
    // Stripe well again: the operator's retry is the refund, not Stripe's saved 500 again.
    const done = await refund(eventId);
    expect([done.status, done.json.refund]).toMatchObject([200, refunded]);
    const asked = await stripeGot("/v1/refunds", intent);
    expect([asked.length, new Set(asked.map((r) => r.key)).size]).toEqual([2, 2]);
    // The same for a claim taken over (a minute old, never answered) that Stripe then answered 500.
    const taken = `pi_test_${crypto.randomUUID().replaceAll("-", "")}`;
    const takenId = await owedByStripe(sku, "xan", taken);
    await env.DB.prepare(
      "UPDATE payments SET refund_status = 'pending', refund_via = 'stripe', refund_id = NULL, refund_at = ?2 WHERE event_id = ?1",
    )
      .bind(takenId, Date.now() - 61_000)
      .run();
    expect((await refund(takenId, failing)).status).toBe(503);
    const after = await refund(takenId);
    expect([after.status, after.json.refund]).toMatchObject([200, refunded]);
  });

  /** Stripe's bank settling a refund (the stand-in's own route): the events Stripe sends for it. */
  async function settleAtStripe(refundId: string, status: "succeeded" | "failed"): Promise<Record<string, unknown>[]> {
    const answer = await fetch(`${apiUrl}/__standin/refunds/${refundId}`, {
      method: "POST",
      body: new URLSearchParams({ status }),
    });
    expect(answer.status).toBe(200);
    return ((await answer.json()) as { events: Record<string, unknown>[] }).events;
  }
  const typeOf = (event: Record<string, unknown>) => event.type as string;
  /** An event as Stripe would send it for this refund in another status (an older one, arriving late). */
  const withStatus = (event: Record<string, unknown>, status: string) => {
    const data = event.data as { object: Record<string, unknown> };
    return stripeEvent(typeOf(event), { ...data.object, status });
  };
  const payment = async (eventId: string) =>
    (await env.DB.prepare(
      "SELECT refund_status, refund_id, refund_at, refund_attempts FROM payments WHERE event_id = ?",
    )
      .bind(eventId)
      .first()) as { refund_status: string; refund_id: string; refund_at: number; refund_attempts: number };

  it("settles a refund Stripe answered pending when Stripe's refund.updated says succeeded; duplicates and a late pending change nothing", async () => {
    const sku = uniqueSku("refund-pending");
    await createSku(sku, { totalStock: 5, perUserLimit: 5, price: 1000 });
    const intent = `pi_test_${crypto.randomUUID().replaceAll("-", "")}`;
    const eventId = await owedByStripe(sku, "pia", intent);
    const pending = await refund(eventId, stripeVars(STRIPE_FAULT_KEYS.pending));
    expect(pending.json.refund).toMatchObject({ status: "pending", via: "stripe", id: expect.stringMatching(/^re_/) });
    const refundId = pending.json.refund.id as string;
    // Asked again while pending: Stripe is asked where the refund stands, not for another refund.
    const again = await refund(eventId);
    expect([again.status, again.json.error.details.state]).toEqual([409, "pending"]);
    expect(await stripeGot("/v1/refunds", intent)).toHaveLength(1);

    const events = await settleAtStripe(refundId, "succeeded");
    expect(events.map(typeOf)).toEqual(["refund.updated", "charge.refund.updated"]);
    const [updated, chargeUpdated] = events as [Record<string, unknown>, Record<string, unknown>];
    const settled = await sendStripe(updated);
    expect([settled.status, settled.json]).toMatchObject([
      200,
      { received: true, payment: { eventId, refund: { status: "refunded", via: "stripe", id: refundId } } },
    ]);
    const after = await payment(eventId);
    // The same change again (the charge's event, the same event resent) and an older one arriving late.
    for (const event of [chargeUpdated, updated, withStatus(updated, "pending")]) {
      const answer = await sendStripe(event);
      expect([answer.status, answer.json.payment?.refund?.status]).toEqual([200, "refunded"]);
    }
    expect(await payment(eventId)).toEqual(after);
    // A refund Flashgate did not make (from Stripe's dashboard): not ours, ignored.
    const data = (updated.data as { object: Record<string, unknown> }).object;
    const foreign = await sendStripe(stripeEvent("refund.updated", { ...data, id: "re_test_dashboard", metadata: {} }));
    expect(foreign.json).toEqual({ received: true, ignored: true });

    const listed = await call("GET", "/admin/payments?outcome=refund_required&refunded=true&limit=1000", {
      admin: true,
    });
    expect(listed.json.payments.map((p: { eventId: string }) => p.eventId)).toContain(eventId);
    const done = await refund(eventId);
    expect([done.status, done.json.error.details.state]).toEqual([409, "refunded"]);
  });

  it("records a pending refund that fails as failed, once; it is refunded again as a new refund at Stripe", async () => {
    const sku = uniqueSku("refund-failed");
    await createSku(sku, { totalStock: 5, perUserLimit: 5, price: 1000 });
    const intent = `pi_test_${crypto.randomUUID().replaceAll("-", "")}`;
    const eventId = await owedByStripe(sku, "fay", intent);
    const pending = await refund(eventId, stripeVars(STRIPE_FAULT_KEYS.pending));
    const first = pending.json.refund.id as string;
    const events = await settleAtStripe(first, "failed");
    expect(events.map(typeOf)).toEqual(["refund.updated", "charge.refund.updated", "refund.failed"]);
    const [updated] = events as [Record<string, unknown>];

    // Signed with another secret: refused, nothing changes.
    const forged = await sendStripe(withStatus(updated, "succeeded"), { secret: "not-the-secret" });
    expect([forged.status, forged.json.error?.code]).toEqual([401, "SIGNATURE_INVALID"]);
    expect((await payment(eventId)).refund_status).toBe("pending");

    // Out of order (refund.failed first) and each twice: failed, one failed attempt counted.
    for (const event of [...events].reverse().concat(events)) {
      const answer = await sendStripe(event);
      expect([answer.status, answer.json.payment?.refund]).toMatchObject([200, { status: "failed", id: first }]);
    }
    // A succeeded sent before the failure, arriving after it: a failed refund is final.
    expect((await sendStripe(withStatus(updated, "succeeded"))).json.payment.refund.status).toBe("failed");
    expect(await payment(eventId)).toMatchObject({ refund_status: "failed", refund_id: first, refund_attempts: 1 });
    const owed = await call("GET", "/admin/payments?outcome=refund_required&refunded=false&limit=1000", {
      admin: true,
    });
    expect(owed.json.payments.map((p: { eventId: string }) => p.eventId)).toContain(eventId);

    // Refunded again: a new refund, under a new idempotency key (not Stripe's replay of the failed one).
    const retried = await refund(eventId);
    expect([retried.status, retried.json.refund]).toMatchObject([200, { status: "refunded", via: "stripe" }]);
    expect(retried.json.refund.id).not.toBe(first);
    const asked = await stripeGot("/v1/refunds", intent);
    expect(asked.map((r) => r.key)).toEqual([`flashgate-refund:${eventId}:0`, `flashgate-refund:${eventId}:1`]);
    // The failed refund's events, sent again, no longer name the payment's refund.
    expect((await sendStripe(updated)).json).toEqual({ received: true, ignored: true });
    expect((await payment(eventId)).refund_status).toBe("refunded");
  });

  it("asks Stripe where a pending refund stands when /refund is sent again, and waits for a refund being created", async () => {
    const sku = uniqueSku("refund-ask");
    await createSku(sku, { totalStock: 5, perUserLimit: 5, price: 1000 });
    const mark = (eventId: string) =>
      call("POST", `/admin/payments/${encodeURIComponent(eventId)}/refunded`, { admin: true, body: { note: "cash" } });
    // Stripe settled it and its events were lost: asking again records what Stripe says.
    for (const [i, status] of (["succeeded", "failed"] as const).entries()) {
      const eventId = await owedByStripe(sku, `ask${i}`, `pi_test_${crypto.randomUUID().replaceAll("-", "")}`);
      const pending = await refund(eventId, stripeVars(STRIPE_FAULT_KEYS.pending));
      const id = pending.json.refund.id as string;
      expect((await mark(eventId)).status).toBe(409); // pending: not paid back twice
      await settleAtStripe(id, status);
      expect((await refund(eventId, stripeVars(STRIPE_FAULT_KEYS.down))).status).toBe(503); // Stripe down: still pending
      const asked = await refund(eventId);
      expect([asked.status, asked.json.refund]).toMatchObject([
        200,
        { status: status === "succeeded" ? "refunded" : "failed", id },
      ]);
      // A failed one is owed again, and may be paid back another way and marked; a refunded one is not.
      const marked = await mark(eventId);
      expect([marked.status, marked.json.refund?.via]).toEqual(
        status === "failed" ? [200, "marked"] : [409, undefined],
      );
    }
    // An event for a refund whose creation is still being recorded (claimed, no id yet): Stripe retries it.
    const eventId = await owedByStripe(sku, "ask-race", `pi_test_${crypto.randomUUID().replaceAll("-", "")}`);
    await env.DB.prepare(
      "UPDATE payments SET refund_status = 'pending', refund_via = 'stripe', refund_id = NULL, refund_at = ?2 WHERE event_id = ?1",
    )
      .bind(eventId, Date.now())
      .run();
    const early = await sendStripe(
      stripeEvent("refund.updated", {
        id: "re_test_early",
        object: "refund",
        status: "succeeded",
        metadata: { flashgate_event_id: eventId },
      }),
    );
    expect([early.status, early.json.error?.code]).toEqual([503, "BUSY"]);
    expect((await payment(eventId)).refund_status).toBe("pending");
  });

  it("records where a refund stands, not Stripe's replay of a lost first answer, when it settled in between", async () => {
    const sku = uniqueSku("refund-replay");
    await createSku(sku, { totalStock: 5, perUserLimit: 5, price: 1000 });
    const intent = `pi_test_${crypto.randomUUID().replaceAll("-", "")}`;
    const eventId = await owedByStripe(sku, "rex", intent);
    // Stripe makes the refund (succeeded) but its answer comes after the Worker gave up: 503, nothing recorded.
    expect((await refund(eventId, stripeVars(STRIPE_FAULT_KEYS.slow))).status).toBe(503);
    await new Promise((resolve) => setTimeout(resolve, 1_500));
    const [lost] = await stripeGot("/v1/refunds", intent);
    // What Stripe holds under that key (its replay), to name the refund.
    const peek = await fetch(`${apiUrl}/v1/refunds`, {
      method: "POST",
      headers: { authorization: `Bearer ${STRIPE_TEST_KEY}`, "idempotency-key": lost?.key as string },
      body: new URLSearchParams(lost?.params),
    });
    const made = (await peek.json()) as { id: string; status: string };
    expect(made.status).toBe("succeeded");
    // The card was closed: Stripe fails it. Its events name no recorded refund (none is): ignored.
    for (const event of await settleAtStripe(made.id, "failed")) {
      expect((await sendStripe(event)).status).toBe(200);
    }
    // Asked again: the same key, Stripe replays "succeeded"; the money is in the merchant's balance.
    const again = await refund(eventId);
    expect(again.status).toBe(200);
    expect(again.json.refund).toMatchObject({ id: made.id, status: "failed" });
    // Owed again, so it can be refunded or marked.
    expect((await refund(eventId)).json.refund?.status).toBe("refunded");
  }, 30_000);
});
