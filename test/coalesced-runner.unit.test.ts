import { describe, expect, it } from "vitest";
import { CoalescedRunner } from "../durable-objects/shared/coalesced-runner";
import { DueWork } from "../durable-objects/stock/due-work";

/** A task whose runs finish when the test says so, counting how many started. */
function gatedTask() {
  const gates: (() => void)[] = [];
  let started = 0;
  const task = () => {
    started++;
    return new Promise<void>((resolve) => gates.push(resolve));
  };
  return { task, started: () => started, finish: () => gates.shift()?.() };
}

describe("CoalescedRunner", () => {
  it("runs one at a time, and once more after a run when asked meanwhile, however often", async () => {
    const { task, started, finish } = gatedTask();
    const runner = new CoalescedRunner(task);
    const first = runner.run();
    const second = runner.run();
    const third = runner.run();
    expect(started()).toBe(1);
    expect(second).toBe(third); // the asks made during a run share the one run booked after it
    finish();
    await first;
    await Promise.resolve();
    expect(started()).toBe(2);
    finish();
    await second;
    expect(started()).toBe(2);
    await runner.settled();
  });

  it("settled() waits for the run in flight and the one booked after it", async () => {
    const { task, started, finish } = gatedTask();
    const runner = new CoalescedRunner(task);
    void runner.run();
    void runner.run();
    let settled = false;
    const waiting = runner.settled().then(() => {
      settled = true;
    });
    finish();
    await new Promise((resolve) => setTimeout(resolve, 0));
    expect(settled).toBe(false);
    expect(started()).toBe(2);
    finish();
    await waiting;
    expect(settled).toBe(true);
  });
});

/** A storage fake holding just the alarm. */
function alarmStorage() {
  const calls: string[] = [];
  let alarm: number | null = null;
  const storage = {
    getAlarm: async () => alarm,
    setAlarm: async (at: number) => {
      calls.push(`set ${at}`);
      alarm = at;
    },
    deleteAlarm: async () => {
      calls.push("delete");
      alarm = null;
    },
  } as unknown as DurableObjectStorage;
  return { storage, calls };
}

describe("DueWork", () => {
  it("keeps the alarm on the earliest of the next hold expiry and the pending retries", async () => {
    const { storage, calls } = alarmStorage();
    let expiry: number | null = 900;
    const due = new DueWork(storage, () => expiry);
    await due.arm();
    await due.retry("mirror", 500);
    await due.retry("outbox", 700); // later than the mirror's: the alarm stays
    expect(due.retryAt("mirror")).toBe(500);
    due.done("mirror");
    await due.arm();
    await due.arm(); // unchanged: no storage call
    due.fired(); // the alarm is gone and every retry was taken
    await due.arm();
    expiry = null;
    await due.retry("transfer", 1_000);
    due.done("transfer");
    await due.arm();
    expect(calls).toEqual(["set 900", "set 500", "set 700", "set 900", "set 1000", "delete"]);
  });
});
