// Checks a sale log receipt in the browser (API.md v1.4 "The verifiable sale", docs/VERIFY.md), as
// `npm run verify-sale --receipt` does (tools/sale-verifier.ts checkReceipt, verifyInclusion,
// openCheckpoint, parseVerifier) short of comparing it with the log as it is now: the receipt's entry
// is at its index in the tree its checkpoint signs, and the checkpoint is signed by the log's key.
// WebCrypto only. An ES module shared by the storefront (/static/receipt-check.js) and the buy
// button (/embed/receipt-check.js, imported from beside the element).

/**
 * A signed-note verifier key (`<name>+<hex id>+<base64(0x01 ‖ key)>`, GET /api/log/key).
 * @typedef {{ name: string, id: Uint8Array, key: CryptoKey }} Verifier
 * @typedef {{ sku: string, reservation: string, entry: string, index: number }} Expected
 * @typedef {{ verified: true, entry: number, of: number }
 *   | { verified: false, checked: boolean, why: string }} ReceiptCheck
 */

/** A receipt that does not check out against the key (not one this browser could not check). */
class Broken extends Error {}

const encoder = new TextEncoder();

/** @param {Uint8Array[]} parts */
async function sha256(...parts) {
  const bytes = new Uint8Array(parts.reduce((n, p) => n + p.length, 0));
  let at = 0;
  for (const part of parts) {
    bytes.set(part, at);
    at += part.length;
  }
  return new Uint8Array(await crypto.subtle.digest("SHA-256", bytes));
}

/** @param {string} text @returns {Uint8Array<ArrayBuffer>} */
function base64(text) {
  try {
    return Uint8Array.from(atob(text), (c) => c.charCodeAt(0));
  } catch {
    throw new Broken(`${JSON.stringify(text.slice(0, 16))} is not base64`);
  }
}

/** @param {Uint8Array} a @param {Uint8Array} b */
const equal = (a, b) => a.length === b.length && a.every((x, i) => x === b[i]);

const LEAF = new Uint8Array([0]);
const NODE = new Uint8Array([1]);

/**
 * RFC 9162 §2.1.3.2: whether `proof` puts the leaf hash at `index` of the tree (size, root).
 * @param {Uint8Array} leaf @param {number} index @param {number} size @param {Uint8Array[]} proof
 * @param {Uint8Array} root
 */
async function verifyInclusion(leaf, index, size, proof, root) {
  if (index < 0 || index >= size) return false;
  let fn = index;
  let sn = size - 1;
  let r = leaf;
  for (const p of proof) {
    if (sn === 0) return false;
    if (fn % 2 === 1 || fn === sn) {
      r = await sha256(NODE, p, r);
      while (fn % 2 === 0 && fn !== 0) {
        fn = Math.floor(fn / 2);
        sn = Math.floor(sn / 2);
      }
    } else r = await sha256(NODE, r, p);
    fn = Math.floor(fn / 2);
    sn = Math.floor(sn / 2);
  }
  return sn === 0 && equal(r, root);
}

/** @param {string} text @returns {Promise<Verifier>} */
async function parseVerifier(text) {
  const [name = "", idHex = "", ...rest] = text.trim().split("+");
  const raw = base64(rest.join("+"));
  if (!name || !/^[0-9a-f]{8}$/.test(idHex) || raw.length !== 33 || raw[0] !== 1)
    throw new Broken("the log's key is not an Ed25519 signed-note key");
  const id = (await sha256(encoder.encode(`${name}\n`), raw)).subarray(0, 4);
  if ([...id].map((b) => b.toString(16).padStart(2, "0")).join("") !== idHex)
    throw new Broken("the log's key id does not match its name and key");
  const key = await crypto.subtle.importKey("raw", raw.subarray(1), { name: "Ed25519" }, false, ["verify"]);
  return { name, id, key };
}

/** The key's promise by URL: fetched once a page (again only after a failure). @type {Map<string, Promise<Verifier>>} */
const keys = new Map();

/** @param {string} url */
function logKey(url) {
  let key = keys.get(url);
  if (!key) {
    key = (async () => {
      /** @type {Response} */
      let answer;
      try {
        answer = await fetch(url, { mode: "cors", credentials: "omit" });
      } catch {
        throw new Error("the log's key did not load");
      }
      if (!answer.ok) throw new Error(`the log's key did not load (HTTP ${answer.status})`);
      const text = await answer.text();
      // A key that does not read, or no Ed25519 in this browser, says nothing of the receipt: not checked.
      try {
        return await parseVerifier(text);
      } catch (error) {
        throw new Error(error instanceof Broken ? error.message : `this browser cannot check the signature (${error})`);
      }
    })();
    keys.set(url, key);
    key.catch(() => keys.delete(url));
  }
  return key;
}

/**
 * The signed checkpoint, opened with the key: a valid signature line
 * `— <name> <base64(4-byte key id ‖ 64-byte Ed25519 signature)>` over the note's text (up to and
 * including the line before the blank line).
 * @param {string} note @param {Verifier} verifier
 */
async function openCheckpoint(note, verifier) {
  const split = note.lastIndexOf("\n\n");
  if (split < 0) throw new Broken("its checkpoint is not a signed note");
  const text = note.slice(0, split + 1);
  let signed = false;
  for (const line of note.slice(split + 2).split("\n")) {
    const match = /^— (\S+) (\S+)$/u.exec(line);
    if (!match || match[1] !== verifier.name) continue;
    const raw = base64(match[2] ?? "");
    if (raw.length !== 68 || !equal(raw.subarray(0, 4), verifier.id)) continue;
    if (await crypto.subtle.verify("Ed25519", verifier.key, raw.subarray(4), encoder.encode(text))) signed = true;
  }
  if (!signed) throw new Broken(`its checkpoint has no valid signature by ${verifier.name}`);
  const [origin = "", size = "", root = ""] = text.split("\n");
  const hash = base64(root);
  if (!origin || !/^(0|[1-9][0-9]*)$/.test(size) || hash.length !== 32)
    throw new Broken("its checkpoint is not a checkpoint");
  return { origin, size: Number(size), root: hash };
}

/**
 * The receipt's `proof` (C2SP tlog-proof: `extra`, `index`, the hashes, a blank line, the signed
 * checkpoint) checked against the key: the checkpoint is this SKU's log, signed by the key, and the
 * entry, this reservation's `entry` at `index`, leads to its root. Resolves to "entry N of M" (N from
 * 1) or why not; a receipt this browser could not check (the key did not load, no Ed25519 here) is
 * `checked: false`, never verified.
 * @param {string} keyUrl the gateway's GET /api/log/key
 * @param {string} proof
 * @param {Expected} expected
 * @returns {Promise<ReceiptCheck>}
 */
export async function checkReceipt(keyUrl, proof, expected) {
  try {
    const lines = proof.split("\n");
    const blank = lines.indexOf("");
    if (lines[0] !== "c2sp.org/tlog-proof@v1" || blank < 0) throw new Broken("it is not a C2SP tlog-proof");
    const extra = lines[1]?.startsWith("extra ") ? base64(lines[1].slice(6)) : null;
    const index = /^index (0|[1-9][0-9]*)$/.exec(lines[2] ?? "")?.[1];
    if (!extra || index === undefined) throw new Broken("it lacks its entry or its index");
    const hashes = lines.slice(3, blank).map(base64);
    if (hashes.some((h) => h.length !== 32)) throw new Broken("its proof has a hash that is not 32 bytes");
    const i = Number(index);
    // What the page says the receipt is of must be what it proves: this reservation's entry, there.
    if (i !== expected.index) throw new Broken(`its proof is of entry ${i + 1}, not ${expected.index + 1}`);
    /** @type {{ type?: unknown, reservation?: unknown }} */
    let entry;
    try {
      entry = JSON.parse(new TextDecoder("utf-8", { fatal: true }).decode(extra));
    } catch {
      throw new Broken("its entry is not JSON");
    }
    if (entry?.type !== expected.entry || entry.reservation !== expected.reservation)
      throw new Broken(`its entry is not this reservation's ${expected.entry}`);
    const checkpoint = await openCheckpoint(lines.slice(blank + 1).join("\n"), await logKey(keyUrl));
    if (!checkpoint.origin.endsWith(`/api/skus/${expected.sku}/log`))
      throw new Broken(`it is of another log (${checkpoint.origin})`);
    if (!(await verifyInclusion(await sha256(LEAF, extra), i, checkpoint.size, hashes, checkpoint.root)))
      throw new Broken("its proof does not lead to the signed checkpoint's root");
    return { verified: true, entry: i + 1, of: checkpoint.size };
  } catch (error) {
    const why = error instanceof Error ? error.message : String(error);
    return { verified: false, checked: error instanceof Broken, why };
  }
}
