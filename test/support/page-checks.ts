import { readFileSync } from "node:fs";
import { createRequire } from "node:module";
import type { Page } from "playwright-core";

/**
 * What the browser tests check on every page they show (issue #32): axe-core's WCAG 2 A/AA rules
 * (color-contrast among them: text at 4.5:1) run inside the page, and that nothing is wider than
 * the screen or than the card it is in.
 */

const AXE_SOURCE = readFileSync(createRequire(import.meta.url).resolve("axe-core/axe.min.js"), "utf8");

export interface AxeFinding {
  id: string;
  impact: string | null;
  help: string;
  nodes: { target: string; summary: string }[];
}

/** axe-core's violations of the WCAG 2.0/2.1/2.2 A and AA rules on the page as it is now. */
export async function axeViolations(page: Page): Promise<AxeFinding[]> {
  // Evaluated through the DevTools protocol: the page's Content-Security-Policy does not apply. Once
  // per document: compiling axe costs more than one of its runs.
  if ((await page.evaluate("typeof window.axe")) !== "object") await page.evaluate(AXE_SOURCE);
  // A string, as every page script of the tests is: this project's types have no DOM.
  return page.evaluate(`(async () => {
    const result = await window.axe.run(document, {
      runOnly: { type: "tag", values: ["wcag2a", "wcag2aa", "wcag21a", "wcag21aa", "wcag22aa"] },
      resultTypes: ["violations"],
    });
    return result.violations.map((v) => ({
      id: v.id,
      impact: v.impact,
      help: v.help,
      nodes: v.nodes.map((n) => ({ target: n.target.join(" "), summary: n.failureSummary ?? "" })),
    }));
  })()`) as Promise<AxeFinding[]>;
}

/** The serious and critical violations (what the pages must not have), for an assertion's message. */
export function serious(findings: AxeFinding[]): string[] {
  return findings
    .filter((f) => f.impact === "serious" || f.impact === "critical")
    .flatMap((f) => f.nodes.map((n) => `${f.id} (${f.impact}) ${n.target}: ${n.summary.split("\n").join(" ")}`));
}

/** How far the page is wider than the viewport (0 when it lays out within it). */
export function pageOverflow(page: Page): Promise<number> {
  return page.evaluate("document.documentElement.scrollWidth - window.innerWidth") as Promise<number>;
}

/**
 * Every visible card (and webhook endpoint) whose content is wider than the card itself, with by
 * how much: a long id or hash that neither wraps nor is cut would show here.
 */
export function cardOverflows(page: Page): Promise<string[]> {
  return page.evaluate(`[...document.querySelectorAll(".card, .webhook, .delivery, .hold")]
    .filter((el) => el.offsetParent !== null && el.scrollWidth > el.clientWidth + 1)
    .map((el) => {
      const name = el.id || el.dataset.sku || el.dataset.endpoint || el.dataset.id || el.className;
      return name + ": content " + el.scrollWidth + " px in " + el.clientWidth + " px";
    })`) as Promise<string[]>;
}
