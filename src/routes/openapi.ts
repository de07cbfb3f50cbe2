import { Hono } from "hono";
import { z } from "zod";
import type { AppEnv } from "../http/context";
import { ERRORS, type ErrorCode } from "../http/errors";
import { type Access, CONTRACT_ROUTES, type ContractRoute, errorCodesOf, PATH_PARAMETERS, ROUTES } from "./contract";
import { CONTRACT_SCHEMAS, type SchemaName } from "./contract-schemas";
import { register } from "./register";

/**
 * `GET /openapi.json`: the contract (docs/API.md) as an OpenAPI 3.1 document, generated with
 * zod 4's `z.toJSONSchema` from the schemas the routes validate with (./contract-schemas.ts).
 */
export const openapi = new Hono<AppEnv>();

type JsonObject = Record<string, unknown>;

/** OpenAPI 3.1 schemas are JSON Schema 2020-12; requests are described as they are sent. */
const JSON_SCHEMA = { target: "draft-2020-12", io: "input" } as const;

const ref = (name: string) => ({ $ref: `#/components/schemas/${name}` });

function inlineSchema(schema: z.ZodType): JsonObject {
  const { $schema: _dialect, ...rest } = z.toJSONSchema(schema, JSON_SCHEMA);
  return rest;
}

function componentSchemas(): JsonObject {
  const registry = z.registry<{ id: string }>();
  for (const [id, schema] of Object.entries(CONTRACT_SCHEMAS)) registry.add(schema, { id });
  const { schemas } = z.toJSONSchema(registry, { ...JSON_SCHEMA, uri: (id) => `#/components/schemas/${id}` });
  return Object.fromEntries(
    Object.entries(schemas).map(([id, schema]) => {
      // `$id` would be a fragment-only URI, which JSON Schema 2020-12 does not allow.
      const { $schema: _dialect, $id: _id, ...rest } = schema;
      return [id, rest];
    }),
  );
}

const SECURITY: Record<Access, JsonObject[]> = {
  public: [],
  shopper: [{ shopperJwt: [] }],
  admin: [{ adminToken: [] }],
  paymentWebhook: [{ paymentSignature: [] }],
};

const TAGS: Record<Access, string> = {
  public: "public",
  shopper: "shopper",
  admin: "admin",
  paymentWebhook: "webhooks",
};

/** Error answers grouped by status, each with a schema whose `code` lists exactly that status's codes. */
function errorResponses(codes: ErrorCode[]): JsonObject {
  const byStatus = new Map<number, ErrorCode[]>();
  for (const code of codes) {
    const status = ERRORS[code][0];
    byStatus.set(status, [...(byStatus.get(status) ?? []), code]);
  }
  const responses: JsonObject = {};
  for (const [status, group] of [...byStatus].sort(([a], [b]) => a - b)) {
    // ErrorBody, narrowed to the codes this status carries for this route.
    const narrowed = z.object({ error: z.object({ code: z.enum(group) }) });
    const retry = group.some((code) => code === "RATE_LIMITED" || code === "BUSY");
    responses[String(status)] = {
      description: group.map((code) => `${code}: ${ERRORS[code][1]}`).join(" | "),
      ...(retry ? { headers: { "Retry-After": { schema: { type: "integer" }, description: "Seconds" } } } : {}),
      content: { "application/json": { schema: { allOf: [ref("ErrorBody"), inlineSchema(narrowed)] } } },
    };
  }
  return responses;
}

/** `:name` (or Hono's `:name{pattern}`) → `{name}`. */
export const openApiPath = (path: string) => path.replace(/:([A-Za-z]+)(\{[^}]*\})?/g, "{$1}");

function operation(route: ContractRoute): JsonObject {
  const pathParameters = [...route.path.matchAll(/:([A-Za-z]+)/g)].map((match) => {
    const parameter = PATH_PARAMETERS[match[1] ?? ""];
    if (!parameter) throw new Error(`no description of path parameter ${match[1]} (${route.path})`);
    return { in: "path", required: true, ...parameter, schema: inlineSchema(parameter.schema) };
  });
  const queryParameters = (route.query ?? []).map((parameter) => ({
    in: "query",
    required: false,
    ...parameter,
    schema: inlineSchema(parameter.schema),
  }));
  const ok = route.ok;
  const okContent = ok.text
    ? { "text/plain": { schema: { type: "string" } } }
    : ok.binary
      ? { "application/octet-stream": { schema: { type: "string", contentMediaType: "application/octet-stream" } } }
      : { "application/json": { schema: ok.schema ? ref(ok.schema) : { type: "object" } } };
  const okHeaders = Object.fromEntries(
    (ok.headers ?? []).map((name) => [name, { schema: { type: "string", enum: ["true"] }, description: "Replay" }]),
  );
  return {
    operationId: `${route.method}${openApiPath(route.path).replace(/[^A-Za-z0-9]+(.)?/g, (_, c: string | undefined) => (c ?? "").toUpperCase())}`,
    summary: route.summary,
    description: route.description,
    tags: [TAGS[route.access]],
    security: SECURITY[route.access],
    ...(pathParameters.length + queryParameters.length > 0
      ? { parameters: [...pathParameters, ...queryParameters] }
      : {}),
    ...(route.body
      ? { requestBody: { required: true, content: { "application/json": { schema: ref(route.body) } } } }
      : {}),
    responses: {
      [String(ok.status)]: {
        description: ok.description,
        ...(ok.headers ? { headers: okHeaders } : {}),
        content: okContent,
      },
      // Marked, so a reader of the document can tell the route's own success from the answer again.
      ...(ok.again
        ? { [String(ok.again.status)]: { description: ok.again.description, "x-again": true, content: okContent } }
        : {}),
      ...errorResponses(errorCodesOf(route)),
    },
  };
}

/** A message Flashgate POSTs to the shop's endpoints (the document's `webhooks`), signed the Standard Webhooks way. */
function webhookOperation(operationId: string, summary: string, description: string, schema: SchemaName): JsonObject {
  return {
    post: {
      operationId,
      summary,
      description,
      tags: ["admin"],
      security: [{ standardWebhooks: [] }],
      parameters: ["webhook-id", "webhook-timestamp"].map((name) => ({
        in: "header",
        name,
        required: true,
        schema: { type: "string" },
      })),
      requestBody: { required: true, content: { "application/json": { schema: ref(schema) } } },
      responses: { "204": { description: "Received (any 2xx is)" } },
    },
  };
}

/**
 * The document for a gateway served at `serverUrl` (its `servers` entry: tools such as
 * openapi-fetch or Redocly's try-it call that origin).
 */
export function buildOpenApiDocument(serverUrl: string): JsonObject {
  const paths: Record<string, JsonObject> = {};
  for (const route of CONTRACT_ROUTES) {
    const path = openApiPath(route.path);
    paths[path] = { ...paths[path], [route.method]: operation(route) };
  }
  return {
    openapi: "3.1.0",
    info: {
      title: "Flashgate HTTP API",
      version: "1.4",
      description:
        'Contract v1.4 (docs/API.md). Every error is {"error":{"code","message"}}. Unknown routes: 404 ' +
        "NOT_FOUND; wrong method: 405 METHOD_NOT_ALLOWED with Allow; bodies over 16 KiB: 413 PAYLOAD_TOO_LARGE.",
    },
    servers: [{ url: serverUrl, description: "The gateway that served this document" }],
    tags: [
      { name: "public", description: "No credentials" },
      { name: "shopper", description: "Authorization: Bearer <shopper JWT>, per-user rate limit" },
      { name: "webhooks", description: "Signed by the payment provider" },
      { name: "admin", description: "Authorization: Bearer <ADMIN_TOKEN>" },
    ],
    paths,
    // What Flashgate sends: the order hand-off's deliveries to the shop's endpoints (API.md "Order hand-off").
    webhooks: {
      orderChange: webhookOperation(
        "orderChange",
        "An order changed (sent to every enabled endpoint subscribed to its type)",
        "Signed the Standard Webhooks way: `webhook-id` (the same on every retry), `webhook-timestamp` (unix seconds of this attempt), `webhook-signature: v1,<base64 HMAC-SHA256(secret bytes after whsec_, id.timestamp.body)>`. Answer 2xx within 10 s; anything else is retried on WEBHOOK_RETRY_SCHEDULE. At least once, possibly out of order: dedupe by `webhook-id`, order by `data.updatedAt`.",
        "WebhookEvent",
      ),
      orderChangeBatch: webhookOperation(
        "orderChangeBatch",
        "Order changes in a batch (to an endpoint with a batch setting, API.md v1.4)",
        "Up to the endpoint's `batch.maxEvents` events in the order feed's order, sent once that many are due or the oldest waited `batch.maxWaitMs`; at most 256 KiB. Signed as one event is; the `webhook-id` is the batch's, the same on every retry, and each event's `id` is the `webhook-id` it would have had alone (dedupe by it). A 2xx delivers every event; anything else retries the batch whole on WEBHOOK_RETRY_SCHEDULE.",
        "WebhookBatchMessage",
      ),
    },
    components: {
      schemas: componentSchemas(),
      securitySchemes: {
        shopperJwt: {
          type: "http",
          scheme: "bearer",
          bearerFormat: "JWT",
          description:
            "JWT whose `sub` is the user id, `exp` required: HS256 signed with AUTH_SECRET, or RS256/ES256 by a key of the identity provider's JWKS (AUTH_JWKS_URL or AUTH_JWKS, chosen by `kid`); `iss`/`aud` checked when AUTH_ISSUER/AUTH_AUDIENCE are set",
        },
        adminToken: { type: "http", scheme: "bearer", description: "ADMIN_TOKEN" },
        standardWebhooks: {
          type: "apiKey",
          in: "header",
          name: "webhook-signature",
          description:
            'Sent by Flashgate to the shop: v1,<base64 HMAC-SHA256(the endpoint secret\'s bytes after "whsec_", webhook-id + "." + webhook-timestamp + "." + raw body)>',
        },
        paymentSignature: {
          type: "apiKey",
          in: "header",
          name: "Payment-Signature",
          description:
            't=<unix seconds>,v1=<hex HMAC-SHA256(PAYMENT_WEBHOOK_SECRET, t + "." + raw body)>, 300 s tolerance',
        },
      },
    },
  };
}

let cached: { origin: string; document: JsonObject } | undefined;

register(openapi, ROUTES.openapi, (c) => {
  // A Worker is reached under several origins (workers.dev, custom domains, localhost): the
  // document names the one this request came to.
  const origin = new URL(c.req.url).origin;
  if (cached?.origin !== origin) cached = { origin, document: buildOpenApiDocument(origin) };
  return c.json(cached.document);
});
