import { spawnSync } from "node:child_process";
import { readFileSync } from "node:fs";
import { describe, expect, it } from "vitest";

/**
 * The Prometheus alerting rules shipped for a sale day (ops/prometheus/flashgate-alerts.yml), checked
 * and unit-tested with promtool (Debian's `prometheus` package: apt-get install -y prometheus; .ci/run
 * installs it). Without promtool this test fails: an untested rule would page nobody, or everybody.
 */

const DIR = new URL("../ops/prometheus/", import.meta.url).pathname;
const RULES = `${DIR}flashgate-alerts.yml`;
const TESTS = `${DIR}flashgate-alerts.test.yml`;

function promtool(...args: string[]) {
  const run = spawnSync("promtool", args, { encoding: "utf8", cwd: DIR });
  if (run.error) {
    throw new Error(
      `promtool could not run (${run.error.message}): install Debian's prometheus package (apt-get install -y prometheus)`,
    );
  }
  return { status: run.status, output: `${run.stdout}${run.stderr}` };
}

const names = (text: string, pattern: RegExp) => [...text.matchAll(pattern)].map((m) => m[1] ?? "");

describe("alerting rules", () => {
  it("are valid Prometheus rules", () => {
    const checked = promtool("check", "rules", RULES);
    expect(checked.output).toContain("SUCCESS: 10 rules found");
    expect(checked.status).toBe(0);
  });

  it("pass their promtool unit tests", () => {
    const tested = promtool("test", "rules", TESTS);
    expect(tested.output).toContain("SUCCESS");
    expect(tested.status).toBe(0);
  });

  it("each fire in a test and stay quiet in another, and each has its section in the runbook", () => {
    const rules = readFileSync(RULES, "utf8");
    const tests = readFileSync(TESTS, "utf8");
    const runbook = readFileSync(new URL("../docs/OPERATIONS.md", import.meta.url), "utf8");
    const alerts = names(rules, /^ {6}- alert: (\w+)$/gm);
    expect(alerts).toHaveLength(10);
    // A case that expects the alert (exp_alerts with an entry) and one that expects none.
    const cases = tests.split(/^ {6}- eval_time: /m).slice(1);
    for (const alert of alerts) {
      const own = cases.filter((c) => c.includes(`alertname: ${alert}\n`));
      expect(
        own.some((c) => c.includes("exp_labels")),
        `${alert} fires in a test`,
      ).toBe(true);
      expect(
        own.some((c) => c.includes("exp_alerts: []")),
        `${alert} stays quiet in a test`,
      ).toBe(true);
      expect(runbook, `docs/OPERATIONS.md names ${alert}`).toContain(alert);
    }
    // Every runbook link of a rule is a heading of docs/OPERATIONS.md.
    const anchors = new Set(
      names(runbook, /^#{2,4} (.+)$/gm).map((heading) =>
        heading
          .toLowerCase()
          .replace(/[^a-z0-9 -]/g, "")
          .replace(/ /g, "-"),
      ),
    );
    for (const link of names(rules, /runbook: docs\/OPERATIONS\.md#([\w-]+)/g)) {
      expect(anchors, `docs/OPERATIONS.md has a section #${link}`).toContain(link);
    }
  });
});
