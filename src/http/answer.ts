import type { Context } from "hono";
import type { AppEnv } from "./context";

export const REQUEST_ID_HEADER = "X-Request-Id";

/** Answers made with their request's id among their headers: observe does not write it again. */
const carryingId = new WeakSet<Response>();

/**
 * `new Response(body, { status, headers })` with the request's `X-Request-Id` among `headers` (a
 * record the caller made for this answer), for an answer made before anything set a header on the
 * context. Observe then leaves the response as it is: one header fewer written across the runtime's
 * boundary on the answers given most often.
 */
export function answerWithId(
  c: Context<AppEnv>,
  body: string,
  status: number,
  headers: Record<string, string>,
): Response {
  const id = c.get("requestId");
  if (id === undefined) return new Response(body, { status, headers });
  headers[REQUEST_ID_HEADER] = id;
  const res = new Response(body, { status, headers });
  carryingId.add(res);
  return res;
}

/** Whether `res` was made by {@link answerWithId} (a response another layer rebuilt is not). */
export function carriesRequestId(res: Response): boolean {
  return carryingId.has(res);
}
