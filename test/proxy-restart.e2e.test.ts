import { createServer } from "node:http";
import type { AddressInfo } from "node:net";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { fetchRetryingRestarts, proxyRestarts } from "../tools/proxy-restart";

/**
 * A stand-in for wrangler dev's proxy: it drops the first two POSTs of each body with
 * `503 Your worker restarted mid-request`, then answers what the Worker would, and records
 * every body it saw.
 */
const seen: string[] = [];
const server = createServer((req, res) => {
  let body = "";
  req.on("data", (chunk: Buffer) => {
    body += chunk.toString();
  });
  req.on("end", () => {
    seen.push(body);
    const attempts = seen.filter((b) => b === body).length;
    if (body.includes("busy")) {
      res.writeHead(503, { "content-type": "application/json", "retry-after": "1" });
      res.end(JSON.stringify({ error: { code: "BUSY", message: "The stock service is busy; retry shortly." } }));
    } else if (attempts <= 2) {
      res.writeHead(503, { "content-type": "text/plain" });
      res.end("Your worker restarted mid-request. Please try sending the request again.");
    } else {
      res.writeHead(202, { "content-type": "application/json" });
      res.end(JSON.stringify({ reservationId: "r-1", attempts }));
    }
  });
});
let url = "";

beforeAll(async () => {
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
});
afterAll(async () => {
  await new Promise((resolve) => server.close(resolve));
});

describe("clients of wrangler dev", () => {
  it("send a request the proxy dropped again, unchanged, and count it", async () => {
    const before = proxyRestarts.retried;
    const body = JSON.stringify({ token: "the-same-token", quantity: 1 });
    const { response, text } = await fetchRetryingRestarts(`${url}/api/skus/s/reservations`, { method: "POST", body });
    expect([response.status, JSON.parse(text)]).toEqual([202, { reservationId: "r-1", attempts: 3 }]);
    expect(seen.filter((b) => b === body)).toHaveLength(3); // the same token each time
    expect(proxyRestarts.retried - before).toBe(2);
  });

  it("leave the Worker's own 503 BUSY to the caller", async () => {
    const before = proxyRestarts.retried;
    const { response } = await fetchRetryingRestarts(`${url}/x`, { method: "POST", body: '{"busy":true}' });
    expect(response.status).toBe(503);
    expect(proxyRestarts.retried).toBe(before);
  });
});
