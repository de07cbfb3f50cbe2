import { describe, expect, it } from "vitest";
import { ApiError, errorBody } from "../src/http/errors";

describe("ApiError", () => {
  it("is an answer, not a fault: it captures no stack frames and leaves the stack limit as it was", () => {
    const before = Error.stackTraceLimit;
    const err = new ApiError("SOLD_OUT");
    expect(Error.stackTraceLimit).toBe(before);
    expect(err.stack ?? "").not.toMatch(/\n\s+at /);
    expect(new Error("a real fault").stack).toMatch(/\n\s+at /);
  });

  it("keeps its contract code, status, message and headers", () => {
    const err = new ApiError("RATE_LIMITED", undefined, { "Retry-After": "10" });
    expect(err.status).toBe(429);
    expect(err.code).toBe("RATE_LIMITED");
    expect(err.headers).toEqual({ "Retry-After": "10" });
    expect(errorBody(err.code, err.message)).toEqual({
      error: { code: "RATE_LIMITED", message: "Too many requests; retry later." },
    });
  });
});
