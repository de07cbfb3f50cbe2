import { randomUUID } from "node:crypto";
import { cpSync, mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import Stripe from "stripe";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { homeShard } from "../durable-objects/shared/shard-name";
import { signPayment } from "../src/payments/webhook-signature";
import { shopperJwt } from "../tools/jwt";
import { stripeEnvelope } from "../tools/stripe-event";
import { startWorker, type WorkerServer } from "../tools/worker";

/**
 * The restart tier (API.md v1.4: nothing an isolate remembers decides an answer). One Worker builds a
 * stored state and keeps its isolates warm; a second starts over a copy of that state in a fresh
 * workerd (a restart, or a deploy: every isolate new). The same requests go to both, and every answer
 * must be the same: what a warm isolate knows from memory (the catalog, the sold-out cache, the draw,
 * keys) a fresh one reads again from where it is stored.
 */

const SECRETS = { PAYMENT_WEBHOOK_SECRET: "restart-webhook-secret", STRIPE_WEBHOOK_SECRET: "restart-stripe-secret" };
// A sold-out answer is remembered for the whole test: the warm Worker answers from memory what the fresh one must read.
const VARS = { ...SECRETS, RECONCILE_GRACE_MS: "0", METRICS_FLUSH_INTERVAL_MS: "0", SOLD_OUT_CACHE_TTL_MS: "120000" };
const ADMIN = { authorization: "Bearer dev-admin-token", "content-type": "application/json" };
const stripe = new Stripe("sk_test_flashgate_restart");
const run = randomUUID().slice(0, 6);
const HOUR = 3_600_000;

let warm: WorkerServer;
let fresh: WorkerServer | undefined;

interface Answer {
  status: number;
  body: unknown;
}

async function send(
  server: WorkerServer,
  method: string,
  path: string,
  opts: { body?: unknown; headers?: Record<string, string>; raw?: string } = {},
): Promise<Answer> {
  const body = opts.raw ?? (opts.body === undefined ? undefined : JSON.stringify(opts.body));
  const response = await fetch(`${server.url}${path}`, {
    method,
    headers: { "content-type": "application/json", ...opts.headers },
    ...(body === undefined ? {} : { body }),
  });
  const text = await response.text();
  let parsed: unknown = text;
  try {
    parsed = JSON.parse(text);
  } catch {
    // not JSON: compared as text
  }
  return { status: response.status, body: parsed };
}

const jwt = async (user: string) => ({ authorization: `Bearer ${await shopperJwt(user, "dev-auth-secret")}` });
const admin = (server: WorkerServer, method: string, path: string, body?: unknown) =>
  send(server, method, path, { headers: ADMIN, body });

async function put(sku: string, body: Record<string, unknown>): Promise<void> {
  const answer = await admin(warm, "PUT", `/admin/skus/${sku}`, body);
  expect(answer.status, JSON.stringify(answer.body)).toBe(200);
}

async function token(server: WorkerServer, sku: string, user: string, headers: Record<string, string> = {}) {
  return send(server, "POST", `/api/skus/${sku}/tokens`, { headers: { ...(await jwt(user)), ...headers } });
}

/** A token, then a hold of `quantity` with it: the reservation's body. */
async function hold(sku: string, user: string, quantity = 1): Promise<{ reservationId: string; status: string }> {
  const minted = await token(warm, sku, user);
  expect(minted.status, JSON.stringify(minted.body)).toBe(201);
  const { token: t } = minted.body as { token: string };
  const held = await send(warm, "POST", `/api/skus/${sku}/reservations`, {
    headers: await jwt(user),
    body: { token: t, quantity },
  });
  expect(held.status, JSON.stringify(held.body)).toBe(202);
  return held.body as { reservationId: string; status: string };
}

/** Users whose home shard of `shards` is `shard`. */
function usersOn(shard: number, shards: number, count: number, prefix: string): string[] {
  const users: string[] = [];
  for (let i = 0; users.length < count; i++) {
    const user = `${prefix}-${run}-${i}`;
    if (homeShard(user, shards) === shard) users.push(user);
  }
  return users;
}

/** Waits until D1 has every order of the SKU the stock objects made (the queue is drained). */
async function drained(sku: string, orders: number): Promise<void> {
  const deadline = Date.now() + 60_000;
  for (;;) {
    const view = (await admin(warm, "GET", `/admin/skus/${sku}`)).body as { orders?: Record<string, number> };
    const counted = Object.values(view.orders ?? {}).reduce((a, b) => a + b, 0);
    if (counted >= orders) return;
    if (Date.now() > deadline) throw new Error(`${sku}: D1 has ${counted} of ${orders} orders`);
    await new Promise((resolve) => setTimeout(resolve, 100));
  }
}

async function generic(server: WorkerServer, eventId: string, reservationId: string, amount: number): Promise<Answer> {
  const raw = JSON.stringify({ id: eventId, type: "payment.succeeded", reservationId, amount, currency: "usd" });
  const signature = await signPayment(raw, SECRETS.PAYMENT_WEBHOOK_SECRET, Math.floor(Date.now() / 1000));
  return send(server, "POST", "/webhooks/payments", { raw, headers: { "payment-signature": signature } });
}

async function stripePaid(server: WorkerServer, id: string, reservationId: string, amount: number): Promise<Answer> {
  const event = stripeEnvelope(`evt_${id}`, "checkout.session.completed", {
    id: `cs_${id}`,
    object: "checkout.session",
    amount_total: amount,
    client_reference_id: reservationId,
    currency: "usd",
    metadata: { reservationId },
    mode: "payment",
    payment_intent: `pi_${id}`,
    payment_status: "paid",
    status: "complete",
  });
  const raw = JSON.stringify(event, null, 2);
  const header = await stripe.webhooks.generateTestHeaderStringAsync({
    payload: raw,
    secret: SECRETS.STRIPE_WEBHOOK_SECRET,
  });
  return send(server, "POST", "/webhooks/stripe", { raw, headers: { "stripe-signature": header } });
}

/** What the scenarios stored before the restart, and the requests asked of both Workers. */
interface Stored {
  cut: string;
  cutHolds: { user: string; reservationId: string }[];
  minted: { sku: string; user: string; token: string };
  line: string;
  waiting: string;
  holder: string;
  draw: string;
  archived: string;
  early: string;
  codes: string[];
  member: string;
  soldOut: string;
}

let stored: Stored;

/** Builds every scenario's state on the warm Worker (its isolates see every step). */
async function build(): Promise<Stored> {
  // A SKU cut from 3 shards to 2 while shard 2 keeps four cancelled holds, owed late payments.
  const cut = `cut-${run}`;
  await put(cut, { name: "Cut", totalStock: 30, perUserLimit: 2, holdSeconds: 3600, shards: 3, price: 1000 });
  const cutHolds = [];
  for (const user of usersOn(2, 3, 4, "late")) {
    const { reservationId } = await hold(cut, user);
    expect(reservationId).toContain(`${cut}.2.`);
    const cancelled = await send(warm, "POST", `/api/reservations/${reservationId}/cancel`, {
      headers: await jwt(user),
    });
    expect(cancelled.status).toBe(200);
    cutHolds.push({ user, reservationId });
  }
  await drained(cut, 4);
  await put(cut, { shards: 2 });

  // A purchase token minted before the restart, used after it.
  const tok = `tok-${run}`;
  await put(tok, { totalStock: 5, perUserLimit: 1, holdSeconds: 3600 });
  const tokenUser = `minted-${run}`;
  const minted = await token(warm, tok, tokenUser);
  expect(minted.status).toBe(201);

  // A line: one unit held, a buyer waiting for it.
  const line = `line-${run}`;
  await put(line, { totalStock: 1, perUserLimit: 1, holdSeconds: 3600 });
  const holder = `holder-${run}`;
  await hold(line, holder);
  const waiting = `waiter-${run}`;
  const joined = await send(warm, "POST", `/api/skus/${line}/waitlist`, {
    headers: await jwt(waiting),
    body: { quantity: 1 },
  });
  expect(joined.status, JSON.stringify(joined.body)).toBe(202);

  // A draw whose window opens in an hour: its seed hash is public, its seed not yet.
  const draw = `draw-${run}`;
  await put(draw, {
    totalStock: 3,
    perUserLimit: 1,
    startsAt: new Date(Date.now() + HOUR).toISOString(),
    openingWindowMs: 10_000,
  });
  expect((await send(warm, "GET", `/api/skus/${draw}/draw`)).status).toBe(200);

  // An archived SKU.
  const archived = `gone-${run}`;
  await put(archived, { totalStock: 2 });
  expect((await admin(warm, "DELETE", `/admin/skus/${archived}`)).status).toBe(200);

  // Early access by code: one code taken by a member before the restart, one still free.
  const early = `early-${run}`;
  await put(early, {
    totalStock: 10,
    perUserLimit: 1,
    startsAt: new Date(Date.now() + HOUR).toISOString(),
    access: [{ name: "friends", startsAt: new Date(Date.now() - 60_000).toISOString() }],
  });
  const minting = await admin(warm, "POST", `/admin/skus/${early}/access-codes`, { tier: "friends", count: 2 });
  expect(minting.status).toBe(201);
  const codes = (minting.body as { codes: string[] }).codes;
  const member = `member-${run}`;
  expect((await token(warm, early, member, { "access-code": codes[0] as string })).status).toBe(201);

  // A SKU sold out: this isolate's sold-out cache has it.
  const soldOut = `sold-${run}`;
  await put(soldOut, { totalStock: 1, perUserLimit: 1, holdSeconds: 3600 });
  await hold(soldOut, `last-${run}`);
  expect((await token(warm, soldOut, `late-comer-${run}`)).status).toBe(409);

  await drained(line, 1);
  await drained(soldOut, 1);
  return {
    cut,
    cutHolds,
    minted: { sku: tok, user: tokenUser, token: (minted.body as { token: string }).token },
    line,
    waiting,
    holder,
    draw,
    archived,
    early,
    codes,
    member,
    soldOut,
  };
}

/** Every request of the scenarios, in order, with its answer (the same sequence on either Worker). */
async function ask(server: WorkerServer): Promise<Record<string, Answer>> {
  const s = stored;
  const answers: Record<string, Answer> = {};
  // Sold out, asked first (the warm Worker's isolate remembers it) without credentials and with bad ones.
  answers["sold out: token without a JWT"] = await send(server, "POST", `/api/skus/${s.soldOut}/tokens`);
  answers["sold out: reservation without a JWT"] = await send(server, "POST", `/api/skus/${s.soldOut}/reservations`, {
    body: { token: "x", quantity: 1 },
  });
  answers["sold out: token with a JWT"] = await token(server, s.soldOut, `another-${run}`);
  const [a, b, c, d] = s.cutHolds;
  if (!a || !b || !c || !d) throw new Error("four holds on the left-out shard");
  // Late payments after the downsize: generic (applied, then refund_required by amount) and Stripe.
  answers["late payment, generic, applied"] = await generic(server, `evt-a-${run}`, a.reservationId, 1000);
  answers["late payment, generic, retried"] = await generic(server, `evt-a-${run}`, a.reservationId, 1000);
  answers["late payment, generic, wrong amount"] = await generic(server, `evt-b-${run}`, b.reservationId, 999);
  answers["late payment, stripe, applied"] = await stripePaid(server, `c${run}`, c.reservationId, 1000);
  answers["late payment, stripe, wrong amount"] = await stripePaid(server, `d${run}`, d.reservationId, 1);
  answers["left-out shard: owner reads"] = await send(server, "GET", `/api/reservations/${a.reservationId}`, {
    headers: await jwt(a.user),
  });
  answers["left-out shard: owner's list"] = await send(server, "GET", "/api/me/reservations", {
    headers: await jwt(b.user),
  });
  answers["left-out shard: someone else reads"] = await send(server, "GET", `/api/reservations/${a.reservationId}`, {
    headers: await jwt(`stranger-${run}`),
  });
  answers["left-out shard: cancel a paid one"] = await send(
    server,
    "POST",
    `/api/reservations/${a.reservationId}/cancel`,
    {
      headers: await jwt(a.user),
    },
  );
  answers["a shard the SKU never had"] = await send(
    server,
    "GET",
    `/api/reservations/${a.reservationId.replace(".2.", ".5.")}`,
    { headers: await jwt(a.user) },
  );
  answers["payments owed back"] = await admin(server, "GET", `/admin/payments?outcome=refund_required&limit=1000`);

  // A token minted before the restart.
  answers["token minted before"] = await send(server, "POST", `/api/skus/${s.minted.sku}/reservations`, {
    headers: await jwt(s.minted.user),
    body: { token: s.minted.token, quantity: 1 },
  });

  // The line.
  answers["the line: my place"] = await send(server, "GET", `/api/skus/${s.line}/waitlist`, {
    headers: await jwt(s.waiting),
  });
  answers["the line: the holder's place"] = await send(server, "GET", `/api/skus/${s.line}/waitlist`, {
    headers: await jwt(s.holder),
  });
  answers["the line: public view"] = await send(server, "GET", `/api/skus/${s.line}`);

  // A pending draw.
  answers["pending draw"] = await send(server, "GET", `/api/skus/${s.draw}/draw`);
  answers["pending draw: a token before it opens"] = await token(server, s.draw, `early-bird-${run}`);

  // An archived SKU.
  answers["archived: public view"] = await send(server, "GET", `/api/skus/${s.archived}`);
  answers["archived: token"] = await token(server, s.archived, `buyer-${run}`);
  answers["archived: PUT"] = await admin(server, "PUT", `/admin/skus/${s.archived}`, { totalStock: 5 });
  answers["archived: admin view"] = await admin(server, "GET", `/admin/skus/${s.archived}`);

  // Access codes.
  const [taken, free] = s.codes;
  answers["code taken by another"] = await token(server, s.early, `friend-${run}`, { "access-code": taken ?? "" });
  answers["code taken, its owner again"] = await token(server, s.early, s.member, { "access-code": taken ?? "" });
  answers["code still free"] = await token(server, s.early, `friend-${run}`, { "access-code": free ?? "" });

  answers["unknown SKU"] = await send(server, "GET", `/api/skus/nobody-${run}`);
  return answers;
}

/** What legitimately differs between two runs of the same request: fresh tokens and the moments of now. */
function comparable(answers: Record<string, Answer>): Record<string, Answer> {
  const volatile = new Set([
    "token",
    "expiresAt",
    "receivedAt",
    "requestId",
    "reservationId",
    "self",
    "createdAt",
    "updatedAt",
  ]);
  const strip = (value: unknown, key = ""): unknown => {
    if (volatile.has(key) && (typeof value === "string" || typeof value === "number")) return "<varies>";
    // Seconds from now (a sale opening in 3597 s, then in 3596 s).
    if (key.endsWith("Seconds") && typeof value === "number") return "<seconds>";
    if (key === "message" && typeof value === "string") return value.replace(/\b\d+ s\b/g, "<n> s");
    // Receipts come as the sale log signs checkpoints (within seconds, whatever the isolate), and a
    // proof names the origin it was read at (each Worker here has its port): their presence varies.
    if (key === "receipts" && Array.isArray(value)) return "<receipts>";
    if (Array.isArray(value)) return value.map((v) => strip(v));
    if (value && typeof value === "object") {
      return Object.fromEntries(Object.entries(value).map(([k, v]) => [k, strip(v, k)]));
    }
    return value;
  };
  return Object.fromEntries(Object.entries(answers).map(([k, v]) => [k, strip(v) as Answer]));
}

beforeAll(async () => {
  warm = await startWorker("warm", VARS);
  stored = await build();
}, 180_000);

afterAll(async () => {
  await Promise.all([warm?.stop(), fresh?.stop()]);
});

describe("a restarted Worker answers as a warm one", () => {
  it("gives every scenario's requests the same answers after a restart over the same stored state", async () => {
    // The warm Worker is idle now (its queue drained): its state directory is copied as it stands,
    // asked, and then a fresh Worker over the copy is asked the same.
    const snapshot = mkdtempSync(join(tmpdir(), "flashgate-restart-"));
    cpSync(warm.stateDir, snapshot, { recursive: true });
    const before = await ask(warm);
    fresh = await startWorker("fresh", VARS, { copyOf: snapshot });
    rmSync(snapshot, { recursive: true, force: true });
    const after = await ask(fresh);
    expect(comparable(after)).toEqual(comparable(before));
    // And the answers are the ones the contract gives, not the same mistake twice.
    expect(before["late payment, generic, applied"]).toMatchObject({ status: 200, body: { outcome: "applied" } });
    expect(before["late payment, generic, wrong amount"]).toMatchObject({
      status: 200,
      body: { outcome: "refund_required" },
    });
    expect(before["late payment, stripe, applied"]).toMatchObject({ status: 200, body: { outcome: "applied" } });
    expect(before["late payment, stripe, wrong amount"]).toMatchObject({
      status: 200,
      body: { outcome: "refund_required" },
    });
    expect(before["left-out shard: owner reads"]?.status).toBe(200);
    expect(before["a shard the SKU never had"]?.status).toBe(404);
    expect(before["token minted before"]?.status).toBe(202);
    expect(before["the line: my place"]).toMatchObject({ status: 200, body: { position: 1 } });
    expect(before["pending draw: a token before it opens"]?.status).toBe(403);
    expect(before["archived: PUT"]?.status).toBe(409);
    expect(before["code taken by another"]?.status).toBe(403);
    expect(before["code still free"]?.status).toBe(201);
    expect(before["sold out: token without a JWT"]?.status).toBe(409);
    expect(before["unknown SKU"]?.status).toBe(404);
  }, 180_000);
});
