import { spawn } from "node:child_process";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { type DevServer, startDevServer } from "../tools/dev-server";
import { SECRETS } from "../tools/dev-vars";

/**
 * `npm run smoke` (scripts/contract-smoke.mjs) as an operator runs it after a deploy
 * (docs/DEPLOY.md, step 9): against a gateway with the proof of work on, it solves the challenge,
 * and whatever happens it leaves no SKU in GET /admin/skus and no unit held.
 */

const SMOKE = new URL("../scripts/contract-smoke.mjs", import.meta.url).pathname;
const ADMIN = { authorization: `Bearer ${SECRETS.ADMIN_TOKEN}` };

/** The smoke script's exit code and output (async: the gateway's requests need the event loop free). */
function smoke(...args: string[]): Promise<{ status: number | null; output: string }> {
  return new Promise((resolve) => {
    // Not the caller's secrets: the local defaults, as a developer without them gets.
    const env = { ...process.env };
    for (const name of ["AUTH_SECRET", "ADMIN_TOKEN", "SMOKE_JWT", "FLASHGATE_URL"]) delete env[name];
    const child = spawn(process.execPath, [SMOKE, ...args], { env });
    let output = "";
    child.stdout.on("data", (d: Buffer) => {
      output += d.toString();
    });
    child.stderr.on("data", (d: Buffer) => {
      output += d.toString();
    });
    child.on("close", (status) => resolve({ status, output }));
  });
}

/** The smoke SKU a run named in its output. */
const skuOf = (output: string) => /PUT \/admin\/skus\/(smoke-[0-9a-f]{8}) creates/.exec(output)?.[1];

async function listed(server: DevServer): Promise<string[]> {
  const response = await fetch(`${server.url}/admin/skus`, { headers: ADMIN });
  expect(response.status).toBe(200);
  return ((await response.json()) as { skus: { sku: string }[] }).skus.map((s) => s.sku);
}

async function adminView(server: DevServer, sku: string) {
  const response = await fetch(`${server.url}/admin/skus/${sku}`, { headers: ADMIN });
  return (await response.json()) as { status: string; test: boolean; stock: { held: number } };
}

describe("npm run smoke against a gateway with POW_BITS 8", () => {
  let server: DevServer;
  beforeAll(async () => {
    server = await startDevServer({ vars: { POW_BITS: "8" } });
  });
  afterAll(async () => {
    await server?.stop();
  });

  it("solves the proof of work, passes, and archives its SKU with nothing held", async () => {
    const run = await smoke(server.url);
    expect(run.output).toContain("(proof of work on: 8 bits");
    expect(run.output).toContain("✓ tokens for a sold-out SKU give 409 SOLD_OUT");
    expect(run.output).toContain("✓ the order row reaches D1 through the queue");
    expect(run.output).toContain("✓ the order says it is a test order (test: true)");
    expect(run.output).toContain("passed, 0 failed");
    expect(run.status, run.output).toBe(0);
    const sku = skuOf(run.output);
    expect(sku).toMatch(/^smoke-/);
    expect(await listed(server)).not.toContain(sku);
    // A test sale (API.md "Test sales"): the smoke sells nothing a shop would fulfil.
    expect(await adminView(server, sku ?? "")).toMatchObject({ status: "archived", test: true, stock: { held: 0 } });
  });

  it("archives its SKU when a step fails (a JWT the gateway refuses)", async () => {
    const run = await smoke(server.url, "--jwt", "not-a-jwt");
    expect(run.status, run.output).toBe(1);
    expect(run.output).toContain("✗ POST tokens gives 201");
    const sku = skuOf(run.output);
    expect(sku).toMatch(/^smoke-/);
    expect(await listed(server)).not.toContain(sku);
    expect((await listed(server)).filter((s) => s.startsWith("smoke-"))).toEqual([]);
  });

  it("refuses to guess secrets for a deployment that is not local", async () => {
    const run = await smoke("https://flashgate.example.workers.dev");
    expect(run.status).toBe(2);
    expect(run.output).toContain("give --admin-token and --auth-secret or --jwt");
    expect(run.output).toContain("Usage: npm run smoke -- [URL] [options]");
  });
});

describe("npm run smoke against a gateway with Turnstile on", () => {
  let server: DevServer;
  beforeAll(async () => {
    // Never called: the smoke sends no Turnstile answer without --turnstile-response.
    server = await startDevServer({ vars: { TURNSTILE_SECRET_KEY: "2x0000000000000000000000000000000AA" } });
  });
  afterAll(async () => {
    await server?.stop();
  });

  it("says it cannot solve Turnstile, skips the purchase, and still archives its SKU", async () => {
    const run = await smoke(server.url);
    expect(run.output).toContain("(Turnstile is on: this script cannot solve it)");
    expect(run.output).toContain("- skipped: the purchase checks");
    expect(run.status, run.output).toBe(0);
    expect(await listed(server)).not.toContain(skuOf(run.output));
  });
});
