/**
 * Cloudflare Turnstile's server-side check (siteverify): the widget's answer, posted with the secret,
 * the shopper's IP and an idempotency key, is valid once. https://developers.cloudflare.com/turnstile/get-started/server-side-validation/
 */

export const DEFAULT_VERIFY_URL = "https://challenges.cloudflare.com/turnstile/v0/siteverify";
/** Past this, no verdict: the token request answers BUSY rather than mint without one. */
const VERIFY_TIMEOUT_MS = 3_000;
/** Turnstile's answers are at most 2048 characters; a longer one is refused without a call. */
const MAX_ANSWER_LENGTH = 2048;

export type Verdict = "passed" | "failed" | "unavailable";

interface SiteverifyAnswer {
  success?: unknown;
  hostname?: unknown;
  "error-codes"?: unknown;
}

export async function verifyTurnstile(
  env: Pick<Env, "TURNSTILE_SECRET_KEY" | "TURNSTILE_VERIFY_URL" | "TURNSTILE_HOSTNAMES">,
  answer: string,
  userId: string,
  remoteIp: string | undefined,
): Promise<Verdict> {
  if (answer.length === 0 || answer.length > MAX_ANSWER_LENGTH) return "failed";
  const form = new URLSearchParams({
    secret: env.TURNSTILE_SECRET_KEY ?? "",
    response: answer,
    // One key per shopper and answer: a retry after a call we gave up on gets that call's verdict
    // (a new key would be a second use of the answer), and another user's key spends it again: refused.
    idempotency_key: await idempotencyKey(userId, answer),
  });
  if (remoteIp) form.set("remoteip", remoteIp);
  let body: SiteverifyAnswer;
  try {
    const response = await fetch(env.TURNSTILE_VERIFY_URL || DEFAULT_VERIFY_URL, {
      method: "POST",
      body: form,
      redirect: "manual", // a redirect is no verdict (and workerd has no "error" mode)
      signal: AbortSignal.timeout(VERIFY_TIMEOUT_MS),
    });
    if (response.status !== 200) return "unavailable";
    body = (await response.json()) as SiteverifyAnswer;
  } catch {
    return "unavailable"; // unreachable, slow, or not JSON
  }
  if (typeof body !== "object" || body === null || typeof body.success !== "boolean") return "unavailable";
  if (!body.success) return "failed";
  const hostnames = (env.TURNSTILE_HOSTNAMES ?? "")
    .split(",")
    .map((h) => h.trim())
    .filter(Boolean);
  if (hostnames.length > 0 && !hostnames.includes(String(body.hostname))) return "failed";
  return "passed";
}

/** A UUID (the form siteverify asks for) derived from the user and the widget's answer. */
async function idempotencyKey(userId: string, answer: string): Promise<string> {
  const text = new TextEncoder().encode(`${userId}\n${answer}`);
  const bytes = new Uint8Array(await crypto.subtle.digest("SHA-256", text)).slice(0, 16);
  bytes[6] = ((bytes[6] ?? 0) & 0x0f) | 0x80; // version 8: custom
  bytes[8] = ((bytes[8] ?? 0) & 0x3f) | 0x80; // RFC 9562 variant
  const hex = Array.from(bytes, (b) => b.toString(16).padStart(2, "0")).join("");
  return `${hex.slice(0, 8)}-${hex.slice(8, 12)}-${hex.slice(12, 16)}-${hex.slice(16, 20)}-${hex.slice(20)}`;
}
