import { createHash } from "node:crypto";
import { describe, expect, it } from "vitest";
import { checkProofOfWork, issueChallenge, leadingZeroBits } from "../src/edge/proof-of-work";

/**
 * The proof of work's check (API.md "Bots"): a `nonce` is any string of up to 32 characters, so one
 * with a colon in it is a nonce like any other (the challenge itself has none).
 */

const SECRET = "unit-pow-secret";
const WHO = { userId: "ann", sku: "pow-sku", bits: 6 };

/** The first answer `<challenge>:<prefix><n>` with `bits` zero bits. */
function solve(challenge: string, bits: number, prefix: string): string {
  for (let n = 0; ; n++) {
    const answer = `${challenge}:${prefix}${n}`;
    if (leadingZeroBits(createHash("sha256").update(answer).digest()) >= bits) return answer;
  }
}

describe("proof of work: the check", () => {
  it("takes a solved nonce whatever its characters, a colon included, and refuses an unsolved or too long one", async () => {
    const now = Date.now();
    const { challenge } = await issueChallenge(SECRET, WHO.userId, WHO.sku, WHO.bits, now);
    for (const prefix of ["n", "n:", "a:b:"]) {
      expect(await checkProofOfWork(solve(challenge, WHO.bits, prefix), SECRET, WHO, now), prefix).toBe(true);
    }
    const unsolved = [...Array(64).keys()]
      .map((n) => `${challenge}:x:${n}`)
      .find((a) => leadingZeroBits(createHash("sha256").update(a).digest()) < WHO.bits) as string;
    expect(await checkProofOfWork(unsolved, SECRET, WHO, now)).toBe(false);
    expect(await checkProofOfWork(`${challenge}:${"n".repeat(33)}`, SECRET, WHO, now)).toBe(false);
    expect(await checkProofOfWork(`${challenge}:`, SECRET, WHO, now)).toBe(false);
    expect(await checkProofOfWork(challenge, SECRET, WHO, now)).toBe(false);
  });
});
