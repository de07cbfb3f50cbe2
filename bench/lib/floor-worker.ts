import { SECRETS } from "../../tools/dev-vars";
import { type BareWorker, startScriptWorker } from "./bare-worker";

/**
 * The floor of a sold-out answer: a Worker, in its own workerd, that does only the work the contract
 * and the design require before a reservation may be answered `409 SOLD_OUT` from the isolate, written
 * by hand with no framework, no logging and no metrics:
 *   HS256 JWT (WebCrypto verify, `exp`, `sub`) → the rate-limit binding → the body (JSON, token,
 *   quantity) → the purchase token (WebCrypto HMAC verify, user, SKU, expiry) → the 409 body.
 * It checks less than Flashgate does (no `iat`, `nbf`, issuer or audience, no JWKS, no request id) and
 * answers every well-formed request SOLD_OUT, so it is a lower bound: Flashgate's sold-out storm
 * divided by it is what the gateway's own structure costs beyond that work.
 */
const SCRIPT = `
const enc = new TextEncoder();
const dec = new TextDecoder();
const hmac = (secret) => crypto.subtle.importKey("raw", enc.encode(secret), { name: "HMAC", hash: "SHA-256" }, false, ["verify"]);
let keys;
function b64url(text) {
  const bin = atob(text.replaceAll("-", "+").replaceAll("_", "/"));
  const out = new Uint8Array(bin.length);
  for (let i = 0; i < bin.length; i++) out[i] = bin.charCodeAt(i);
  return out;
}
const error = (status, code) => new Response(JSON.stringify({ error: { code, message: code } }), { status, headers: { "content-type": "application/json" } });
export default {
  async fetch(request, env) {
    keys ??= { auth: hmac(env.AUTH_SECRET), token: hmac(env.TOKEN_SECRET) };
    const jwt = (request.headers.get("authorization") ?? "").slice(7).split(".");
    if (jwt.length !== 3) return error(401, "UNAUTHENTICATED");
    const signed = await crypto.subtle.verify("HMAC", await keys.auth, b64url(jwt[2]), enc.encode(jwt[0] + "." + jwt[1]));
    const claims = signed ? JSON.parse(dec.decode(b64url(jwt[1]))) : null;
    if (!claims || typeof claims.sub !== "string" || !(claims.exp > Date.now() / 1000)) return error(401, "UNAUTHENTICATED");
    const { success } = await env.LIMITER.limit({ key: claims.sub });
    if (!success) return error(429, "RATE_LIMITED");
    const body = JSON.parse(await request.text());
    if (typeof body.token !== "string" || !Number.isInteger(body.quantity)) return error(400, "INVALID_REQUEST");
    const [payload, signature] = body.token.split(".");
    const genuine = await crypto.subtle.verify("HMAC", await keys.token, b64url(signature), enc.encode(payload));
    const wire = genuine ? JSON.parse(dec.decode(b64url(payload))) : null;
    const sku = new URL(request.url).pathname.split("/")[3];
    if (!wire || wire.u !== claims.sub || wire.s !== sku) return error(401, "TOKEN_INVALID");
    if (wire.e <= Date.now()) return error(401, "TOKEN_EXPIRED");
    return error(409, "SOLD_OUT");
  },
};`;

export function startFloorWorker(): Promise<BareWorker> {
  return startScriptWorker("floor", SCRIPT, {
    bindings: { AUTH_SECRET: SECRETS.AUTH_SECRET, TOKEN_SECRET: SECRETS.TOKEN_SECRET },
    // wrangler.toml's shopper limit, so the binding does the same work as Flashgate's.
    ratelimits: { LIMITER: { simple: { limit: 20, period: 10 } } },
  });
}
