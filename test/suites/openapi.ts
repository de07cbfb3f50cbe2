import { describe, expect, inject, it } from "vitest";
import type { z } from "zod";
import { app } from "../../src/app";
import { CONTRACT_ROUTES, type ContractRoute } from "../../src/routes/contract";
import {
  AdminSku,
  AdminSkuList,
  DeadLetterList,
  ErrorBody,
  Health,
  PaymentAck,
  PublicSku,
  PurchaseToken,
  Reservation,
  ReservationDetail,
  ReservationList,
} from "../../src/routes/contract-schemas";
import { openApiPath } from "../../src/routes/openapi";
import { STRIPE_TEST_KEY } from "../../tools/stripe-api";
import { type Answer, call, createSku, reserve, tokenFor, uniqueSku } from "../support/client";
import { pay } from "../support/payments";
import { checkoutSession, sendStripe, stripeEvent } from "../support/stripe";

/**
 * The contract data behind `GET /openapi.json` cannot drift from the code: every route the app
 * registers is in it, and real answers of the Worker parse with its answer schemas.
 */

function conforms(schema: z.ZodType, answer: Answer, status: number) {
  expect(answer.status).toBe(status);
  const parsed = schema.safeParse(answer.json);
  expect(parsed.success ? [] : parsed.error.issues).toEqual([]);
}

describe("the contract behind openapi.json", () => {
  it("documents every route the app registers (pages and dev-only helpers aside)", () => {
    const documented = new Set(CONTRACT_ROUTES.map((r) => `${r.method.toUpperCase()} ${r.path}`));
    const registered = app.routes
      .filter((r) => r.method !== "ALL")
      // Dev-, bench- and chaos-only helpers are 404 unless their flag is set: not part of the contract.
      .filter((r) => !/^\/(dev|bench|chaos)\//.test(r.path) && r.path !== "/" && r.path !== "/dashboard")
      // Page files, and the buy button's (API.md v1.4): scripts, not JSON routes.
      .filter((r) => !r.path.startsWith("/static/") && !r.path.startsWith("/embed/"))
      .map((r) => `${r.method} ${r.path}`);
    expect(registered.length).toBeGreaterThan(10);
    expect(registered.filter((route) => !documented.has(route))).toEqual([]);
  });

  it("registers every route it documents (the document promises nothing the app lacks)", () => {
    const registered = new Set(app.routes.filter((r) => r.method !== "ALL").map((r) => `${r.method} ${r.path}`));
    const documented = CONTRACT_ROUTES.map((r) => `${r.method.toUpperCase()} ${r.path}`);
    expect(documented.filter((route) => !registered.has(route))).toEqual([]);
  });

  it("serves the document", async () => {
    const answer = await call("GET", "/openapi.json");
    expect(answer.status).toBe(200);
    expect(answer.json.openapi).toBe("3.1.0");
    // The contract it is built to: the shared API.md's version, which docs/API.md's heading names too.
    expect(answer.json.info.version).toBe("1.4");
    expect(answer.json.info.description).toMatch(/^Contract v1\.4 /);
    for (const route of CONTRACT_ROUTES) {
      expect(answer.json.paths[openApiPath(route.path)]?.[route.method], `${route.method} ${route.path}`).toBeDefined();
    }
  });

  it("lists 503 BUSY, with Retry-After, on every route that answers it when the stock objects are overloaded", async () => {
    const sku = uniqueSku("busy");
    const user = "busy-shopper";
    await createSku(sku, { totalStock: 5, price: 1999, currency: "usd" });
    // A hold of the shopper's own, for the routes of a reservation and the payment webhooks, and a
    // token for a second reservation: each reaches the stock object when the probe sends it.
    const held = await reserve(user, sku, 1);
    expect(held.status).toBe(202);
    const reservationId = held.json.reservationId as string;
    const token = await tokenFor(user, sku);
    const document = (await call("GET", "/openapi.json")).json;
    // Each object refuses every call as workerd refuses an overloaded one (stock-client.ts: BUSY).
    const refuse = () => Promise.reject(Object.assign(new Error("Durable Object is overloaded"), { overloaded: true }));
    const stub = new Proxy({}, { get: (_, key) => (key === "then" ? undefined : refuse) });
    // Stripe configured (the tests' stand-in of its API), so checkout and refund get past "not configured".
    const env = {
      SKU_STOCK: { getByName: () => stub } as unknown as Env["SKU_STOCK"],
      STRIPE_SECRET_KEY: STRIPE_TEST_KEY,
      STRIPE_API_URL: inject("stripe").apiUrl,
    } as Partial<Env>;
    const params: Record<string, string> = {
      sku,
      id: "x",
      deliveryId: "x",
      userId: "u",
      eventId: "e",
      tile: "0/000",
    };
    // The shopper's routes of a reservation name the shopper's own hold.
    const shopperParams: Record<string, string> = { ...params, id: reservationId };
    const bodies: Record<string, unknown> = {
      "PUT /admin/skus/:sku": { totalStock: 6 },
      "POST /admin/skus/:sku/access-codes": { tier: "early", count: 1 },
      "POST /api/skus/:sku/reservations": { token, quantity: 1 },
      "POST /api/skus/:sku/waitlist": { quantity: 1 },
      "POST /api/reservations/:id/checkout": {
        successUrl: "http://flashgate.test/paid",
        cancelUrl: "http://flashgate.test/cancelled",
      },
    };
    /** The route's request, as its caller sends it: credentials, body, and a webhook's signature. */
    const send = (route: ContractRoute, path: string, name: string): Promise<Answer> => {
      if (route.path === "/webhooks/payments") return pay(reservationId, "payment.succeeded", undefined, { env });
      if (route.path === "/webhooks/stripe") {
        return sendStripe(stripeEvent("checkout.session.completed", checkoutSession(reservationId, 1999)), { env });
      }
      return call(route.method.toUpperCase(), path, {
        admin: route.access === "admin",
        user: route.access === "shopper" ? user : undefined,
        env,
        body: bodies[name],
      });
    };
    const busy: string[] = [];
    const unlisted: string[] = [];
    const withoutRetryAfter: string[] = [];
    for (const route of CONTRACT_ROUTES) {
      const name = `${route.method.toUpperCase()} ${route.path}`;
      const values = route.access === "shopper" ? shopperParams : params;
      const path = route.path.replace(/:([A-Za-z]+)(\{[^}]*\})?/g, (_, p: string) => values[p] ?? p);
      // Reconciliation of this SKU alone: the run must not touch the other suites' SKUs.
      const query = route.path === "/admin/reconcile" ? `?sku=${sku}` : "";
      const answer = await send(route, path + query, name);
      if (answer.status !== 503) continue;
      busy.push(name);
      if (answer.json.error?.code !== "BUSY" || answer.headers.get("retry-after") === null)
        withoutRetryAfter.push(name);
      const listed = document.paths[openApiPath(route.path)][route.method].responses["503"];
      if (!JSON.stringify(listed ?? {}).includes('"BUSY"')) unlisted.push(name);
    }
    // The probe reaches the stock objects on each of these (else it would prove nothing of them).
    expect(busy).toEqual(
      expect.arrayContaining([
        "GET /api/skus/:sku",
        "GET /api/skus/:sku/draw",
        "GET /api/skus/:sku/draw/entries",
        "POST /api/skus/:sku/tokens",
        "POST /api/skus/:sku/reservations",
        "GET /api/reservations/:id",
        "POST /api/reservations/:id/checkout",
        "POST /api/reservations/:id/cancel",
        "POST /api/skus/:sku/waitlist",
        "GET /api/skus/:sku/waitlist",
        "DELETE /api/skus/:sku/waitlist",
        "POST /webhooks/payments",
        "POST /webhooks/stripe",
        "PUT /admin/skus/:sku",
        "DELETE /admin/skus/:sku",
        "POST /admin/skus/:sku/access-codes",
        "GET /admin/skus/:sku",
        "GET /admin/skus",
      ]),
    );
    expect(withoutRetryAfter).toEqual([]);
    expect(unlisted).toEqual([]);
  });

  it("matches real answers of the shopper, webhook, admin and ops routes", async () => {
    const sku = uniqueSku("openapi");
    conforms(AdminSku, await createSku(sku, { name: "Contract", totalStock: 5, perUserLimit: 2 }), 200);
    conforms(PublicSku, await call("GET", `/api/skus/${sku}`), 200);
    conforms(PurchaseToken, await call("POST", `/api/skus/${sku}/tokens`, { user: "olga" }), 201);

    const held = await call("POST", `/api/skus/${sku}/reservations`, {
      user: "olga",
      body: { token: await tokenFor("olga", sku), quantity: 1 },
    });
    conforms(Reservation, held, 202);
    conforms(
      ReservationDetail,
      await call("GET", `/api/reservations/${held.json.reservationId}`, { user: "olga" }),
      200,
    );
    conforms(PaymentAck, await pay(held.json.reservationId), 200);

    const second = await call("POST", `/api/skus/${sku}/reservations`, {
      user: "olga",
      body: { token: await tokenFor("olga", sku), quantity: 1 },
    });
    conforms(
      Reservation,
      await call("POST", `/api/reservations/${second.json.reservationId}/cancel`, { user: "olga" }),
      200,
    );
    conforms(ReservationList, await call("GET", "/api/me/reservations", { user: "olga" }), 200);

    conforms(AdminSku, await call("GET", `/admin/skus/${sku}`, { admin: true }), 200);
    conforms(AdminSkuList, await call("GET", "/admin/skus", { admin: true }), 200);
    conforms(DeadLetterList, await call("GET", "/admin/dead-letters", { admin: true }), 200);
    conforms(Health, await call("GET", "/healthz"), 200);
    conforms(ErrorBody, await call("GET", "/api/skus/no-such-sku"), 404);
    conforms(ErrorBody, await call("POST", `/api/skus/${sku}/reservations`, { user: "olga", raw: "{" }), 400);
  });
});
