import { createServer, type IncomingMessage, type ServerResponse } from "node:http";
import { text } from "node:stream/consumers";
import { Webhook } from "standardwebhooks";
import { listenLocal } from "./listen";

/**
 * A shop's webhook receiver, for tests, chaos and the bench: a Node HTTP server that checks every
 * delivery with `standardwebhooks`, the scheme's reference library, as a shop's own receiver would.
 * Each endpoint is a path, `/hooks/<name>`, with its own behaviour, set over a control route:
 *
 *   PUT /control/<name>  {"secret": "whsec_…", "fail"?: n, "drop"?: n, "delayMs"?: ms, "delayMaxMs"?: ms,
 *                         "status"?: code, "keep"?: boolean}   (resets what was received)
 *     fail: the first n requests answer 500; drop: the next n are read and recorded, then the
 *     connection is cut without an answer (a receiver that processed it but whose answer was lost:
 *     it will see it again); delayMs: every answer waits that long (delayMaxMs: a time drawn
 *     between the two, for each answer); status: the answer otherwise (default 204); keep: false
 *     keeps counts and lags only, not each request (the bench's setting); location, answerBody:
 *     sent with every answer (a redirect, an oversized body).
 *   PATCH /control/<name>  any of "fail", "drop", "delayMs", "delayMaxMs", "status", "location",
 *                         "answerBody"   (keeps what was received)
 *     changes the behaviour from the next request on. With fail or drop (either left out: 0), the
 *     window starts again there: the next `fail` requests answer 500, the `drop` after them are cut.
 *   GET /control/<name>  {"received": [...], "count", "events", "verified", "unverified", "lagsMs": [...], "firstAt", "lastAt"}
 *     (`?counts`: without `received` and `lagsMs`, for polling while thousands arrive); firstAt and
 *     lastAt: when the first and the latest request came (ms since the epoch, null before any);
 *     events: the events of the verified requests answered 2xx (a batch's each, API.md v1.4).
 *
 * A request is recorded with its `webhook-id`, whether its signature verified, its body and when it
 * came; `lagsMs` are the times from the change (`data.updatedAt`) to its arrival.
 */

export interface Received {
  webhookId: string;
  timestamp: number;
  verified: boolean;
  receivedAt: number;
  answered: number | "dropped";
  body: {
    type: string;
    timestamp: string;
    data: {
      reservationId: string;
      status: string;
      updatedAt: string;
      /** A batch's (`type` "batch"): each event with the `webhook-id` it would have had alone. */
      events?: {
        id: string;
        type: string;
        timestamp: string;
        data: { reservationId: string; status: string; updatedAt: string };
      }[];
    };
  } | null;
}

export interface Behaviour {
  secret: string;
  fail?: number;
  drop?: number;
  delayMs?: number;
  /** When above delayMs, each answer waits a time drawn between delayMs and this. */
  delayMaxMs?: number;
  status?: number;
  keep?: boolean;
  /** Sent with every answer: a `location` (to show redirects are not followed) and a body. */
  location?: string;
  answerBody?: string;
}

interface Endpoint {
  behaviour: Behaviour;
  verifier: Webhook;
  requests: number;
  /** The request count at which the fail and drop windows start (0, or where a PATCH set them). */
  windowStart: number;
  received: Received[];
  verified: number;
  unverified: number;
  /** Events of verified requests answered 2xx: one a single event, each of a batch. */
  events: number;
  lagsMs: number[];
  firstAt: number | null;
  lastAt: number | null;
}

export interface WebhookReceiver {
  /** http://127.0.0.1:<port>: endpoints are `${url}/hooks/<name>`. */
  url: string;
  close(): Promise<void>;
}

function json(res: ServerResponse, status: number, value: unknown): void {
  res.writeHead(status, { "content-type": "application/json" }).end(JSON.stringify(value));
}

export async function startWebhookReceiver(opts: { port?: number } = {}): Promise<WebhookReceiver> {
  const endpoints = new Map<string, Endpoint>();

  async function control(name: string, req: IncomingMessage, res: ServerResponse, countsOnly: boolean) {
    if (req.method === "PUT") {
      const behaviour = JSON.parse(await text(req)) as Behaviour;
      endpoints.set(name, {
        behaviour,
        verifier: new Webhook(behaviour.secret),
        requests: 0,
        windowStart: 0,
        received: [],
        verified: 0,
        unverified: 0,
        events: 0,
        lagsMs: [],
        firstAt: null,
        lastAt: null,
      });
      return json(res, 200, { ok: true });
    }
    const endpoint = endpoints.get(name);
    if (!endpoint) return json(res, 404, { error: "no such endpoint" });
    if (req.method === "PATCH") {
      const { secret: _secret, keep: _keep, ...changes } = JSON.parse(await text(req)) as Partial<Behaviour>;
      if (changes.fail !== undefined || changes.drop !== undefined) {
        endpoint.windowStart = endpoint.requests;
        changes.fail ??= 0;
        changes.drop ??= 0;
      }
      endpoint.behaviour = { ...endpoint.behaviour, ...changes };
      return json(res, 200, { ok: true });
    }
    const { received, verified, unverified, events, lagsMs, requests, firstAt, lastAt } = endpoint;
    if (countsOnly) return json(res, 200, { count: requests, events, verified, unverified, firstAt, lastAt });
    return json(res, 200, { received, count: requests, events, verified, unverified, lagsMs, firstAt, lastAt });
  }

  async function hook(name: string, req: IncomingMessage, res: ServerResponse) {
    const endpoint = endpoints.get(name);
    const body = await text(req);
    if (!endpoint) return json(res, 404, { error: "no such endpoint" });
    const receivedAt = Date.now();
    const headers = {
      "webhook-id": String(req.headers["webhook-id"] ?? ""),
      "webhook-timestamp": String(req.headers["webhook-timestamp"] ?? ""),
      "webhook-signature": String(req.headers["webhook-signature"] ?? ""),
    };
    let parsed: Received["body"] = null;
    let verified = false;
    try {
      parsed = endpoint.verifier.verify(body, headers) as Received["body"];
      verified = true;
    } catch {
      // recorded as unverified below
    }
    const n = endpoint.requests++ - endpoint.windowStart;
    endpoint.firstAt ??= receivedAt;
    endpoint.lastAt = receivedAt;
    const { fail = 0, drop = 0, delayMs = 0, delayMaxMs = 0, status = 204, keep = true } = endpoint.behaviour;
    const answered = n < fail ? 500 : n < fail + drop ? "dropped" : verified ? status : 401;
    if (verified) endpoint.verified++;
    else endpoint.unverified++;
    if (parsed?.data?.updatedAt) endpoint.lagsMs.push(receivedAt - Date.parse(parsed.data.updatedAt));
    for (const event of parsed?.data?.events ?? []) {
      if (event.data?.updatedAt) endpoint.lagsMs.push(receivedAt - Date.parse(event.data.updatedAt));
    }
    if (typeof answered === "number" && answered >= 200 && answered < 300) {
      endpoint.events += parsed?.type === "batch" ? (parsed.data.events?.length ?? 0) : 1;
    }
    if (keep) {
      endpoint.received.push({
        webhookId: headers["webhook-id"],
        timestamp: Number(headers["webhook-timestamp"]),
        verified,
        receivedAt,
        answered,
        body: parsed,
      });
    }
    const wait = delayMaxMs > delayMs ? delayMs + Math.random() * (delayMaxMs - delayMs) : delayMs;
    // Unref'd: a receiver holding an answer back never keeps its process alive.
    if (wait > 0) await new Promise((resolve) => setTimeout(resolve, wait).unref());
    if (answered === "dropped") {
      req.socket.destroy();
      return;
    }
    const { location, answerBody } = endpoint.behaviour;
    res
      .writeHead(answered, { "content-type": "text/plain", ...(location ? { location } : {}) })
      .end(answerBody ?? (answered === 500 ? "receiver failing on purpose" : ""));
  }

  const server = createServer((req, res) => {
    const url = new URL(req.url ?? "/", "http://receiver");
    const [, kind, name] = url.pathname.split("/");
    const handled =
      kind === "control" && name
        ? control(name, req, res, url.searchParams.has("counts"))
        : kind === "hooks" && name
          ? hook(name, req, res)
          : null;
    if (!handled) return json(res, 404, { error: "no such route" });
    handled.catch((err: unknown) => json(res, 500, { error: String(err) }));
  });
  server.keepAliveTimeout = 60_000;
  const { port, close } = await listenLocal(server, opts.port);
  return { url: `http://127.0.0.1:${port}`, close };
}
