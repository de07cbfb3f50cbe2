import { type ChildProcess, spawn } from "node:child_process";
import { afterAll, describe, expect, it } from "vitest";
import { freePort } from "../tools/redis-server";

/**
 * `npm run dev` as a newcomer sees it (scripts/dev.ts), on a machine without internet access as
 * this one is: migrations quiet, no prompt text, no stack traces, no table of bindings, and one
 * banner naming the storefront, the dashboard, the OpenAPI document, the admin token and
 * `npm run jwt`.
 */

let child: ChildProcess | undefined;
afterAll(async () => {
  if (child?.exitCode === null && child.pid !== undefined) {
    const exited = new Promise((resolve) => child?.once("exit", resolve));
    process.kill(-child.pid, "SIGTERM"); // dev.ts stops wrangler, redis-server and the bridge
    await exited;
  }
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
 * Starts `npm run dev`, waits for the banner's closing rule, opens the banner's URLs, and resolves
 * with everything printed by then and the URLs' statuses.
 */
async function firstScreen(port: number): Promise<{ out: string; statuses: number[] }> {
  const dev = spawn("npx", ["tsx", "scripts/dev.ts", "--port", String(port)], {
    stdio: ["ignore", "pipe", "pipe"],
    env: { ...process.env, DEV_CRON_INTERVAL_MS: "0" },
    detached: true,
  });
  child = dev;
  let out = "";
  let bannerSeen = false;
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`no banner within 90 s:\n${out}`)), 90_000);
    const take = (d: Buffer) => {
      out += d.toString();
      if (!bannerSeen && (out.match(/^─{20,}$/gm) ?? []).length >= 2) {
        bannerSeen = true;
        clearTimeout(timer);
        // No fixed wait for late output: the newcomer's first moves (opening the banner's URLs) are
        // made and answered, and the screen is what was printed by then, those requests' lines too.
        void openBannerUrls(port).then(
          // The requests' own log lines come a moment after their answers: wait (bounded) for the last.
          (statuses) =>
            untilPrinted(() => out, "GET /healthz").then(
              () => resolve({ out, statuses }),
              (err: unknown) => reject(err),
            ),
          (err: unknown) => reject(err),
        );
      }
    };
    dev.stdout.on("data", take);
    dev.stderr.on("data", take);
    dev.once("exit", (code) => reject(new Error(`npm run dev exited ${code}:\n${out}`)));
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
    expect(screen).toMatch(/\[dev\] D1: (applied \d+ migrations to|local database up to date)/);
    // What the first screen used to show: migration tables, a prompt, bindings, offline stack traces.
    for (const noise of [
      "┌",
      "continue?",
      "About to apply",
      "has access to the following bindings",
      "Error:",
      "    at ",
    ]) {
      expect(screen).not.toContain(noise);
    }
    // One line per request the newcomer made (the Worker's JSON log line and wrangler's) aside.
    const lines = screen
      .split("\n")
      .filter((l) => !l.includes('"msg":"request"') && !l.startsWith("[wrangler:info] GET"));
    expect(lines.length).toBeLessThan(25);
  });
});
