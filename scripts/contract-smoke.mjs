#!/usr/bin/env node
// Contract smoke test for docs/API.md: run it against a running Flashgate (npm run dev) with
//   npm run smoke [-- http://127.0.0.1:8787]
// A copy of the team's contract-smoke.mjs (beside API.md in the shared docs), kept in the repo so
// that test/dev-server.e2e.test.ts runs in any clone. It shares no code with the Worker on purpose:
// it checks the contract from the outside, as any client would.
// It uses the local default secrets of API.md, creates SKUs named smoke-*, and exits non-zero
// on the first answer that breaks the contract. Node built-ins only.
import { createHmac, randomUUID } from "node:crypto";

const BASE = process.argv[2] || process.env.FLASHGATE_URL || "http://127.0.0.1:8787";
const AUTH_SECRET = process.env.AUTH_SECRET || "dev-auth-secret";
const ADMIN_TOKEN = process.env.ADMIN_TOKEN || "dev-admin-token";
const run = randomUUID().slice(0, 8);
let passed = 0;

const b64u = (s) => Buffer.from(s).toString("base64url");
function jwt(sub) {
  const now = Math.floor(Date.now() / 1000);
  const h = b64u(JSON.stringify({ alg: "HS256", typ: "JWT" }));
  const p = b64u(JSON.stringify({ sub, iat: now, exp: now + 600 }));
  return `${h}.${p}.${createHmac("sha256", AUTH_SECRET).update(`${h}.${p}`).digest("base64url")}`;
}
async function call(method, path, { user, admin, body, raw } = {}) {
  const headers = {};
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
function expect(what, cond, r) {
  if (!cond) {
    console.error(`✗ ${what}\n  got ${r?.status} ${r?.text?.slice(0, 300)}`);
    process.exit(1);
  }
  passed++;
  console.log(`✓ ${what}`);
}
const errorIs = (r, status, code) =>
  r.status === status && r.json?.error?.code === code && typeof r.json.error.message === "string";

const sku = `smoke-${run}`;
const health = await call("GET", "/healthz");
expect("GET /healthz is 200 {ok:true}", health.status === 200 && health.json?.ok === true, health);

let r = await call("PUT", `/admin/skus/${sku}`, {
  admin: true,
  body: { name: "Smoke", totalStock: 3, perUserLimit: 2, holdSeconds: 600 },
});
expect(
  "PUT /admin/skus creates a SKU",
  r.status === 200 && r.json?.stock?.total === 3 && r.json.stock.available === 3,
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

r = await call("POST", `/api/skus/${sku}/tokens`, { user: "ann" });
expect(
  "POST tokens gives 201 {token, expiresAt}",
  r.status === 201 && typeof r.json?.token === "string" && typeof r.json.expiresAt === "string",
  r,
);
const annToken = r.json.token;

r = await call("POST", `/api/skus/${sku}/reservations`, { user: "ann", body: { token: annToken, quantity: 2 } });
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

r = await call("POST", `/api/skus/${sku}/tokens`, { user: "ann" });
const annToken2 = r.json?.token;
r = await call("POST", `/api/skus/${sku}/reservations`, { user: "ann", body: { token: annToken2, quantity: 1 } });
expect("per-user limit gives 409 LIMIT_EXCEEDED", errorIs(r, 409, "LIMIT_EXCEEDED"), r);

r = await call("POST", `/api/skus/${sku}/tokens`, { user: "ben" });
const benToken = r.json?.token;
r = await call("POST", `/api/skus/${sku}/reservations`, { user: "ben", body: { token: benToken, quantity: 2 } });
expect("asking more than available gives 409 INSUFFICIENT_STOCK", errorIs(r, 409, "INSUFFICIENT_STOCK"), r);
r = await call("POST", `/api/skus/${sku}/reservations`, { user: "cat", body: { token: benToken, quantity: 1 } });
expect("another user's token gives 401 TOKEN_INVALID", errorIs(r, 401, "TOKEN_INVALID"), r);
r = await call("POST", `/api/skus/${sku}/reservations`, { user: "ben", body: { token: benToken, quantity: 1 } });
expect("the last unit is held", r.status === 202, r);

r = await call("POST", `/api/skus/${sku}/tokens`, { user: "dan" });
expect("tokens for a sold-out SKU give 409 SOLD_OUT", errorIs(r, 409, "SOLD_OUT"), r);

r = await call("GET", `/api/reservations/${resId}`, { user: "ann" });
expect(
  "the owner reads the reservation",
  r.status === 200 && r.json?.reservationId === resId && r.json.status === "held",
  r,
);
r = await call("GET", `/api/reservations/${resId}`, { user: "eve" });
expect("another user gets 404 RESERVATION_NOT_FOUND", errorIs(r, 404, "RESERVATION_NOT_FOUND"), r);

r = await call("POST", `/api/reservations/${resId}/cancel`, { user: "ann" });
expect("cancel releases the hold", r.status === 200 && r.json?.status === "cancelled", r);
r = await call("GET", `/admin/skus/${sku}`, { admin: true });
expect(
  "admin view adds up after cancel",
  r.status === 200 && r.json?.stock?.available === 2 && r.json.stock.held === 1 && r.json.stock.sold === 0,
  r,
);

r = await call("POST", `/api/skus/${sku}/reservations`, { user: "ann", raw: "{not json" });
expect("malformed JSON gives 400 INVALID_REQUEST", errorIs(r, 400, "INVALID_REQUEST"), r);
r = await call("POST", `/api/skus/${sku}/reservations`, { user: "ann", body: { token: "x", quantity: 0 } });
expect("quantity 0 gives 400 INVALID_REQUEST", errorIs(r, 400, "INVALID_REQUEST"), r);
r = await call("POST", `/api/skus/${sku}/tokens`);
expect("no JWT gives 401 UNAUTHENTICATED", errorIs(r, 401, "UNAUTHENTICATED"), r);
r = await call("GET", "/no/such/route");
expect("unknown route gives 404 NOT_FOUND", errorIs(r, 404, "NOT_FOUND"), r);

console.log(`\n${passed} passed, 0 failed`);
