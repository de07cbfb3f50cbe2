import { type ChildProcess, spawn } from "node:child_process";
import { createWriteStream, mkdtempSync, rmSync } from "node:fs";
import { createRequire } from "node:module";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { ensureDevVars } from "./dev-vars";
import { HARNESS_ENTRY } from "./harness";
import { migrateInto } from "./migrated-d1";
import { atExit } from "./proc";
import { workerRestarts } from "./proxy-restart";
import { freePort } from "./redis-server";

/**
 * Where wrangler dev runs the Worker's `scheduled` handler on request (the cron trigger never fires by
 * itself locally): `GET /__scheduled?cron=<pattern>`, present when wrangler dev is started with
 * `--test-scheduled`. It answers `200 Ran scheduled event` once the handler has finished, and 500 when
 * it threw. The other endpoint wrangler 4.86 advertises, `/cdn-cgi/handler/scheduled`, answers
 * `500 exception` for this Worker: with `[assets]` configured, miniflare sends it to the assets router,
 * which has no `scheduled` handler (cloudflare/workers-sdk#9882, fixed in a later miniflare).
 */
export const SCHEDULED_PATH = "/__scheduled";

/**
 * Starts the Worker as a user runs it, `wrangler dev`, on a free port of 127.0.0.1 with its own
 * state directory (D1 migrated first), for end-to-end tests from Node.
 */
export interface DevServer {
  url: string;
  /** The `--persist-to` directory of this server (D1, Durable Objects): for `wrangler d1 execute --local`. */
  stateDir: string;
  /**
   * How often wrangler dev reloaded the Worker since it was ready: it watches the worktree, so an edit
   * or a merge there mid-run reloads it, and its proxy holds or drops requests meanwhile.
   */
  reloads(): number;
  /** The last lines wrangler dev printed (to show what it said before it stopped answering). */
  tail(lines: number): string;
  /**
   * Stops wrangler dev and starts it again on the same port over the same state: every isolate and
   * object starts afresh, storage kept (a deploy, or isolates Cloudflare starts anew). Requests cut
   * off meanwhile are sent again by {@link fetchRetryingRestarts} once it is back.
   */
  restart(): Promise<void>;
  /** Stops wrangler dev and removes its state directory, or leaves it (`keepState`) to be read afterwards. */
  stop(opts?: { keepState?: boolean }): Promise<void>;
}

const RELOADING = "Reloading local server";

export async function startDevServer(opts: { vars?: Record<string, string> } = {}): Promise<DevServer> {
  ensureDevVars(); // a fresh clone has no .dev.vars yet, as for `npm run dev`
  const port = await freePort();
  const state = mkdtempSync(join(tmpdir(), "flashgate-dev-"));
  let child: ChildProcess | undefined;
  // Killed and removed at exit unless stop() ran: a process that ends without stopping it (a test
  // file cut short, a harness that crashed) leaves no wrangler dev running in its own group.
  const cancelExit = atExit(() => {
    try {
      if (child?.pid !== undefined && child.exitCode === null) process.kill(-child.pid, "SIGKILL");
    } catch {
      // The group is gone already.
    }
    rmSync(state, { recursive: true, force: true });
  });
  await migrateInto(state, process.cwd()); // where wrangler dev below reads wrangler.toml
  const vars = Object.entries(opts.vars ?? {}).flatMap(([k, v]) => ["--var", `${k}:${v}`]);
  // An inspector port of its own: wrangler's default (9229) is taken by whichever server starts first.
  const inspector = ["--inspector-port", String(await freePort())];
  const base = ["--port", String(port), "--ip", "127.0.0.1", "--persist-to", state, "--test-scheduled", ...inspector];
  // wrangler's own bin, as npx would find it, without npx's process in front (about 0.9 CPU-s a start).
  const wrangler = createRequire(join(process.cwd(), "package.json")).resolve("wrangler/bin/wrangler.js");
  const args = [wrangler, "dev", HARNESS_ENTRY, ...base, ...vars]; // with the dev, bench and chaos routes
  let log = "";
  // DEV_SERVER_LOG=<file>: wrangler dev's whole output (the Worker's JSON log lines) also goes there.
  const copy = process.env.DEV_SERVER_LOG ? createWriteStream(process.env.DEV_SERVER_LOG, { flags: "a" }) : null;
  const keep = (d: Buffer) => {
    copy?.write(d);
    log += d.toString();
  };
  const url = `http://127.0.0.1:${port}`;
  const launch = async (): Promise<ChildProcess> => {
    const child: ChildProcess = spawn(process.execPath, args, {
      stdio: ["ignore", "pipe", "pipe"],
      env: { ...process.env, WRANGLER_SEND_METRICS: "false" },
      detached: true,
    });
    child.stdout?.on("data", keep);
    child.stderr?.on("data", keep);
    const deadline = Date.now() + 60_000;
    for (;;) {
      if (child.exitCode !== null) throw new Error(`wrangler dev exited ${child.exitCode}:\n${log}`);
      try {
        // Its connection closed, not pooled: a caller whose event loop is busy when wrangler drops an idle
        // connection would send its first request on it ("other side closed").
        if ((await fetch(`${url}/healthz`, { headers: { connection: "close" } })).ok) return child;
      } catch {
        // not listening yet
      }
      if (Date.now() > deadline) throw new Error(`wrangler dev did not become ready:\n${log}`);
      await new Promise((resolve) => setTimeout(resolve, 200));
    }
  };
  const kill = async (child: ChildProcess) => {
    if (child.exitCode !== null || child.signalCode !== null || child.pid === undefined) return;
    const exited = new Promise((resolve) => child.once("exit", resolve));
    process.kill(-child.pid, "SIGTERM"); // the whole group: wrangler (its bin and its CLI) and workerd
    await exited;
  };
  child = await launch();
  let readyAt = log.length;
  // Restarts and the stop one at a time: a restart begun while another still launched would start a
  // second wrangler dev over the same port and state, and only one of the two is ever stopped.
  let turn: Promise<unknown> = Promise.resolve();
  const inTurn = (work: () => Promise<void>): Promise<void> => {
    const done = turn.then(work);
    turn = done.catch(() => undefined);
    return done;
  };
  return {
    url,
    stateDir: state,
    reloads: () => log.slice(readyAt).split(RELOADING).length - 1,
    tail: (lines) => log.split("\n").slice(-lines).join("\n"),
    async restart() {
      const restarted = inTurn(async () => {
        if (child) await kill(child);
        child = await launch();
        readyAt = log.length;
      });
      workerRestarts.during(restarted);
      await restarted;
    },
    stop({ keepState = false } = {}) {
      return inTurn(async () => {
        cancelExit();
        if (child) await kill(child);
        if (!keepState) rmSync(state, { recursive: true, force: true });
      });
    },
  };
}
