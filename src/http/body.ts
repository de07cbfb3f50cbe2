import type { Context, Env, MiddlewareHandler } from "hono";
import { bodyLimit } from "hono/body-limit";
import type { z } from "zod";
import { ApiError } from "./errors";

/** Bodies over 16 KiB are refused before anything reads them (API.md). */
const MAX_BODY_BYTES = 16 * 1024;

/**
 * `413 PAYLOAD_TOO_LARGE` for a body over {@link MAX_BODY_BYTES}: from `Content-Length` before the
 * body is read, or while a chunked body streams in. On the routes that take a body (register.ts).
 */
const limitBody = bodyLimit({
  maxSize: MAX_BODY_BYTES,
  onError: () => {
    throw new ApiError("PAYLOAD_TOO_LARGE");
  },
});

/**
 * `handler` behind the body limit, as one layer: a body whose `Content-Length` is within the limit
 * (nearly all) goes straight on, for a header read rather than a dispatch of its own; any other
 * takes {@link limitBody} (a chunked body is counted as it streams in).
 */
export function withBodyLimit<E extends Env>(handler: MiddlewareHandler<E>): MiddlewareHandler<E> {
  return (c, next) => {
    const headers = c.req.raw.headers;
    const length = headers.get("content-length");
    // The handler's answer goes back through limitBody as through any `next()`.
    if (length === null || headers.has("transfer-encoding"))
      return limitBody(c, () => handler(c, next) as Promise<void>);
    if (Number.parseInt(length, 10) > MAX_BODY_BYTES) throw new ApiError("PAYLOAD_TOO_LARGE");
    return handler(c, next);
  };
}

/**
 * Parses a JSON text and validates it: malformed JSON and failed validation are both
 * `400 INVALID_REQUEST`, with a message that names the fields at fault.
 */
export function parseJson<S extends z.ZodType>(text: string, schema: S): z.infer<S> {
  let raw: unknown;
  try {
    raw = JSON.parse(text);
  } catch {
    throw new ApiError("INVALID_REQUEST", "The body is not valid JSON.");
  }
  const parsed = schema.safeParse(raw);
  if (!parsed.success) throw invalidBody(parsed.error.issues, schema);
  return parsed.data;
}

/**
 * `400 INVALID_REQUEST` naming the fields at fault (`error.details.fields`: every unknown one, then
 * up to 10 others). A strict (admin) body's unknown fields are listed in `details.unknownFields`, each
 * with the known field it is closest to.
 */
function invalidBody(issues: readonly z.core.$ZodIssue[], schema: z.ZodType): ApiError {
  const known = Object.keys((schema as { shape?: Record<string, unknown> }).shape ?? {});
  const unknownFields: string[] = [];
  const fields: { path: string; message: string }[] = [];
  // Unknown fields are always named (zod reports them last), then at most 10 other issues.
  const unknown = issues.filter((issue) => issue.code === "unrecognized_keys");
  const others = issues.filter((issue) => issue.code !== "unrecognized_keys").slice(0, 10);
  for (const issue of [...unknown, ...others]) {
    const at = issue.path.join(".");
    if (issue.code === "unrecognized_keys") {
      for (const key of issue.keys) {
        const path = at ? `${at}.${key}` : key;
        unknownFields.push(path);
        const near = at ? undefined : closest(key, known);
        fields.push({ path, message: `unknown field${near ? ` (did you mean "${near}"?)` : ""}` });
      }
    } else {
      fields.push({ path: at || "body", message: issue.message });
    }
  }
  const said = fields.map((f) => `${f.path}: ${f.message}`).join("; ");
  const next =
    unknownFields.length > 0
      ? ` This body is strict: nothing was changed. Fields it takes: ${known.join(", ")}.`
      : " Nothing was changed: correct these fields and send it again.";
  return new ApiError(
    "INVALID_REQUEST",
    `Invalid body: ${said}.${next}`,
    {},
    {
      fields,
      ...(unknownFields.length > 0 ? { unknownFields } : {}),
    },
  );
}

/** The known name a misspelled one is nearest to (edit distance at most 3), if any. */
function closest(name: string, known: readonly string[]): string | undefined {
  let best: { key: string; d: number } | undefined;
  for (const key of known) {
    const d = editDistance(name.toLowerCase(), key.toLowerCase());
    if (d <= 3 && (!best || d < best.d)) best = { key, d };
  }
  return best?.key;
}

function editDistance(a: string, b: string): number {
  let prev = Array.from({ length: b.length + 1 }, (_, j) => j);
  for (let i = 1; i <= a.length; i++) {
    const row = [i];
    for (let j = 1; j <= b.length; j++) {
      row[j] = Math.min(
        (prev[j] ?? 0) + 1,
        (row[j - 1] ?? 0) + 1,
        (prev[j - 1] ?? 0) + (a[i - 1] === b[j - 1] ? 0 : 1),
      );
    }
    prev = row;
  }
  return prev[b.length] ?? 0;
}

/**
 * Reads the request body as JSON and validates it (see {@link parseJson}), for the local tooling's
 * routes (the contract's go through register.ts): the same 16 KiB limit, checked once it is read.
 */
export async function readJson<S extends z.ZodType>(c: Context, schema: S): Promise<z.infer<S>> {
  const text = await c.req.text();
  if (text.length > MAX_BODY_BYTES) throw new ApiError("PAYLOAD_TOO_LARGE");
  return parseJson(text, schema);
}
