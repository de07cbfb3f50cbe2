import { describe, expect, it } from "vitest";
import { appendedHashes, type Hash, inclusionProof, leafHash, treeHash } from "../durable-objects/shared/merkle";
import { checkpointText, generateKey, parseSigner, signNote } from "../durable-objects/shared/signed-note";

/**
 * The pages' receipt check (public/static/receipt-check.js: the storefront's hold card and the buy
 * button say "Verified" only when it passes) against receipts made as the log makes them
 * (durable-objects/log/sale-log.ts tlogProof, signed with the log's own signed-note code): every
 * entry of trees of 1 to 9 entries checks out, and a receipt with anything changed does not, each
 * with its reason. The browsers' side of it runs in test/receipts.e2e.test.ts.
 */

type ReceiptCheck = { verified: true; entry: number; of: number } | { verified: false; checked: boolean; why: string };
type Expected = { sku: string; reservation: string; entry: string; index: number };
// Imported by its URL: the Worker's typings take every "*.js" import for a text module (wrangler.toml `rules`).
const { checkReceipt } = (await import(new URL("../public/static/receipt-check.js", import.meta.url).href)) as {
  checkReceipt: (keyUrl: string, proof: string, expected: Expected) => Promise<ReceiptCheck>;
};

const ORIGIN = "flashgate.example/api/skus/tee/log";
const b64 = (bytes: Uint8Array) => Buffer.from(bytes).toString("base64");
const entryOf = (n: number) =>
  new TextEncoder().encode(JSON.stringify({ type: "hold", reservation: `res-${n}`, quantity: 1 }));

/** A log of `size` holds, signed by a new key named after ORIGIN; its receipts, and the key's URL. */
async function log(size: number, origin = ORIGIN) {
  const keys = await generateKey(origin);
  const signer = await parseSigner(keys.signer);
  if (!signer) throw new Error("no signer");
  const stored = new Map<string, Hash>();
  const at = (level: number, index: number) => stored.get(`${level}/${index}`) as Hash;
  const entries = Array.from({ length: size }, (_, n) => entryOf(n));
  entries.forEach((entry, n) => {
    for (const { level, index, hash } of appendedHashes(n, leafHash(entry), at)) stored.set(`${level}/${index}`, hash);
  });
  const note = await signNote(checkpointText({ origin, size, root: treeHash(size, at) }), signer);
  const receipt = (n: number) => {
    const hashes = inclusionProof(n, size, at).map((h) => `${b64(h)}\n`);
    return `c2sp.org/tlog-proof@v1\nextra ${b64(entries[n] as Uint8Array)}\nindex ${n}\n${hashes.join("")}\n${note}`;
  };
  return { receipt, keyUrl: `data:text/plain,${encodeURIComponent(keys.verifier)}` };
}

const expected = (n: number): Expected => ({ sku: "tee", reservation: `res-${n}`, entry: "hold", index: n });

describe("the pages' receipt check", () => {
  it("checks out every entry of trees of 1 to 9 entries, as entry N of M", async () => {
    for (let size = 1; size <= 9; size++) {
      const { receipt, keyUrl } = await log(size);
      for (let n = 0; n < size; n++)
        expect(await checkReceipt(keyUrl, receipt(n), expected(n)), `${n} of ${size}`).toEqual({
          verified: true,
          entry: n + 1,
          of: size,
        });
    }
  });

  it("does not check out a receipt with anything changed, and says why", async () => {
    const { receipt, keyUrl } = await log(7);
    const other = await log(7);
    const flip = (text: string, line: number, byte: number) => {
      const lines = text.split("\n");
      const words = (lines[line] ?? "").split(" ");
      const bytes = Buffer.from(words.at(-1) ?? "", "base64");
      bytes[byte] = (bytes[byte] ?? 0) ^ 1;
      lines[line] = [...words.slice(0, -1), bytes.toString("base64")].join(" ");
      return lines.join("\n");
    };
    const good = receipt(5);
    const signatureLine = good.split("\n").findIndex((l) => l.startsWith("— "));
    const cases: [string, string, Expected, string][] = [
      ["a proof hash", flip(good, 3, 0), expected(5), "its proof does not lead to the signed checkpoint's root"],
      ["the root", flip(good, signatureLine - 2, 31), expected(5), "its checkpoint has no valid signature by"],
      ["the signature", flip(good, signatureLine, 20), expected(5), "its checkpoint has no valid signature by"],
      ["the key", other.receipt(5), expected(5), "its checkpoint has no valid signature by"],
      ["the index", good.replace("\nindex 5\n", "\nindex 4\n"), expected(4), "its entry is not this reservation's"],
      ["the reservation", good, { ...expected(5), reservation: "res-4" }, "its entry is not this reservation's"],
      ["the entry shown", good, { ...expected(5), index: 4 }, "its proof is of entry 6, not 5"],
      ["the SKU", good, { ...expected(5), sku: "cap" }, `it is of another log (${ORIGIN})`],
      ["the format", good.replace("tlog-proof@v1", "tlog-proof@v2"), expected(5), "it is not a C2SP tlog-proof"],
    ];
    for (const [what, text, expecting, why] of cases) {
      const check = await checkReceipt(keyUrl, text, expecting);
      expect(check, what).toMatchObject({ verified: false, checked: true });
      expect(check.verified === false && check.why, what).toContain(why);
    }
    // A receipt that moved its entry to another index, with a proof of that index: still not its checkpoint's.
    const moved = receipt(4).replace(/^extra .*$/m, `extra ${b64(entryOf(5))}`);
    expect(await checkReceipt(keyUrl, moved, { ...expected(5), index: 4 })).toMatchObject({
      verified: false,
      checked: true,
      why: "its proof does not lead to the signed checkpoint's root",
    });
  });

  it("says it could not check when the key does not load, and calls nothing verified", async () => {
    const { receipt } = await log(3);
    const check = await checkReceipt("data:text/plain,not-a-key", receipt(1), expected(1));
    expect(check).toMatchObject({ verified: false, checked: false });
  });
});
