/**
 * The Standard Webhooks signature (https://www.standardwebhooks.com): `v1,` + base64 of
 * HMAC-SHA256, keyed by the bytes the `whsec_` secret encodes, over `<id>.<timestamp>.<body>`.
 */

export const SECRET_PREFIX = "whsec_";
const encoder = new TextEncoder();
const keys = new Map<string, Promise<CryptoKey>>();

function base64(bytes: Uint8Array): string {
  let binary = "";
  for (const byte of bytes) binary += String.fromCharCode(byte);
  return btoa(binary);
}

/** A new endpoint secret: `whsec_` + base64 of 32 random bytes. */
export function newSecret(): string {
  return SECRET_PREFIX + base64(crypto.getRandomValues(new Uint8Array(32)));
}

/** The key of a secret, imported once per isolate (an endpoint's deliveries all use it). */
function keyOf(secret: string): Promise<CryptoKey> {
  let key = keys.get(secret);
  if (!key) {
    const raw = Uint8Array.from(atob(secret.slice(SECRET_PREFIX.length)), (ch) => ch.charCodeAt(0));
    key = crypto.subtle.importKey("raw", raw, { name: "HMAC", hash: "SHA-256" }, false, ["sign"]);
    keys.set(secret, key);
  }
  return key;
}

/** The `webhook-signature` header of one attempt. */
export async function sign(secret: string, id: string, timestamp: number, body: string): Promise<string> {
  const mac = await crypto.subtle.sign("HMAC", await keyOf(secret), encoder.encode(`${id}.${timestamp}.${body}`));
  return `v1,${base64(new Uint8Array(mac))}`;
}
