import { createHash } from "node:crypto";
import { leadingZeroBits } from "../src/edge/proof-of-work";

/**
 * The client's part of a proof of work (API.md "Bots"), in Node, for the bench's and chaos's
 * shoppers: `<challenge>:<nonce>` whose SHA-256 begins with `bits` zero bits, as the storefront's
 * Web Worker finds it.
 */
export function solveProofOfWork(challenge: string, bits: number): string {
  for (let nonce = 0; ; nonce++) {
    const answer = `${challenge}:${nonce.toString(36)}`;
    if (leadingZeroBits(createHash("sha256").update(answer).digest()) >= bits) return answer;
  }
}
