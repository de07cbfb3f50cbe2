import type { Context } from "hono";
import { createMiddleware } from "hono/factory";
import { errors, type JWTHeaderParameters, type JWTPayload, type JWTVerifyOptions, jwtVerify } from "jose";
import { log } from "../../durable-objects/shared/log";
import type { AppEnv } from "./context";
import { ApiError, rateLimited } from "./errors";
import { hmacKey } from "./hmac";
import { indexKeys, JWKS_ALGORITHMS, type JwksAlgorithm, type KeyIndex, keyFor, RemoteKeySet } from "./jwks";
import { jwtRefused, refusalOf } from "./jwt-refusal";
import { timingSafeEqualText } from "./timing-safe";

const MAX_USER_ID_LENGTH = 128;
const DEFAULT_CLOCK_SKEW_SECONDS = 30;

function bearer(header: string | undefined): string | null {
  const match = header?.match(/^Bearer[ ]+([^ ]+)$/i);
  return match?.[1] ?? null;
}

/** The variables that configure shopper auth (API.md "Configuration"). */
const AUTH_VARS = [
  "AUTH_SECRET",
  "AUTH_JWKS",
  "AUTH_JWKS_URL",
  "AUTH_ISSUER",
  "AUTH_AUDIENCE",
  "AUTH_CLOCK_SKEW_SECONDS",
] as const;
type AuthVars = Partial<Record<(typeof AUTH_VARS)[number], string>>;

/** Unset or blank means not configured. */
const setting = (value: string | undefined) => (value === undefined || value.trim() === "" ? undefined : value);

/**
 * A configuration no shopper can sign in under (API.md "Configuration"): `500 INTERNAL` saying what
 * the operator must set (names of settings only, never a value), and an error in the log.
 */
function misconfigured(problem: string): ApiError {
  log("error", "shopper auth is not configured", { problem });
  return new ApiError(
    "INTERNAL",
    `Shopper sign-in is not configured on this gateway: ${problem} (API.md Configuration).`,
  );
}

/** Thrown by the key lookup when the remote key set should be fetched (again) first. */
const KEYS_NEEDED = new Error("JWKS refresh needed");
/** Refreshes per request at most: a cold isolate may take the Cache API copy, then ask the IdP. */
const MAX_REFRESHES = 2;

/**
 * Everything needed to verify a token under one configuration, built once per isolate: the HS256
 * key imported, the inline JWKS parsed and imported, the `jwtVerify` options allocated.
 */
class ShopperVerifier {
  readonly options: JWTVerifyOptions;
  readonly skewSeconds: number;
  private readonly hmac: Promise<CryptoKey> | undefined;
  private readonly inline: Promise<KeyIndex> | undefined;
  private readonly remote: RemoteKeySet | undefined;

  constructor(readonly vars: AuthVars) {
    const secret = setting(vars.AUTH_SECRET);
    const jwks = setting(vars.AUTH_JWKS);
    const jwksUrl = setting(vars.AUTH_JWKS_URL);
    const issuer = setting(vars.AUTH_ISSUER);
    const audience = setting(vars.AUTH_AUDIENCE);
    const skew = setting(vars.AUTH_CLOCK_SKEW_SECONDS);
    if (!secret && !jwks && !jwksUrl) throw misconfigured("set AUTH_SECRET, AUTH_JWKS_URL or AUTH_JWKS");
    const skewSeconds = skew === undefined ? DEFAULT_CLOCK_SKEW_SECONDS : Number(skew);
    if (!Number.isFinite(skewSeconds) || skewSeconds < 0) {
      throw misconfigured("AUTH_CLOCK_SKEW_SECONDS must be a number of seconds >= 0");
    }
    this.skewSeconds = skewSeconds;
    this.hmac = secret ? hmacKey(secret) : undefined;
    this.inline = jwks ? indexKeys(jwks) : undefined;
    this.inline?.catch((err) => log("error", "auth: AUTH_JWKS is unusable", { error: String(err) }));
    this.remote = jwksUrl ? new RemoteKeySet(new URL(jwksUrl).href) : undefined;
    const algorithms: string[] = secret ? ["HS256"] : [];
    if (jwks || jwksUrl) algorithms.push(...JWKS_ALGORITHMS);
    this.options = {
      algorithms,
      clockTolerance: skewSeconds,
      requiredClaims: ["exp", "sub"],
      ...(issuer === undefined ? {} : { issuer }),
      ...(audience === undefined ? {} : { audience }),
    };
  }

  /** Whether `env` still configures this verifier (plain comparisons: this runs on every request). */
  matches(env: AuthVars): boolean {
    const vars = this.vars;
    return (
      env.AUTH_SECRET === vars.AUTH_SECRET &&
      env.AUTH_JWKS === vars.AUTH_JWKS &&
      env.AUTH_JWKS_URL === vars.AUTH_JWKS_URL &&
      env.AUTH_ISSUER === vars.AUTH_ISSUER &&
      env.AUTH_AUDIENCE === vars.AUTH_AUDIENCE &&
      env.AUTH_CLOCK_SKEW_SECONDS === vars.AUTH_CLOCK_SKEW_SECONDS
    );
  }

  /** `jwtVerify`'s key lookup; an arrow so it is bound once, not per request. */
  readonly getKey = (header: JWTHeaderParameters): Promise<CryptoKey> => {
    // `jwtVerify` has already refused any `alg` outside `options.algorithms`. The HS256 key is the
    // promise imported once: handed back as is, no new promise per request.
    if (header.alg === "HS256" && this.hmac) return this.hmac;
    return this.jwksKey(header);
  };

  private async jwksKey(header: JWTHeaderParameters): Promise<CryptoKey> {
    const alg = header.alg as JwksAlgorithm;
    if (this.inline) {
      const key = keyFor(await this.inline, alg, header.kid);
      if (key) return key;
    }
    if (this.remote) {
      const verdict = this.remote.resolve(alg, header.kid, Date.now());
      if (verdict === "refresh") throw KEYS_NEEDED;
      if (verdict !== "none") return verdict.key;
    }
    throw new errors.JWKSNoMatchingKey();
  }

  /** The token's claims once verified; `ctx` is used only when the remote key set must be fetched. */
  async verify(token: string, ctx: Context<AppEnv>): Promise<JWTPayload> {
    for (let refreshes = 0; ; refreshes++) {
      try {
        return (await jwtVerify(token, this.getKey, this.options)).payload;
      } catch (err) {
        // Fetched again as often as allowed and still no key: the token's key is unknown.
        if (err === KEYS_NEEDED && refreshes === MAX_REFRESHES) throw new errors.JWKSNoMatchingKey();
        if (err !== KEYS_NEEDED || !this.remote) throw err;
        await this.remote.refresh((promise) => ctx.executionCtx.waitUntil(promise));
      }
    }
  }
}

let current: ShopperVerifier | undefined;

/** The verifier of this configuration: the same object on every request of an isolate. */
function verifierFor(env: Env): ShopperVerifier {
  const vars = env as AuthVars;
  if (!current?.matches(vars)) {
    const snapshot: AuthVars = {};
    for (const name of AUTH_VARS) if (vars[name] !== undefined) snapshot[name] = vars[name];
    current = new ShopperVerifier(snapshot);
  }
  return current;
}

/**
 * Shopper authentication: a JWT whose `sub` is the user id and whose `exp` is required, signed
 * HS256 with AUTH_SECRET or RS256/ES256 by a key of the identity provider's JWKS (AUTH_JWKS_URL or
 * AUTH_JWKS), with `iss`/`aud` checked when AUTH_ISSUER/AUTH_AUDIENCE are set. Time claims get
 * AUTH_CLOCK_SKEW_SECONDS of leeway. The verdict is `401 UNAUTHENTICATED` for anything else, its
 * `details.reason` saying why (./jwt-refusal.ts).
 */
export const shopperAuth = createMiddleware<AppEnv>(async (c, next) => {
  const token = bearer(c.req.header("authorization"));
  if (!token) throw jwtRefused("missing_token", "A Bearer JWT is required.");
  const verifier = verifierFor(c.env);
  let payload: JWTPayload;
  try {
    payload = await verifier.verify(token, c);
  } catch (err) {
    throw refusalOf(err, verifier.options.algorithms ?? []);
  }
  const { sub, iat } = payload;
  // jose checks `iat` only against a maximum age; a token issued in the future is refused here.
  if (typeof iat === "number" && iat > Date.now() / 1000 + verifier.skewSeconds) {
    throw jwtRefused("not_yet_valid", "The JWT is not valid yet (its `iat` is in the future).", "iat");
  }
  // A lone surrogate has no UTF-8 form: the id would change on its way into SQLite (as U+FFFD), and
  // the user's quota, holds and cancels would each be looked up under another id.
  // Characters as the contract counts them: code points, not UTF-16 units (an emoji is one, not two).
  if (typeof sub !== "string" || sub.length === 0 || !sub.isWellFormed() || [...sub].length > MAX_USER_ID_LENGTH) {
    throw jwtRefused(
      "invalid_claim",
      `The JWT's \`sub\` must be a user id of 1 to ${MAX_USER_ID_LENGTH} characters of well-formed Unicode.`,
      "sub",
    );
  }
  c.set("userId", sub);
  c.set("claims", payload);
  await next();
});

/**
 * What an operator is told when the admin token is refused: which secret it is, where it lives
 * locally, and the header's form. Never the token, nor what was sent.
 */
const ADMIN_TOKEN_HINT =
  "send header Authorization: Bearer <token>, where <token> is the Worker's ADMIN_TOKEN secret (locally in .dev.vars; deployed: wrangler secret put ADMIN_TOKEN).";

/** Admin authentication: `Authorization: Bearer <ADMIN_TOKEN>`, compared in constant time. */
export const adminAuth = createMiddleware<AppEnv>(async (c, next) => {
  const header = c.req.header("authorization");
  const token = bearer(header);
  if (!token || !(await timingSafeEqualText(token, c.env.ADMIN_TOKEN))) {
    const what =
      header === undefined
        ? "The admin token is missing"
        : token === null
          ? "The Authorization header is not of the form Bearer <token>"
          : "The admin token is wrong";
    throw new ApiError("UNAUTHENTICATED", `${what}: ${ADMIN_TOKEN_HINT}`);
  }
  await next();
});

/**
 * Per-shopper rate limit through the Workers rate-limit binding (limit set in wrangler.toml):
 * `429 RATE_LIMITED` with `Retry-After` once the shopper is over it.
 */
export async function limitShopper(c: Context<AppEnv>): Promise<void> {
  const { success } = await c.env.SHOPPER_RATE_LIMITER.limit({ key: c.get("userId") });
  if (!success) throw rateLimited(10);
}

/** {@link limitShopper} as middleware: the shopper routes run it right after authentication. */
export const shopperRateLimit = createMiddleware<AppEnv>(async (c, next) => {
  await limitShopper(c);
  await next();
});
