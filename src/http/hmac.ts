const encoder = new TextEncoder();
const keys = new Map<string, Promise<CryptoKey>>();

/**
 * An HMAC-SHA256 key for `secret`, imported once per isolate: importing costs more than signing,
 * and the same few secrets (purchase tokens, webhooks) are used on every request.
 */
export function hmacKey(secret: string): Promise<CryptoKey> {
  let key = keys.get(secret);
  if (!key) {
    key = crypto.subtle.importKey("raw", encoder.encode(secret), { name: "HMAC", hash: "SHA-256" }, false, [
      "sign",
      "verify",
    ]);
    keys.set(secret, key);
  }
  return key;
}
