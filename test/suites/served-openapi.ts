import { readFileSync } from "node:fs";
import { Validator } from "@seriousme/openapi-schema-validator";
import { beforeAll, describe, expect, it } from "vitest";
import type { DevServer } from "../../tools/dev-server";

/**
 * `GET /openapi.json` as served by `wrangler dev`: a valid OpenAPI 3 document that is the contract
 * as built (docs/API.md, v1.4 with this implementation's additions), checked both ways. Its route
 * index must list exactly the served routes, each with exactly the served success fields and error
 * codes; every code and body field a route section of the prose names must be served too.
 */

type Response = { content?: Record<string, { schema?: Schema & { allOf?: unknown[] } }> };
type Operation = { responses: Record<string, unknown>; requestBody?: unknown };
type Document = {
  openapi: string;
  info: { version: string };
  paths: Record<string, Record<string, Operation>>;
  components: { schemas: Record<string, Schema> };
};

let document: Document;

const ROUTE = /`(GET|POST|PUT|PATCH|DELETE) (\/[^`\s?]*)[^`]*`/g;
const CODE = /`(\d{3})\s+([A-Z][A-Z_]+)`/g;
/** A status followed by a JSON-ish body in one code span: `200 {"a","b":…}`. */
const BODY = /`(\d{3}) (\{[^`]*\})`/g;

/** `GET /api/skus/:sku` → `get /api/skus/{sku}` (the document's spelling). */
const routeKey = (method: string, path: string) => `${method.toLowerCase()} ${path.replace(/:([A-Za-z]+)/g, "{$1}")}`;

/** Every `METHOD /path` written in code spans of a contract text. */
function routesIn(markdown: string): string[] {
  return [...new Set([...markdown.matchAll(ROUTE)].map(([, method = "", path = ""]) => routeKey(method, path)))].sort();
}

/** The top-level keys of a body as the contract writes it: `{"a","b":"x","c":{"d"}}` → a, b, c. */
function keysOf(body: string): string[] {
  const keys: string[] = [];
  let depth = 0;
  let previous = "";
  for (let i = 0; i < body.length; i++) {
    const ch = body[i] as string;
    if (ch === "{" || ch === "[") depth++;
    else if (ch === "}" || ch === "]") depth--;
    else if (ch === '"') {
      const close = body.indexOf('"', i + 1);
      if (depth === 1 && (previous === "{" || previous === ",")) keys.push(body.slice(i + 1, close));
      i = close;
      previous = '"';
      continue;
    }
    if (!/\s/.test(ch)) previous = ch;
  }
  return keys;
}

/** The codes and bodies a piece of contract text names. */
function answersIn(text: string) {
  return {
    codes: [...text.matchAll(CODE)].map(([, status, code]) => `${status} ${code}`),
    bodies: [...text.matchAll(BODY)].map(([, status = "", body = ""]) => ({ status, fields: keysOf(body) })),
  };
}

interface IndexRow {
  route: string;
  status: string;
  fields: string[];
  codes: string[];
}

/** The table under "## Routes at a glance": one row per route. */
function routeIndex(markdown: string): IndexRow[] {
  const section = markdown.split(/^## Routes at a glance$/m)[1]?.split(/^## /m)[0] ?? "";
  return section
    .split("\n")
    .filter((line) => line.startsWith("| `"))
    .map((line) => {
      const [, route = "", answers = "", errors = ""] = line.split("|").map((cell) => cell.trim());
      const [name] = routesIn(route);
      const status = /^`(\d{3})/.exec(answers)?.[1] ?? "";
      const body = /\{[^`]*\}/.exec(answers)?.[0];
      return { route: name ?? route, status, fields: body ? keysOf(body) : [], codes: answersIn(errors).codes };
    });
}

/**
 * The route units of the contract's prose: a section whose heading names routes, or a paragraph or
 * bullet that starts with one; each with the codes and bodies it names.
 */
function routeUnits(markdown: string) {
  const units: { routes: string[]; text: string }[] = [];
  const sections = markdown.split(/^(?=#{1,3} )/m);
  for (const section of sections) {
    const [heading = "", ...rest] = section.split("\n");
    if (/^## Routes at a glance/.test(heading)) continue;
    const headingRoutes = routesIn(heading);
    if (headingRoutes.length > 0) {
      units.push({ routes: headingRoutes, text: rest.join("\n") });
      continue;
    }
    // Paragraphs and bullets (a bullet runs until the next bullet or blank line).
    for (const piece of rest.join("\n").split(/\n(?=- )|\n\s*\n/)) {
      const opening = piece.replace(/^- /, "").trimStart();
      if (!/^`(GET|POST|PUT|PATCH|DELETE) \//.test(opening)) continue;
      units.push({ routes: routesIn(piece), text: piece });
    }
  }
  return units.map((unit) => ({ ...unit, ...answersIn(unit.text) }));
}

type Schema = {
  $ref?: string;
  properties?: Record<string, unknown>;
  anyOf?: Schema[];
  allOf?: Schema[];
  oneOf?: Schema[];
};

/** The property names of a schema of the document, through `$ref`, `allOf` and the branches of a union. */
function fieldsOf(schema: Schema | undefined): string[] {
  if (!schema) return [];
  if (schema.$ref) return fieldsOf(document.components.schemas[schema.$ref.split("/").pop() ?? ""]);
  const parts = [...(schema.anyOf ?? []), ...(schema.oneOf ?? []), ...(schema.allOf ?? [])];
  return [...new Set([...Object.keys(schema.properties ?? {}), ...parts.flatMap(fieldsOf)])];
}

/** What the served document says a route answers: its success status and fields, its error codes. */
function served(route: string) {
  const [method = "", path = ""] = route.split(" ");
  const operation = document.paths[path]?.[method];
  if (!operation) return undefined;
  const entries = Object.entries(operation.responses) as [string, Response][];
  // The route's own success; a second one marked `x-again` is the same thing answered again.
  const [status = "", ok] =
    entries.find(([s, r]) => s.startsWith("2") && !(r as { "x-again"?: true })["x-again"]) ?? [];
  const codes = entries
    .filter(([s]) => !s.startsWith("2"))
    .flatMap(([s, r]) => {
      const schema = r.content?.["application/json"]?.schema?.allOf?.[1] as
        | { properties: { error: { properties: { code: { enum: string[] } } } } }
        | undefined;
      return (schema?.properties.error.properties.code.enum ?? []).map((code) => `${s} ${code}`);
    });
  return { status, fields: fieldsOf(ok?.content?.["application/json"]?.schema).sort(), codes: codes.sort() };
}

function documentedRoutes(doc: Document): string[] {
  return Object.entries(doc.paths)
    .flatMap(([path, operations]) => Object.keys(operations).map((method) => `${method} ${path}`))
    .sort();
}

const CONTRACT = new URL("../../docs/API.md", import.meta.url);

/** The suite, against `server()` (test/dev-server.e2e.test.ts's `wrangler dev`). */
export function servedOpenApi(server: () => DevServer) {
  describe("GET /openapi.json", () => {
    beforeAll(async () => {
      const response = await fetch(`${server().url}/openapi.json`);
      expect(response.status).toBe(200);
      expect(response.headers.get("content-type")).toMatch(/^application\/json/);
      document = (await response.json()) as Document;
    });

    it("is a valid OpenAPI 3.1 document whose references all resolve", async () => {
      const validator = new Validator();
      const result = await validator.validate(structuredClone(document));
      expect(result.errors ?? []).toEqual([]);
      expect(result.valid).toBe(true);
      expect(validator.version).toBe("3.1");
      expect(() => validator.resolveRefs()).not.toThrow();
    });

    it("serves exactly the routes of docs/API.md's route index, and the prose names no other", () => {
      const markdown = readFileSync(CONTRACT, "utf8");
      expect(markdown.split("\n")[0]).toContain(`(contract v${document.info.version},`);
      const index = routeIndex(markdown).map((row) => row.route);
      expect(index.length).toBeGreaterThanOrEqual(29);
      expect(new Set(index).size).toBe(index.length);
      expect(documentedRoutes(document)).toEqual([...index].sort()); // both ways
      expect(routesIn(markdown).filter((route) => !index.includes(route))).toEqual([]);
    });

    it("answers each route with the status, fields and codes its index row lists, no more and no fewer", () => {
      const rows = routeIndex(readFileSync(CONTRACT, "utf8"));
      const mismatches = rows.flatMap((row) => {
        const doc = served(row.route);
        const listed = { status: row.status, fields: [...row.fields].sort(), codes: [...row.codes].sort() };
        return JSON.stringify(doc) === JSON.stringify(listed) ? [] : [{ route: row.route, listed, served: doc }];
      });
      expect(mismatches).toEqual([]);
    });

    it("answers every code and body field the route sections name", () => {
      const units = routeUnits(readFileSync(CONTRACT, "utf8"));
      expect(units.length).toBeGreaterThan(20);
      const missing: string[] = [];
      for (const unit of units) {
        const answers = unit.routes.map(served);
        for (const code of unit.codes) {
          if (!answers.some((a) => a?.codes.includes(code))) missing.push(`${unit.routes.join(", ")}: ${code}`);
        }
        for (const body of unit.bodies) {
          const fits = answers.some((a) => a?.status === body.status && body.fields.every((f) => a.fields.includes(f)));
          if (!fits) missing.push(`${unit.routes.join(", ")}: ${body.status} {${body.fields.join(",")}}`);
        }
      }
      expect(missing).toEqual([]);
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
}
