import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { allowedOrigins } from "../../src/http/cors";
import { call, createSku, stockCallsTo, tokenFor, uniqueSku } from "../support/client";

/** API.md v1.4 "Browser clients and the buy button": CORS on the shopper routes for ALLOWED_ORIGINS only. */

const SHOP = "https://shop.example";
const WWW = "https://www.shop.example:8443";
// wrangler.toml's value types the var as its literal "": a test sets another.
const ORIGINS = ` ${SHOP}/ ,${WWW}`;
const env = { ALLOWED_ORIGINS: ORIGINS } as unknown as Partial<Env>;
const CORS_HEADERS = [
  "access-control-allow-origin",
  "access-control-allow-methods",
  "access-control-allow-headers",
  "access-control-expose-headers",
  "access-control-max-age",
  "access-control-allow-credentials",
];

function corsOf(headers: Headers): Record<string, string> {
  return Object.fromEntries(CORS_HEADERS.flatMap((h) => (headers.has(h) ? [[h, headers.get(h) ?? ""]] : [])));
}

const from = (origin: string, extra: Record<string, string> = {}) => ({ env, headers: { origin, ...extra } });

describe("CORS for the shop's own origins", () => {
  it("answers a preflight from an allowed origin at the edge: 204 with the contract's headers, no stock object asked", async () => {
    const sku = uniqueSku("cors-pre");
    await createSku(sku, { totalStock: 3 });
    const calls = stockCallsTo(sku);
    for (const path of [`/api/skus/${sku}/reservations`, `/api/skus/${sku}/tokens`, "/api/me/reservations"]) {
      const answer = await call(
        "OPTIONS",
        path,
        from(SHOP, { "access-control-request-method": "POST", "access-control-request-headers": "authorization" }),
      );
      expect(answer.status).toBe(204);
      expect(answer.headers.get("access-control-allow-origin")).toBe(SHOP);
      const allowed = (answer.headers.get("access-control-allow-headers") ?? "").toLowerCase().split(",");
      for (const h of ["authorization", "content-type", "access-code", "cf-turnstile-response", "proof-of-work"]) {
        expect(allowed).toContain(h);
      }
      expect(answer.headers.get("access-control-allow-methods")).toContain("POST");
      expect(Number(answer.headers.get("access-control-max-age"))).toBeGreaterThan(0);
      expect(answer.headers.get("vary")).toContain("Origin");
    }
    expect(stockCallsTo(sku)).toBe(calls);
  });

  it("puts the allowed origin, the exposed headers and Vary: Origin on every shopper answer, errors included", async () => {
    const sku = uniqueSku("cors");
    await createSku(sku, { totalStock: 1, perUserLimit: 1 });
    const token = await tokenFor("cora", sku);
    const held = await call("POST", `/api/skus/${sku}/reservations`, {
      ...from(WWW),
      user: "cora",
      body: { token, quantity: 1 },
    });
    expect(held.status).toBe(202);
    const replayed = await call("POST", `/api/skus/${sku}/reservations`, {
      ...from(WWW),
      user: "cora",
      body: { token, quantity: 1 },
    });
    const answers = [
      held,
      replayed,
      await call("GET", `/api/skus/${sku}`, from(SHOP)),
      await call("GET", `/api/reservations/${held.json.reservationId}`, { ...from(SHOP), user: "cora" }),
      await call("GET", "/api/me/reservations", { ...from(SHOP), user: "cora" }),
      await call("POST", `/api/skus/${sku}/tokens`, { ...from(SHOP), user: "dora" }), // 409 sold out
      await call("GET", `/api/skus/${sku}/waitlist`, { ...from(SHOP), user: "dora" }), // 404 not waiting
      await call("GET", "/api/skus/no-such-sku", from(SHOP)), // 404
      await call("POST", `/api/skus/${sku}/tokens`, from(SHOP)), // no JWT
    ];
    expect(answers.map((a) => a.status)).toEqual([202, 202, 200, 200, 200, 409, 404, 404, 409]);
    expect(replayed.headers.get("idempotent-replayed")).toBe("true");
    for (const [i, answer] of answers.entries()) {
      const origin = i < 2 ? WWW : SHOP;
      expect(answer.headers.get("access-control-allow-origin"), `answer ${i}`).toBe(origin);
      const exposed = (answer.headers.get("access-control-expose-headers") ?? "").toLowerCase().split(",");
      expect(exposed).toEqual(expect.arrayContaining(["retry-after", "idempotent-replayed"]));
      expect(answer.headers.get("vary")).toContain("Origin");
    }
  });

  it("never answers CORS on admin, webhook, metrics and operations routes, whatever the origin", async () => {
    const answers = [
      await call("GET", "/admin/skus", { ...from(SHOP), admin: true }),
      await call("OPTIONS", "/admin/skus", from(SHOP, { "access-control-request-method": "GET" })),
      await call("GET", "/metrics", { ...from(SHOP), admin: true }),
      await call("POST", "/webhooks/payments", { ...from(SHOP), body: {} }),
      await call("OPTIONS", "/webhooks/stripe", from(SHOP, { "access-control-request-method": "POST" })),
      await call("GET", "/healthz", from(SHOP)),
      await call("GET", "/openapi.json", from(SHOP)),
    ];
    expect(answers.map((a) => a.status)).toEqual([200, 405, 200, 401, 405, 200, 200]);
    for (const answer of answers) expect(corsOf(answer.headers)).toEqual({});
  });

  it("gives an origin not listed no CORS header at all, and its preflight no 204", async () => {
    const sku = uniqueSku("cors-no");
    await createSku(sku, { totalStock: 3 });
    const strangers = [
      "null",
      "https://SHOP.example",
      "HTTPS://shop.example",
      "https://shop.example/",
      "https://shop.example.evil",
      "https://evil-shop.example",
      "https://evilshop.example",
      "http://shop.example",
      "https://shop.example:443",
      "https://www.shop.example",
      "https://www.shop.example:8443/",
      `${SHOP}, ${WWW}`,
      "",
      "*",
    ];
    for (const origin of strangers) {
      const view = await call("GET", `/api/skus/${sku}`, from(origin));
      expect(view.status, origin).toBe(200);
      expect(corsOf(view.headers), origin).toEqual({});
      const preflight = await call(
        "OPTIONS",
        `/api/skus/${sku}/tokens`,
        from(origin, { "access-control-request-method": "POST" }),
      );
      expect(preflight.status, origin).toBe(405);
      expect(corsOf(preflight.headers), origin).toEqual({});
    }
    // Without ALLOWED_ORIGINS (the default), not even the shop's own origin.
    const none = await call("GET", `/api/skus/${sku}`, { headers: { origin: SHOP } });
    expect(corsOf(none.headers)).toEqual({});
  });

  it("reflects an Origin only when it is exactly one listed (fuzzed)", async () => {
    const sku = uniqueSku("cors-fuzz");
    await createSku(sku, { totalStock: 3 });
    const listed = allowedOrigins(ORIGINS);
    const near = fc.oneof(
      fc.webUrl().map((u) => new URL(u).origin),
      fc.constantFrom(SHOP, WWW).chain((o) =>
        fc.oneof(
          fc.string({ maxLength: 6 }).map((s) => `${o}${s}`),
          fc.string({ maxLength: 6 }).map((s) => `${s}${o}`),
          fc.constant(o.toUpperCase()),
          fc.constant(o.replace("https", "http")),
        ),
      ),
    );
    await fc.assert(
      fc.asyncProperty(near, async (origin) => {
        if (/[\r\n\0]/.test(origin)) return;
        // What arrives: a header value loses its leading and trailing whitespace on the way.
        const sent = new Headers({ origin }).get("origin") ?? "";
        const answer = await call("GET", `/api/skus/${sku}`, from(origin));
        // Listed: that origin reflected, exactly; any other: no CORS header at all.
        expect(corsOf(answer.headers)).toEqual(
          listed.has(sent) ? expect.objectContaining({ "access-control-allow-origin": sent }) : {},
        );
      }),
      { numRuns: 200, seed: 50 },
    );
  });

  it("refuses an ALLOWED_ORIGINS entry that is no origin, naming it", () => {
    expect(() => allowedOrigins("https://shop.example/checkout")).toThrow(/checkout/);
    expect(() => allowedOrigins("shop.example")).toThrow(/shop\.example/);
    expect([...allowedOrigins("https://Shop.Example:443/, http://localhost:3000")]).toEqual([
      "https://shop.example",
      "http://localhost:3000",
    ]);
  });
});
