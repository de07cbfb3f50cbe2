import { describe, expect, it } from "vitest";
import { GC, partsOf, RUNTIME, SHARED } from "../bench/lib/parts";
import type { CpuProfile } from "../bench/lib/profile";

// A bundle as esbuild writes it: each module's code after a `// <path>` line (V8 counts lines from 0).
const BUNDLE = [
  "// src/edge/group-commit.ts",
  "function submit() {}",
  "// durable-objects/shared/fnv1a.ts",
  "function fnv1a() {}",
  "// node_modules/hono/dist/context.js",
  "function json() {}",
  "// durable-objects/log/sale-log.ts",
  "function append() {}",
  "// ../elsewhere/data.json",
  "var data = {};",
].join("\n");

type Frame = [id: number, name: string, url: string, line: number, hits: number, children?: number[]];

function profileOf(frames: Frame[]): CpuProfile {
  return {
    nodes: frames.map(([id, functionName, url, lineNumber, hitCount, children]) => ({
      id,
      callFrame: { functionName, url, lineNumber },
      hitCount,
      children: children ?? [],
    })),
  };
}

describe("a hot-SKU profile by part", () => {
  it("charges a native call and shared code to the bundle function that called them, and the rest by module", () => {
    const parts = partsOf(
      profileOf([
        [1, "(root)", "", -1, 0, [2, 3, 4, 8, 9, 10, 11, 12, 13]],
        [2, "(idle)", "", -1, 5],
        [3, "(program)", "", -1, 7],
        [4, "submit", "index.js", 1, 2, [5]],
        [5, "fnv1a", "index.js", 3, 3, [6]],
        [6, "digest", "", -1, 4],
        [8, "fnv1a", "index.js", 3, 1], // resumed after an await: no caller on its stack
        [9, "(garbage collector)", "", -1, 2],
        [10, "json", "index.js", 5, 6],
        [11, "get", "cloudflare-internal:d1-api", 10, 1], // the runtime's own module, no bundle caller
        [12, "append", "index.js", 7, 2],
        [13, "", "index.js", 9, 1], // a module outside src/, durable-objects/ and node_modules/
      ]),
      BUNDLE,
    );
    expect(parts.samples).toBe(34);
    expect(parts.idleSamples).toBe(5);
    expect(Object.fromEntries(parts.parts.map((p) => [p.part, p.samples]))).toEqual({
      "edge: group commit and the call to the stock object": 9,
      [RUNTIME]: 9,
      "edge: the framework (Hono: routing, context, response)": 6,
      "sale log object: entries, hashes, checkpoints": 2,
      [GC]: 2,
      [SHARED]: 1,
    });
    expect(parts.parts[0]?.samples).toBe(9); // largest first
  });

  it("refuses a profile that never ran the bundle, and a bundle that names no module", () => {
    const once = profileOf([
      [1, "(root)", "", -1, 0, [2]],
      [2, "json", "index.js", 5, 1],
    ]);
    expect(() => partsOf(profileOf([[1, "(program)", "", -1, 3]]), BUNDLE)).toThrow(/no sample/);
    expect(() => partsOf(once, "function json() {}")).toThrow(/names no module/);
  });
});
