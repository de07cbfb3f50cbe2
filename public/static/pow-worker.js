// Proof-of-work solver, run in a Web Worker so the page stays responsive (API.md "Bots"): finds a
// nonce such that SHA-256 of `<challenge>:<nonce>` begins with `bits` zero bits. SHA-256 is written
// out here, synchronous: WebCrypto's digest is a promise per hash, many times slower for millions of
// short messages. The prefix's whole 64-byte blocks are hashed once; each nonce hashes only the tail.
// Messages: in {challenge, bits}; out {progress: hashesTried} every 2^16 hashes, then {answer}.

const K = new Uint32Array([
  0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5, 0xd807aa98,
  0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174, 0xe49b69c1, 0xefbe4786,
  0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da, 0x983e5152, 0xa831c66d, 0xb00327c8,
  0xbf597fc7, 0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967, 0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13,
  0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85, 0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3, 0xd192e819,
  0xd6990624, 0xf40e3585, 0x106aa070, 0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a,
  0x5b9cca4f, 0x682e6ff3, 0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7,
  0xc67178f2,
]);
const INITIAL = [0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a, 0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19];
const W = new Uint32Array(64);

/**
 * One SHA-256 compression of the 64 bytes at `offset` of `bytes` into `h` (8 words, changed in place).
 * @param {Uint32Array} h
 * @param {Uint8Array} bytes
 * @param {number} offset
 */
function compress(h, bytes, offset) {
  for (let i = 0; i < 16; i++) {
    const j = offset + i * 4;
    W[i] = (bytes[j] << 24) | (bytes[j + 1] << 16) | (bytes[j + 2] << 8) | bytes[j + 3];
  }
  for (let i = 16; i < 64; i++) {
    const a = W[i - 15];
    const b = W[i - 2];
    const s0 = ((a >>> 7) | (a << 25)) ^ ((a >>> 18) | (a << 14)) ^ (a >>> 3);
    const s1 = ((b >>> 17) | (b << 15)) ^ ((b >>> 19) | (b << 13)) ^ (b >>> 10);
    W[i] = (W[i - 16] + s0 + W[i - 7] + s1) | 0;
  }
  let [a, b, c, d, e, f, g, k] = h;
  for (let i = 0; i < 64; i++) {
    const t1 =
      (k +
        (((e >>> 6) | (e << 26)) ^ ((e >>> 11) | (e << 21)) ^ ((e >>> 25) | (e << 7))) +
        ((e & f) ^ (~e & g)) +
        K[i] +
        W[i]) |
      0;
    const t2 =
      ((((a >>> 2) | (a << 30)) ^ ((a >>> 13) | (a << 19)) ^ ((a >>> 22) | (a << 10))) +
        ((a & b) ^ (a & c) ^ (b & c))) |
      0;
    k = g;
    g = f;
    f = e;
    e = (d + t1) | 0;
    d = c;
    c = b;
    b = a;
    a = (t1 + t2) | 0;
  }
  h[0] = (h[0] + a) | 0;
  h[1] = (h[1] + b) | 0;
  h[2] = (h[2] + c) | 0;
  h[3] = (h[3] + d) | 0;
  h[4] = (h[4] + e) | 0;
  h[5] = (h[5] + f) | 0;
  h[6] = (h[6] + g) | 0;
  h[7] = (h[7] + k) | 0;
}

/**
 * The first 32 bits of SHA-256(prefix + nonce), given the state after the prefix's whole blocks.
 * @param {Uint32Array} mid
 * @param {Uint8Array} tail
 * @param {number} tailLength
 * @param {string} nonce
 * @param {number} totalLength
 */
function firstWord(mid, tail, tailLength, nonce, totalLength) {
  const block = tail; // tail bytes are already in place; the nonce, padding and length follow
  let n = tailLength;
  for (let i = 0; i < nonce.length; i++) block[n++] = nonce.charCodeAt(i);
  block[n++] = 0x80;
  const blocks = n + 8 <= 64 ? 1 : 2;
  block.fill(0, n, blocks * 64);
  const bitLength = totalLength * 8;
  const end = blocks * 64;
  block[end - 4] = bitLength >>> 24;
  block[end - 3] = bitLength >>> 16;
  block[end - 2] = bitLength >>> 8;
  block[end - 1] = bitLength;
  const h = mid.slice();
  compress(h, block, 0);
  if (blocks === 2) compress(h, block, 64);
  return h[0] >>> 0;
}

self.onmessage = (/** @type {MessageEvent<{ challenge: string, bits: number }>} */ event) => {
  const { challenge, bits } = event.data;
  const prefix = `${challenge}:`;
  const bytes = new TextEncoder().encode(prefix);
  const whole = bytes.length - (bytes.length % 64);
  const mid = new Uint32Array(INITIAL);
  for (let offset = 0; offset < whole; offset += 64) compress(mid, bytes, offset);
  const tail = new Uint8Array(128);
  const tailLength = bytes.length - whole;
  for (let tried = 0; ; tried++) {
    tail.set(bytes.subarray(whole), 0);
    const nonce = tried.toString(36);
    if (Math.clz32(firstWord(mid, tail, tailLength, nonce, bytes.length + nonce.length)) >= bits) {
      self.postMessage({ answer: `${prefix}${nonce}`, tried: tried + 1 });
      return;
    }
    if ((tried & 0xffff) === 0xffff) self.postMessage({ progress: tried + 1 });
  }
};
