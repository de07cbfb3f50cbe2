import type { Context } from "hono";
import type { AppEnv } from "../http/context";
import { ApiError, busy } from "../http/errors";
import { increment } from "../observability/metrics";
import { checkProofOfWork } from "./proof-of-work";
import { verifyTurnstile } from "./turnstile";

/**
 * The bot challenges a purchase token is issued behind (API.md "Bots"), each off unless configured:
 * proof of work (`POW_BITS` > 0) and Turnstile (`TURNSTILE_SECRET_KEY` set). Fail closed: a missing
 * or refused answer mints nothing, and without a verdict (siteverify down or slow) nothing is minted
 * either. Proof of work is checked first: it costs the Worker nothing outside the isolate, and a
 * request that fails it does not spend the shopper's Turnstile answer. Every check is counted in
 * `flashgate_challenges_total{kind,result}`.
 */

export const MAX_POW_BITS = 28;

type Kind = "turnstile" | "pow";
type Result = "passed" | "failed" | "missing" | "unavailable";

/** The proof-of-work difficulty configured, 0 when off; a value out of range is a deployment error. */
export function powBits(env: Pick<Env, "POW_BITS">): number {
  const bits = Number(env.POW_BITS || 0);
  if (!Number.isInteger(bits) || bits < 0 || bits > MAX_POW_BITS) {
    throw new Error(`POW_BITS must be an integer from 0 to ${MAX_POW_BITS}, not ${JSON.stringify(env.POW_BITS)}`);
  }
  return bits;
}

function counted(kind: Kind, result: Result): Result {
  increment("flashgate_challenges_total", { kind, result });
  return result;
}

/** Throws the contract's answer unless every challenge that is on was passed by this request. */
export async function checkChallenges(c: Context<AppEnv>, sku: string): Promise<void> {
  const bits = powBits(c.env);
  if (bits > 0) {
    const header = c.req.header("Proof-Of-Work");
    const result = counted(
      "pow",
      header === undefined
        ? "missing"
        : (await checkProofOfWork(header, c.env.TOKEN_SECRET, { userId: c.get("userId"), sku, bits }, Date.now()))
          ? "passed"
          : "failed",
    );
    if (result === "missing") {
      throw new ApiError(
        "CHALLENGE_REQUIRED",
        `Solve a proof of work first: GET /api/skus/${sku}/challenge, then send header Proof-Of-Work: <challenge>:<nonce>.`,
      );
    }
    if (result === "failed") {
      throw new ApiError(
        "CHALLENGE_FAILED",
        "The proof of work is wrong, expired, or for another user or SKU: get a new challenge and solve it.",
      );
    }
  }
  if (c.env.TURNSTILE_SECRET_KEY) {
    const answer = c.req.header("CF-Turnstile-Response");
    if (answer === undefined) {
      counted("turnstile", "missing");
      throw new ApiError(
        "CHALLENGE_REQUIRED",
        "Complete the Turnstile check; send its answer in header CF-Turnstile-Response.",
      );
    }
    const result = counted(
      "turnstile",
      await verifyTurnstile(c.env, answer, c.get("userId"), c.req.header("CF-Connecting-IP")),
    );
    if (result === "failed") {
      throw new ApiError(
        "CHALLENGE_FAILED",
        "The Turnstile answer was refused (expired, already used, or invalid): complete the check again.",
      );
    }
    if (result === "unavailable") throw busy("The bot check could not be verified just now");
  }
}
