import { type ChildProcess, spawn } from "node:child_process";
import { afterEach, describe, expect, it } from "vitest";
import { isQuietRequest } from "../scripts/dev-output";
import { freePort } from "../tools/redis-server";

/**
 * `npm run dev` as a newcomer sees it (scripts/dev.ts), on a machine without internet access as
 * this one is: the banner first (migrations quiet, no types prompt, no stack traces, no table of
 * bindings), naming the storefront, the dashboard, the OpenAPI document, the admin token and
 * `npm run jwt`, with "create a SKU" as the first next step; and a request log that stays quiet
 * (errors and slow requests) unless `--log-requests=all` asks for every request.
 */

let child: ChildProcess | undefined;
let output = "";
afterEach(async () => {
  if (child?.exitCode === null && child.pid !== undefined) {
    const exited = new Promise((resolve) => child?.once("exit", resolve));
    process.kill(-child.pid, "SIGTERM"); // dev.ts stops wrangler, redis-server and the bridge
    await exited;
  }
  child = undefined;
});

/** GETs the banner's URLs (`/` may redirect): their statuses, in order. */
async function openBannerUrls(port: number): Promise<number[]> {
  const base = `http://127.0.0.1:${port}`;
  const statuses: number[] = [];
  for (const path of ["/", "/dashboard", "/openapi.json", "/healthz"]) {
    const response = await fetch(`${base}${path}`, { redirect: "manual" });
    await response.arrayBuffer();
    statuses.push(response.status);
  }
  return statuses;
}

/** Polls (bounded) until `text` appears in what the process printed. */
async function untilPrinted(printed: () => string, text: string): Promise<void> {
  for (const started = Date.now(); !printed().includes(text); ) {
    if (Date.now() - started > 10_000) throw new Error(`"${text}" not printed within 10 s:\n${printed()}`);
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
}

/**
 * Starts `npm run dev`, waits for the banner's closing rule, opens the banner's URLs (the newcomer's
 * first moves, answered before the screen is taken: no fixed wait), and resolves with everything
 * printed by then and the URLs' statuses.
 */
async function firstScreen(port: number, extra: string[] = []): Promise<{ out: string; statuses: number[] }> {
  output = "";
  // Its own inspector port: wrangler's default (9229) may be taken by another test's server.
  const inspector = ["--inspector-port", String(await freePort())];
  const dev = spawn("npx", ["tsx", "scripts/dev.ts", "--port", String(port), ...inspector, ...extra], {
    stdio: ["ignore", "pipe", "pipe"],
    env: { ...process.env, DEV_CRON_INTERVAL_MS: "0" },
    detached: true,
  });
  child = dev;
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`no banner within 90 s:\n${output}`)), 90_000);
    let done = false;
    const take = (d: Buffer) => {
      output += d.toString();
      if (!done && (output.match(/^─{20,}$/gm) ?? []).length >= 2) {
        done = true;
        clearTimeout(timer);
        void openBannerUrls(port).then(
          (statuses) => resolve({ out: output, statuses }),
          (err: unknown) => reject(err),
        );
      }
    };
    dev.stdout.on("data", take);
    dev.stderr.on("data", take);
    dev.once("exit", (code) => reject(new Error(`npm run dev exited ${code}:\n${output}`)));
  });
}

describe("npm run dev", () => {
  it("shows one banner with the URLs, the admin token and npm run jwt, and none of wrangler's noise", async () => {
    const port = await freePort();
    const { out: screen, statuses } = await firstScreen(port);
    expect(statuses).toEqual([200, 200, 200, 200]); // storefront, dashboard, OpenAPI, health
    const base = `http://127.0.0.1:${port}`;
    for (const line of [
      `Flashgate is up on ${base}`,
      `Storefront    ${base}/`,
      `Dashboard     ${base}/dashboard`,
      "ADMIN_TOKEN in .dev.vars",
      `OpenAPI       ${base}/openapi.json`,
      "npm run -s jwt -- alice",
    ]) {
      expect(screen).toContain(line);
    }
    // The banner is the first thing on the screen.
    expect(screen.trimStart().split("\n")[0]).toMatch(/^─{20,}$/);
    // What the first screen used to show: migration lines and tables, the types prompt, the command
    // line, bindings, offline stack traces.
    for (const noise of [
      "[dev] D1:",
      "[dev] starting",
      "Your types might be out of date",
      "┌",
      "continue?",
      "About to apply",
      "has access to the following bindings",
      "Error:",
      "    at ",
    ]) {
      expect(screen).not.toContain(noise);
    }
    // The first next step: create a SKU, as a command to paste, then the storefront on it.
    const lines = screen.split("\n");
    const next = lines.findIndex((line) => line.startsWith("Next: "));
    expect(lines[next]).toMatch(/^Next: create a SKU/);
    expect(lines[next + 1]).toBe(
      `  curl -X PUT ${base}/admin/skus/tee-shirt -H 'Authorization: Bearer dev-admin-token' \\`,
    );
    expect(lines[next + 3]).toBe(`  ${base}/?sku=tee-shirt`);
    expect(screen).toContain("Request log: errors and requests of 1 s or more only");
    expect(screen).toContain("npm run dev -- --log-requests=all");
    expect(lines.length).toBeLessThan(25);

    // A dashboard's worth of polling says nothing: the log keeps errors and slow requests only.
    const before = output.length;
    for (let i = 0; i < 10; i++) {
      for (const path of ["/admin/skus", "/admin/dead-letters", "/healthz"]) {
        const answer = await fetch(`${base}${path}`, { headers: { authorization: "Bearer dev-admin-token" } });
        expect(answer.status).toBe(200);
      }
    }
    // The unknown path's 404 a moment later: nothing either (a client's error is its answer, not a log line).
    expect((await fetch(`${base}/no-such-route`)).status).toBe(404);
    // A check that nothing is printed needs a window to look in: one second after the last answer.
    await new Promise((resolve) => setTimeout(resolve, 1_000));
    expect(output.slice(before)).toBe("");
  });

  it("shows every request with --log-requests=all", async () => {
    const port = await freePort();
    const { out: screen } = await firstScreen(port, ["--log-requests=all"]);
    expect(screen).toContain("Request log: every request (--log-requests=all)");
    const before = output.length;
    const answer = await fetch(`http://127.0.0.1:${port}/admin/skus`, {
      headers: { authorization: "Bearer dev-admin-token", "x-request-id": "follow-me" },
    });
    expect(answer.status).toBe(200);
    await untilPrinted(() => output.slice(before), '"requestId":"follow-me"');
    expect(output.slice(before)).toContain('"requestId":"follow-me"');
  });
});

describe("the quiet request log", () => {
  it("leaves out quick answers below 500 and keeps errors and slow requests", () => {
    const worker = (status: number, ms: number) =>
      `{"time":"2026-12-01T20:13:22.955Z","level":"info","msg":"request","requestId":"r","method":"GET","route":"/admin/skus","path":"/admin/skus","status":${status},"ms":${ms}}`;
    expect(isQuietRequest(worker(200, 3))).toBe(true);
    expect(isQuietRequest(worker(409, 12))).toBe(true);
    expect(isQuietRequest(worker(200, 1_500))).toBe(false);
    expect(isQuietRequest(worker(503, 2))).toBe(false);
    expect(isQuietRequest("[wrangler:info] GET /admin/skus 200 OK (12ms)")).toBe(true);
    expect(isQuietRequest("[wrangler:info] POST /api/skus/x/reservations 503 Service Unavailable (40ms)")).toBe(false);
    expect(isQuietRequest('{"time":"t","level":"warn","msg":"metrics: stock objects did not answer"}')).toBe(false);
    expect(isQuietRequest("[dev] cron: reconciliation 1a2b3c4d in 40 ms")).toBe(false);
  });
});
