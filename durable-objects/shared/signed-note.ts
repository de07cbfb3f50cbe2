import { sha256 } from "@noble/hashes/sha2.js";

/**
 * C2SP signed notes with Ed25519 (the format of Go's `golang.org/x/mod/sumdb/note`), and the
 * `tlog-checkpoint` a transparency log signs: a note's text, a blank line, then a line per
 * signature, `— <name> <base64(key id ‖ signature)>`. A key's id is the first four bytes of
 * SHA-256(name ‖ "\n" ‖ 0x01 ‖ public key). Keys are written `<name>+<hex id>+<base64(0x01 ‖ key)>`,
 * the private one with `PRIVATE+KEY+` before it. Ed25519 through WebCrypto (workerd and Node alike).
 */

const ED25519 = 0x01;
const encoder = new TextEncoder();
/** PKCS #8 wrapping of a raw Ed25519 seed (RFC 8410): WebCrypto imports private keys only so. */
const PKCS8_PREFIX = Uint8Array.from([
  0x30, 0x2e, 0x02, 0x01, 0x00, 0x30, 0x05, 0x06, 0x03, 0x2b, 0x65, 0x70, 0x04, 0x22, 0x04, 0x20,
]);

const base64 = (bytes: Uint8Array) => btoa(String.fromCharCode(...bytes));
function unbase64(text: string): Uint8Array | null {
  try {
    return Uint8Array.from(atob(text), (c) => c.charCodeAt(0));
  } catch {
    return null;
  }
}
const hex = (bytes: Uint8Array) => [...bytes].map((b) => b.toString(16).padStart(2, "0")).join("");

/** A name is non-empty, has no `+` and no white space (C2SP signed-note). */
function validName(name: string): boolean {
  return name.length > 0 && !/[+\s]/u.test(name);
}

function keyId(name: string, publicKey: Uint8Array): Uint8Array {
  const input = new Uint8Array([...encoder.encode(`${name}\n`), ED25519, ...publicKey]);
  return sha256(input).slice(0, 4);
}

export interface Verifier {
  name: string;
  id: Uint8Array;
  /** The key in signed-note form: `<name>+<hex id>+<base64(0x01 ‖ key)>`. */
  text: string;
  verify(message: Uint8Array, signature: Uint8Array): Promise<boolean>;
}

export interface Signer {
  name: string;
  id: Uint8Array;
  verifier: Verifier;
  sign(message: Uint8Array): Promise<Uint8Array>;
}

/** The first `n` fields of `text` split at "+", and the rest (base64 may hold "+"). */
function fields(text: string, n: number): string[] {
  const parts = text.split("+");
  return [...parts.slice(0, n), parts.slice(n).join("+")];
}

/** A verifier from its signed-note form; null when the text is not such a key. */
export async function parseVerifier(text: string): Promise<Verifier | null> {
  const [name = "", idHex = "", key = ""] = fields(text, 2);
  const raw = unbase64(key);
  if (!validName(name) || !/^[0-9a-f]{8}$/.test(idHex) || !raw) return null;
  if (raw.length !== 33 || raw[0] !== ED25519) return null;
  const publicKey = raw.slice(1);
  const id = keyId(name, publicKey);
  if (hex(id) !== idHex) return null;
  const cryptoKey = await crypto.subtle.importKey("raw", publicKey, { name: "Ed25519" }, false, ["verify"]);
  return {
    name,
    id,
    text,
    verify: (message, signature) => crypto.subtle.verify({ name: "Ed25519" }, cryptoKey, signature, message),
  };
}

/** A signer from its signed-note form (`PRIVATE+KEY+<name>+<hex id>+<base64(0x01 ‖ seed)>`); null when it is none. */
export async function parseSigner(text: string): Promise<Signer | null> {
  const [p = "", k = "", name = "", idHex = "", key = ""] = fields(text, 4);
  const raw = unbase64(key);
  if (p !== "PRIVATE" || k !== "KEY" || !validName(name) || !raw) return null;
  if (raw.length !== 33 || raw[0] !== ED25519 || !/^[0-9a-f]{8}$/.test(idHex)) return null;
  const pkcs8 = new Uint8Array([...PKCS8_PREFIX, ...raw.slice(1)]);
  let privateKey: CryptoKey;
  try {
    privateKey = await crypto.subtle.importKey("pkcs8", pkcs8, { name: "Ed25519" }, true, ["sign"]);
  } catch {
    return null;
  }
  // The public key, from the private key's JWK (`x`, base64url).
  const jwk = (await crypto.subtle.exportKey("jwk", privateKey)) as JsonWebKey;
  const publicKey = unbase64((jwk.x ?? "").replaceAll("-", "+").replaceAll("_", "/"));
  if (!publicKey) return null;
  const id = keyId(name, publicKey);
  if (hex(id) !== idHex) return null;
  const verifier = await parseVerifier(`${name}+${idHex}+${base64(new Uint8Array([ED25519, ...publicKey]))}`);
  if (!verifier) return null;
  return {
    name,
    id,
    verifier,
    sign: async (message) => new Uint8Array(await crypto.subtle.sign({ name: "Ed25519" }, privateKey, message)),
  };
}

/** A new key pair in signed-note form (what the local tooling makes for `LOG_SIGNING_KEY`). */
export async function generateKey(name: string): Promise<{ signer: string; verifier: string }> {
  if (!validName(name)) throw new Error(`a key name has no "+" and no white space: ${JSON.stringify(name)}`);
  const pair = (await crypto.subtle.generateKey({ name: "Ed25519" }, true, ["sign", "verify"])) as CryptoKeyPair;
  const pkcs8 = new Uint8Array((await crypto.subtle.exportKey("pkcs8", pair.privateKey)) as ArrayBuffer);
  const publicKey = new Uint8Array((await crypto.subtle.exportKey("raw", pair.publicKey)) as ArrayBuffer);
  const idHex = hex(keyId(name, publicKey));
  return {
    signer: `PRIVATE+KEY+${name}+${idHex}+${base64(new Uint8Array([ED25519, ...pkcs8.slice(PKCS8_PREFIX.length)]))}`,
    verifier: `${name}+${idHex}+${base64(new Uint8Array([ED25519, ...publicKey]))}`,
  };
}

/** A note: its text (lines, each ending in "\n") signed by `signer`. */
export async function signNote(text: string, signer: Signer): Promise<string> {
  if (!text.endsWith("\n") || text.includes("\n\n") || text.startsWith("\n")) throw new Error("malformed note");
  const signature = await signer.sign(encoder.encode(text));
  return `${text}\n— ${signer.name} ${base64(new Uint8Array([...signer.id, ...signature]))}\n`;
}

/** The text of a note signed by `verifier`, or null when no signature of that key verifies. */
export async function openNote(note: string, verifier: Verifier): Promise<string | null> {
  const split = note.lastIndexOf("\n\n");
  if (split < 0) return null;
  const text = note.slice(0, split + 1);
  const lines = note.slice(split + 2).split("\n");
  if (lines.at(-1) !== "") return null;
  for (const line of lines.slice(0, -1)) {
    const match = /^— (\S+) (\S+)$/u.exec(line);
    if (!match || match[1] !== verifier.name) continue;
    const raw = unbase64(match[2] ?? "");
    if (!raw || raw.length < 5 || hex(raw.slice(0, 4)) !== hex(verifier.id)) continue;
    if (await verifier.verify(encoder.encode(text), raw.slice(4))) return text;
  }
  return null;
}

export interface Checkpoint {
  origin: string;
  size: number;
  root: Uint8Array;
}

/** C2SP tlog-checkpoint's text: origin, tree size, base64 root hash, each on its line. */
export function checkpointText(checkpoint: Checkpoint): string {
  return `${checkpoint.origin}\n${checkpoint.size}\n${base64(checkpoint.root)}\n`;
}

/** A checkpoint's fields from its (opened) text; null when it is not one. */
export function parseCheckpoint(text: string): Checkpoint | null {
  const [origin = "", size = "", root = ""] = text.split("\n");
  const hash = unbase64(root);
  if (!origin || !/^(0|[1-9][0-9]*)$/.test(size) || !hash || hash.length !== 32) return null;
  return { origin, size: Number(size), root: hash };
}
