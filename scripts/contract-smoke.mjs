#!/usr/bin/env node
// Contract smoke test for docs/API.md, against a running Flashgate: `npm run dev` or a deployment
// (docs/DEPLOY.md, step 9). `npm run smoke -- --help` for its arguments.
// Grown from the team's contract-smoke.mjs (beside API.md in the shared docs), kept in the repo so
// that test/dev-server.e2e.test.ts runs in any clone. It shares no code with the Worker on purpose:
// it checks the contract from the outside, as any client would. Node built-ins only.
// It creates one SKU, smoke-<hex>, a test sale (API.md v1.4 "Test sales": its orders, events and
// payments say `test: true`, so the shop's systems skip them), solves the proof of work when the
// gateway asks for one, and in the end (also after a failure) cancels its holds and archives the SKU
// (DELETE /admin/skus/:sku).
import { createHash, createHmac, randomUUID } from "node:crypto";
import { parseArgs } from "node:util";

const HELP = `Usage: npm run smoke -- [URL] [options]

Runs the API contract against a running Flashgate, then cancels its holds and archives the SKU it
created: a test sale ("test": true), whose orders and payments the shop's systems can skip. Exits 1 on the first answer that breaks the contract (after cleaning up), 2 on bad arguments.

  URL                      the gateway (env FLASHGATE_URL; default http://127.0.0.1:8787)
  --admin-token TOKEN      the deployment's ADMIN_TOKEN (env ADMIN_TOKEN)
  --auth-secret SECRET     the deployment's AUTH_SECRET, to sign shopper JWTs for several test
                           users (env AUTH_SECRET): every check runs
  --jwt JWT                one shopper's JWT, e.g. from your identity provider (env SMOKE_JWT):
                           the checks that need a second shopper are skipped, and said so
  --turnstile-response R   sent as CF-Turnstile-Response when the gateway asks for Turnstile (only a
                           deployment with Cloudflare's test secret key accepts a made-up answer);
                           without it the purchase checks are skipped, and said so
  -h, --help               this text

Against 127.0.0.1 or localhost the local secrets of .dev.vars.example are the defaults; any other
URL needs --admin-token and one of --auth-secret or --jwt.`;

let options;
try {
  options = parseArgs({
    allowPositionals: true,
    options: {
      "admin-token": { type: "string" },
      "auth-secret": { type: "string" },
      jwt: { type: "string" },
      "turnstile-response": { type: "string" },
      help: { type: "boolean", short: "h" },
    },
  });
} catch (error) {
  console.error(`${error.message}\n\n${HELP}`);
  process.exit(2);
}
if (options.values.help) {
  console.log(HELP);
  process.exit(0);
}
// An empty variable counts as unset (as `ADMIN_TOKEN= npm run smoke` means).
const env = (name) => process.env[name] || undefined;
const BASE = (options.positionals[0] || env("FLASHGATE_URL") || "http://127.0.0.1:8787").replace(/\/+$/, "");
const local = ["127.0.0.1", "localhost", "[::1]"].includes(new URL(BASE).hostname);
const ADMIN_TOKEN = options.values["admin-token"] ?? env("ADMIN_TOKEN") ?? (local ? "dev-admin-token" : undefined);
const ONE_JWT = options.values.jwt ?? env("SMOKE_JWT");
const AUTH_SECRET =
  options.values["auth-secret"] ?? env("AUTH_SECRET") ?? (local && !ONE_JWT ? "dev-auth-secret" : undefined);
const TURNSTILE = options.values["turnstile-response"] ?? env("SMOKE_TURNSTILE_RESPONSE");
if (!ADMIN_TOKEN || (!AUTH_SECRET && !ONE_JWT)) {
  console.error(`${BASE} is not local: give --admin-token and --auth-secret or --jwt.\n\n${HELP}`);
  process.exit(2);
}

const run = randomUUID().slice(0, 8);
let passed = 0;
let skipped = 0;

const b64u = (s) => Buffer.from(s).toString("base64url");
/** Test users: with AUTH_SECRET, signed JWTs of smoke users; with one JWT, that shopper only. */
const canSign = AUTH_SECRET !== undefined;
function jwt(user) {
  if (!canSign) return ONE_JWT;
  const now = Math.floor(Date.now() / 1000);
  const h = b64u(JSON.stringify({ alg: "HS256", typ: "JWT" }));
  const p = b64u(JSON.stringify({ sub: `smoke-${user}`, iat: now, exp: now + 600 }));
  return `${h}.${p}.${createHmac("sha256", AUTH_SECRET).update(`${h}.${p}`).digest("base64url")}`;
}
async function call(method, path, { user, admin, body, raw, headers: extra } = {}) {
  const headers = { ...extra };
  if (user) headers.authorization = `Bearer ${jwt(user)}`;
  if (admin) headers.authorization = `Bearer ${ADMIN_TOKEN}`;
  if (body !== undefined || raw !== undefined) headers["content-type"] = "application/json";
  const r = await fetch(BASE + path, {
    method,
    headers,
    body: raw ?? (body === undefined ? undefined : JSON.stringify(body)),
  });
  const text = await r.text();
  let json = null;
  try {
    json = JSON.parse(text);
  } catch {}
  return { status: r.status, json, text, headers: r.headers };
}
class Broken extends Error {}
function expect(what, cond, r) {
  if (!cond) throw new Broken(`✗ ${what}\n  got ${r?.status} ${r?.text?.slice(0, 300)}`);
  passed++;
  console.log(`✓ ${what}`);
}
function skip(what, why) {
  skipped++;
  console.log(`- skipped: ${what} (${why})`);
}
const errorIs = (r, status, code) =>
  r.status === status && r.json?.error?.code === code && typeof r.json.error.message === "string";

/** Leading zero bits of a digest. */
function zeroBits(digest) {
  let bits = 0;
  for (const byte of digest) {
    if (byte === 0) {
      bits += 8;
      continue;
    }
    return bits + Math.clz32(byte) - 24;
  }
  return bits;
}
/** A nonce such that SHA-256("<challenge>:<nonce>") has `bits` leading zero bits (API.md "Bots"). */
function solve(challenge, bits) {
  for (let n = 0; ; n++) {
    const nonce = n.toString(36);
    if (zeroBits(createHash("sha256").update(`${challenge}:${nonce}`).digest()) >= bits) return nonce;
  }
}

/** Solved proofs by user and SKU: one is valid for its user and SKU until it expires (10 minutes). */
const proofs = new Map();
let challenges = null; // what the gateway asked for, once known: { pow: bits | 0, turnstile: boolean }

/**
 * POST tokens as a shopper would: on 403 CHALLENGE_REQUIRED, a proof of work if the gateway offers
 * one (GET challenge), and the Turnstile answer if one was given; still refused means Turnstile.
 */
async function purchaseToken(sku, user) {
  const headers = {};
  if (proofs.has(`${user}/${sku}`)) headers["proof-of-work"] = proofs.get(`${user}/${sku}`);
  if (TURNSTILE && challenges?.turnstile) headers["cf-turnstile-response"] = TURNSTILE;
  let r = await call("POST", `/api/skus/${sku}/tokens`, { user, headers });
  if (!errorIs(r, 403, "CHALLENGE_REQUIRED")) return r;
  challenges ??= { pow: 0, turnstile: false };
  if (!headers["proof-of-work"]) {
    const c = await call("GET", `/api/skus/${sku}/challenge`, { user });
    if (c.status === 200) {
      const started = Date.now();
      headers["proof-of-work"] = `${c.json.challenge}:${solve(c.json.challenge, c.json.bits)}`;
      proofs.set(`${user}/${sku}`, headers["proof-of-work"]);
      if (challenges.pow === 0) {
        console.log(`  (proof of work on: ${c.json.bits} bits, solved in ${Date.now() - started} ms)`);
      }
      challenges.pow = c.json.bits;
      r = await call("POST", `/api/skus/${sku}/tokens`, { user, headers });
      if (!errorIs(r, 403, "CHALLENGE_REQUIRED")) return r;
    }
  }
  if (!challenges.turnstile) console.log("  (Turnstile is on: this script cannot solve it)");
  challenges.turnstile = true;
  if (!TURNSTILE || headers["cf-turnstile-response"]) return r;
  headers["cf-turnstile-response"] = TURNSTILE;
  return call("POST", `/api/skus/${sku}/tokens`, { user, headers });
}

const sku = `smoke-${run}`;
let created = false;
/** Reservations this run made and may still hold: [id, user]. */
const holds = new Map();

async function contract() {
  const health = await call("GET", "/healthz");
  expect("GET /healthz is 200 {ok:true}", health.status === 200 && health.json?.ok === true, health);

  let r = await call("PUT", `/admin/skus/${sku}`, {
    admin: true,
    body: { name: "Smoke", totalStock: 3, perUserLimit: 2, holdSeconds: 600, test: true },
  });
  created = r.status === 200;
  expect(
    `PUT /admin/skus/${sku} creates the SKU, a test sale`,
    r.status === 200 && r.json?.stock?.total === 3 && r.json.stock.available === 3 && r.json.test === true,
    r,
  );
  r = await call("PUT", `/admin/skus/${sku}`, { body: { totalStock: 3 } });
  expect("admin routes refuse a missing token", errorIs(r, 401, "UNAUTHENTICATED"), r);

  r = await call("GET", `/api/skus/${sku}`);
  expect(
    "GET /api/skus/:sku is public",
    r.status === 200 && r.json?.sku === sku && typeof r.json.available === "number",
    r,
  );
  r = await call("POST", `/api/skus/${sku}/tokens`);
  expect("no JWT gives 401 UNAUTHENTICATED", errorIs(r, 401, "UNAUTHENTICATED"), r);

  r = await purchaseToken(sku, "ann");
  if (errorIs(r, 403, "CHALLENGE_REQUIRED") && challenges?.turnstile && !TURNSTILE) {
    skip("the purchase checks (tokens, reservations, cancel)", "Turnstile is on: give --turnstile-response");
    return;
  }
  expect(
    "POST tokens gives 201 {token, expiresAt}",
    r.status === 201 && typeof r.json?.token === "string" && typeof r.json.expiresAt === "string",
    r,
  );
  const annToken = r.json.token;

  r = await call("POST", `/api/skus/${sku}/reservations`, { user: "ann", body: { token: annToken, quantity: 2 } });
  if (typeof r.json?.reservationId === "string") holds.set(r.json.reservationId, "ann");
  expect(
    "reservation is 202 held",
    r.status === 202 && r.json?.status === "held" && r.json.quantity === 2 && typeof r.json.reservationId === "string",
    r,
  );
  const resId = r.json.reservationId;

  r = await call("POST", `/api/skus/${sku}/reservations`, { user: "ann", body: { token: annToken, quantity: 2 } });
  expect(
    "token replay returns the same reservation",
    r.status === 202 && r.json?.reservationId === resId && r.headers.get("idempotent-replayed") === "true",
    r,
  );

  r = await call("POST", `/api/skus/${sku}/reservations`, { user: "ann", body: { token: annToken, quantity: 1 } });
  expect("token replay with another quantity is 422", errorIs(r, 422, "IDEMPOTENCY_MISMATCH"), r);

  r = await purchaseToken(sku, "ann");
  const annToken2 = r.json?.token;
  r = await call("POST", `/api/skus/${sku}/reservations`, { user: "ann", body: { token: annToken2, quantity: 1 } });
  expect("per-user limit gives 409 LIMIT_EXCEEDED", errorIs(r, 409, "LIMIT_EXCEEDED"), r);

  if (canSign) {
    r = await purchaseToken(sku, "ben");
    const benToken = r.json?.token;
    r = await call("POST", `/api/skus/${sku}/reservations`, { user: "ben", body: { token: benToken, quantity: 2 } });
    expect("asking more than available gives 409 INSUFFICIENT_STOCK", errorIs(r, 409, "INSUFFICIENT_STOCK"), r);
    r = await call("POST", `/api/skus/${sku}/reservations`, { user: "cat", body: { token: benToken, quantity: 1 } });
    expect("another user's token gives 401 TOKEN_INVALID", errorIs(r, 401, "TOKEN_INVALID"), r);
    r = await call("POST", `/api/skus/${sku}/reservations`, { user: "ben", body: { token: benToken, quantity: 1 } });
    if (typeof r.json?.reservationId === "string") holds.set(r.json.reservationId, "ben");
    expect("the last unit is held", r.status === 202, r);

    r = await call("POST", `/api/skus/${sku}/tokens`, { user: "dan" });
    expect("tokens for a sold-out SKU give 409 SOLD_OUT", errorIs(r, 409, "SOLD_OUT"), r);
  } else {
    skip("INSUFFICIENT_STOCK, TOKEN_INVALID and SOLD_OUT", "they need a second shopper: give --auth-secret");
  }

  r = await call("GET", `/api/reservations/${resId}`, { user: "ann" });
  expect(
    "the owner reads the reservation",
    r.status === 200 && r.json?.reservationId === resId && r.json.status === "held",
    r,
  );
  // The order row reaches D1 through the order-events queue and its consumer: on a deployment, the
  // check that the queues exist and are bound. A poll with a deadline, as a client waits for it.
  const deadline = Date.now() + 60_000;
  for (;;) {
    r = await call("GET", `/api/reservations/${resId}`, { user: "ann" });
    if (r.json?.order?.persisted === true || r.status !== 200 || Date.now() > deadline) break;
    await new Promise((resolve) => setTimeout(resolve, 250));
  }
  expect("the order row reaches D1 through the queue (order.persisted)", r.json?.order?.persisted === true, r);
  r = await call("GET", `/admin/orders/${resId}`, { admin: true });
  expect("the order says it is a test order (test: true)", r.status === 200 && r.json?.test === true, r);
  if (canSign) {
    r = await call("GET", `/api/reservations/${resId}`, { user: "eve" });
    expect("another user gets 404 RESERVATION_NOT_FOUND", errorIs(r, 404, "RESERVATION_NOT_FOUND"), r);
  } else {
    skip("another user gets 404 RESERVATION_NOT_FOUND", "it needs a second shopper: give --auth-secret");
  }

  r = await call("POST", `/api/reservations/${resId}/cancel`, { user: "ann" });
  if (r.status === 200) holds.delete(resId);
  expect("cancel releases the hold", r.status === 200 && r.json?.status === "cancelled", r);
  const held = canSign ? 1 : 0;
  r = await call("GET", `/admin/skus/${sku}`, { admin: true });
  expect(
    "admin view adds up after cancel",
    r.status === 200 && r.json?.stock?.available === 3 - held && r.json.stock.held === held && r.json.stock.sold === 0,
    r,
  );

  r = await call("POST", `/api/skus/${sku}/reservations`, { user: "ann", raw: "{not json" });
  expect("malformed JSON gives 400 INVALID_REQUEST", errorIs(r, 400, "INVALID_REQUEST"), r);
  r = await call("POST", `/api/skus/${sku}/reservations`, { user: "ann", body: { token: "x", quantity: 0 } });
  expect("quantity 0 gives 400 INVALID_REQUEST", errorIs(r, 400, "INVALID_REQUEST"), r);
  r = await call("GET", "/no/such/route");
  expect("unknown route gives 404 NOT_FOUND", errorIs(r, 404, "NOT_FOUND"), r);
}

/** Leaves nothing behind: no unit held, the SKU archived (out of GET /admin/skus). */
async function cleanUp() {
  for (const [id, user] of holds) {
    const r = await call("POST", `/api/reservations/${id}/cancel`, { user });
    expect(`cleanup: hold ${id} cancelled`, r.status === 200 && r.json?.status === "cancelled", r);
  }
  if (!created) return;
  const r = await call("DELETE", `/admin/skus/${sku}`, { admin: true });
  expect(
    `cleanup: ${sku} archived (DELETE /admin/skus/:sku)`,
    r.status === 200 && r.json?.status === "archived" && r.json.stock?.held === 0,
    r,
  );
}

const report = (error) => console.error(error instanceof Broken ? error.message : error);
let failed = false;
try {
  await contract();
} catch (error) {
  failed = true;
  report(error);
} finally {
  try {
    await cleanUp();
  } catch (error) {
    failed = true;
    report(error);
  }
}
const tail = skipped ? `, ${skipped} skipped` : "";
if (failed) {
  console.error(`\n${passed} passed, 1 failed${tail}: cleaned up what could be (lines "cleanup:" above)`);
  process.exit(1);
}
console.log(`\n${passed} passed, 0 failed${tail}`);
