import { log } from "./log";

/**
 * The numeric vars the edge and the stock objects both read (wrangler.toml `[vars]`): a value that is
 * not a positive number (unset, blank, `"5 minutes"`, `"-300"`) falls back to the documented default
 * and says so in the log (once per isolate and value), as WEBHOOK_RETRY_SCHEDULE and
 * HANDOFF_RETENTION_DAYS do, rather than becoming NaN or 0 in arithmetic: a token born expired, or
 * an `expiresAt` that cannot be written.
 */
export const NUMBER_VAR_DEFAULTS = {
  PURCHASE_TOKEN_TTL_SECONDS: 300,
} as const;

export type NumberVar = keyof typeof NUMBER_VAR_DEFAULTS;

const warned = new Set<string>();

export function positiveNumberVar(env: Partial<Record<NumberVar, string | undefined>>, name: NumberVar): number {
  const text = env[name];
  const value = text === undefined || text.trim() === "" ? Number.NaN : Number(text);
  if (Number.isFinite(value) && value > 0) return value;
  const fallback = NUMBER_VAR_DEFAULTS[name];
  const key = `${name}=${String(text)}`;
  if (!warned.has(key)) {
    warned.add(key);
    log("error", `${name} is not a positive number; using the default`, { value: text ?? null, default: fallback });
  }
  return fallback;
}
