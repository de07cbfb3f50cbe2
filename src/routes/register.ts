import type { Context, Hono, MiddlewareHandler } from "hono";
import type { z } from "zod";
import { adminAuth, shopperAuth, shopperRateLimit } from "../http/auth";
import { parseJson, withBodyLimit } from "../http/body";
import type { AppEnv } from "../http/context";
import { ApiError } from "../http/errors";
import { verifyPaymentSignature } from "../payments/webhook-signature";
import type { Access, ContractRoute } from "./contract";
import { CONTRACT_SCHEMAS, type SchemaName } from "./contract-schemas";

/** The parsed body a route's handler receives: the type of its contract schema, or nothing. */
type BodyOf<R extends ContractRoute> = R["body"] extends SchemaName
  ? z.infer<(typeof CONTRACT_SCHEMAS)[R["body"]]>
  : undefined;

/** A route's own work, once its caller is admitted and its body parsed. */
type RouteHandler<R extends ContractRoute> = (
  c: Context<AppEnv, R["path"]>,
  body: BodyOf<R>,
) => Response | Promise<Response>;

/** Who may call a route, as middleware. A payment webhook's caller is proven by the signature over its body. */
const ADMISSION: Record<Access, MiddlewareHandler<AppEnv>[]> = {
  public: [],
  shopper: [shopperAuth, shopperRateLimit],
  admin: [adminAuth],
  paymentWebhook: [],
};

/** Options of {@link register}. */
interface RegisterOptions {
  /** Middleware ahead of everything else (a counter that must see the `401`s too). */
  before?: MiddlewareHandler<AppEnv>[];
  /**
   * `"handler"`: a shopper route whose handler calls `limitShopper` itself, after the answers that
   * cost less than the rate-limit binding (the reservation's isolate-local `SOLD_OUT`).
   */
  rateLimit?: "handler";
  /**
   * Middleware between the body's size check and admission: answers that need no credentials
   * (API.md "Sold out comes first": a SKU the isolate knows is sold out).
   */
  first?: MiddlewareHandler<AppEnv>[];
}

/**
 * An admin route that takes no body refuses one (strict, like every admin body): an option sent as
 * JSON (`{"full": true}` to POST /admin/reconcile) would otherwise be dropped without a word. Empty
 * and `{}` pass.
 */
async function refuseBody(c: Context<AppEnv>, route: ContractRoute): Promise<void> {
  const raw = (await c.req.text()).trim();
  if (raw === "") return;
  let keys: string[] = [];
  try {
    const parsed: unknown = JSON.parse(raw);
    if (parsed && typeof parsed === "object" && !Array.isArray(parsed)) {
      keys = Object.keys(parsed);
      if (keys.length === 0) return; // `{}`, however spaced
    }
  } catch {
    // not JSON: refused all the same
  }
  const options = (route.query ?? []).map((q) => `?${q.name}=`);
  const where = options.length > 0 ? ` Its options are query parameters: ${options.join(", ")}.` : "";
  throw new ApiError(
    "INVALID_REQUEST",
    `${route.method.toUpperCase()} ${route.path} takes no body, and nothing was done.${where}`,
    {},
    {
      fields:
        keys.length > 0
          ? keys.map((path) => ({ path, message: "unknown field" }))
          : [{ path: "body", message: "this route takes no body" }],
      ...(keys.length > 0 ? { unknownFields: keys } : {}),
    },
  );
}

/**
 * Registers one route of the contract (./contract.ts) on `app`. The entry decides everything a
 * route would otherwise repeat: the method and path, who may call it (`access`), and how its body
 * is read (`body`: the raw text is signature-checked first for payment webhooks, then parsed and validated
 * with the contract's schema: `400 INVALID_REQUEST` names the fields at fault).
 */
export function register<const R extends ContractRoute>(
  app: Hono<AppEnv>,
  route: R,
  handler: RouteHandler<R>,
  opts: RegisterOptions = {},
): void {
  const schema: z.ZodType | undefined = route.body === undefined ? undefined : CONTRACT_SCHEMAS[route.body];
  const signature = route.signature;
  if (route.access === "paymentWebhook" && (!signature || !schema)) {
    throw new Error(`${route.method} ${route.path}: a payment webhook route names its signature and body`);
  }
  const takesNothing = !schema && !(route.access === "admin" && route.method !== "get");
  // A route with no body to read calls its handler as it is: no async frame of its own around it.
  const direct: MiddlewareHandler<AppEnv> = (c) =>
    handler(c as Context<AppEnv, R["path"]>, undefined as BodyOf<R>) as Promise<Response>;
  const run: MiddlewareHandler<AppEnv> = takesNothing
    ? direct
    : async (c) => {
        let body: unknown;
        if (schema) {
          const raw = await c.req.text();
          if (signature) {
            const secret = c.env[signature.secret];
            if (!secret) throw new ApiError("SIGNATURE_INVALID", `No ${signature.secret} is configured.`);
            await verifyPaymentSignature(c.req.header(signature.header), raw, secret, Date.now(), signature.header);
          }
          body = parseJson(raw, schema);
        } else if (route.access === "admin" && route.method !== "get") {
          await refuseBody(c, route);
        }
        return handler(c as Context<AppEnv, R["path"]>, body as BodyOf<R>);
      };
  const admission = opts.rateLimit === "handler" ? [shopperAuth] : ADMISSION[route.access];
  if (opts.rateLimit === "handler" && route.access !== "shopper") {
    throw new Error(`${route.method} ${route.path}: only a shopper route is rate limited`);
  }
  const [next, ...rest] = [...(opts.first ?? []), ...admission, run] as [MiddlewareHandler<AppEnv>];
  // Every route a body may come with refuses one over MAX_BODY_BYTES (API.md), those that read none
  // included: a shopper's 17 KiB token request is 413, not a token. A GET has no body to refuse.
  const handlers = [...(opts.before ?? []), route.method === "get" ? next : withBodyLimit(next), ...rest];
  app.on(route.method.toUpperCase(), route.path, ...(handlers as [MiddlewareHandler<AppEnv>]));
}
