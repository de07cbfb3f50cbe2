import { randomUUID } from "node:crypto";
import { describe, expect, it } from "vitest";
import { type DevServer, SCHEDULED_PATH } from "../../tools/dev-server";

/**
 * The cron trigger through `wrangler dev`, the way `npm run dev` fires it once a minute: a request to
 * the dev server's scheduled endpoint runs the Worker's `scheduled` handler, which reconciles and
 * records a run with trigger "cron". It runs first in test/dev-server.e2e.test.ts's `wrangler dev`:
 * no other suite there reconciles, so the run it finds can only come from the trigger.
 */

const ADMIN = { authorization: "Bearer dev-admin-token" };

interface Run {
  runId: string;
  trigger: "cron" | "admin";
  startedAt: string;
  finishedAt: string | null;
  skusChecked: number;
  errors: number;
  differences: { sku: string; kind: string; expected: string; actual: string; repaired: boolean }[];
}

async function runs(server: DevServer, limit: number): Promise<Run[]> {
  const response = await fetch(`${server.url}/admin/reconcile/runs?limit=${limit}`, { headers: ADMIN });
  expect(response.status).toBe(200);
  return ((await response.json()) as { runs: Run[] }).runs;
}

/** The suite, against `server()`. */
export function cronTrigger(server: () => DevServer) {
  describe("cron trigger through wrangler dev", () => {
    it("runs reconciliation from the scheduled endpoint and records a cron run", async () => {
      const url = server().url;
      const sku = `cron-${randomUUID().slice(0, 8)}`;
      const put = await fetch(`${url}/admin/skus/${sku}`, {
        method: "PUT",
        headers: { ...ADMIN, "content-type": "application/json" },
        body: JSON.stringify({ totalStock: 5, perUserLimit: 1 }),
      });
      expect(put.status).toBe(200);
      // A fresh state directory: no run yet, so the one below can only come from the trigger.
      expect(await runs(server(), 50)).toEqual([]);

      const fired = await fetch(`${url}${SCHEDULED_PATH}?cron=${encodeURIComponent("* * * * *")}`);
      // The endpoint answers once the handler has finished (500 had it thrown).
      expect(fired.status).toBe(200);
      expect(await fired.text()).toBe("Ran scheduled event");

      const [run, ...older] = await runs(server(), 10);
      expect(older).toEqual([]);
      expect(run).toMatchObject({ trigger: "cron", errors: 0, differences: [] });
      expect(run?.skusChecked).toBeGreaterThanOrEqual(1);
      expect(Date.parse(run?.finishedAt ?? "")).toBeGreaterThanOrEqual(Date.parse(run?.startedAt ?? ""));
    });
  });
}
