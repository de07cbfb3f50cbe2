import type { Context } from "hono";
import { bodyLimit } from "hono/body-limit";
import type { z } from "zod";
import { ApiError } from "./errors";

/** Bodies over 16 KiB are refused before anything reads them (API.md). */
const MAX_BODY_BYTES = 16 * 1024;

/**
 * `413 PAYLOAD_TOO_LARGE` for a body over {@link MAX_BODY_BYTES}: from `Content-Length` before the
 * body is read, or while a chunked body streams in. On the routes that take a body (register.ts).
 */
export const limitBody = bodyLimit({
  maxSize: MAX_BODY_BYTES,
  onError: () => {
    throw new ApiError("PAYLOAD_TOO_LARGE");
  },
});

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
  if (!parsed.success) {
    const detail = parsed.error.issues
      .slice(0, 5)
      .map((issue) => `${issue.path.join(".") || "body"}: ${issue.message}`)
      .join("; ");
    throw new ApiError("INVALID_REQUEST", `Invalid body: ${detail}`);
  }
  return parsed.data;
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
