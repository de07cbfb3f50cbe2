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
    // The contract it is built to: the shared API.md's version, which docs/API.md's heading names too.
    expect(answer.json.info.version).toBe("1.4");
    expect(answer.json.info.description).toMatch(/^Contract v1\.4 /);
    for (const route of CONTRACT_ROUTES) {
      expect(answer.json.paths[openApiPath(route.path)]?.[route.method], `${route.method} ${route.path}`).toBeDefined();
    }
  });

  it("lists 503 BUSY on every admin route that answers it when the stock objects are overloaded", async () => {
    const sku = uniqueSku("busy");
    await createSku(sku, { totalStock: 5 });
    const document = (await call("GET", "/openapi.json")).json;
    // Each object refuses every call as workerd refuses an overloaded one (stock-client.ts: BUSY).
    const refuse = () => Promise.reject(Object.assign(new Error("Durable Object is overloaded"), { overloaded: true }));
    const stub = new Proxy({}, { get: (_, key) => (key === "then" ? undefined : refuse) });
    const SKU_STOCK = { getByName: () => stub } as unknown as Env["SKU_STOCK"];
    const params: Record<string, string> = { sku, id: "x", deliveryId: "x", userId: "u", eventId: "e" };
    const bodies: Record<string, unknown> = {
      "PUT /admin/skus/:sku": { totalStock: 6 },
      "POST /admin/skus/:sku/access-codes": { tier: "early", count: 1 },
    };
    const busy: string[] = [];
    const unlisted: string[] = [];
    for (const route of CONTRACT_ROUTES.filter((r) => r.access === "admin")) {
      const name = `${route.method.toUpperCase()} ${route.path}`;
      const path = route.path.replace(/:([A-Za-z]+)/g, (_, p: string) => params[p] ?? p);
      // Reconciliation of this SKU alone: the run must not touch the other suites' SKUs.
      const query = route.path === "/admin/reconcile" ? `?sku=${sku}` : "";
      const answer = await call(route.method.toUpperCase(), path + query, {
        admin: true,
        env: { SKU_STOCK },
        body: bodies[name],
      });
      if (answer.status !== 503) continue;
      busy.push(name);
      const listed = document.paths[openApiPath(route.path)][route.method].responses["503"];
      if (!JSON.stringify(listed ?? {}).includes('"BUSY"')) unlisted.push(name);
    }
    expect(busy).toEqual(expect.arrayContaining(["PUT /admin/skus/:sku", "GET /admin/skus/:sku"]));
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
