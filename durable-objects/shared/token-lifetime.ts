import { log } from "./log";

/** `PURCHASE_TOKEN_TTL_SECONDS`'s default (wrangler.toml, docs/CONFIGURATION.md). */
export const DEFAULT_TOKEN_TTL_SECONDS = 300;

let warnedOf: string | undefined;

/**
 * A purchase token's lifetime in ms, as the edge mints it and the stock objects keep its replays:
 * `PURCHASE_TOKEN_TTL_SECONDS`, or the default when it is not a positive number (unset, blank,
 * `"5 minutes"`, `"-300"`), said in the log once per isolate and value, as WEBHOOK_RETRY_SCHEDULE's
 * is; NaN or a negative lifetime made every token request a 500, or every token born expired.
 */
export function tokenLifetimeMs(env: { PURCHASE_TOKEN_TTL_SECONDS?: string | undefined }): number {
  const text = env.PURCHASE_TOKEN_TTL_SECONDS;
  const seconds = text === undefined || text.trim() === "" ? Number.NaN : Number(text);
  if (Number.isFinite(seconds) && seconds > 0) return seconds * 1000;
  if (warnedOf !== String(text)) {
    warnedOf = String(text);
    log("error", "PURCHASE_TOKEN_TTL_SECONDS is not a positive number; using the default", {
      value: text ?? null,
      default: DEFAULT_TOKEN_TTL_SECONDS,
    });
  }
  return DEFAULT_TOKEN_TTL_SECONDS * 1000;
}
