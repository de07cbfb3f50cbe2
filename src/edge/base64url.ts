/** base64url without padding (RFC 4648 §5), as purchase tokens and proof-of-work challenges carry it. */

export function toBase64Url(bytes: Uint8Array): string {
  let binary = "";
  for (const byte of bytes) binary += String.fromCharCode(byte);
  return btoa(binary).replaceAll("+", "-").replaceAll("/", "_").replace(/=+$/, "");
}

const BASE64URL = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";

/**
 * Only the canonical encoding: the bits of the last character that fall past the last byte must be
 * zero. Otherwise several texts decode to the same bytes, and a token whose signature was altered in
 * those bits would still verify (the same HMAC), so "a changed token is refused" would not hold.
 */
function canonical(text: string): boolean {
  const spare = [0, -1, 4, 2][text.length % 4] as number; // unused low bits of the last character
  if (spare < 0) return false;
  return spare === 0 || (BASE64URL.indexOf(text.charAt(text.length - 1)) & ((1 << spare) - 1)) === 0;
}

export function fromBase64Url(text: string): Uint8Array<ArrayBuffer> | null {
  if (!/^[A-Za-z0-9_-]*$/.test(text) || !canonical(text)) return null;
  try {
    const binary = atob(text.replaceAll("-", "+").replaceAll("_", "/"));
    // A plain loop: `Uint8Array.from(binary, fn)` calls a function per byte, on every reservation.
    const bytes = new Uint8Array(binary.length);
    for (let i = 0; i < binary.length; i++) bytes[i] = binary.charCodeAt(i);
    return bytes;
  } catch {
    return null;
  }
}

const decoder = new TextDecoder();

/**
 * The JSON object a signed payload carries (base64url of UTF-8 JSON), its fields checked by
 * `wellFormed`; null for anything else.
 */
export function payloadOf<T>(payload: string, wellFormed: (value: Partial<T>) => boolean): T | null {
  const bytes = fromBase64Url(payload);
  if (!bytes) return null;
  try {
    const value = JSON.parse(decoder.decode(bytes)) as Partial<T> | null;
    return value !== null && typeof value === "object" && wellFormed(value) ? (value as T) : null;
  } catch {
    return null;
  }
}
