import { describe, expect, it } from "vitest";
import { DEFAULT_RETRY_SCHEDULE, retrySchedule } from "../src/handoff/endpoint-lane";

// `WEBHOOK_RETRY_SCHEDULE` (docs/CONFIGURATION.md): seconds after each failed attempt, comma-separated;
// unset or malformed, the default (API.md's backoff).
describe("WEBHOOK_RETRY_SCHEDULE", () => {
  it("reads whole seconds up to 12 hours, and takes the default for anything else", () => {
    expect(retrySchedule("1, 2,30")).toEqual([1, 2, 30]);
    expect(retrySchedule("0,43200")).toEqual([0, 43_200]);
    expect(retrySchedule(undefined)).toBe(DEFAULT_RETRY_SCHEDULE);
    for (const slip of ["5,,10", "5,", ",5", " ", "1.5", "-1", "43201", "5;10", "abc"]) {
      expect(retrySchedule(slip), slip).toBe(DEFAULT_RETRY_SCHEDULE);
    }
  });
});
