import { describe, expect, it } from "vitest";
import { ApiError, busy, errorBody, rateLimited } from "../src/http/errors";

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

describe("waits are given as figures", () => {
  it("429 and 503 say how long to wait, in the message, the header and error.details", () => {
    const limited = rateLimited(10);
    expect(limited.headers).toEqual({ "Retry-After": "10" });
    expect(limited.message).toBe(
      "Too many requests from you in a short time: wait 10 s, then send the same request again.",
    );
    expect(limited.details).toEqual({ retryAfterSeconds: 10 });
    const stalled = busy("The opening draw is being decided (your token keeps its place)");
    expect(stalled.headers).toEqual({ "Retry-After": "1" });
    expect(stalled.message).toBe(
      "The opening draw is being decided (your token keeps its place): send the same request again in 1 s.",
    );
    expect(errorBody(stalled.code, stalled.message, stalled.details).error.details).toEqual({ retryAfterSeconds: 1 });
    expect(busy().message).toBe("The stock service is busy and decided nothing: send the same request again in 1 s.");
  });
});
