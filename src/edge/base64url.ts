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
  const binary = binaryOf(text);
  return binary === null ? null : bytesOf(binary);
}

/** The decoded bytes of canonical base64url text as a binary string (one character a byte), or null. */
function binaryOf(text: string): string | null {
  if (!/^[A-Za-z0-9_-]*$/.test(text) || !canonical(text)) return null;
  try {
    return atob(text.replaceAll("-", "+").replaceAll("_", "/"));
  } catch {
    return null;
  }
}

function bytesOf(binary: string): Uint8Array<ArrayBuffer> {
  // A plain loop: `Uint8Array.from(binary, fn)` calls a function per byte, on every reservation.
  const bytes = new Uint8Array(binary.length);
  for (let i = 0; i < binary.length; i++) bytes[i] = binary.charCodeAt(i);
  return bytes;
}

const decoder = new TextDecoder();
/** A byte outside ASCII, where a binary string and its UTF-8 text differ. */
const NOT_ASCII = /[\x80-\xff]/;

/**
 * The JSON object a signed payload carries (base64url of UTF-8 JSON), its fields checked by
 * `wellFormed`; null for anything else.
 */
export function payloadOf<T>(payload: string, wellFormed: (value: Partial<T>) => boolean): T | null {
  const binary = binaryOf(payload);
  if (binary === null) return null;
  try {
    // ASCII bytes are their own UTF-8 text: no byte array and no decoder call for nearly every token.
    const text = NOT_ASCII.test(binary) ? decoder.decode(bytesOf(binary)) : binary;
    const value = JSON.parse(text) as Partial<T> | null;
    return value !== null && typeof value === "object" && wellFormed(value) ? (value as T) : null;
  } catch {
    return null;
  }
}
