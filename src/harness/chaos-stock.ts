import { SkuStock as ProductionSkuStock } from "../../durable-objects/sku-stock";

/**
 * The stock object as the harness runs it: the production class plus what chaos needs, exported
 * under the same class name (the binding's `class_name`) by the harness entry only.
 */
export class SkuStock extends ProductionSkuStock {
  /**
   * Aborts this object as a crash would (`POST /chaos/stock/:sku/:shard/abort`). In-flight requests
   * fail, in-memory state is lost, storage stays. Refused unless the var CHAOS is "true".
   */
  chaosAbort(): void {
    if (this.env.CHAOS !== "true") throw new Error("chaosAbort is only available when CHAOS is true");
    this.ctx.abort("chaos: stock object aborted");
  }
}
