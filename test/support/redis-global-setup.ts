import { mkdtempSync, rmSync } from "node:fs";
import { createServer, type IncomingMessage, type ServerResponse } from "node:http";
import { tmpdir } from "node:os";
import { join } from "node:path";
import type { TestProject } from "vitest/node";
import { freePort, hasRedisServer, REDIS_MISSING, type RedisServer, startRedis } from "../../tools/redis-server";
import { startStripe } from "../../tools/stripe-api";
import { startSiteverify } from "../../tools/turnstile-siteverify";
import { startBridge } from "../../tools/upstash-bridge";
import { startWebhookReceiver } from "../../tools/webhook-receiver";

/**
 * Vitest globalSetup of the workerd projects: a private redis-server, the Upstash REST bridge in front
 * of it, the Turnstile siteverify stand-in, the Stripe API stand-in, a shop's webhook receiver, and a small control server, all in Node (workerd cannot start processes). Tests read the URLs
 * with `inject("redis")` and reach them with fetch from inside workerd; the workers-mirror project also
 * binds the bridge as the Worker's UPSTASH_REDIS_REST_URL/_TOKEN (vitest.config.ts).
 *
 * Control server (POST, no body): /redis/stop and /redis/start stop and restart the redis-server on the
 * same port and data directory (append-only file on, so data survives like a real restart);
 * /redis/pause and /redis/resume freeze it with SIGSTOP/SIGCONT (connections stay open, nothing
 * answers); /hang accepts any request and never answers (a black hole for timeout tests).
 */

export interface RedisFixture {
  /** The bridge's URL: what UPSTASH_REDIS_REST_URL would be. */
  bridgeUrl: string;
  token: string;
  controlUrl: string;
}

/** The Turnstile siteverify stand-in (tools/turnstile-siteverify.ts) the challenge tests verify against. */
export interface TurnstileFixture {
  verifyUrl: string;
  widgetUrl: string;
}

/** A shop's webhook receiver (tools/webhook-receiver.ts), checking deliveries with `standardwebhooks`. */
export interface ReceiverFixture {
  url: string;
}

declare module "vitest" {
  export interface ProvidedContext {
    redis: RedisFixture;
    turnstile: TurnstileFixture;
    /** The Stripe API stand-in (tools/stripe-api.ts): what STRIPE_API_URL would be. */
    stripe: { apiUrl: string };
    receiver: ReceiverFixture;
  }
}

export default async function setup(project: TestProject): Promise<() => Promise<void>> {
  if (!hasRedisServer()) {
    // One line, no stack: the fix is to install redis-server, nothing in the trace would help.
    console.error(`\n${REDIS_MISSING}\n`);
    process.exit(1);
  }
  const dir = mkdtempSync(join(tmpdir(), "flashgate-test-redis-"));
  const port = await freePort();
  const start = () => startRedis({ port, dir, persist: true });
  let server: RedisServer | undefined = await start();
  let paused = false;
  const token = `test-${crypto.randomUUID()}`;
  const bridge = await startBridge({ redisUrl: server.url, token });

  const hanging = new Set<ServerResponse>();
  // One control operation at a time, in arrival order.
  let queue: Promise<unknown> = Promise.resolve();
  const operations: Record<string, () => Promise<void>> = {
    "/redis/stop": async () => {
      if (paused) server?.process.kill("SIGCONT");
      paused = false;
      await server?.stop({ keepData: true });
      server = undefined;
    },
    "/redis/start": async () => {
      server ??= await start();
    },
    "/redis/pause": async () => {
      if (server && !paused) server.process.kill("SIGSTOP");
      paused = true;
    },
    "/redis/resume": async () => {
      if (server && paused) server.process.kill("SIGCONT");
      paused = false;
    },
  };
  const control = createServer((req: IncomingMessage, res: ServerResponse) => {
    const path = new URL(req.url ?? "/", "http://control").pathname;
    if (path === "/hang" || path.startsWith("/hang/")) {
      hanging.add(res);
      req.resume();
      return;
    }
    const operation = req.method === "POST" ? operations[path] : undefined;
    if (!operation) {
      res.writeHead(404).end();
      return;
    }
    req.resume();
    const done = queue.then(operation);
    queue = done.catch(() => undefined);
    done.then(
      () => res.writeHead(200, { "content-type": "application/json" }).end(JSON.stringify({ ok: true })),
      (error: unknown) => res.writeHead(500).end(String(error)),
    );
  });
  const controlPort = await freePort();
  await new Promise<void>((resolve) => control.listen(controlPort, "127.0.0.1", resolve));

  project.provide("redis", { bridgeUrl: bridge.url, token, controlUrl: `http://127.0.0.1:${controlPort}` });
  const siteverify = await startSiteverify({ hostname: "flashgate.test" });
  project.provide("turnstile", { verifyUrl: siteverify.url, widgetUrl: siteverify.widgetUrl });
  const stripe = await startStripe();
  project.provide("stripe", { apiUrl: stripe.url });
  const receiver = await startWebhookReceiver();
  project.provide("receiver", { url: receiver.url });

  return async () => {
    await siteverify.close();
    await stripe.close();
    await receiver.close();
    for (const res of hanging) res.destroy();
    control.closeAllConnections();
    await new Promise<void>((resolve) => control.close(() => resolve()));
    await bridge.close();
    if (paused) server?.process.kill("SIGCONT");
    await server?.stop({ keepData: true });
    rmSync(dir, { recursive: true, force: true });
  };
}
