import { createHash } from "node:crypto";

/**
 * The Merkle tree of a transparency log (RFC 6962 / RFC 9162 §2.1), as Go's
 * `golang.org/x/mod/sumdb/tlog` and the C2SP `tlog-tiles` spec lay it out: leaf hash
 * SHA-256(0x00 ‖ entry), node hash SHA-256(0x01 ‖ left ‖ right), and a stored hash per complete
 * subtree, addressed by (level, index): the subtree of leaves [index·2^level, (index+1)·2^level).
 * Synchronous (node:crypto, native in workerd and Node), so a log can append inside a Durable
 * Object's transaction. The foundation of the verifiable sale (API.md v1.4), tested against RFC
 * 6962's vectors and Go's layout.
 */

export const HASH_SIZE = 32;
/** C2SP tlog-tiles: a tile holds 2^8 hashes of one level of tiles. */
export const TILE_HEIGHT = 8;
export const TILE_WIDTH = 1 << TILE_HEIGHT;

export type Hash = Uint8Array;
/** The stored hash of a complete subtree: `level` 0 is a leaf. */
export type HashAt = (level: number, index: number) => Hash;

/** SHA-256 as a plain Uint8Array (a Buffer's `slice` would share its memory), in one native call. */
function sha256(input: Uint8Array): Hash {
  const digest = createHash("sha256").update(input).digest();
  return new Uint8Array(digest.buffer, digest.byteOffset, digest.byteLength);
}

export function leafHash(entry: Uint8Array): Hash {
  const input = new Uint8Array(1 + entry.length);
  input.set(entry, 1);
  return sha256(input);
}

export function nodeHash(left: Hash, right: Hash): Hash {
  const input = new Uint8Array(1 + 2 * HASH_SIZE);
  input[0] = 1;
  input.set(left, 1);
  input.set(right, 1 + HASH_SIZE);
  return sha256(input);
}

/** The largest power of two below `n` (n ≥ 2): where RFC 6962 splits a range of n leaves. */
function split(n: number): number {
  let k = 1;
  while (k * 2 < n) k *= 2;
  return k;
}

const isPowerOfTwo = (n: number) => n > 0 && (n & (n - 1)) === 0;

/** MTH of leaves [start, end): a stored hash when the range is one complete subtree, else combined. */
export function rangeHash(start: number, end: number, at: HashAt): Hash {
  const n = end - start;
  if (n <= 0) throw new RangeError(`empty range ${start}..${end}`);
  if (isPowerOfTwo(n) && start % n === 0) return at(Math.log2(n), start / n);
  const k = split(n);
  return nodeHash(rangeHash(start, start + k, at), rangeHash(start + k, end, at));
}

/** The root of a tree of `size` leaves (SHA-256 of nothing for the empty tree). */
export function treeHash(size: number, at: HashAt): Hash {
  return size === 0 ? sha256(new Uint8Array()) : rangeHash(0, size, at);
}

/**
 * The hashes a tree of `size` leaves stores once leaf `size` (its hash `leaf`) is appended: the
 * leaf, then each subtree it completes, bottom up.
 */
export function appendedHashes(size: number, leaf: Hash, at: HashAt): { level: number; index: number; hash: Hash }[] {
  const out = [{ level: 0, index: size, hash: leaf }];
  let hash = leaf;
  for (let level = 0, index = size; index % 2 === 1; level++, index = (index - 1) / 2) {
    hash = nodeHash(at(level, index - 1), hash);
    out.push({ level: level + 1, index: (index - 1) / 2, hash });
  }
  return out;
}

/** RFC 9162 §2.1.3.1: the inclusion proof of leaf `index` in the tree of `size` leaves. */
export function inclusionProof(index: number, size: number, at: HashAt): Hash[] {
  if (index < 0 || index >= size) throw new RangeError(`leaf ${index} is not in a tree of ${size}`);
  const path = (m: number, start: number, end: number): Hash[] => {
    const n = end - start;
    if (n === 1) return [];
    const k = split(n);
    return m < k
      ? [...path(m, start, start + k), rangeHash(start + k, end, at)]
      : [...path(m - k, start + k, end), rangeHash(start, start + k, at)];
  };
  return path(index, 0, size);
}

/** RFC 9162 §2.1.4.1: the proof that the tree of `size` leaves extends the one of `from` leaves. */
export function consistencyProof(from: number, size: number, at: HashAt): Hash[] {
  if (from < 1 || from > size) throw new RangeError(`no consistency proof from ${from} to ${size}`);
  const subproof = (m: number, start: number, end: number, whole: boolean): Hash[] => {
    const n = end - start;
    if (m === n) return whole ? [] : [rangeHash(start, end, at)];
    const k = split(n);
    return m <= k
      ? [...subproof(m, start, start + k, whole), rangeHash(start + k, end, at)]
      : [...subproof(m - k, start + k, end, false), rangeHash(start, start + k, at)];
  };
  return subproof(from, 0, size, true);
}

const equal = (a: Hash, b: Hash) => a.length === b.length && a.every((byte, i) => byte === b[i]);

/** RFC 9162 §2.1.3.2: whether `proof` puts the leaf hash at `index` of the tree whose root is `root`. */
export function verifyInclusion(leaf: Hash, index: number, size: number, proof: readonly Hash[], root: Hash): boolean {
  if (index < 0 || index >= size) return false;
  let fn = index;
  let sn = size - 1;
  let r = leaf;
  for (const p of proof) {
    if (sn === 0) return false;
    if (fn % 2 === 1 || fn === sn) {
      r = nodeHash(p, r);
      while (fn % 2 === 0 && fn !== 0) {
        fn = Math.floor(fn / 2);
        sn = Math.floor(sn / 2);
      }
    } else r = nodeHash(r, p);
    fn = Math.floor(fn / 2);
    sn = Math.floor(sn / 2);
  }
  return sn === 0 && equal(r, root);
}

/** RFC 9162 §2.1.4.2: whether `proof` shows the tree (size, root) extends the tree (from, fromRoot). */
export function verifyConsistency(
  from: number,
  fromRoot: Hash,
  size: number,
  root: Hash,
  proof: readonly Hash[],
): boolean {
  if (from < 1 || from > size) return false;
  if (from === size) return proof.length === 0 && equal(fromRoot, root);
  const path = isPowerOfTwo(from) ? [fromRoot, ...proof] : [...proof];
  const [first, ...rest] = path;
  if (!first) return false;
  let fn = from - 1;
  let sn = size - 1;
  while (fn % 2 === 1) {
    fn = Math.floor(fn / 2);
    sn = Math.floor(sn / 2);
  }
  let fr = first;
  let sr = first;
  for (const c of rest) {
    if (sn === 0) return false;
    if (fn % 2 === 1 || fn === sn) {
      fr = nodeHash(c, fr);
      sr = nodeHash(c, sr);
      while (fn % 2 === 0 && fn !== 0) {
        fn = Math.floor(fn / 2);
        sn = Math.floor(sn / 2);
      }
    } else sr = nodeHash(sr, c);
    fn = Math.floor(fn / 2);
    sn = Math.floor(sn / 2);
  }
  return sn === 0 && equal(fr, fromRoot) && equal(sr, root);
}

/**
 * C2SP tlog-tiles: the path of a tile, `tile/<L>/<N>[.p/<W>]` (`level` "entries" for entry bundles):
 * N in groups of three digits, each but the last prefixed with `x` (1234067 → x001/x234/067).
 */
export function tilePath(level: number | "entries", index: number, width = TILE_WIDTH): string {
  if (!Number.isSafeInteger(index) || index < 0) throw new RangeError(`tile index ${index}`);
  if (width < 1 || width > TILE_WIDTH) throw new RangeError(`tile width ${width}`);
  const groups: string[] = [];
  let n = index;
  do {
    groups.unshift(String(n % 1000).padStart(3, "0"));
    n = Math.floor(n / 1000);
  } while (n > 0);
  const encoded = groups.map((g, i) => (i < groups.length - 1 ? `x${g}` : g)).join("/");
  return `tile/${level}/${encoded}${width < TILE_WIDTH ? `.p/${width}` : ""}`;
}
