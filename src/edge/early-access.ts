import { claimTier, isScheduled, type SkuState } from "../../durable-objects/stock/stock-model";
import { ApiError } from "../http/errors";
import { saleNotActive } from "./sale-phase";

/**
 * Early access at the edge (API.md "Early access"): which opened tier admits a shopper before the
 * public start, by a JWT claim (no I/O) or by an access code (judged and taken by shard 0 in the
 * same call that reads the SKU's state, see `SkuStock.tokenState`), and the codes themselves.
 */

/** Access codes: 16 characters of 32 unambiguous ones (no 0/O, 1/I/L), 80 random bits. */
const CODE_ALPHABET = "23456789ABCDEFGHJKMNPQRSTUVWXYZa";
const CODE_LENGTH = 16;
const encoder = new TextEncoder();

/** `count` fresh codes (256 is a multiple of 32: a byte's low 5 bits are uniform). */
export function newAccessCodes(count: number): string[] {
  // getRandomValues fills at most 64 KiB a call.
  const bytes = new Uint8Array(count * CODE_LENGTH);
  for (let at = 0; at < bytes.length; at += 65_536) crypto.getRandomValues(bytes.subarray(at, at + 65_536));
  const codes: string[] = [];
  for (let i = 0; i < count; i++) {
    let code = "";
    for (let j = 0; j < CODE_LENGTH; j++) code += CODE_ALPHABET[(bytes[i * CODE_LENGTH + j] ?? 0) & 31];
    codes.push(code);
  }
  return codes;
}

/** What is stored of a code: hex SHA-256 of its text as sent, trimmed. */
export async function accessCodeHash(code: string): Promise<string> {
  const digest = new Uint8Array(await crypto.subtle.digest("SHA-256", encoder.encode(code.trim())));
  let hex = "";
  for (const byte of digest) hex += byte.toString(16).padStart(2, "0");
  return hex;
}

/**
 * The tier a token request is admitted by while the sale has not publicly started, or the refusal:
 * an opened tier whose claim the JWT carries first (a code sent as well is then not needed, and
 * shard 0 did not take it), else the code's tier as shard 0 judged it (`codeTier`, null:
 * `403 ACCESS_CODE_INVALID`), else `403 SALE_NOT_ACTIVE` as before. Paused or ended sales are
 * refused as before, whatever the tiers.
 */
export function admittedTier(
  sale: SkuState,
  now: number,
  claims: Record<string, unknown>,
  code: { given: boolean; tier: string | null },
): string {
  if (!isScheduled(sale, now)) throw saleNotActive(sale, now);
  const byClaim = claimTier(sale.access, claims, now);
  if (byClaim) return byClaim.name;
  if (code.given) {
    if (code.tier !== null) return code.tier;
    throw new ApiError(
      "ACCESS_CODE_INVALID",
      "This access code admits nobody here now: it is unknown, its tier has not opened yet, or another shopper took it.",
    );
  }
  throw saleNotActive(sale, now);
}
