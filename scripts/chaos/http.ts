import { solveProofOfWork } from "../../tools/proof-of-work";
/** The harness's HTTP client: JSON in and out, a timeout on every call, retries only where asked. */
import { fetchRetryingRestarts } from "../../tools/proxy-restart";

export interface Reply {
  status: number;
  /** Parsed JSON body, or null when the body is not JSON. */
  json: unknown;
  text: string;
  headers: Headers;
}

export interface Secrets {
  authSecret: string;
  adminToken: string;
  webhookSecret: string;
  /** STRIPE_WEBHOOK_SECRET of the dev server (`/webhooks/stripe`). */
  stripeSecret: string;
}

export class Client {
  constructor(
    readonly base: string,
    readonly secrets: Secrets,
    /** The Worker's POW_BITS: above 0, shoppers solve a proof of work before each token. */
    readonly powBits = 0,
  ) {}

  /**
   * `POST /api/skus/:sku/tokens` as a shopper's page asks for it: with the proof of work solved when
   * the Worker asks for one (a challenge of this user and SKU, from `GET /api/skus/:sku/challenge`).
   */
  async mint(sku: string, headers: Record<string, string>): Promise<Reply> {
    const answer: Record<string, string> = {};
    if (this.powBits > 0) {
      const offered = await this.request("GET", `/api/skus/${sku}/challenge`, { headers });
      const { challenge, bits } = (offered.json ?? {}) as { challenge?: unknown; bits?: unknown };
      if (offered.status === 200 && typeof challenge === "string" && typeof bits === "number") {
        answer["Proof-Of-Work"] = solveProofOfWork(challenge, bits);
      }
    }
    return this.request("POST", `/api/skus/${sku}/tokens`, { headers: { ...headers, ...answer } });
  }

  async request(
    method: string,
    path: string,
    opts: { body?: unknown; headers?: Record<string, string> } = {},
  ): Promise<Reply> {
    const headers: Record<string, string> = { ...opts.headers };
    let body: string | undefined;
    if (opts.body !== undefined) {
      body = typeof opts.body === "string" ? opts.body : JSON.stringify(opts.body);
      headers["content-type"] ??= "application/json";
    }
    // Sent again, unchanged, when wrangler dev's proxy dropped it (every write is idempotent).
    const { response, text } = await fetchRetryingRestarts(`${this.base}${path}`, {
      method,
      headers,
      ...(body === undefined ? {} : { body }),
      signal: AbortSignal.timeout(30_000),
    });
    let json: unknown = null;
    try {
      json = JSON.parse(text);
    } catch {
      json = null;
    }
    return { status: response.status, json, text, headers: response.headers };
  }

  admin(method: string, path: string, body?: unknown): Promise<Reply> {
    return this.request(method, path, { headers: { authorization: `Bearer ${this.secrets.adminToken}` }, body });
  }
}

export const sleep = (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms));

/**
 * A check read again up to four times 400 ms apart (a transfer between shards in flight takes its
 * units out of one shard before the other has them): the last problem found, or null.
 */
export async function settled(check: () => Promise<string | null>): Promise<string | null> {
  let problem: string | null = null;
  for (let read = 0; read < 4; read++) {
    problem = await check();
    if (problem === null) return null;
    await sleep(400);
  }
  return problem;
}

/** The `error.code` of a contract error body, or null. */
export function errorCode(json: unknown): string | null {
  if (typeof json !== "object" || json === null || !("error" in json)) return null;
  const error = json.error;
  if (typeof error !== "object" || error === null || !("code" in error)) return null;
  return typeof error.code === "string" ? error.code : null;
}

/** A string field of a JSON object, or undefined. */
export function field(json: unknown, name: string): unknown {
  if (typeof json !== "object" || json === null) return undefined;
  return (json as Record<string, unknown>)[name];
}

export function str(json: unknown, name: string): string | undefined {
  const value = field(json, name);
  return typeof value === "string" ? value : undefined;
}

export function num(json: unknown, name: string): number | undefined {
  const value = field(json, name);
  return typeof value === "number" ? value : undefined;
}
