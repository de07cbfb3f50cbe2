import type { WorkerServer } from "../../tools/worker";
import type { Bench } from "../lib/context";
import { log, median } from "../lib/log";
import { engineCore } from "./engine-core";

export interface GatherFigure {
  batch: number;
  /** The gatherer's own CPU per reservation: through it less straight to the object, median of the rounds. */
  cpuUsPerReservation: number;
  directCpuUs: number[];
  viaCpuUs: number[];
}

/**
 * The gatherer's cost per call (issue 44), measured as the engine core's is: the stock object alone
 * in its workerd, the same batches driven by the bench route, once straight to the object and once
 * through the shard's gatherer (`via: "gatherer"`), which passes each batch on as one RPC. The
 * difference in workerd CPU per reservation is the gatherer's: one call in and one out, plus its
 * share per reservation. Batches of 1 and of 64 give its a + b·n (bench/lib/capacity-sim.ts,
 * gathererCosts); the two ways alternate which goes first, `rounds` times, and the medians are kept.
 */
export async function gatherCore(bench: Bench, server: WorkerServer, rounds = 2): Promise<void> {
  for (const batch of [1, 64]) {
    const direct: number[] = [];
    const via: number[] = [];
    for (let round = 0; round < rounds; round++) {
      const order = round % 2 === 0 ? (["stock", "gatherer"] as const) : (["gatherer", "stock"] as const);
      for (const how of order) {
        const key = `gather_core_${how}_${batch}_${round}`;
        const fig = await engineCore(bench, server, key, batch, how);
        delete bench.figures[key];
        (how === "stock" ? direct : via).push(fig.cpuUsPerReservation);
      }
    }
    const figure: GatherFigure = {
      batch,
      cpuUsPerReservation: Math.max(0, median(via) - median(direct)),
      directCpuUs: direct,
      viaCpuUs: via,
    };
    bench.figures[batch === 1 ? "gather_core_batch1" : "gather_core"] = figure;
    log(
      `gatherer, batches of ${batch}: ${figure.cpuUsPerReservation.toFixed(1)} µs workerd CPU per reservation (through it ${via.map((v) => v.toFixed(0)).join(", ")}; straight ${direct.map((v) => v.toFixed(0)).join(", ")})`,
    );
  }
}
