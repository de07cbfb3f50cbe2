import { fail, type Outcome, ok, type SkuState, type VariantSetting } from "../engine/types";
import { log } from "../shared/log";
import type { ShardPulls } from "./shard-pulls";
import {
  type ChangePlan,
  followerSettings,
  isFollowPlan,
  leadSettings,
  type ResizePlan,
  reachOf,
  resizeSettings,
  type SkuChange,
  soleSettings,
  stillChecked,
} from "./sku-change";
import { RETRY_MS, type StockHost, siblingsOf } from "./stock-host";

/**
 * Shard 0 running `PUT /admin/skus/:sku`, all or nothing (the plans are sku-change.ts's): one change
 * at a time, in arrival order. A 1-shard SKU changes in one transaction; a sharded one with the same
 * shard count in shard 0's transaction, then its settings handed to every sibling by settings
 * revision; a new shard count (or sizes for a sharded SKU without them) in two phases with fences.
 * A change left half done by a restart is finished or undone by the alarm ({@link recover}), from
 * the plan shard 0 recorded.
 */
export class SkuChanges {
  readonly #host: StockHost;
  readonly #pulls: ShardPulls;
  /** The changes of the SKU, one after another. */
  #queue: Promise<unknown> = Promise.resolve();
  /** A change is being applied now (the alarm leaves its plan alone). */
  #changing = false;

  constructor(host: StockHost, pulls: ShardPulls) {
    this.#host = host;
    this.#pulls = pulls;
  }

  /**
   * A cut of a sharded SKU that shard 0's available units cannot cover pulls the rest from siblings
   * first, with the usual exactly-once transfers (units pulled stay here, still counted); if the SKU
   * has not enough available, `INVALID_STATE` and nothing changed.
   */
  put(change: SkuChange): Promise<Outcome<SkuState>> {
    const run = this.#queue.then(() => this.#change(change));
    this.#queue = run.catch(() => undefined);
    return run;
  }

  async #change(change: SkuChange): Promise<Outcome<SkuState>> {
    const configuration = this.#host.engine.configuration;
    this.#changing = true;
    try {
      // A change left half done by a restart is finished (or undone) before the next one starts.
      if (configuration.resizePlan()) await this.recover(true);
      if (configuration.resizePlan()) return { ok: false, code: "BUSY" };
      return await this.#changeNow(change);
    } finally {
      this.#changing = false;
    }
  }

  async #changeNow(asked: SkuChange): Promise<Outcome<SkuState>> {
    const { engine } = this.#host;
    const state = engine.configuration.state();
    // An archived SKU's id is not reused: archiving it again is the one change it takes (unchanged).
    if (state?.status === "archived") return asked.status === "archived" ? ok(state) : fail("INVALID_STATE");
    // Checked against another SKU than this one (another PUT created it, or changed what this one
    // leaves out, since the edge read it): the edge reads it and checks this PUT again.
    if (!stillChecked(asked, state)) return { ok: false, code: "BUSY", stale: true };
    const change = { ...asked, shards: asked.shards ?? state?.shards ?? 1, totalStock: this.#totalOf(asked, state) };
    if (!state && change.shards === 1) return engine.configuration.configure(soleSettings(change), this.#host.now());
    // Sizes given to a sharded SKU that has none: its units held or sold have no size, so every shard
    // must be idle, which only a resize's fences make sure of (a sibling holding a unit would refuse
    // shard 0's settings, and the change would stay half made).
    const sizing = state !== null && state.shards > 1 && !state.variants && (asked.variants?.length ?? 0) > 0;
    if (!state || state.shards !== change.shards || sizing) {
      const sized = { ...change, variants: this.#allVariants(asked, state) };
      return this.#resize({
        changeId: crypto.randomUUID(),
        from: state?.shards ?? 0,
        to: change.shards,
        change: sized,
      });
    }
    if (state.shards === 1) return engine.configuration.configure(soleSettings(change), this.#host.now());
    // Units on their way here (a pull whose answer was lost) land first: without them a cut the SKU
    // covers is found short and refused 409 until the alarm finishes the transfer.
    if (engine.transfers.pending().length > 0) await this.#pulls.finish();
    let pullFailed = engine.transfers.pending().length > 0;
    let pulled = 0;
    const changeId = crypto.randomUUID();
    // A cut of several sizes may find each short in turn: a pull a size, while pulls bring units.
    const tries = (change.variants?.length ?? 0) + 2;
    for (let attempt = 0; ; attempt++) {
      const outcome = engine.configuration.configure(leadSettings(change, changeId), this.#host.now());
      if (outcome.ok) {
        await this.#lead(outcome.value);
        return outcome;
      }
      if (outcome.missing === undefined || (attempt > 0 && pulled === 0) || attempt + 1 >= tries) {
        // A sibling that could not answer may have had the units: BUSY (retry), not a refusal.
        return outcome.missing !== undefined && pullFailed ? { ok: false, code: "BUSY" } : outcome;
      }
      // A sharded draw being decided: its home shards pull from their siblings, and a unit this pull
      // took would be on its way to shard 0 as one asked for it (a SOLD_OUT while units were left, sim
      // seed 2688). The cut waits for the decision (retry).
      if (engine.drawDecision.due(this.#host.now()) !== null) return { ok: false, code: "BUSY" };
      const pull = await this.#pulls.pull(state, outcome.missing, outcome.variant);
      pullFailed ||= pull.failed;
      pulled = pull.pulled;
    }
  }

  /**
   * Sizes, for a resize: every variant with its total over all shards, those the change names as it
   * sets them, the others as shard 0 recorded them (a resize finds nothing held or sold).
   */
  #allVariants(change: SkuChange, state: SkuState | null): VariantSetting[] | undefined {
    const targets = this.#host.engine.configuration.variantTargets();
    const all = new Map<string, VariantSetting>();
    for (const v of state?.variants ?? [])
      all.set(v.id, { id: v.id, name: v.name, totalStock: targets.get(v.id) ?? 0 });
    for (const v of change.variants ?? []) {
      const kept = all.get(v.id);
      all.set(v.id, {
        id: v.id,
        name: v.name ?? kept?.name,
        totalStock: v.totalStock ?? kept?.totalStock ?? 0,
      });
    }
    return all.size > 0 ? [...all.values()] : undefined;
  }

  /**
   * The SKU's total a change sets: as given, or (left out) the one in force, decided here, in the
   * change's turn, so a PUT of other fields never moves the stock: the total shard 0 recorded for the
   * last PUT (a sharded SKU's base, see `retarget`), else the shards' sum the edge read.
   */
  #totalOf(change: SkuChange, state: SkuState | null): number {
    if (change.totalStock !== undefined) return change.totalStock;
    if (!state) throw new Error("a new SKU needs its totalStock (the edge checks it first)");
    if (state.shards === 1) return state.stock.total;
    return this.#host.engine.configuration.skuTarget() ?? change.assumedTotal;
  }

  /**
   * Hands shard 0's settings to every sibling (idempotent by settings revision), then ends the plan the lead
   * transaction recorded; a failure leaves it to the alarm, which hands them again.
   */
  async #lead(lead: SkuState): Promise<void> {
    const undecided = this.#host.engine.draw.undecidedOpenings();
    const answers = await Promise.allSettled(
      siblingsOf(lead.shards).map((shard) =>
        this.#host.shardOf(lead.sku, shard).configure(followerSettings(lead, shard, undecided)),
      ),
    );
    if (allTook(answers, { revision: lead.seq })) this.#host.engine.configuration.endPlan(this.#host.now());
    else {
      log("warn", "a sibling did not take the SKU's settings", { revision: lead.seq });
      await this.#host.due.retry("config", this.#host.now() + RETRY_MS);
    }
  }

  /**
   * A new shard count in two phases: fence every shard it reaches, each only if idle; then shard 0
   * commits with the plan recorded, every sibling commits, and the plan ends. A refusal in the first
   * phase lifts every fence and is the answer.
   */
  async #resize(plan: ResizePlan): Promise<Outcome<SkuState>> {
    const host = this.#host;
    const { engine } = host;
    if (plan.from > 0) {
      const own = engine.configuration.fence(plan.changeId, host.now(), JSON.stringify(plan));
      if (!own.ok) return own;
      // Durably armed first: if this object dies mid-way, the alarm lifts the fences.
      await host.due.retry("config", host.now() + RETRY_MS);
      const fenced = await Promise.all(
        reachOf(plan)
          .slice(1)
          .map((shard) =>
            host
              .shardOf(plan.change.sku, shard)
              .fence(plan.changeId)
              .catch((err: unknown): Outcome<null> => {
                log("warn", "fencing a shard for a resize failed", { shard, error: String(err) });
                return { ok: false, code: "BUSY" };
              }),
          ),
      );
      const refused = fenced.find((f) => !f.ok);
      if (refused && !refused.ok) {
        await this.#liftFences(plan);
        return { ok: false, code: refused.code };
      }
    }
    const committed = engine.configuration.configure(resizeSettings(plan, 0), host.now());
    if (!committed.ok) {
      await this.#liftFences(plan);
      return committed;
    }
    await host.due.retry("config", host.now() + RETRY_MS);
    await this.#commitSiblings(plan);
    return { ok: true, value: engine.configuration.state() ?? committed.value };
  }

  /** Every sibling a resize reaches commits it (a repeat changes nothing); then the plan ends. */
  async #commitSiblings(plan: ResizePlan): Promise<void> {
    const lead = this.#host.engine.configuration.state();
    if (!lead) throw new Error("shard 0 commits a resize before its siblings");
    const answers = await Promise.allSettled(
      reachOf(plan)
        .slice(1)
        .map((shard) =>
          this.#host
            .shardOf(plan.change.sku, shard)
            .configure(resizeSettings(plan, shard, lead, this.#host.engine.draw.undecidedOpenings())),
        ),
    );
    if (allTook(answers, { changeId: plan.changeId })) this.#host.engine.configuration.endPlan(this.#host.now());
    else log("warn", "a sibling did not commit a resize yet", { changeId: plan.changeId }); // the alarm again
  }

  /** A resize that will not commit: every fence it set goes, shard 0's plan last. */
  async #liftFences(plan: ResizePlan): Promise<void> {
    const lifted = await Promise.allSettled(
      reachOf(plan)
        .slice(1)
        .map((shard) => this.#host.shardOf(plan.change.sku, shard).unfence(plan.changeId)),
    );
    if (lifted.every((a) => a.status === "fulfilled")) this.#host.engine.configuration.unfence(plan.changeId);
    else log("warn", "lifting a resize's fences failed", { changeId: plan.changeId }); // the alarm again
  }

  /** Shard 0: whether change `changeId` is being made (its plan is recorded before any sibling is fenced for it). */
  runs(changeId: string): boolean {
    const row = this.#host.engine.configuration.resizePlan();
    return row !== null && (JSON.parse(row.plan) as ChangePlan).changeId === changeId;
  }

  /**
   * The alarm. Shard 0's: a change left half done by a restart is undone (preparing) or finished. A
   * fenced sibling's: shard 0 says whether the change that fenced it still runs, and a fence no change
   * holds goes. One sent by an instance of shard 0 that was reset can arrive after the next instance
   * lifted that change's fences, and would otherwise refuse every hold and change for good.
   */
  async recover(byChange = false): Promise<void> {
    const { engine } = this.#host;
    const changeId = engine.configuration.fencedBy();
    const sku = engine.configuration.state();
    if (sku && sku.shard !== 0 && changeId !== null) {
      const runs = await this.#host
        .shardOf(sku.sku, 0)
        .changeRuns(changeId)
        .catch(() => true);
      if (!runs) engine.configuration.unfence(changeId);
      else await this.#host.due.retry("config", this.#host.now() + RETRY_MS);
      return;
    }
    const row = engine.configuration.resizePlan();
    if (!row || (this.#changing && !byChange)) return;
    const plan = JSON.parse(row.plan) as ChangePlan;
    const state = engine.configuration.state();
    if (isFollowPlan(plan)) {
      if (state) await this.#lead(state);
    } else if (row.phase === "preparing") await this.#liftFences(plan);
    else await this.#commitSiblings(plan);
    if (engine.configuration.resizePlan()) await this.#host.due.retry("config", this.#host.now() + RETRY_MS);
  }
}

/**
 * Whether every sibling took shard 0's change. One that answered a refusal (not one that could not
 * answer) is a defect: a sibling never refuses what shard 0 decided, and the change cannot finish.
 */
function allTook(answers: PromiseSettledResult<Outcome<unknown>>[], change: Record<string, unknown>): boolean {
  const refused = answers.flatMap((a, i) =>
    a.status === "fulfilled" && !a.value.ok ? [{ shard: i + 1, code: a.value.code }] : [],
  );
  if (refused.length > 0)
    log("error", "a sibling refused shard 0's change, which cannot finish", { ...change, refused });
  return answers.every((a) => a.status === "fulfilled" && a.value.ok);
}
