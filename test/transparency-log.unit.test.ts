import { describe, expect, it } from "vitest";
import {
  appendedHashes,
  consistencyProof,
  type Hash,
  inclusionProof,
  leafHash,
  nodeHash,
  rangeHash,
  tilePath,
  treeHash,
  verifyConsistency,
  verifyInclusion,
} from "../durable-objects/shared/merkle";
import {
  checkpointText,
  generateKey,
  openNote,
  parseCheckpoint,
  parseSigner,
  parseVerifier,
  signNote,
} from "../durable-objects/shared/signed-note";

/**
 * The verifiable sale's building blocks (issue #52): the RFC 6962 tree with its proofs, the C2SP
 * tile paths, and Ed25519 signed notes, against published vectors (RFC 6962's test tree as
 * certificate-transparency's tests give it, Go's `sumdb/note` test key and note) and the sizes where
 * implementations go wrong.
 */

const hexOf = (h: Uint8Array) => Buffer.from(h).toString("hex");
const bytes = (hex: string) => Uint8Array.from(Buffer.from(hex, "hex"));

/** A tree in memory, grown one leaf at a time through `appendedHashes`, as a log stores it. */
function grow(entries: readonly Uint8Array[]) {
  const stored = new Map<string, Hash>();
  const at = (level: number, index: number) => {
    const hash = stored.get(`${level}/${index}`);
    if (!hash) throw new Error(`no stored hash ${level}/${index}`);
    return hash;
  };
  entries.forEach((entry, size) => {
    for (const { level, index, hash } of appendedHashes(size, leafHash(entry), at))
      stored.set(`${level}/${index}`, hash);
  });
  return { at, stored };
}

/** MTH straight from RFC 6962 §2.1, over leaf hashes, to hold the stored-hash version to. */
function mth(leaves: readonly Hash[]): Hash {
  if (leaves.length === 1) return leaves[0] as Hash;
  let k = 1;
  while (k * 2 < leaves.length) k *= 2;
  return nodeHash(mth(leaves.slice(0, k)), mth(leaves.slice(k)));
}

// RFC 6962's test leaves and the root of each prefix (certificate-transparency's merkle tree tests).
const LEAVES = ["", "00", "10", "2021", "3031", "40414243", "5051525354555657", "606162636465666768696a6b6c6d6e6f"].map(
  bytes,
);
const ROOTS = [
  "6e340b9cffb37a989ca544e6bb780a2c78901d3fb33738768511a30617afa01d",
  "fac54203e7cc696cf0dfcb42c92a1d9dbaf70ad9e621f4bd8d98662f00e3c125",
  "aeb6bcfe274b70a14fb067a5e5578264db0fa9b51af5e0ba159158f329e06e77",
  "d37ee418976dd95753c1c73862b9398fa2a2cf9b4ff0fdfe8b30cd95209614b7",
  "4e3bbb1f7b478dcfe71fb631631519a3bca12c9aefca1612bfce4c13a86264d4",
  "76e67dadbcdf1e10e1b74ddc608abd2f98dfb16fbce75277b5232a127f2087ef",
  "ddb89be403809e325750d3d263cd78929c2942b7942a34b77e122c9594a74c8c",
  "5dc9da79a70659a9ad559cb701ded9a2ab9d823aad2f4960cfe370eff4604328",
];

describe("the RFC 6962 tree", () => {
  it("has RFC 6962's roots for every prefix of its test leaves, and SHA-256('') when empty", () => {
    const { at } = grow(LEAVES);
    expect(ROOTS.map((_, i) => hexOf(treeHash(i + 1, at)))).toEqual(ROOTS);
    expect(hexOf(treeHash(0, at))).toBe("e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  });

  it("gives RFC 6962's inclusion and consistency proofs", () => {
    const { at } = grow(LEAVES);
    expect(inclusionProof(0, 8, at).map(hexOf)).toEqual([
      "96a296d224f285c67bee93c30f8a309157f0daa35dc5b87e410b78630a09cfc7",
      "5f083f0a1a33ca076a95279832580db3e0ef4584bdff1f54c8a360f50de3031e",
      "6b47aaf29ee3c2af9af889bc1fb9254dabd31177f16232dd6aab035ca39bf6e4",
    ]);
    expect(inclusionProof(5, 8, at).map(hexOf)).toEqual([
      "bc1a0643b12e4d2d7c77918f44e0f4f79a838b6cf9ec5b5c283e1f4d88599e6b",
      "ca854ea128ed050b41b35ffc1b87b8eb2bde461e9e3b5596ece6b9d5975a0ae0",
      "d37ee418976dd95753c1c73862b9398fa2a2cf9b4ff0fdfe8b30cd95209614b7",
    ]);
    expect(consistencyProof(1, 8, at).map(hexOf)).toEqual(inclusionProof(0, 8, at).map(hexOf));
    expect(consistencyProof(6, 8, at).map(hexOf)).toEqual([
      "0ebc5d3437fbe2db158b9f126a1d118e308181031d0a949f8dededebc558ef6a",
      "ca854ea128ed050b41b35ffc1b87b8eb2bde461e9e3b5596ece6b9d5975a0ae0",
      "d37ee418976dd95753c1c73862b9398fa2a2cf9b4ff0fdfe8b30cd95209614b7",
    ]);
  });

  it("proves every leaf and every earlier tree at the sizes where trees go wrong, and refuses a tampered proof", () => {
    const entries = Array.from({ length: 257 }, (_, i) => new TextEncoder().encode(`{"type":"hold","n":${i}}`));
    const { at } = grow(entries);
    const leaves = entries.map(leafHash);
    const sizes = [1, 2, 3, 4, 5, 7, 8, 9, 15, 16, 17, 255, 256, 257];
    let checked = 0;
    for (const size of sizes) {
      const root = treeHash(size, at);
      expect(hexOf(root), `size ${size}`).toBe(hexOf(mth(leaves.slice(0, size))));
      for (const index of new Set([0, 1, size >> 1, size - 2, size - 1].filter((i) => i >= 0 && i < size))) {
        const proof = inclusionProof(index, size, at);
        expect(verifyInclusion(leaves[index] as Hash, index, size, proof, root), `${index} in ${size}`).toBe(true);
        // Another leaf, index or size does not verify; nor does a proof with one byte changed.
        expect(verifyInclusion(leafHash(new Uint8Array([9])), index, size, proof, root)).toBe(false);
        const elsewhere = size > 1 ? [(index + 1) % size] : [];
        for (const other of elsewhere)
          expect(verifyInclusion(leaves[index] as Hash, other, size, proof, root)).toBe(false);
        const bent = proof.slice(0, 1).map((h) => Uint8Array.from(h, (b, j) => (j === 0 ? b ^ 1 : b)));
        for (const first of bent) {
          expect(verifyInclusion(leaves[index] as Hash, index, size, [first, ...proof.slice(1)], root)).toBe(false);
        }
        checked++;
      }
      for (const from of sizes.filter((m) => m <= size)) {
        const proof = consistencyProof(from, size, at);
        const fromRoot = treeHash(from, at);
        expect(verifyConsistency(from, fromRoot, size, root, proof), `${from} -> ${size}`).toBe(true);
        // Another old root, or another new one, does not verify.
        const otherRoot = Uint8Array.from(fromRoot, (b, j) => (j === 31 ? b ^ 1 : b));
        expect(verifyConsistency(from, otherRoot, size, root, proof)).toBe(false);
        expect(verifyConsistency(from, fromRoot, size, treeHash(size - 1, at), proof)).toBe(false);
        checked++;
      }
    }
    expect(checked).toBeGreaterThan(150);
    // A stored hash is the MTH of its range, at every level of the largest tree.
    expect(hexOf(rangeHash(0, 256, at))).toBe(hexOf(mth(leaves.slice(0, 256))));
    expect(hexOf(rangeHash(256, 257, at))).toBe(hexOf(leaves[256] as Hash));
  });

  it("names tiles as C2SP tlog-tiles does", () => {
    expect(tilePath(0, 1234067)).toBe("tile/0/x001/x234/067");
    expect(tilePath(1, 0, 1)).toBe("tile/1/000.p/1");
    expect(tilePath("entries", 1000, 255)).toBe("tile/entries/x001/000.p/255");
    expect(tilePath(2, 999)).toBe("tile/2/999");
    expect(() => tilePath(0, 0, 257)).toThrow();
  });
});

describe("signed notes", () => {
  // Go's golang.org/x/mod/sumdb/note tests: this key, this text, this signed note, byte for byte.
  const PRIVATE = "PRIVATE+KEY+PeterNeumann+c74f20a3+AYEKFALVFGyNhPJEMzD1QIDr+Y7hfZx09iUvxdXHKDFz";
  const PUBLIC = "PeterNeumann+c74f20a3+ARpc2QcUPDhMQegwxbzhKqiBfsVkmqq/LDE4izWy10TW";
  const TEXT = "If you think cryptography is the answer to your problem,\nthen you don't know what your problem is.\n";
  const SIGNED = `${TEXT}\n— PeterNeumann x08go/ZJkuBS9UG/SffcvIAQxVBtiFupLLr8pAcElZInNIuGUgYN1FFYC2pZSNXgKvqfqdngotpRZb6KE6RyyBwJnAM=\n`;

  it("signs Go's test note with Go's test key exactly as Go does, and opens it", async () => {
    const signer = await parseSigner(PRIVATE);
    expect(signer?.verifier.text).toBe(PUBLIC);
    expect(await signNote(TEXT, signer as NonNullable<typeof signer>)).toBe(SIGNED);
    const verifier = await parseVerifier(PUBLIC);
    expect(await openNote(SIGNED, verifier as NonNullable<typeof verifier>)).toBe(TEXT);
  });

  it("refuses a note whose text, signature or key is not the one signed", async () => {
    const verifier = (await parseVerifier(PUBLIC)) as NonNullable<Awaited<ReturnType<typeof parseVerifier>>>;
    expect(await openNote(SIGNED.replace("cryptography", "cryptographY"), verifier)).toBeNull();
    expect(await openNote(SIGNED.replace("x08go", "x08gp"), verifier)).toBeNull();
    const other = await generateKey("PeterNeumann");
    expect(await openNote(SIGNED, (await parseVerifier(other.verifier)) as typeof verifier)).toBeNull();
    for (const bad of [
      "PeterNeumann+c74f20a4+ARpc2QcUPDhMQegwxbzhKqiBfsVkmqq/LDE4izWy10TW", // wrong key id
      "PeterNeumann+173116ae+ZRpc2QcUPDhMQegwxbzhKqiBfsVkmqq/LDE4izWy10TW", // unknown algorithm
      "Peter Neumann+c74f20a3+ARpc2QcUPDhMQegwxbzhKqiBfsVkmqq/LDE4izWy10TW", // a space in the name
      PUBLIC.slice(0, -2),
    ]) {
      expect(await parseVerifier(bad), bad).toBeNull();
    }
    expect(await parseSigner(PRIVATE.replace("c74f20a3", "c74f20a4"))).toBeNull();
  });

  it("signs and opens a checkpoint with a key it made", async () => {
    const keys = await generateKey("flashgate.example/api/skus/shoe/log");
    const signer = (await parseSigner(keys.signer)) as NonNullable<Awaited<ReturnType<typeof parseSigner>>>;
    const { at } = grow(LEAVES);
    const checkpoint = { origin: "flashgate.example/api/skus/shoe/log", size: 8, root: treeHash(8, at) };
    const note = await signNote(checkpointText(checkpoint), signer);
    expect(note.split("\n").slice(0, 3)).toEqual([
      "flashgate.example/api/skus/shoe/log",
      "8",
      Buffer.from(bytes(ROOTS[7] as string)).toString("base64"),
    ]);
    const opened = await openNote(
      note,
      (await parseVerifier(keys.verifier)) as NonNullable<Awaited<ReturnType<typeof parseVerifier>>>,
    );
    expect(parseCheckpoint(opened ?? "")).toEqual(checkpoint);
    expect(parseCheckpoint("origin\n08\nAAAA\n")).toBeNull();
  });
});
