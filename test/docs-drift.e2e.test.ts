import { existsSync, readdirSync, readFileSync, statSync } from "node:fs";
import { describe, expect, it } from "vitest";
import { performanceDoc, type Results } from "../bench/report";

/**
 * The bench's figures live in one document: docs/PERFORMANCE.md is exactly what bench/report.ts makes
 * of bench/results.json, and no other document carries a bench figure mark (they link to its sections).
 *
 * docs/CONFIGURATION.md and README.md name only what the code has: every var, secret and binding
 * they name exists (wrangler.toml, .dev.vars.example, env.d.ts, or read by the code), every var's
 * value is wrangler.toml's, the queue figures are wrangler.toml's, every route is registered and
 * every file is in the repo. An operator who tunes what the docs say tunes the real thing. Every
 * markdown file names only files and folders that exist, by their path or a tail of it.
 *
 * A constant a document quotes is marked where it is quoted,
 * `<!-- const:src/reconcile/reconcile.ts#PAGE -->1,000<!-- /const -->`, and the figure between the
 * marks must be the constant's value in that file (in the unit its name says: `_MS`, `_SECONDS`,
 * `_DAYS`; a list for an array), so a change to the constant fails here until the doc follows.
 */

const root = new URL("../", import.meta.url);
const read = (path: string) => readFileSync(new URL(path, root), "utf8");

const DOCS = ["docs/CONFIGURATION.md", "README.md"] as const;

/** Every file under these folders (the code that may read a name or register a route). */
function sources(...dirs: string[]): string[] {
  const out: string[] = [];
  const walk = (dir: string) => {
    for (const entry of readdirSync(new URL(dir, root))) {
      const path = `${dir}/${entry}`;
      if (statSync(new URL(path, root)).isDirectory()) walk(path);
      else if (/\.(ts|mjs|js)$/.test(entry)) out.push(path);
    }
  };
  for (const dir of dirs) walk(dir);
  return out;
}
/** Every file and folder of the repo (node_modules and dot folders left out); folders end with `/`. */
const TREE = (() => {
  const out: string[] = [];
  const walk = (dir: string) => {
    for (const entry of readdirSync(new URL(dir || ".", root))) {
      if (entry.startsWith(".") || entry === "node_modules") continue;
      const path = dir ? `${dir}/${entry}` : entry;
      const folder = statSync(new URL(path, root)).isDirectory();
      out.push(folder ? `${path}/` : path);
      if (folder) walk(path);
    }
  };
  walk("");
  return out;
})();
/** Every markdown file of the repo. */
const MARKDOWN = TREE.filter((path) => path.endsWith(".md"));
const CODE = sources("src", "durable-objects", "scripts", "tools", "bench").map((path) => ({ path, text: read(path) }));

/**
 * A document's marked constants: `<!-- const:<file>#<NAME> -->figure<!-- /const -->`, or a product of
 * constants of one file (`#PAGE*PAGES_PER_RUN`) where the doc quotes what they make together.
 */
const CONST_MARK = /<!-- const:([\w./-]+)#([A-Z][A-Z0-9_]*(?:\*[A-Z][A-Z0-9_]*)*) -->([\s\S]*?)<!-- \/const -->/g;

/** Milliseconds per unit a document may write a figure in. */
const UNIT_MS: Record<string, number> = {
  ms: 1,
  s: 1_000,
  second: 1_000,
  seconds: 1_000,
  min: 60_000,
  minute: 60_000,
  minutes: 60_000,
  h: 3_600_000,
  hour: 3_600_000,
  hours: 3_600_000,
  day: 86_400_000,
  days: 86_400_000,
};

/** The unit a constant's name gives its value, in milliseconds; undefined for a plain count. */
function unitOf(name: string): number | undefined {
  if (name.endsWith("_MS")) return 1;
  if (name.endsWith("_SECONDS")) return 1_000;
  if (name.endsWith("_DAYS")) return 86_400_000;
  if (name.endsWith("_SCHEDULE")) return 1_000;
  return undefined;
}

/** The value of `const NAME = …` in a source file: numeric literals, arithmetic, arrays, and other such constants of the file. */
function constantValue(path: string, name: string): number | number[] {
  const text = read(path);
  const declaration = new RegExp(`^(?:export )?const ${name}(?:: [^=]+)? = ([\\s\\S]+?);[ \\t]*(?://.*)?$`, "m").exec(
    text,
  );
  if (!declaration?.[1]) throw new Error(`${path} declares no const ${name}`);
  const expression = declaration[1]
    .replace(/\bas const\b/g, "")
    .replace(/(\d)_(?=\d)/g, "$1")
    .replace(/\b[A-Z][A-Z0-9_]*\b/g, (other) => JSON.stringify(constantValue(path, other)));
  if (!/^[\d\s.+\-*/()[\],]*$/.test(expression))
    throw new Error(`${path}#${name} is not a plain figure: ${expression}`);
  return new Function(`return (${expression});`)() as number | number[];
}

/** A document's figure (`1,000`, `500 ms`, `7 days`, `an hour`) in the constant's unit. */
function figureIn(text: string, unit: number | undefined): number {
  const match = /^(an?|one|two|three|four|five|six|seven|eight|nine|ten|[\d,.]+)(?:[ -]?([a-z]+))?$/.exec(text.trim());
  if (!match?.[1]) return Number.NaN;
  const word = ["a", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten"].indexOf(match[1]);
  const value = match[1] === "an" ? 1 : word >= 0 ? Math.max(word, 1) : Number(match[1].replaceAll(",", ""));
  if (match[2] === undefined) return value;
  const ms = UNIT_MS[match[2]];
  return ms === undefined || unit === undefined ? Number.NaN : (value * ms) / unit;
}

/** Every marked constant of `markdown` whose figure is not the code's: `file#NAME: doc says … code has …`. */
function constantMismatches(markdown: string): string[] {
  return [...markdown.matchAll(CONST_MARK)].flatMap(([, path = "", name = "", text = ""]) => {
    const names = name.split("*");
    const values = names.map((each) => constantValue(path, each));
    const value = values.length === 1 ? values[0] : values.reduce((product: number, each) => product * Number(each), 1);
    const unit = names.map(unitOf).find((each) => each !== undefined);
    const quoted = Array.isArray(value)
      ? text.split(/,\s+(?:and\s+)?|\s+and\s+/).map((item) => figureIn(item, unit))
      : figureIn(text, unit);
    return JSON.stringify(quoted) === JSON.stringify(value)
      ? []
      : [`${path}#${name}: doc says "${text}", code has ${JSON.stringify(value)}`];
  });
}

/** `[vars]` of wrangler.toml, and every name the file binds. */
const TOML = read("wrangler.toml");
const VARS = new Map(
  [...(TOML.split(/^\[vars\]$/m)[1]?.split(/^\[/m)[0] ?? "").matchAll(/^([A-Z][A-Z0-9_]+) = "(.*)"$/gm)].map(
    ([, name = "", value = ""]) => [name, value],
  ),
);
const BOUND = new Set([...TOML.matchAll(/^\s*(?:binding|name) = "([A-Z][A-Z0-9_]+)"/gm)].map(([, name]) => name));

/** Names the Worker's environment or the tools can have. */
function known(name: string): boolean {
  if (VARS.has(name) || BOUND.has(name)) return true;
  if (new RegExp(`^${name}=`, "m").test(read(".dev.vars.example"))) return true;
  if (new RegExp(`\\b${name}\\b`).test(read("env.d.ts"))) return true;
  return CODE.some((file) => new RegExp(`\\b${name}\\b`).test(file.text));
}

/** Code spans of a markdown text (fenced blocks left out). */
const spans = (markdown: string) =>
  [...markdown.replace(/```[\s\S]*?```/g, "").matchAll(/`([^`\n]+)`/g)].map(([, span = ""]) => span);

/** Table rows of the section under `heading`: their cells. */
function tableOf(markdown: string, heading: string): string[][] {
  const section = markdown.split(heading)[1]?.split(/^## /m)[0] ?? "";
  return section
    .split("\n")
    .filter((line) => line.startsWith("| ") && !line.startsWith("| ---") && !line.startsWith("| name"))
    .map((line) =>
      line
        .slice(1, -1)
        .split(" | ")
        .map((cell) => cell.trim()),
    );
}

/** Routes the code registers: the contract's, and the harness's /dev, /bench and /chaos helpers. */
const ROUTES = new Set<string>();
{
  const contract = read("src/routes/contract.ts");
  for (const [, method = "", path = ""] of contract.matchAll(/method: "(get|post|put|delete)",\s*path: "([^"]+)"/g)) {
    ROUTES.add(`${method.toUpperCase()} ${path}`);
  }
  for (const file of CODE.filter((f) => f.path.startsWith("src/"))) {
    for (const [, method = "", path = ""] of file.text.matchAll(/\.(get|post|put|delete)\(\s*"(\/[^"]*)"/g)) {
      ROUTES.add(`${method.toUpperCase()} ${path}`);
    }
  }
}

describe.each(DOCS)("%s names only what the code has", (doc) => {
  const markdown = read(doc);

  it("every var, secret and binding it names exists", () => {
    const names = new Set(spans(markdown).flatMap((span) => span.match(/\b[A-Z][A-Z0-9]*_[A-Z0-9_]+\b/g) ?? []));
    // Error codes are not settings.
    const codes = new Set(
      read("src/http/errors.ts")
        .match(/^\s+([A-Z_]+): \[/gm)
        ?.map((m) => m.trim().split(":")[0]),
    );
    const settings = [...names].filter((name) => !codes.has(name));
    expect(settings.length).toBeGreaterThan(0);
    expect(settings.filter((name) => !known(name))).toEqual([]);
  });

  it("every route it names is registered", () => {
    const routes = spans(markdown).flatMap((span) => {
      const match = /^(GET|POST|PUT|DELETE) (\/[^\s?]*)/.exec(span);
      return match ? [`${match[1]} ${match[2]}`] : [];
    });
    expect(routes.filter((route) => !ROUTES.has(route))).toEqual([]);
  });

  it("every file and folder it names is in the repo", () => {
    const here = new URL(doc, root);
    const linked = [...markdown.matchAll(/\]\(([^)#\s]+)(?:#[^)]*)?\)/g)]
      .map(([, target = ""]) => target)
      .filter((target) => !/^[a-z]+:/.test(target))
      .map((target) => new URL(target, here));
    const named = [...spans(markdown), ...[...markdown.matchAll(/^([.\w/-]+\/[\w./-]*)\s{2,}/gm)].map(([, p]) => p)]
      .filter((span): span is string => span !== undefined)
      .filter((span) => /^\.?[\w-]+\/[\w./-]*$|^[\w.-]+\.(ts|md|toml|json|lua|example)$/.test(span))
      .filter((span) => !span.includes("*") && !span.startsWith("/"))
      .map((span) => new URL(span, root));
    const missing = [...linked, ...named].filter((url) => !existsSync(url)).map((url) => url.pathname);
    expect(named.length).toBeGreaterThan(0);
    expect(missing).toEqual([]);
  });
});

describe("docs/ARCHITECTURE.md", () => {
  it("is a map on a page: at most 200 lines, the glossary first", () => {
    const map = readFileSync("docs/ARCHITECTURE.md", "utf8");
    expect(map.trimEnd().split("\n").length).toBeLessThanOrEqual(200);
    expect(map.split("\n## ")[1]?.startsWith("Glossary")).toBe(true);
  });
});

describe("docs/CONFIGURATION.md", () => {
  const markdown = read("docs/CONFIGURATION.md");

  it("lists exactly wrangler.toml's [vars], each with wrangler.toml's value", () => {
    const rows = tableOf(markdown, "## Vars (`wrangler.toml` `[vars]`)");
    const listed = new Map(rows.map(([name = "", , value = ""]) => [name.replaceAll("`", ""), value]));
    expect([...listed.keys()].sort()).toEqual([...VARS.keys()].sort());
    const wrong = [...VARS].filter(([name, value]) => {
      const doc = listed.get(name) ?? "";
      return value === "" ? !doc.startsWith("empty") : !doc.replaceAll("`", "").startsWith(value);
    });
    expect(wrong).toEqual([]);
  });

  it("gives the queues' batch sizes, timeouts and retries as wrangler.toml sets them", () => {
    const consumers = TOML.split(/^\[\[queues\.consumers\]\]$/m)
      .slice(1)
      .map((block) => ({
        queue: /^queue = "([^"]+)"/m.exec(block)?.[1],
        batch: /^max_batch_size = (\d+)/m.exec(block)?.[1],
        timeout: /^max_batch_timeout = (\d+)/m.exec(block)?.[1],
        retries: /^max_retries = (\d+)/m.exec(block)?.[1],
      }));
    const row = tableOf(markdown, "## Bindings and other settings in `wrangler.toml`").find(
      ([what]) => what === "queue",
    );
    const text = row?.[1] ?? "";
    const [main, dlq] = text.split("DLQ");
    const events = consumers.find((c) => c.queue === "order-events");
    const letters = consumers.find((c) => c.queue === "order-events-dlq");
    expect(main).toContain(`up to ${events?.batch} messages`);
    expect(main).toContain(events?.timeout === "0" ? "no batch timeout" : `${events?.timeout} s timeout`);
    expect(main).toContain(`${events?.retries} retries`);
    expect(dlq).toContain(`batches of ${letters?.batch}, ${letters?.timeout} s timeout`);
    expect(dlq).toContain(`${letters?.retries} retries`);
  });

  it("gives the defaults of the local tooling's settings as the code that reads them has them", () => {
    const rows = tableOf(markdown, "## Local tooling only");
    const checked = rows.flatMap(([names = "", , what = ""]) => {
      const fallback = /\(default (\d+)/.exec(what)?.[1];
      if (!fallback) return [];
      const name = names.replaceAll("`", "").split(",")[0]?.trim() ?? "";
      const readers = CODE.filter((file) => file.text.includes(name));
      const digits = new RegExp(`\\b${fallback.replace(/\B(?=(\d{3})+$)/g, "_?")}\\b`);
      return [{ name, fallback, inCode: readers.some((file) => digits.test(file.text)) }];
    });
    expect(checked.length).toBeGreaterThan(0);
    expect(checked.filter((c) => !c.inCode)).toEqual([]);
  });
});

describe("bench figures in the docs", () => {
  const results = JSON.parse(read("bench/results.json")) as Results;

  it("docs/PERFORMANCE.md is what npm run bench:report makes of bench/results.json, byte for byte", () => {
    expect(read("docs/PERFORMANCE.md")).toBe(performanceDoc(results));
  });

  it("no other document carries a bench figure: they link to docs/PERFORMANCE.md", () => {
    const docs = MARKDOWN.filter((path) => path !== "docs/PERFORMANCE.md");
    expect(docs.length).toBeGreaterThan(5);
    expect(docs.filter((path) => read(path).includes("<!-- bench:"))).toEqual([]);
  });
});

describe("constants the docs quote", () => {
  const marked = MARKDOWN.map((path) => ({ path, marks: [...read(path).matchAll(CONST_MARK)].length }));

  it("are marked in the documents that quote them", () => {
    expect(marked.filter((doc) => doc.marks > 0).length).toBeGreaterThan(5);
  });

  it.each(marked.filter((doc) => doc.marks > 0).map((doc) => doc.path))(
    "%s quotes every marked constant as the code has it",
    (path) => {
      expect(constantMismatches(read(path))).toEqual([]);
    },
  );

  it("a figure that differs from the code is caught, in its unit and as a list", () => {
    const mark = (target: string, figure: string) => `<!-- const:${target} -->${figure}<!-- /const -->`;
    expect(constantMismatches(mark("src/reconcile/reconcile.ts#PAGE", "1,000"))).toEqual([]);
    expect(constantMismatches(mark("src/reconcile/reconcile.ts#PAGE", "200"))).toHaveLength(1);
    expect(constantMismatches(mark("src/db/retention.ts#PROCESSED_EVENTS_RETENTION_MS", "7 days"))).toEqual([]);
    expect(constantMismatches(mark("src/db/retention.ts#PROCESSED_EVENTS_RETENTION_MS", "7 hours"))).toHaveLength(1);
    expect(constantMismatches(mark("src/handoff/endpoint-lane.ts#DEFAULT_RETRY_SCHEDULE", "5 s, 5 min"))).toHaveLength(
      1,
    );
  });
});

describe("files the documents name", () => {
  // A name is a path from the root, or the tail of one (`engine/holds.ts`, `sku-stock.ts`): a file
  // that moves fails here until the documents that name it by its old path follow.
  const exists = (name: string) => {
    const wanted = name.endsWith("/") || !/\.\w+$/.test(name) ? [name.replace(/\/?$/, "/")] : [name];
    return TREE.some((path) => wanted.some((w) => path === w || path.endsWith(`/${w}`)));
  };

  it.each(MARKDOWN.filter((path) => path !== "docs/PERFORMANCE.md"))(
    "%s names only files and folders in the repo",
    (doc) => {
      const named = spans(read(doc)).filter(
        (span) =>
          /^[\w-]+\/[\w./-]*$|^[\w.-]+\.(ts|md|toml|json|lua|sql)$/.test(span) &&
          !span.startsWith(".") &&
          !span.startsWith("v3/"),
      );
      expect(named.filter((name) => !exists(name))).toEqual([]);
    },
  );
});
