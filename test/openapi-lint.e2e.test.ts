import { spawnSync } from "node:child_process";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { buildOpenApiDocument } from "../src/routes/openapi";

/**
 * The OpenAPI document through Redocly's linter (the pinned @redocly/cli, with redocly.yaml), as a
 * user who runs `npx @redocly/cli lint` on GET /openapi.json would: no errors, no warnings.
 */

type Operation = { operationId: string; description?: string };
type Document = { servers?: { url: string }[]; paths: Record<string, Record<string, Operation>> };

const SERVER = "http://127.0.0.1:8787";

describe("the OpenAPI document", () => {
  const document = buildOpenApiDocument(SERVER) as Document;

  it("names its server and describes every operation", () => {
    expect(document.servers).toEqual([expect.objectContaining({ url: SERVER })]);
    const operations = Object.values(document.paths).flatMap((ops) => Object.values(ops));
    expect(operations.length).toBeGreaterThanOrEqual(17);
    const undescribed = operations.filter((op) => !op.description?.trim()).map((op) => op.operationId);
    expect(undescribed).toEqual([]);
  });

  it("passes `redocly lint` with 0 errors and 0 warnings", () => {
    const dir = mkdtempSync(join(tmpdir(), "flashgate-openapi-"));
    try {
      const file = join(dir, "openapi.json");
      writeFileSync(file, JSON.stringify(document));
      const run = spawnSync("npx", ["redocly", "lint", file, "--format=json"], {
        encoding: "utf8",
        env: { ...process.env, REDOCLY_TELEMETRY: "off", REDOCLY_SUPPRESS_UPDATE_NOTICE: "true" },
      });
      const report = JSON.parse(run.stdout) as { totals: Record<string, number>; problems: { message: string }[] };
      expect(report.problems.map((p) => p.message)).toEqual([]);
      expect(report.totals).toMatchObject({ errors: 0, warnings: 0 });
      expect(run.status).toBe(0);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});
