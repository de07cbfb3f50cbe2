import { runInDurableObject } from "cloudflare:test";
import { env } from "cloudflare:workers";
import { stockEngineSuite } from "./suites/stock-engine";
import { stockShard } from "./support/client";
// The engine's read bounds, which only workerd's SQLite measures (a cursor's rowsRead), share this
// file's runtime: each workerd file costs a start-up of its own (issue #56).
import "./suites/waitlist-bounds";
import "./suites/waitlist-place-cost";

// The engine's suite inside a stock object in workerd (its SQLite); the same suite runs in Node in stock-engine.unit.test.ts.
stockEngineSuite((name, body) =>
  runInDurableObject(stockShard(env, name, 0), async (_object, state) => {
    await state.storage.deleteAll();
    return body(state.storage);
  }),
);
