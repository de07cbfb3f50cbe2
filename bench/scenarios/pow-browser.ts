import { existsSync } from "node:fs";
import { chromium } from "playwright-core";
import type { WorkerServer } from "../../tools/worker";
import type { Bench } from "../lib/context";
import { log } from "../lib/log";

const CHROMIUM = "/usr/bin/chromium";
/** The difficulties the issue asks about; each solved this many times (the work per solve varies). */
const BITS = [16, 20] as const;
const SOLVES = 5;
/** Hashes WebCrypto computes to measure its rate (extrapolated: a solve at 20 bits would take minutes). */
const WEBCRYPTO_HASHES = 20_000;

interface Solved {
  ms: number;
  tried: number;
}

/**
 * What a proof of work costs an honest shopper: headless Chromium on this machine solves challenges
 * at 16 and 20 bits with the storefront's own solver (public/static/pow-worker.js, a hand-written
 * SHA-256 in a Web Worker), and, for the choice of solver, WebCrypto's digest rate on the same page.
 * Challenges are made up (the solver only hashes): the Worker is not involved.
 */
export async function powBrowser(bench: Bench, server: WorkerServer): Promise<void> {
  if (!existsSync(CHROMIUM)) {
    bench.problems.push(`pow_browser: ${CHROMIUM} is missing`);
    return;
  }
  const browser = await chromium.launch({ executablePath: CHROMIUM, args: ["--headless", "--no-sandbox"] });
  try {
    const page = await browser.newPage();
    await page.goto(`${server.url}/`);
    const solves: Record<string, Solved[]> = {};
    for (const bits of BITS) {
      solves[bits] = [];
      for (let i = 0; i < SOLVES; i++) {
        const challenge = `bench-${bits}-${i}-${Date.now().toString(36)}.made-up-challenge-of-a-realistic-length`;
        const solved = (await page.evaluate(
          `new Promise((resolve) => {
            const worker = new Worker("/static/pow-worker.js");
            const started = performance.now();
            worker.onmessage = ({ data }) => {
              if (!data.answer) return;
              worker.terminate();
              resolve({ ms: performance.now() - started, tried: data.tried });
            };
            worker.postMessage({ challenge: ${JSON.stringify(challenge)}, bits: ${bits} });
          })`,
        )) as Solved;
        solves[bits]?.push(solved);
      }
    }
    const webcrypto = (await page.evaluate(
      `(async () => {
        const encoder = new TextEncoder();
        const started = performance.now();
        for (let i = 0; i < ${WEBCRYPTO_HASHES}; i++) await crypto.subtle.digest("SHA-256", encoder.encode("bench-challenge:" + i));
        return (performance.now() - started) * 1000 / ${WEBCRYPTO_HASHES};
      })()`,
    )) as number;
    const figure: Record<string, unknown> = { webcryptoUsPerHash: webcrypto };
    for (const bits of BITS) {
      const runs = solves[bits] ?? [];
      const ms = runs.map((r) => r.ms).sort((a, b) => a - b);
      const tried = runs.reduce((n, r) => n + r.tried, 0);
      const usPerHash = (runs.reduce((n, r) => n + r.ms, 0) * 1000) / tried;
      figure[`bits${bits}`] = {
        solves: runs.length,
        medianMs: ms[Math.floor(ms.length / 2)],
        maxMs: ms.at(-1),
        usPerHash,
      };
      log(
        `proof of work in Chromium, ${bits} bits: median ${ms[Math.floor(ms.length / 2)]?.toFixed(0)} ms over ${runs.length} solves (${usPerHash.toFixed(2)} µs a hash; WebCrypto ${webcrypto.toFixed(2)} µs a hash, so about ${((2 ** bits * webcrypto) / 1000).toFixed(0)} ms)`,
      );
    }
    bench.figures.pow_browser = figure;
  } finally {
    await browser.close();
  }
}
