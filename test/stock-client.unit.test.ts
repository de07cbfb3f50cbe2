import { describe, expect, it } from "vitest";
import { ApiError } from "../src/http/errors";
import { callStock } from "../src/stock/stock-client";

/** An Error with the flags the Durable Objects runtime sets on what it throws. */
const runtimeError = (flags: {
  overloaded?: boolean;
  retryable?: boolean;
  remote?: boolean;
  durableObjectReset?: boolean;
}) => Object.assign(new Error("from the runtime"), flags);

async function answerTo(err: Error): Promise<unknown> {
  return callStock(() => Promise.reject(err)).catch((thrown: unknown) => thrown);
}

describe("callStock", () => {
  it("answers 503 BUSY with Retry-After when the object is overloaded or restarting", async () => {
    for (const flags of [
      { overloaded: true },
      { retryable: true },
      { retryable: true, overloaded: true },
      { durableObjectReset: true }, // reset (ctx.abort(), a code update) while the call waited
      { durableObjectReset: true, remote: true },
    ]) {
      const thrown = await answerTo(runtimeError(flags));
      expect(thrown, JSON.stringify(flags)).toBeInstanceOf(ApiError);
      expect((thrown as ApiError).code).toBe("BUSY");
      expect((thrown as ApiError).headers["Retry-After"]).toBe("1");
    }
  });

  it("lets a failure of the object's own code through (a 500, logged), even when marked retryable", async () => {
    for (const flags of [{}, { remote: true }, { remote: true, retryable: true }]) {
      const err = runtimeError(flags);
      expect(await answerTo(err), JSON.stringify(flags)).toBe(err);
    }
  });

  it("returns the object's answer", async () => {
    expect(await callStock(() => Promise.resolve(42))).toBe(42);
  });
});
