import { describe, expect, it } from "vitest";
import type { z } from "zod";
import { app } from "../../src/app";
import { CONTRACT_ROUTES } from "../../src/routes/contract";
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
import { type Answer, call, createSku, tokenFor, uniqueSku } from "../support/client";
import { pay } from "../support/payments";

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
    for (const route of CONTRACT_ROUTES) {
      expect(answer.json.paths[openApiPath(route.path)]?.[route.method], `${route.method} ${route.path}`).toBeDefined();
    }
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
