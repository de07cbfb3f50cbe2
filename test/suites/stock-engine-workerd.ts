import { runInDurableObject } from "cloudflare:test";
import { env } from "cloudflare:workers";
import { stockShard } from "../support/client";
import { stockEngineSuite, WORKERD_RUNS } from "./stock-engine";
// The engine's read bounds, which only workerd's SQLite measures (a cursor's rowsRead), share this
// file's runtime: each workerd file costs a start-up of its own (issue #56).
import "./waitlist-bounds";
import "./waitlist-place-cost";

// The engine's suite inside a stock object in workerd (its SQLite): the first tenth of the sequences
// stock-engine.unit.test.ts runs in Node, from the same seeds.
stockEngineSuite(
  (name, body) =>
    runInDurableObject(stockShard(env, name, 0), async (_object, state) => {
      await state.storage.deleteAll();
      return body(state.storage);
    }),
  WORKERD_RUNS,
);
