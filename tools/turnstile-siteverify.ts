import { randomUUID } from "node:crypto";
import { createServer, type IncomingMessage, type ServerResponse } from "node:http";
import { text } from "node:stream/consumers";
import { listenLocal } from "./listen";

/**
 * A local stand-in for Cloudflare Turnstile's siteverify, following its documented contract
 * (https://developers.cloudflare.com/turnstile/get-started/server-side-validation/), so the Worker's
 * check is tested against the other side of the wire, not a mock inside it:
 *
 *   POST /turnstile/v0/siteverify   form or JSON: secret, response, remoteip?, idempotency_key?
 *     -> 200 {"success": true, "challenge_ts", "hostname", "error-codes": [], "action", "cdata"}
 *     -> 200 {"success": false, "error-codes": ["invalid-input-response" | "timeout-or-duplicate" | …]}
 *
 * The documented test secrets behave as documented, whatever the answer:
 * `1x0000000000000000000000000000000AA` always passes, `2x0000000000000000000000000000000AA` always
 * fails, `3x0000000000000000000000000000000AA` answers "token already spent". With the stand-in's own
 * secret, answers are those its widget handed out (`POST /widget`, what the browser widget does), each
 * valid once for 300 s; the same idempotency key verifies the same answer again with the same result.
 * For fault tests, four more secrets: `standin-slow` answers after 5 s, `standin-500` with a 500,
 * `standin-html` with an HTML page, and `standin-slow-first` verifies as the stand-in's own secret but
 * answers a key's first call after 5 s (the answer is spent at once, as a call the caller gave up on).
 */

export const TEST_SECRETS = {
  passes: "1x0000000000000000000000000000000AA",
  fails: "2x0000000000000000000000000000000AA",
  spent: "3x0000000000000000000000000000000AA",
} as const;
export const STAND_IN_SECRET = "standin-secret";
export const FAULT_SECRETS = {
  slow: "standin-slow",
  error: "standin-500",
  html: "standin-html",
  slowFirst: "standin-slow-first",
} as const;

const ANSWER_LIFETIME_MS = 300_000;
const SLOW_MS = 5_000;

export interface Siteverify {
  /** What TURNSTILE_VERIFY_URL would be. */
  url: string;
  /** The widget's side: a fresh answer, as a browser solving the widget would get it. */
  widgetUrl: string;
  /** Verify calls received, for tests that count them. */
  calls(): number;
  close(): Promise<void>;
}

type Verdict = Record<string, unknown>;

export async function startSiteverify(opts: { hostname?: string; port?: number } = {}): Promise<Siteverify> {
  const hostname = opts.hostname ?? "localhost";
  /** Answers handed out and not yet verified: when each was issued. */
  const issued = new Map<string, number>();
  /** Verdicts by idempotency key: a retry of one verification gets its first verdict. */
  const byKey = new Map<string, { response: string; verdict: Verdict }>();
  let verifies = 0;

  const failure = (code: string): Verdict => ({ success: false, "error-codes": [code], messages: [] });
  const success = (): Verdict => ({
    success: true,
    challenge_ts: new Date().toISOString(),
    hostname,
    "error-codes": [],
    action: "",
    cdata: "",
  });

  function decide(secret: string, response: string): Verdict {
    if (!secret) return failure("missing-input-secret");
    if (!response) return failure("missing-input-response");
    if (response.length > 2048) return failure("invalid-input-response");
    if (secret === TEST_SECRETS.passes) return success();
    if (secret === TEST_SECRETS.fails) return failure("invalid-input-response");
    if (secret === TEST_SECRETS.spent) return failure("timeout-or-duplicate");
    if (secret !== STAND_IN_SECRET) return failure("invalid-input-secret");
    const at = issued.get(response);
    if (at === undefined) return failure("invalid-input-response");
    issued.delete(response); // valid once
    return Date.now() - at > ANSWER_LIFETIME_MS ? failure("timeout-or-duplicate") : success();
  }

  async function verify(req: IncomingMessage, res: ServerResponse): Promise<void> {
    verifies++;
    const body = await text(req);
    const fields: Record<string, string> = req.headers["content-type"]?.includes("application/json")
      ? (JSON.parse(body || "{}") as Record<string, string>)
      : Object.fromEntries(new URLSearchParams(body));
    const secret = fields.secret ?? "";
    const response = fields.response ?? "";
    if (secret === FAULT_SECRETS.slow) await new Promise((r) => setTimeout(r, SLOW_MS));
    if (secret === FAULT_SECRETS.error) return send(res, 500, "text/plain", "internal error");
    if (secret === FAULT_SECRETS.html) return send(res, 200, "text/html", "<html><body>Bad gateway</body></html>");
    // Keys are a site's own: the same key under another secret is another verification.
    const key = fields.idempotency_key ? `${secret}\n${fields.idempotency_key}` : undefined;
    const earlier = key ? byKey.get(key) : undefined;
    let verdict: Verdict;
    if (earlier && earlier.response === response) verdict = earlier.verdict;
    else if (earlier)
      verdict = failure("invalid-input-response"); // a key names one answer
    else {
      const slowFirst = secret === FAULT_SECRETS.slowFirst;
      verdict = decide(slowFirst ? STAND_IN_SECRET : secret, response);
      if (key) byKey.set(key, { response, verdict });
      if (slowFirst) await new Promise((r) => setTimeout(r, SLOW_MS));
    }
    send(res, 200, "application/json", JSON.stringify(verdict));
  }

  const server = createServer((req, res) => {
    const path = new URL(req.url ?? "/", "http://stand-in").pathname;
    if (req.method === "POST" && path === "/turnstile/v0/siteverify") {
      verify(req, res).catch(() => send(res, 400, "application/json", JSON.stringify(failure("bad-request"))));
    } else if (req.method === "POST" && path === "/widget") {
      const answer = `standin.${randomUUID()}`;
      issued.set(answer, Date.now());
      send(res, 200, "application/json", JSON.stringify({ response: answer }));
    } else send(res, 404, "text/plain", "not found");
  });
  const { port, close } = await listenLocal(server, opts.port);
  return {
    url: `http://127.0.0.1:${port}/turnstile/v0/siteverify`,
    widgetUrl: `http://127.0.0.1:${port}/widget`,
    calls: () => verifies,
    close,
  };
}

function send(res: ServerResponse, status: number, type: string, body: string): void {
  res.writeHead(status, { "content-type": type, "content-length": Buffer.byteLength(body) });
  res.end(body);
}
