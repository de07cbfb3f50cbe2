import { runInDurableObject } from "cloudflare:test";
import { env } from "cloudflare:workers";
import { stockEngineSuite } from "./suites/stock-engine";
import { stockShard } from "./support/client";

// The engine's suite inside a stock object in workerd (its SQLite); the same suite runs in Node in stock-engine.unit.test.ts.
stockEngineSuite((name, body) =>
  runInDurableObject(stockShard(env, name, 0), async (_object, state) => {
    await state.storage.deleteAll();
    return body(state.storage);
  }),
);
