import { createRequire } from "node:module";
import type { ClientOptions, default as WebSocketClass } from "ws";

/**
 * vitest talks to each workerd test runtime over a WebSocket that Miniflare opens with `ws`, whose
 * clients offer per-message deflate unless told not to, and Miniflare passes no option: every module
 * and result crossing it was deflated on one side and inflated on the other, about a quarter of the
 * workerd tier's CPU. So the `ws` Miniflare loads opens its client sockets uncompressed. Must run
 * before Miniflare is first imported (it keeps the class it loads); a second run (the config read
 * again) finds it done.
 */
const UNCOMPRESSED = Symbol.for("flashgate.uncompressed-ws");
const miniflare = createRequire(import.meta.url).resolve("miniflare");
const fromMiniflare = createRequire(miniflare);
const path = fromMiniflare.resolve("ws");
const WebSocket: typeof WebSocketClass = fromMiniflare("ws");
const cached = fromMiniflare.cache[path];
if (!cached) throw new Error(`ws (${path}) was not loaded by the require above`);

if (!(UNCOMPRESSED in WebSocket)) {
  if (fromMiniflare.cache[miniflare])
    throw new Error("Miniflare was loaded before test/support/uncompressed-sockets.ts");
  cached.exports = class UncompressedWebSocket extends WebSocket {
    static readonly [UNCOMPRESSED] = true;
    constructor(address: string | URL, protocols?: string | string[] | ClientOptions, options?: ClientOptions) {
      if (typeof protocols === "object" && !Array.isArray(protocols))
        super(address, { ...protocols, perMessageDeflate: false });
      else super(address, protocols, { ...options, perMessageDeflate: false });
    }
  };
}
