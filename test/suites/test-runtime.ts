import { runInDurableObject } from "cloudflare:test";
import { env } from "cloudflare:workers";
import { describe, expect, it } from "vitest";

/**
 * The test runtime itself: `@cloudflare/vitest-pool-workers` 0.15.1 (the version this project pins),
 * with the fix of workers-sdk#15092 applied from patches/ by `npm install`. Its wrapper of each Durable
 * Object class put the class's prototype behind a new Proxy every time it built an object, around the
 * Proxy before: every RPC then passed one trap per object built so far in that runtime. A file's calls
 * slowed quadratically, and past about 1,500 objects of one class every call threw "Maximum call stack
 * size exceeded". Patched, the Proxy is put in place once.
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
