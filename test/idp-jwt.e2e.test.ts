import { createServer, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import { exportJWK, generateKeyPair, SignJWT } from "jose";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { type DevServer, startDevServer } from "../tools/dev-server";

/**
 * Shopper JWTs from an identity provider, end to end: keys made with jose, the JWKS served by a
 * local HTTP server standing in for the IdP, the gateway under `wrangler dev` with AUTH_JWKS_URL,
 * AUTH_ISSUER and AUTH_AUDIENCE pointing at it (real outbound fetch, real Cache API).
 */

const ISSUER = "https://idp.flashgate.test/";
const AUDIENCE = "flashgate-e2e";

let idp: Server;
let jwksUrl: string;
let fetches = 0;
let server: DevServer;
let keys: Awaited<ReturnType<typeof generateKeyPair>>;

beforeAll(async () => {
  keys = await generateKeyPair("ES256", { extractable: true });
  const jwks = JSON.stringify({ keys: [{ ...(await exportJWK(keys.publicKey)), kid: "e2e-1", alg: "ES256" }] });
  idp = createServer((request, response) => {
    if (request.url !== "/.well-known/jwks.json") {
      response.writeHead(404).end();
      return;
    }
    fetches++;
    response.writeHead(200, { "content-type": "application/json" }).end(jwks);
  });
  await new Promise<void>((resolve) => idp.listen(0, "127.0.0.1", resolve));
  jwksUrl = `http://127.0.0.1:${(idp.address() as AddressInfo).port}/.well-known/jwks.json`;
  server = await startDevServer({ vars: { AUTH_JWKS_URL: jwksUrl, AUTH_ISSUER: ISSUER, AUTH_AUDIENCE: AUDIENCE } });
});
afterAll(async () => {
  await server?.stop();
  await new Promise((resolve) => idp?.close(resolve));
});

function token(sub: string, kid = "e2e-1", claims: Record<string, unknown> = {}): Promise<string> {
  return new SignJWT({ sub, iss: ISSUER, aud: AUDIENCE, ...claims })
    .setProtectedHeader({ alg: "ES256", kid })
    .setIssuedAt()
    .setExpirationTime("10m")
    .sign(keys.privateKey);
}

async function myReservations(jwt: string): Promise<number> {
  const response = await fetch(`${server.url}/api/me/reservations`, { headers: { authorization: `Bearer ${jwt}` } });
  await response.body?.cancel();
  return response.status;
}

describe("an identity provider's ES256 JWTs under wrangler dev", () => {
  it("are accepted by a key of the fetched JWKS, fetched once; wrong issuer and unknown kid refused", async () => {
    for (const user of ["ida", "ivo", "ira"]) expect(await myReservations(await token(user))).toBe(200);
    expect(fetches).toBe(1);
    expect(await myReservations(await token("ida", "e2e-1", { iss: "https://evil.test/" }))).toBe(401);
    // An unknown kid right after a fetch is refused without asking the IdP again (the refetch floor).
    expect(await myReservations(await token("ida", "rotated-2"))).toBe(401);
    expect(fetches).toBe(1);
  });

  it("say why they are refused: unknown key, bad signature, expired, a claim wrong or missing", async () => {
    const stranger = await generateKeyPair("ES256");
    const now = Math.floor(Date.now() / 1000);
    const signed = (claims: Record<string, unknown>, key: CryptoKey = keys.privateKey) =>
      new SignJWT(claims).setProtectedHeader({ alg: "ES256", kid: "e2e-1" }).sign(key);
    const right = { sub: "ida", iss: ISSUER, aud: AUDIENCE, iat: now, exp: now + 600 };
    const cases: [string, string, Record<string, string>][] = [
      ["unknown kid", await token("ida", "rotated-3"), { reason: "unknown_key" }],
      ["another signer", await signed(right, stranger.privateKey), { reason: "bad_signature" }],
      ["expired", await signed({ ...right, iat: now - 7200, exp: now - 3600 }), { reason: "expired", claim: "exp" }],
      [
        "wrong issuer",
        await token("ida", "e2e-1", { iss: "https://evil.test/" }),
        { reason: "invalid_claim", claim: "iss" },
      ],
      ["no audience", await signed({ ...right, aud: undefined }), { reason: "missing_claim", claim: "aud" }],
    ];
    for (const [label, jwt, details] of cases) {
      const response = await fetch(`${server.url}/api/me/reservations`, {
        headers: { authorization: `Bearer ${jwt}` },
      });
      const body = (await response.json()) as { error: { code: string; details?: unknown } };
      expect([response.status, body.error.code, body.error.details], label).toEqual([401, "UNAUTHENTICATED", details]);
    }
  });
});
