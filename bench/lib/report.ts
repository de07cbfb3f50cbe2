import type { Bench, Row } from "./context";

export interface RatioInput {
  hot: Record<string, number>;
  ceiling: Record<number, number>;
  soldOut: Record<number, number>;
  engine: {
    rpcBatched: { perSec: number };
    rpcSingleC50: { perSec: number };
    luaC50: { perSec: number };
    luaPipelined: { perSec: number };
  };
  classic: Record<number, number>;
}

/** The ratios of issue #7, each from figures measured side by side in this run. */
export function ratios(x: RatioInput): Record<string, number> {
  const q = (a: number | undefined, b: number | undefined) => (a === undefined || b === undefined ? Number.NaN : a / b);
  return {
    "hot SKU ÷ ceiling (GC on, c50)": q(x.hot.on50, x.ceiling[50]),
    "hot SKU ÷ ceiling (GC on, c200)": q(x.hot.on200, x.ceiling[200]),
    "sold-out ÷ ceiling (c50)": q(x.soldOut[50], x.ceiling[50]),
    "sold-out ÷ ceiling (c200)": q(x.soldOut[200], x.ceiling[200]),
    "engine core ÷ Redis Lua (RPC batches ÷ pipelined EVALSHA)": q(
      x.engine.rpcBatched.perSec,
      x.engine.luaPipelined.perSec,
    ),
    "engine core ÷ Redis Lua (1 per RPC c50 ÷ EVALSHA c50)": q(x.engine.rpcSingleC50.perSec, x.engine.luaC50.perSec),
    "Flashgate hot SKU ÷ classic baseline (c50)": q(x.hot.on50, x.classic[50]),
    "Flashgate hot SKU ÷ classic baseline (c200)": q(x.hot.on200, x.classic[200]),
    "group commit on ÷ off (c50)": q(x.hot.on50, x.hot.off50),
    "group commit on ÷ off (c200)": q(x.hot.on200, x.hot.off200),
  };
}

const ms = (v: number | undefined) => (v === undefined || Number.isNaN(v) ? "" : v.toFixed(v < 10 ? 1 : 0));

/** The one table: every scenario's figures, then the ratios. */
export function printTable(bench: Bench, r: Record<string, number>): void {
  const rows: Row[] = [
    ...bench.rows,
    ...Object.entries(r).map(([name, v]) => ({ scenario: "ratio", setting: name, figure: `${v.toFixed(2)}×` })),
  ];
  const head = ["scenario", "setting", "figure", "p50 ms", "p99 ms", "errors"];
  const cells = rows.map((row) => [
    row.scenario,
    row.setting,
    row.figure,
    ms(row.p50),
    ms(row.p99),
    row.errors === undefined ? "" : String(row.errors),
  ]);
  const widths = head.map((h, i) => Math.max(h.length, ...cells.map((c) => (c[i] ?? "").length)));
  const line = (c: string[]) => `| ${c.map((v, i) => v.padEnd(widths[i] ?? 0)).join(" | ")} |`;
  const out = [line(head), `|${widths.map((w) => "-".repeat(w + 2)).join("|")}|`, ...cells.map(line)];
  console.log(`\n${out.join("\n")}\n`);
  console.log("errors: answers other than the expected ones (202; 409 SOLD_OUT in the storm) plus socket errors.");
  console.log("The MODEL line is a model from the measured service time, not a measurement on Cloudflare.");
}
