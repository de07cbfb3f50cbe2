import { createMiddleware } from "hono/factory";
import { verify } from "hono/jwt";
import type { AppEnv } from "./context";
import { ApiError } from "./errors";
import { hmacKey } from "./hmac";
import { timingSafeEqualText } from "./timing-safe";

const MAX_USER_ID_LENGTH = 128;

function bearer(header: string | undefined): string | null {
  const match = header?.match(/^Bearer[ ]+([^ ]+)$/i);
  return match?.[1] ?? null;
}

/**
 * Shopper authentication: an HS256 JWT whose `sub` is the user id and whose `exp` is required.
 * Nothing leaves the isolate; the verdict is `401 UNAUTHENTICATED` for anything but a valid token.
 */
export const shopperAuth = createMiddleware<AppEnv>(async (c, next) => {
  const token = bearer(c.req.header("authorization"));
  if (!token) throw new ApiError("UNAUTHENTICATED", "A Bearer JWT is required.");
  let payload: Awaited<ReturnType<typeof verify>>;
  try {
    // The key is imported once per isolate (hmacKey), not by `verify` on every request.
    payload = await verify(token, await hmacKey(c.env.AUTH_SECRET), "HS256");
  } catch {
    throw new ApiError("UNAUTHENTICATED", "The JWT is invalid or expired.");
  }
  const { sub, exp } = payload;
  if (typeof exp !== "number") throw new ApiError("UNAUTHENTICATED", "The JWT must carry `exp`.");
  if (typeof sub !== "string" || sub.length === 0 || sub.length > MAX_USER_ID_LENGTH) {
    throw new ApiError(
      "UNAUTHENTICATED",
      `The JWT's \`sub\` must be a user id of 1 to ${MAX_USER_ID_LENGTH} characters.`,
    );
  }
  c.set("userId", sub);
  await next();
});

/** Admin authentication: `Authorization: Bearer <ADMIN_TOKEN>`, compared in constant time. */
export const adminAuth = createMiddleware<AppEnv>(async (c, next) => {
  const token = bearer(c.req.header("authorization"));
  if (!token || !(await timingSafeEqualText(token, c.env.ADMIN_TOKEN))) {
    throw new ApiError("UNAUTHENTICATED", "The admin token is missing or wrong.");
  }
  await next();
});

/** Per-shopper rate limit through the Workers rate-limit binding (limit set in wrangler.toml). */
export const shopperRateLimit = createMiddleware<AppEnv>(async (c, next) => {
  const { success } = await c.env.SHOPPER_RATE_LIMITER.limit({ key: c.get("userId") });
  if (!success) throw new ApiError("RATE_LIMITED", undefined, { "Retry-After": "10" });
  await next();
});
