import { createExecutionContext, waitOnExecutionContext } from "cloudflare:test";
import { env } from "cloudflare:workers";
import { shardName } from "../../durable-objects/shared/shard-name";
import type { SkuStock } from "../../durable-objects/stock/sku-stock";
import { gathererName } from "../../src/edge/gather-name";
import worker from "../../src/index";
import { shopperJwt } from "../../tools/jwt";

/**
 * Test-side client of the Worker: requests go through the Worker's real `fetch` handler, in
 * workerd, with the real bindings. (It calls the handler directly: `SELF.fetch` serialises
 * concurrent requests in the test harness and slows a 300-request burst down by minutes.)
 */

export const ADMIN_TOKEN = "test-admin-token";
const AUTH_SECRET = "test-auth-secret";

// biome-ignore lint/suspicious/noExplicitAny: tests read arbitrary JSON answers and assert on them.
type AnyJson = any;

export interface Answer<T = AnyJson> {
  status: number;
  json: T;
  headers: Headers;
}

/** RPCs the Worker made to each stock object while serving `call`s, by object name. */
const stockCalls = new Map<string, number>();

/** A stock object stub that counts the RPCs made through it. */
function countingStub<T extends object>(stub: T, name: string): T {
  return new Proxy(stub, {
    get(target, prop) {
      const value: unknown = Reflect.get(target, prop);
      if (typeof prop !== "string" || prop === "then" || typeof value !== "function") return value;
      return (...args: unknown[]) => {
        stockCalls.set(name, (stockCalls.get(name) ?? 0) + 1);
        // Reflect.apply, not value.apply: on an RPC stub, `.apply` would be a remote method's name.
        return Reflect.apply(value as (...a: unknown[]) => unknown, target, args);
      };
    },
  });
}

/**
 * The bindings `call` hands the Worker: the test's own, except that every stub the Worker gets from
 * SKU_STOCK counts its RPCs, so tests can prove the edge answered without calling a stock object.
 */
function countingNamespace<T extends Rpc.DurableObjectBranded | undefined>(
  namespace: DurableObjectNamespace<T>,
): DurableObjectNamespace<T> {
  return new Proxy(namespace, {
    get(target, prop) {
      if (prop === "getByName") {
        return (name: string, options?: DurableObjectNamespaceGetDurableObjectOptions) =>
          countingStub(target.getByName(name, options), name);
      }
      const value: unknown = Reflect.get(target, prop);
      return typeof value === "function" ? value.bind(target) : value;
    },
  });
}

const workerEnv: Env = {
  ...env,
  SKU_STOCK: countingNamespace(env.SKU_STOCK),
  GATHERER: countingNamespace(env.GATHERER),
};

/** How many RPCs the Worker has made to a SKU shard's gatherer of this test run (colo "local") so far. */
export function gathererCallsTo(sku: string, shard = 0): number {
  return stockCalls.get(gathererName(shardName(sku, shard), undefined)) ?? 0;
}

/** How many RPCs the Worker has made to a SKU shard's stock object so far (through `call`). */
export function stockCallsTo(sku: string, shard = 0): number {
  return stockCalls.get(shardName(sku, shard)) ?? 0;
}

let counter = 0;
/** A SKU id no other test uses (storage is shared between tests of a file). */
export function uniqueSku(prefix = "sku"): string {
  counter++;
  return `${prefix}-${counter}-${crypto.randomUUID().slice(0, 8)}`;
}

export async function jwtFor(userId: string, opts: { expiresIn?: number; secret?: string } = {}): Promise<string> {
  return shopperJwt(userId, opts.secret ?? AUTH_SECRET, opts.expiresIn ?? 600);
}

export interface CallOptions {
  user?: string | undefined;
  admin?: boolean;
  body?: unknown;
  raw?: BodyInit;
  headers?: Record<string, string>;
  /** Bindings to hand the Worker instead of the test's own (a var or secret set for one test). */
  env?: Partial<Env>;
}

export async function call<T = AnyJson>(method: string, path: string, opts: CallOptions = {}): Promise<Answer<T>> {
  const headers = new Headers(opts.headers);
  if (opts.user !== undefined) headers.set("authorization", `Bearer ${await jwtFor(opts.user)}`);
  if (opts.admin) headers.set("authorization", `Bearer ${ADMIN_TOKEN}`);
  const body = opts.raw ?? (opts.body === undefined ? undefined : JSON.stringify(opts.body));
  if (body !== undefined) headers.set("content-type", "application/json");
  const ctx = createExecutionContext();
  const request = new Request(`http://flashgate.test${path}`, { method, headers, body: body ?? null });
  const response = await worker.fetch(request, opts.env ? { ...workerEnv, ...opts.env } : workerEnv, ctx);
  await waitOnExecutionContext(ctx);
  const text = await response.text();
  let json: T;
  try {
    json = JSON.parse(text) as T;
  } catch {
    json = { text } as T;
  }
  return { status: response.status, json, headers: response.headers };
}

/**
 * Spends `user`'s rate-limit allowance (25 GETs of their reservations, against 20 a window), then
 * runs `then`. The limiter counts in fixed 10 s windows (Miniflare's, as Cloudflare's): an answer
 * 2xx came in the next window, with a fresh allowance, so the whole is tried again (3 times at most).
 */
export async function overTheLimit(user: string, then: () => Promise<Answer>): Promise<Answer> {
  for (let attempt = 1; ; attempt++) {
    await Promise.all(Array.from({ length: 25 }, () => call("GET", "/api/me/reservations", { user })));
    const answer = await then();
    if (answer.status >= 300 || attempt === 3) return answer;
  }
}

export async function createSku(sku: string, settings: Record<string, unknown>): Promise<Answer> {
  const answer = await call("PUT", `/admin/skus/${sku}`, { admin: true, body: settings });
  if (answer.status !== 200) throw new Error(`creating ${sku} failed: ${answer.status} ${JSON.stringify(answer.json)}`);
  return answer;
}

export async function tokenFor(user: string, sku: string): Promise<string> {
  const answer = await call("POST", `/api/skus/${sku}/tokens`, { user });
  if (answer.status !== 201)
    throw new Error(`token for ${user} failed: ${answer.status} ${JSON.stringify(answer.json)}`);
  return answer.json.token as string;
}

export async function reserve(user: string, sku: string, quantity = 1, token?: string): Promise<Answer> {
  return call("POST", `/api/skus/${sku}/reservations`, {
    user,
    body: { token: token ?? (await tokenFor(user, sku)), quantity },
  });
}

export async function stockOf(sku: string): Promise<{ total: number; available: number; held: number; sold: number }> {
  const answer = await call("GET", `/admin/skus/${sku}`, { admin: true });
  return answer.json.stock;
}

/**
 * The stock object of a SKU's shard, for tests that look inside it: typed to the whole class, where
 * the product's callers each get one face (src/stock/stock-client.ts).
 */
export function stockShard(env: Env, sku: string, shard: number): DurableObjectStub<SkuStock> {
  return env.SKU_STOCK.getByName(shardName(sku, shard));
}
