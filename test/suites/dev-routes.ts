import { createExecutionContext, waitOnExecutionContext } from "cloudflare:test";
import { env } from "cloudflare:workers";
import { describe, expect, it } from "vitest";
import worker from "../../src/harness/index";
import { createSku, uniqueSku } from "../support/client";

/**
 * The demo storefront's dev-only routes: absent (404, any method) unless DEV_TOOLS is "true",
 * which only .dev.vars sets (wrangler.toml, and so production, never does).
 */

/** Calls the Worker with DEV_TOOLS set to `devTools`, or unset (as in production) for undefined. */
async function fetchWith(devTools: string | undefined, method: string, path: string, body?: unknown, jwt?: string) {
  const headers = new Headers({ "content-type": "application/json" });
  if (jwt) headers.set("authorization", `Bearer ${jwt}`);
  const request = new Request(`http://flashgate.test${path}`, {
    method,
    headers,
    body: body === undefined ? null : JSON.stringify(body),
  });
  // The pool also reads a local .dev.vars, so the test decides DEV_TOOLS itself.
  const { DEV_TOOLS: _fromDevVars, ...bindings } = env;
  const withVar = devTools === undefined ? bindings : { ...bindings, DEV_TOOLS: devTools };
  const ctx = createExecutionContext();
  const response = await worker.fetch(request, withVar as Env, ctx);
  await waitOnExecutionContext(ctx);
  return { status: response.status, json: (await response.json()) as Record<string, unknown> };
}

const withDevTools = (method: string, path: string, body?: unknown, jwt?: string) =>
  fetchWith("true", method, path, body, jwt);

describe("dev-only routes", () => {
  it('do not exist unless DEV_TOOLS is exactly "true"', async () => {
    for (const devTools of [undefined, "false", "1", "TRUE"]) {
      for (const [method, path] of [
        ["POST", "/dev/jwt"],
        ["GET", "/dev/jwt"],
        ["POST", "/dev/pay"],
        ["GET", "/dev/anything"],
      ]) {
        const body = method === "POST" ? { userId: "alice", reservationId: "x" } : undefined;
        const answer = await fetchWith(devTools, method ?? "", path ?? "", body);
        expect(answer.status, `${method} ${path} with DEV_TOOLS=${devTools}`).toBe(404);
        expect(answer.json).toEqual({ error: { code: "NOT_FOUND", message: "No such route." } });
      }
    }
  });

  it("with DEV_TOOLS: mint a shopper JWT and pay through the real, signed webhook", async () => {
    const sku = uniqueSku("dev");
    await createSku(sku, { totalStock: 3, price: 2500 });
    const minted = await withDevTools("POST", "/dev/jwt", { userId: "dev-user" });
    expect(minted.status).toBe(200);
    const jwt = String(minted.json.token);
    expect(minted.json.userId).toBe("dev-user");

    const token = await withDevTools("POST", `/api/skus/${sku}/tokens`, undefined, jwt);
    expect(token.status).toBe(201);
    const held = await withDevTools(
      "POST",
      `/api/skus/${sku}/reservations`,
      { token: token.json.token, quantity: 1 },
      jwt,
    );
    expect(held.status).toBe(202);

    const paid = await withDevTools("POST", "/dev/pay", { reservationId: held.json.reservationId });
    // Without an amount, the simulated provider charges what the reservation costs.
    expect(paid).toEqual({ status: 200, json: { received: true, reservationStatus: "paid", outcome: "applied" } });
    const unknown = await withDevTools("POST", "/dev/pay", { reservationId: "nope", outcome: "failed" });
    expect(unknown.status).toBe(404);
    expect(unknown.json).toEqual({ error: { code: "RESERVATION_NOT_FOUND", message: "No such reservation." } });
  });

  it("with DEV_TOOLS: validate their bodies and keep 405 for a wrong method", async () => {
    expect((await withDevTools("POST", "/dev/jwt", { userId: "" })).status).toBe(400);
    expect((await withDevTools("POST", "/dev/pay", { outcome: "maybe" })).status).toBe(400);
    const wrong = await withDevTools("GET", "/dev/jwt");
    expect(wrong.status).toBe(405);
    expect(wrong.json).toEqual({ error: { code: "METHOD_NOT_ALLOWED", message: expect.any(String) } });
  });
});
