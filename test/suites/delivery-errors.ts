import { afterEach, describe, expect, it } from "vitest";
import { call, createSku, reserve, uniqueSku } from "../support/client";
import { eventually } from "../support/eventually";
import { configure, deliveries, endpoint, endpoints, forgetEndpoints } from "../support/handoff";

/**
 * What the delivery log says of a failed attempt (`lastError`), in words, against real receivers:
 * a port nobody listens on, a host that does not resolve, and the test receiver
 * (tools/webhook-receiver.ts) answering 500, redirecting, or hanging past the 10 s timeout.
 */

afterEach(forgetEndpoints);

/** An endpoint at a URL that is no receiver. */
async function nowhere(url: string) {
  const id = uniqueSku("nowhere");
  const answer = await call("PUT", `/admin/webhooks/${id}`, { admin: true, body: { url, events: ["order.held"] } });
  expect(answer.status, JSON.stringify(answer.json)).toBe(200);
  endpoints.push(id);
  return id;
}

/** The endpoint's one delivery once it has been attempted. */
const attempted = (id: string, timeoutMs = 15_000) =>
  eventually(async () => {
    const [row] = await deliveries(id);
    expect(row?.attempts).toBeGreaterThanOrEqual(1);
    return row;
  }, timeoutMs);

describe("delivery failures in words", () => {
  it("refused, unresolvable, 500, redirect and a receiver that hangs each say what happened", async () => {
    const refused = await nowhere("http://127.0.0.1:1/hooks");
    const unresolvable = await nowhere("https://no-such-host.invalid/hooks");
    const failing = await endpoint({ fail: 1000 }, { events: ["order.held"] });
    const redirecting = await endpoint(
      { status: 302, location: "https://elsewhere.example/hooks" },
      { events: ["order.held"] },
    );
    const hanging = await endpoint({ delayMs: 12_000 }, { events: ["order.held"] });
    const sku = uniqueSku("words");
    await createSku(sku, { totalStock: 5 });
    expect((await reserve("w1", sku)).status).toBe(202);

    expect(await attempted(refused)).toMatchObject({
      lastStatusCode: null,
      lastError: "connection refused or closed before an answer",
    });
    expect(await attempted(unresolvable)).toMatchObject({
      lastStatusCode: null,
      lastError: "could not connect: DNS lookup or TLS handshake failed",
    });
    expect(await attempted(failing.id)).toMatchObject({ lastStatusCode: 500, lastError: "answered 500" });
    expect(await attempted(redirecting.id)).toMatchObject({
      lastStatusCode: 302,
      lastError: "redirect not followed (302 to https://elsewhere.example/hooks)",
    });
    const hung = await attempted(hanging.id, 30_000);
    expect(hung).toMatchObject({ lastStatusCode: null, lastError: "timed out after 10 s without an answer" });

    // Once the receiver answers 2xx, the delivery is delivered and no error is left.
    await configure(failing.id, { secret: failing.secret });
    const [owed] = await deliveries(failing.id);
    const retry = await call("POST", `/admin/webhooks/${failing.id}/deliveries/${owed?.id}/retry`, { admin: true });
    expect(retry.status).toBe(202);
    await eventually(async () =>
      expect(await deliveries(failing.id)).toMatchObject([
        { status: "delivered", lastStatusCode: 204, lastError: null },
      ]),
    );
  }, 60_000);
});
