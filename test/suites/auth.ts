import { createExecutionContext, waitOnExecutionContext } from "cloudflare:test";
import { env } from "cloudflare:workers";
import { exportJWK, generateKeyPair, type JWK, type JWTPayload, SignJWT } from "jose";
import { afterEach, beforeAll, describe, expect, it, vi } from "vitest";
import { JWKS_FETCH_TIMEOUT_MS, JWKS_REFETCH_FLOOR_MS } from "../../src/http/jwks";
import worker from "../../src/index";
import { call } from "../support/client";
// The bot challenges before a token share this file's workerd (one start-up, issue #56). This file's
// afterEach (mocks restored, real timers) runs after theirs too, which changes nothing for them.
import "./challenges";

/**
 * Shopper JWTs from an identity provider: keys made with jose, the JWKS served by a stand-in for
 * the IdP (the isolate's outbound `fetch`, counted), the Worker called with its real bindings plus
 * the AUTH_* settings under test.
 */

type KeyPair = Awaited<ReturnType<typeof generateKeyPair>>;
let rsa: KeyPair;
let rsaNext: KeyPair;
let ec: KeyPair;
let stranger: KeyPair;

beforeAll(async () => {
  [rsa, rsaNext, ec, stranger] = await Promise.all([
    generateKeyPair("RS256", { extractable: true }),
    generateKeyPair("RS256", { extractable: true }),
    generateKeyPair("ES256", { extractable: true }),
    generateKeyPair("RS256", { extractable: true }),
  ]);
});

afterEach(() => {
  vi.restoreAllMocks();
  vi.useRealTimers();
});

const publicJwk = async (pair: KeyPair, kid: string | undefined, alg: string): Promise<JWK> => ({
  ...(await exportJWK(pair.publicKey)),
  ...(kid === undefined ? {} : { kid }),
  alg,
  use: "sig",
});

interface TokenOptions {
  alg?: string;
  kid?: string;
  claims?: JWTPayload;
  /** Seconds from now. */
  exp?: number;
}

let shoppers = 0;
async function idpToken(key: CryptoKey | Uint8Array, opts: TokenOptions = {}): Promise<string> {
  const now = Math.floor(Date.now() / 1000);
  // A shopper per token: the per-shopper rate limit (20 per 10 s) is not what these tests are about.
  return new SignJWT({ sub: `shopper-${++shoppers}`, iat: now, exp: now + (opts.exp ?? 600), ...opts.claims })
    .setProtectedHeader({ alg: opts.alg ?? "RS256", typ: "JWT", ...(opts.kid === undefined ? {} : { kid: opts.kid }) })
    .sign(key);
}

let urls = 0;
/** A JWKS URL no other test uses (the Cache API and the isolate's verifier outlive a test). */
const jwksUrl = () => `https://idp-${++urls}.example/.well-known/jwks.json`;

/** Stands in for the IdP: serves `keys()` at `url` (or a 503 while `keys` gives null) and counts the fetches. */
function serveJwks(url: string, keys: () => JWK[] | null): { fetches: () => number } {
  let count = 0;
  const real = globalThis.fetch;
  vi.spyOn(globalThis, "fetch").mockImplementation(async (input, init) => {
    const target = input instanceof Request ? input.url : String(input);
    if (target !== url) return real(input, init);
    count++;
    const served = keys();
    return served ? Response.json({ keys: served }) : new Response("down", { status: 503 });
  });
  return { fetches: () => count };
}

/** `GET /api/me/reservations` (shopper auth and nothing else) under these settings: its answer. */
async function answerOf(
  token: string,
  settings: Record<string, string>,
): Promise<{ status: number; code?: string; message?: string }> {
  const ctx = createExecutionContext();
  const request = new Request("http://flashgate.test/api/me/reservations", {
    headers: { authorization: `Bearer ${token}` },
  });
  const response = await worker.fetch(request, { ...env, ...settings }, ctx);
  await waitOnExecutionContext(ctx);
  const json = (await response.json()) as { error?: { code: string; message: string } };
  return { status: response.status, ...(json.error ? { code: json.error.code, message: json.error.message } : {}) };
}

/** `GET /api/me/reservations` (shopper auth and nothing else) under these settings: its status and code. */
async function asShopper(token: string, settings: Record<string, string>): Promise<{ status: number; code?: string }> {
  const { message: _message, ...answer } = await answerOf(token, settings);
  return answer;
}

const OK = { status: 200 };
const REFUSED = { status: 401, code: "UNAUTHENTICATED" };

describe("shopper JWTs from an identity provider", () => {
  it("accepts RS256 tokens by a key of AUTH_JWKS_URL, fetching the set once per isolate", async () => {
    const url = jwksUrl();
    // The set also holds a symmetric key, which must be skipped: only public RS256/ES256 keys count.
    const keys: JWK[] = [{ kty: "oct", k: "c2VjcmV0", kid: "sym" }, await publicJwk(rsa, "k1", "RS256")];
    const served = serveJwks(url, () => keys);

    const settings = { AUTH_JWKS_URL: url };
    for (let i = 0; i < 5; i++)
      expect(await asShopper(await idpToken(rsa.privateKey, { kid: "k1" }), settings)).toEqual(OK);
    expect(served.fetches()).toBe(1);
    // HS256 with AUTH_SECRET keeps working beside the JWKS.
    const hs = await idpToken(new TextEncoder().encode("test-auth-secret"), { alg: "HS256" });
    expect(await asShopper(hs, settings)).toEqual(OK);
    // The oct key of the set is no HS256 key: a token signed with it is refused.
    const oct = await idpToken(new TextEncoder().encode("secret"), { alg: "HS256", kid: "sym" });
    expect(await asShopper(oct, settings)).toEqual(REFUSED);
  });

  it("accepts ES256 tokens by a key of an inline AUTH_JWKS, with or without `kid`", async () => {
    const settings = { AUTH_JWKS: JSON.stringify({ keys: [await publicJwk(ec, "e1", "ES256")] }) };
    expect(await asShopper(await idpToken(ec.privateKey, { alg: "ES256", kid: "e1" }), settings)).toEqual(OK);
    expect(await asShopper(await idpToken(ec.privateKey, { alg: "ES256" }), settings)).toEqual(OK);
    expect(await asShopper(await idpToken(ec.privateKey, { alg: "ES256", kid: "e2" }), settings)).toEqual(REFUSED);
  });

  it("refetches the set for an unknown `kid` (key rotation), at most once per floor however many arrive", async () => {
    vi.useFakeTimers({ toFake: ["Date"], now: Date.now() });
    const url = jwksUrl();
    const keys = [await publicJwk(rsa, "k1", "RS256")];
    const idp = serveJwks(url, () => keys);
    const settings = { AUTH_JWKS_URL: url };
    expect(await asShopper(await idpToken(rsa.privateKey, { kid: "k1" }), settings)).toEqual(OK);
    expect(idp.fetches()).toBe(1);

    // A flood of unknown kids (forged, or the IdP rotated a moment ago): refused, the IdP left alone.
    for (let i = 0; i < 20; i++) {
      const forged = await idpToken(stranger.privateKey, { kid: `forged-${i}` });
      expect(await asShopper(forged, settings)).toEqual(REFUSED);
    }
    expect(idp.fetches()).toBe(1);

    // The IdP rotates to k2; once the floor has passed, the first k2 token brings the new set in.
    keys.push(await publicJwk(rsaNext, "k2", "RS256"));
    vi.setSystemTime(Date.now() + JWKS_REFETCH_FLOOR_MS + 1000);
    expect(await asShopper(await idpToken(rsaNext.privateKey, { kid: "k2" }), settings)).toEqual(OK);
    expect(await asShopper(await idpToken(rsa.privateKey, { kid: "k1" }), settings)).toEqual(OK);
    expect(idp.fetches()).toBe(2);
  });

  it("fetches the set once for a burst of requests reaching a cold isolate together", async () => {
    const url = jwksUrl();
    const keys = [await publicJwk(rsa, "k1", "RS256")];
    let fetches = 0;
    const real = globalThis.fetch;
    vi.spyOn(globalThis, "fetch").mockImplementation(async (input, init) => {
      if ((input instanceof Request ? input.url : String(input)) !== url) return real(input, init);
      fetches++;
      await new Promise((resolve) => setTimeout(resolve, 100)); // a slow IdP
      return Response.json({ keys });
    });
    const token = await idpToken(rsa.privateKey, { kid: "k1" });
    const answers = await Promise.all(Array.from({ length: 20 }, () => asShopper(token, { AUTH_JWKS_URL: url })));
    expect(answers).toEqual(Array(20).fill(OK));
    expect(fetches).toBe(1);
  });

  it("lets a new isolate take the set from the Cache API instead of the IdP", async () => {
    const url = jwksUrl();
    const keys = [await publicJwk(rsa, "k1", "RS256")];
    const idp = serveJwks(url, () => keys);
    const token = await idpToken(rsa.privateKey, { kid: "k1" });
    expect(await asShopper(token, { AUTH_JWKS_URL: url })).toEqual(OK);
    expect(idp.fetches()).toBe(1);
    // Another configuration with the same URL builds a fresh key set, as a new isolate would.
    expect(await asShopper(token, { AUTH_JWKS_URL: url, AUTH_CLOCK_SKEW_SECONDS: "31" })).toEqual(OK);
    expect(idp.fetches()).toBe(1);
  });

  it("refuses tokens while the IdP is down, asking it again only after a pause, and recovers", async () => {
    vi.useFakeTimers({ toFake: ["Date"], now: Date.now() });
    const url = jwksUrl();
    let up = false;
    const keys = [await publicJwk(rsa, "k1", "RS256")];
    const idp = serveJwks(url, () => (up ? keys : null));
    const settings = { AUTH_JWKS_URL: url };
    const token = await idpToken(rsa.privateKey, { kid: "k1" });
    for (let i = 0; i < 10; i++) expect(await asShopper(token, settings)).toEqual(REFUSED);
    expect(idp.fetches()).toBe(1);
    // HS256 with AUTH_SECRET is not held up by the IdP.
    const hs = await idpToken(new TextEncoder().encode("test-auth-secret"), { alg: "HS256" });
    expect(await asShopper(hs, settings)).toEqual(OK);

    up = true;
    vi.setSystemTime(Date.now() + JWKS_FETCH_TIMEOUT_MS + 1000);
    expect(await asShopper(token, settings)).toEqual(OK);
    expect(idp.fetches()).toBe(2);
  });

  it("answers 500 when no way to verify shopper JWTs is configured, and 401 to IdP tokens when AUTH_JWKS is unusable", async () => {
    const hs = await idpToken(new TextEncoder().encode("test-auth-secret"), { alg: "HS256" });
    // The operator learns what to set (the settings' names, never a value); /openapi.json lists it.
    const nothing = await answerOf(hs, { AUTH_SECRET: "", AUTH_JWKS: " " });
    expect(nothing).toEqual({
      status: 500,
      code: "INTERNAL",
      message: expect.stringContaining("set AUTH_SECRET, AUTH_JWKS_URL or AUTH_JWKS"),
    });
    const skew = await answerOf(hs, { AUTH_CLOCK_SKEW_SECONDS: "half a minute" });
    expect(skew).toMatchObject({ status: 500, message: expect.stringContaining("AUTH_CLOCK_SKEW_SECONDS must be") });
    expect(skew.message).not.toContain("half a minute");
    const listed = (await call("GET", "/openapi.json")).json.paths["/api/me/reservations"].get.responses["500"];
    expect(JSON.stringify(listed ?? {})).toContain('"INTERNAL"');
    const broken = { AUTH_JWKS: "{not json" };
    expect(await asShopper(hs, broken)).toEqual(OK);
    expect(await asShopper(await idpToken(rsa.privateKey, { kid: "k1" }), broken)).toEqual(REFUSED);
  });

  it("checks `iss` and `aud` when AUTH_ISSUER and AUTH_AUDIENCE are set", async () => {
    const settings = {
      AUTH_JWKS: JSON.stringify({ keys: [await publicJwk(rsa, "k1", "RS256")] }),
      AUTH_ISSUER: "https://idp.example/",
      AUTH_AUDIENCE: "flashgate",
    };
    const token = (claims: JWTPayload) => idpToken(rsa.privateKey, { kid: "k1", claims });
    expect(await asShopper(await token({ iss: "https://idp.example/", aud: "flashgate" }), settings)).toEqual(OK);
    expect(
      await asShopper(await token({ iss: "https://idp.example/", aud: ["other", "flashgate"] }), settings),
    ).toEqual(OK);
    expect(await asShopper(await token({ iss: "https://evil.example/", aud: "flashgate" }), settings)).toEqual(REFUSED);
    expect(await asShopper(await token({ iss: "https://idp.example/", aud: "other" }), settings)).toEqual(REFUSED);
    expect(await asShopper(await token({ iss: "https://idp.example/" }), settings)).toEqual(REFUSED);
    expect(await asShopper(await token({ aud: "flashgate" }), settings)).toEqual(REFUSED);
  });

  it("gives exp, nbf and iat AUTH_CLOCK_SKEW_SECONDS of leeway (30 by default)", async () => {
    const hs = new TextEncoder().encode("test-auth-secret");
    const now = Math.floor(Date.now() / 1000);
    const token = (claims: JWTPayload) => idpToken(hs, { alg: "HS256", claims });
    const byDefault = {};
    const strict = { AUTH_CLOCK_SKEW_SECONDS: "0" };
    expect(await asShopper(await token({ exp: now - 10 }), byDefault)).toEqual(OK);
    expect(await asShopper(await token({ exp: now - 10 }), strict)).toEqual(REFUSED);
    expect(await asShopper(await token({ exp: now - 60 }), byDefault)).toEqual(REFUSED);
    expect(await asShopper(await token({ nbf: now + 10 }), byDefault)).toEqual(OK);
    expect(await asShopper(await token({ nbf: now + 60 }), byDefault)).toEqual(REFUSED);
    expect(await asShopper(await token({ iat: now + 10 }), byDefault)).toEqual(OK);
    expect(await asShopper(await token({ iat: now + 10 }), strict)).toEqual(REFUSED);
    expect(await asShopper(await token({ iat: now + 3600, exp: now + 7200 }), byDefault)).toEqual(REFUSED);
    const noExp = await new SignJWT({ sub: "ada", iat: now }).setProtectedHeader({ alg: "HS256" }).sign(hs);
    expect(await asShopper(noExp, byDefault)).toEqual(REFUSED);
  });

  it("refuses wrong algorithms, unknown signers and HS256 when only a JWKS is configured", async () => {
    const jwks = JSON.stringify({ keys: [await publicJwk(rsa, "k1", "RS256")] });
    const hs = new TextEncoder().encode("test-auth-secret");
    const both = { AUTH_JWKS: jwks };
    const jwksOnly = { AUTH_JWKS: jwks, AUTH_SECRET: "" };
    const none = `${btoa(JSON.stringify({ alg: "none" }))}.${btoa(JSON.stringify({ sub: "ada", exp: 2e9 }))}.`;
    expect(await asShopper(await idpToken(hs, { alg: "HS256" }), both)).toEqual(OK);
    expect(await asShopper(await idpToken(hs, { alg: "HS512" }), both)).toEqual(REFUSED);
    for (const alg of ["RS384", "PS256", "ES384"]) {
      const other = await generateKeyPair(alg);
      expect(await asShopper(await idpToken(other.privateKey, { alg, kid: "k1" }), both), alg).toEqual(REFUSED);
    }
    expect(await asShopper(await idpToken(stranger.privateKey, { kid: "k1" }), both)).toEqual(REFUSED);
    expect(await asShopper(none.replaceAll("=", ""), both)).toEqual(REFUSED);
    expect(await asShopper(await idpToken(hs, { alg: "HS256" }), jwksOnly)).toEqual(REFUSED);
    expect(await asShopper(await idpToken(rsa.privateKey, { kid: "k1" }), jwksOnly)).toEqual(OK);
    // Without a JWKS, an RS256 token is refused even when well signed.
    expect(await asShopper(await idpToken(rsa.privateKey, { kid: "k1" }), {})).toEqual(REFUSED);
  });
});

/** The refusal of `GET /api/me/reservations` under these settings: status, code and why. */
async function refusal(authorization: string | null, settings: Record<string, string> = {}) {
  const ctx = createExecutionContext();
  const headers: Record<string, string> = authorization === null ? {} : { authorization };
  const request = new Request("http://flashgate.test/api/me/reservations", { headers });
  const response = await worker.fetch(request, { ...env, ...settings }, ctx);
  await waitOnExecutionContext(ctx);
  const { error } = (await response.json()) as {
    error: { code: string; message: string; details?: { reason?: string; claim?: string } };
  };
  return { status: response.status, code: error.code, ...error.details, message: error.message };
}

const refusedFor = (reason: string, claim?: string) => ({
  status: 401,
  code: "UNAUTHENTICATED",
  reason,
  ...(claim === undefined ? {} : { claim }),
  message: expect.any(String),
});

describe("a refused shopper JWT says why (details.reason, and in words)", () => {
  const secret = "test-auth-secret";
  const hs = new TextEncoder().encode(secret);
  const now = () => Math.floor(Date.now() / 1000);
  const hsToken = (claims: JWTPayload, alg = "HS256", key: Uint8Array = hs) =>
    new SignJWT({ ...claims }).setProtectedHeader({ alg }).sign(key);

  it("HS256 (AUTH_SECRET): each reason, never the secret", async () => {
    const cases: [string, string | null, ReturnType<typeof refusedFor>, RegExp][] = [
      ["no token", null, refusedFor("missing_token"), /Bearer JWT is required/],
      ["not a JWT", "Bearer not-a-jwt", refusedFor("malformed"), /not a well-formed JWT/],
      ["JSON that is no JWT", `Bearer ${btoa("{}")}.${btoa("[]")}.x`, refusedFor("malformed"), /well-formed/],
      [
        "another algorithm",
        `Bearer ${await hsToken({ sub: "ada", exp: now() + 600 }, "HS512")}`,
        refusedFor("algorithm_not_allowed"),
        /algorithm .*not accepted here \(accepted: HS256\)/,
      ],
      [
        "another secret",
        `Bearer ${await hsToken({ sub: "ada", exp: now() + 600 }, "HS256", new TextEncoder().encode("other-secret"))}`,
        refusedFor("bad_signature"),
        /signature does not verify/,
      ],
      [
        "expired",
        `Bearer ${await hsToken({ sub: "ada", exp: now() - 3600 })}`,
        refusedFor("expired", "exp"),
        /has expired/,
      ],
      [
        "nbf ahead",
        `Bearer ${await hsToken({ sub: "ada", exp: now() + 7200, nbf: now() + 3600 })}`,
        refusedFor("not_yet_valid", "nbf"),
        /not valid yet \(its `nbf`/,
      ],
      [
        "issued in the future",
        `Bearer ${await hsToken({ sub: "ada", exp: now() + 7200, iat: now() + 3600 })}`,
        refusedFor("not_yet_valid", "iat"),
        /not valid yet \(its `iat`/,
      ],
      ["no exp", `Bearer ${await hsToken({ sub: "ada" })}`, refusedFor("missing_claim", "exp"), /no `exp` claim/],
      ["no sub", `Bearer ${await hsToken({ exp: now() + 600 })}`, refusedFor("missing_claim", "sub"), /no `sub` claim/],
      [
        "exp not a number",
        `Bearer ${await hsToken({ sub: "ada", exp: "tomorrow" as unknown as number })}`,
        refusedFor("invalid_claim", "exp"),
        /`exp` claim must be a number/,
      ],
      [
        "empty sub",
        `Bearer ${await hsToken({ sub: "", exp: now() + 600 })}`,
        refusedFor("invalid_claim", "sub"),
        /`sub` must be a user id/,
      ],
      [
        "nbf not a number (found in an audit: told not_yet_valid)",
        `Bearer ${await hsToken({ sub: "ada", exp: now() + 600, nbf: "yesterday" as unknown as number })}`,
        refusedFor("invalid_claim", "nbf"),
        /`nbf` claim must be a number/,
      ],
      [
        "a sub of 129 characters",
        `Bearer ${await hsToken({ sub: "😀".repeat(129), exp: now() + 600 })}`,
        refusedFor("invalid_claim", "sub"),
        /`sub` must be a user id of 1 to 128 characters/,
      ],
    ];
    for (const [label, authorization, expected, words] of cases) {
      const answer = await refusal(authorization);
      expect(answer, label).toEqual(expected);
      expect(answer.message, label).toMatch(words);
      expect(answer.message, label).not.toContain(secret);
    }
    // 128 characters are a user id, whatever their UTF-16 length (found in an audit: 100 emoji refused).
    const emoji = await hsToken({ sub: "😀".repeat(128), exp: now() + 600 });
    const ctx = createExecutionContext();
    const mine = new Request("http://flashgate.test/api/me/reservations", {
      headers: { authorization: `Bearer ${emoji}` },
    });
    const answer = await worker.fetch(mine, env, ctx);
    await waitOnExecutionContext(ctx);
    expect(answer.status).toBe(200);
  });

  it("an identity provider's keys (AUTH_JWKS, AUTH_ISSUER, AUTH_AUDIENCE): each reason", async () => {
    const settings = {
      AUTH_JWKS: JSON.stringify({ keys: [await publicJwk(rsa, "k1", "RS256")] }),
      AUTH_SECRET: "",
      AUTH_ISSUER: "https://idp.example/",
      AUTH_AUDIENCE: "flashgate",
    };
    const right = { iss: "https://idp.example/", aud: "flashgate" };
    const token = (claims: JWTPayload, opts: TokenOptions = {}, key: CryptoKey | Uint8Array = rsa.privateKey) =>
      idpToken(key, { kid: "k1", ...opts, claims: { ...right, ...claims } });
    /** A token without `claim` (the claim set otherwise right). */
    const lacking = (claim: "iss" | "aud" | "sub") => {
      const now = Math.floor(Date.now() / 1000);
      const claims: JWTPayload = { sub: "ada", exp: now + 600, ...right };
      delete claims[claim];
      return new SignJWT(claims).setProtectedHeader({ alg: "RS256", kid: "k1" }).sign(rsa.privateKey);
    };
    const rs384 = await generateKeyPair("RS384");
    expect(await asShopper(await token({}), settings)).toEqual(OK);
    const cases: [string, string, ReturnType<typeof refusedFor>][] = [
      ["unknown kid", await token({}, { kid: "k9" }), refusedFor("unknown_key")],
      ["another signer", await token({}, {}, stranger.privateKey), refusedFor("bad_signature")],
      ["HS256 without AUTH_SECRET", await token({}, { alg: "HS256" }, hs), refusedFor("algorithm_not_allowed")],
      ["RS384", await token({}, { alg: "RS384" }, rs384.privateKey), refusedFor("algorithm_not_allowed")],
      ["expired", await token({}, { exp: -3600 }), refusedFor("expired", "exp")],
      ["wrong issuer", await token({ iss: "https://evil.example/" }), refusedFor("invalid_claim", "iss")],
      ["wrong audience", await token({ aud: "other" }), refusedFor("invalid_claim", "aud")],
      ["no issuer", await lacking("iss"), refusedFor("missing_claim", "iss")],
      ["no audience", await lacking("aud"), refusedFor("missing_claim", "aud")],
      ["no sub", await lacking("sub"), refusedFor("missing_claim", "sub")],
    ];
    for (const [label, jwt, expected] of cases) {
      expect(await refusal(`Bearer ${jwt}`, settings), label).toEqual(expected);
    }
  });
});
