import { runInDurableObject } from "cloudflare:test";
import { env } from "cloudflare:workers";
import { describe, expect, it } from "vitest";

/**
 * The test runtime itself: the pinned `@cloudflare/vitest-pool-workers` 0.15.1 with workers-sdk#15092's
 * fix from patches/ (docs/DEVELOPMENT.md, "Tests"). Unpatched, every object built wrapped its class's
 * prototype in one more Proxy, and a call past about 1,500 objects threw RangeError.
 */

/** The pool's module that builds the wrappers (not typed: it is the pool's own, not a public API). */
const POOL_INTERNALS: string = "cloudflare:test-internal";

type Wrapper = new (ctx: DurableObjectState, env: Env) => Record<string, unknown>;

describe("the test runtime", () => {
  it("builds any number of objects of a class behind one prototype (the pool's patch is applied)", async () => {
    const { createDurableObjectWrapper } = (await import(POOL_INTERNALS)) as {
      createDurableObjectWrapper: (className: string) => Wrapper;
    };
    const StockWrapper = createDurableObjectWrapper("SkuStock");
    await runInDurableObject(env.SKU_STOCK.getByName("test-runtime"), (_object, state) => {
      const built = Array.from({ length: 5_000 }, () => new StockWrapper(state, env));
      expect(new Set(built.map((object) => Object.getPrototypeOf(object))).size).toBe(1);
      // An RPC method is still found through the prototype after them all.
      expect(typeof built.at(-1)?.reserve).toBe("function");
    });
  });
});
