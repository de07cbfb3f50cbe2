import { createHash, createHmac } from "node:crypto";

/**
 * WebCrypto's digest and HMAC for the simulator's run (docs/SIMULATOR.md): Node's `crypto.subtle`
 * answers on its thread pool, so its promises settle when real time says, not when the world pumps;
 * these answer at once (a settled promise) with the same bytes, so a seed replays byte for byte.
 * SHA-256 and HMAC-SHA-256 only (the log's user salts, the codes' hashes); any other use
 * goes to the real `subtle`.
 */
/** An algorithm as WebCrypto names it: a name, or an object with one (an HMAC key's also names its hash). */
type Algorithm = string | { name: string; hash?: Algorithm };

export function simulatedSubtle(real: SubtleCrypto): SubtleCrypto {
  const hmacKeys = new WeakMap<object, Buffer>();
  const bytes = (data: BufferSource): Buffer =>
    ArrayBuffer.isView(data)
      ? Buffer.from(data.buffer, data.byteOffset, data.byteLength)
      : Buffer.from(data as ArrayBuffer);
  const arrayBuffer = (b: Buffer): ArrayBuffer =>
    b.buffer.slice(b.byteOffset, b.byteOffset + b.byteLength) as ArrayBuffer;
  const nameOf = (algorithm: Algorithm) => (typeof algorithm === "string" ? algorithm : algorithm.name).toUpperCase();
  const own: Record<string, unknown> = {
    digest: (algorithm: Algorithm, data: BufferSource) =>
      nameOf(algorithm) === "SHA-256"
        ? Promise.resolve(arrayBuffer(createHash("sha256").update(bytes(data)).digest()))
        : real.digest(algorithm as string, data),
    importKey: (format: string, data: BufferSource, algorithm: Algorithm, extractable: boolean, usages: string[]) => {
      const hash = typeof algorithm === "string" ? undefined : algorithm.hash;
      if (format === "raw" && nameOf(algorithm) === "HMAC" && hash && nameOf(hash) === "SHA-256") {
        const key = { type: "secret", algorithm: { name: "HMAC" }, extractable, usages };
        hmacKeys.set(key, Buffer.from(bytes(data)));
        return Promise.resolve(key as unknown as CryptoKey);
      }
      return real.importKey(format as "raw", data, algorithm as string, extractable, usages as never);
    },
    sign: (algorithm: Algorithm, key: CryptoKey, data: BufferSource) => {
      const secret = hmacKeys.get(key);
      return secret
        ? Promise.resolve(arrayBuffer(createHmac("sha256", secret).update(bytes(data)).digest()))
        : real.sign(algorithm as string, key, data);
    },
  };
  return new Proxy(real, {
    get: (target, name) => {
      if (typeof name === "string" && name in own) return own[name];
      const value = Reflect.get(target, name) as unknown;
      return typeof value === "function" ? value.bind(target) : value;
    },
  });
}
