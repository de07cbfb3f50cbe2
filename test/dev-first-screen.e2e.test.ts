import { type ChildProcess, spawn } from "node:child_process";
import { existsSync } from "node:fs";
import { afterEach, describe, expect, it } from "vitest";
import { isQuietLine, isQuietRequest } from "../scripts/dev-output";
import { readDevVars } from "../tools/dev-vars";
import { shopperJwt } from "../tools/jwt";
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
async function firstScreen(
  port: number,
  extra: string[] = [],
  env: Record<string, string> = {},
): Promise<{ out: string; statuses: number[] }> {
  output = "";
  // Its own inspector port: wrangler's default (9229) may be taken by another test's server.
  const inspector = ["--inspector-port", String(await freePort())];
  // As package.json's `dev` runs it: node with tsx's loader, no tsx parent process between (that one
  // SIGKILLs its child when the child is slow to say it got a Ctrl-C, cutting its clean-up short).
  const dev = spawn("node", ["--import", "tsx", "scripts/dev.ts", "--port", String(port), ...inspector, ...extra], {
    stdio: ["ignore", "pipe", "pipe"],
    env: { ...process.env, DEV_CRON_INTERVAL_MS: "0", ...env },
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

/**
 * The lines the dev server printed, less blank ones, wrangler's own (⎔) and warnings and errors (they
 * pass by design: on a loaded machine the mirror may time out and say so).
 */
const printedLines = (printed: string) =>
  printed
    .split("\n")
    .filter(
      (line) => line.trim() !== "" && !line.startsWith("⎔ ") && !/WARNING|ERROR|"level":"(warn|error)"/.test(line),
    );
const CRON_LINE = "[dev] cron: ";

describe("npm run dev", () => {
  // One server for a newcomer's whole first session (each start costs a few CPU-seconds): the banner,
  // a quiet log while a dashboard polls, a sale's queue batch and cron runs, then Ctrl-C.
  it("shows one banner with the URLs, the admin token and npm run jwt, and none of wrangler's noise; says nothing per request, queue batch or cron run but its [dev] cron line; leaves no redis folder after Ctrl-C", async () => {
    const port = await freePort();
    const { out: screen, statuses } = await firstScreen(port, [], { DEV_CRON_INTERVAL_MS: "2000" });
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
    const polled = output.length;
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
    expect(printedLines(output.slice(polled)).filter((line) => !line.startsWith(CRON_LINE))).toEqual([]);
    await aSaleThenCtrlC(base, screen);
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

/**
 * A sale on the running dev server: its queue batch and cron runs print nothing but a [dev] cron line
 * a run; then Ctrl-C stops everything and leaves no redis-server data directory behind.
 */
async function aSaleThenCtrlC(base: string, screen: string): Promise<void> {
  // The banner names redis-server's data directory, a fresh one in the temp directory.
  const dir = /\(data in (\S+flashgate-redis-[^)\s]+)\)/.exec(screen)?.[1];
  expect(dir, screen).toBeDefined();
  expect(existsSync(dir ?? "")).toBe(true);
  const before = output.length;
  const admin = { authorization: "Bearer dev-admin-token", "content-type": "application/json" };
  const sku = `quiet-${Date.now().toString(36)}`;
  const created = await fetch(`${base}/admin/skus/${sku}`, {
    method: "PUT",
    headers: admin,
    body: JSON.stringify({ totalStock: 5, test: true }),
  });
  expect(created.status).toBe(200);
  const shopper = { authorization: `Bearer ${await shopperJwt("quinn", readDevVars().AUTH_SECRET ?? "")}` };
  const token = (await (
    await fetch(`${base}/api/skus/${sku}/tokens`, { method: "POST", headers: shopper })
  ).json()) as {
    token: string;
  };
  const held = await fetch(`${base}/api/skus/${sku}/reservations`, {
    method: "POST",
    headers: { ...shopper, "content-type": "application/json" },
    body: JSON.stringify({ token: token.token, quantity: 1 }),
  });
  expect(held.status).toBe(202);
  const { reservationId } = (await held.json()) as { reservationId: string };
  // The queue batch: the order row reaches D1 through the order-events consumer.
  for (const started = Date.now(); ; ) {
    const read = await fetch(`${base}/api/reservations/${reservationId}`, { headers: shopper });
    if (((await read.json()) as { order?: { persisted?: boolean } }).order?.persisted) break;
    if (Date.now() - started > 15_000) throw new Error(`order not persisted within 15 s:\n${output.slice(before)}`);
    await new Promise((resolve) => setTimeout(resolve, 100));
  }
  // Two cron runs after it (the second a whole run after the batch), then a second to look in.
  await untilPrinted(() => output.slice(before), "[dev] cron: reconciliation");
  const runs = () => (output.slice(before).match(/\[dev\] cron: reconciliation/g) ?? []).length;
  for (const started = Date.now(); runs() < 3; ) {
    if (Date.now() - started > 20_000) throw new Error(`fewer than 3 cron runs in 20 s:\n${output.slice(before)}`);
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
  await new Promise((resolve) => setTimeout(resolve, 1_000));
  const printed = output.slice(before);
  // What a batch and a run used to print: wrangler's QUEUE line and the Worker's JSON lines.
  expect(printed).not.toMatch(/QUEUE order-events/);
  expect(printed).not.toContain("order events applied");
  expect(printed).not.toContain("reconciliation finished");
  // What is left: a [dev] cron line per run (or per run skipped while the last still went), nothing else.
  expect(
    printedLines(printed).every((line) => line.startsWith(CRON_LINE)),
    printed,
  ).toBe(true);

  // Ctrl-C: the terminal sends SIGINT to every process of the group.
  const dev = child;
  const exited = new Promise((resolve) => dev?.once("exit", resolve));
  if (dev?.pid === undefined) throw new Error("npm run dev is not running");
  process.kill(-dev.pid, "SIGINT");
  await exited;
  child = undefined; // stopped (a process ended by a signal keeps exitCode null: afterEach would wait on it)
  expect(existsSync(dir ?? ""), `${dir} is left after Ctrl-C`).toBe(false);
}

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

  it("leaves out a queue batch acked whole and the Worker's info lines, and keeps retries, warnings and errors", () => {
    expect(isQuietLine("[wrangler:info] QUEUE order-events 1/1 (9ms)")).toBe(true);
    expect(isQuietLine("QUEUE webhook-deliveries 3/3 (2ms)")).toBe(true);
    expect(isQuietLine("[wrangler:info] QUEUE order-events 0/2 (9ms)")).toBe(false);
    expect(isQuietLine('{"time":"t","level":"info","msg":"order events applied","messages":1}')).toBe(true);
    expect(isQuietLine('{"time":"t","level":"info","msg":"reconciliation finished","errors":0}')).toBe(true);
    expect(isQuietLine('{"time":"t","level":"warn","msg":"metrics: stock objects did not answer"}')).toBe(false);
    expect(isQuietLine('{"time":"t","level":"error","msg":"order events failed"}')).toBe(false);
    const slow = `{"time":"t","level":"info","msg":"request","requestId":"r","method":"GET","route":"/x","path":"/x","status":200,"ms":1500}`;
    expect(isQuietLine(slow)).toBe(false);
    expect(isQuietLine("[dev] cron: reconciliation 1a2b3c4d in 40 ms")).toBe(false);
    expect(isQuietLine("⎔ Reloading local server...")).toBe(false);
  });
});
