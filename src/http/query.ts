import { ApiError } from "./errors";

/**
 * An integer query parameter, as /openapi.json declares it (`^\d+$`): digits only, so `1e1`, `0x5`,
 * ` 5` and `5.0` are refused like any other bad value rather than read as numbers. Absent: `fallback`.
 */
export function integerQuery(
  text: string | undefined,
  name: string,
  range: { min: number; max: number; fallback: number },
): number {
  if (text === undefined) return range.fallback;
  const value = /^\d{1,15}$/.test(text) ? Number(text) : Number.NaN;
  if (!(value >= range.min && value <= range.max)) {
    const message = `an integer from ${range.min} to ${range.max}, digits only`;
    throw new ApiError("INVALID_REQUEST", `${name} must be ${message}.`, {}, { fields: [{ path: name, message }] });
  }
  return value;
}

/** A `true`/`false` query parameter; anything else is refused rather than read as `false`. Absent: `false`. */
export function booleanQuery(text: string | undefined, name: string): boolean {
  if (text === undefined || text === "false") return false;
  if (text === "true") return true;
  throw new ApiError(
    "INVALID_REQUEST",
    `${name} must be true or false.`,
    {},
    { fields: [{ path: name, message: "true or false" }] },
  );
}
