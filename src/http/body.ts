import type { Context } from "hono";
import type { z } from "zod";
import { ApiError } from "./errors";

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

/** Reads the request body as JSON and validates it (see {@link parseJson}). */
export async function readJson<S extends z.ZodType>(c: Context, schema: S): Promise<z.infer<S>> {
  return parseJson(await c.req.text(), schema);
}
