import { readFileSync } from "node:fs";
import { Validator } from "@seriousme/openapi-schema-validator";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { type DevServer, startDevServer } from "../tools/dev-server";

/**
 * `GET /openapi.json` as served by `wrangler dev`: a valid OpenAPI 3 document that lists every
 * route of the contract. The routes are read from the contract's own text (docs/API.md, the repo's
 * copy of the team's contract), so a route added there and not here fails.
 */

type Operation = { responses: Record<string, unknown>; requestBody?: unknown };
type Document = { openapi: string; paths: Record<string, Record<string, Operation>> };

let server: DevServer;
let document: Document;

beforeAll(async () => {
  server = await startDevServer();
  const response = await fetch(`${server.url}/openapi.json`);
  expect(response.status).toBe(200);
  expect(response.headers.get("content-type")).toMatch(/^application\/json/);
  document = (await response.json()) as Document;
});
afterAll(async () => {
  await server?.stop();
});

/** Every `METHOD /path` written in code spans of a contract text, as `method /openapi/{path}`. */
function contractRoutes(markdown: string): string[] {
  const routes = new Set<string>();
  for (const match of markdown.matchAll(/`(GET|POST|PUT|PATCH|DELETE) (\/[^`\s?]*)/g)) {
    const [, method = "", path = ""] = match;
    routes.add(`${method.toLowerCase()} ${path.replace(/:([A-Za-z]+)/g, "{$1}")}`);
  }
  return [...routes].sort();
}

function documentedRoutes(doc: Document): string[] {
  return Object.entries(doc.paths)
    .flatMap(([path, operations]) => Object.keys(operations).map((method) => `${method} ${path}`))
    .sort();
}

const CONTRACT = new URL("../docs/API.md", import.meta.url);

describe("GET /openapi.json", () => {
  it("is a valid OpenAPI 3.1 document whose references all resolve", async () => {
    const validator = new Validator();
    const result = await validator.validate(structuredClone(document));
    expect(result.errors ?? []).toEqual([]);
    expect(result.valid).toBe(true);
    expect(validator.version).toBe("3.1");
    expect(() => validator.resolveRefs()).not.toThrow();
  });

  it("lists every route of docs/API.md", () => {
    const routes = contractRoutes(readFileSync(CONTRACT, "utf8"));
    expect(routes.length).toBeGreaterThanOrEqual(17);
    const documented = documentedRoutes(document);
    expect(routes.filter((route) => !documented.includes(route))).toEqual([]);
  });

  it("documents the error body and the request schemas the routes validate with", () => {
    const reserve = document.paths["/api/skus/{sku}/reservations"]?.post;
    expect(Object.keys(reserve?.responses ?? {})).toEqual(
      expect.arrayContaining(["202", "400", "401", "403", "404", "409", "413", "422", "429", "503"]),
    );
    expect(reserve?.requestBody).toEqual({
      required: true,
      content: { "application/json": { schema: { $ref: "#/components/schemas/ReservationRequest" } } },
    });
    expect(document.paths["/webhooks/payments"]?.post?.requestBody).toBeDefined();
    expect(document.paths["/admin/skus/{sku}"]?.put?.requestBody).toBeDefined();
  });
});
