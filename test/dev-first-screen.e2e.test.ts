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

/** Starts `npm run dev` and resolves with everything it printed once the banner's closing rule is out. */
async function firstScreen(port: number): Promise<string> {
  const dev = spawn("npx", ["tsx", "scripts/dev.ts", "--port", String(port)], {
    stdio: ["ignore", "pipe", "pipe"],
    env: { ...process.env, DEV_CRON_INTERVAL_MS: "0" },
    detached: true,
  });
  child = dev;
  let out = "";
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`no banner within 90 s:\n${out}`)), 90_000);
    const take = (d: Buffer) => {
      out += d.toString();
      if ((out.match(/^─{20,}$/gm) ?? []).length >= 2) {
        clearTimeout(timer);
        // A moment for anything printed right after the banner (a late warning would show here).
        setTimeout(() => resolve(out), 1_500);
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
    const screen = await firstScreen(port);
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
    expect(screen.split("\n").length).toBeLessThan(25);
  });
});
