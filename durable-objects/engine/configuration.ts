import type { ConfiguredSku } from "../shared/sale-entries";
import { type Access, sameAdmission } from "./access";
import { LAZY_EXPIRY_BATCH, type Ledger, type ResizePhase } from "./ledger";
import type { NewDraw, OpeningDraw } from "./opening-draw";
import type { Payments } from "./payments";
import type { Transfers } from "./transfers";
import {
  type AccessTier,
  availableOf,
  fail,
  type Outcome,
  ok,
  type Pricing,
  type SaleStatus,
  type SkuRow,
  type SkuState,
  toState,
  type VariantRow,
  type VariantSetting,
} from "./types";
import type { Waitlist } from "./waitlist";

/**
 * A shard's configuration: its settings, total, price and fair-opening window, set all at once by a
 * configure and read back with the counts by `state()`; and the steps of a resize that shard 0 runs
 * across shards (durable-objects/stock/sku-change.ts plans them; durable-objects/stock/sku-change-runner.ts
 * runs them). A refused configure writes nothing, and an object never configured stays without tables.
 */

export interface SkuSettings {
  sku: string;
  shard: number;
  shards: number;
  name?: string | undefined;
  /** This shard's stock; `undefined` keeps the current value (0 on create). */
  totalStock?: number | undefined;
  perUserLimit?: number | undefined;
  holdSeconds?: number | undefined;
  /** Epoch ms; `null` clears it, `undefined` keeps the current value. */
  startsAt?: number | null | undefined;
  endsAt?: number | null | undefined;
  status?: SaleStatus | undefined;
  /**
   * Shard 0 only: the SKU's total over all shards, recorded as the base of later PUTs (see
   * `retarget`). Given when every shard's total is set at once (create, reshard).
   */
  skuTotal?: number | undefined;
  /** Fair opening window in ms (0: off); `undefined` keeps the current value. See opening-draw.ts. */
  openingWindowMs?: number | undefined;
  /** Early access tiers, all at once (left out: kept; [] removes them). See engine/access.ts. */
  access?: readonly AccessTier[] | undefined;
  /** Price and currency, applied in the same transaction (left out: kept). */
  price?: number | null | undefined;
  currency?: string | undefined;
  /**
   * A test sale (API.md "Test sales"), applied with the price when this shard has no SKU yet; a
   * configured shard keeps its flag whatever this says. The edge sets it only on a new SKU.
   */
  test?: boolean | undefined;
  /**
   * Shard 0 of a sharded SKU: set the SKU's total to `total` as the difference from the total it
   * recorded for the last PUT; `assumed` stands for that record on a SKU configured before it was
   * kept. A cut this shard cannot cover answers `missing`.
   */
  retarget?: { total: number; assumed: number } | undefined;
  /**
   * A resize's commit: applied only by a shard that this change fenced, or one never configured; a
   * shard that already applied it answers its state.
   */
  changeId?: string | undefined;
  /**
   * Sizes: variants added or changed (left out: kept; a variant is never removed). Totals are this
   * shard's, or with `retarget` the SKU's, applied as the difference from shard 0's record of them.
   */
  variants?: readonly VariantSetting[] | undefined;
  /** Shard 0: each variant's total over all shards, recorded as the base of later PUTs (as `skuTotal`). */
  skuVariantTotals?: Readonly<Record<string, number>> | undefined;
  /** Shard 0: the resize plan it commits, kept until every sibling has applied it. */
  plan?: string | undefined;
  /** A follower: the settings revision shard 0 handed (its seq then); an older or equal one changes nothing. */
  revision?: number | undefined;
  /**
   * A follower: the openings shard 0 has not decided yet. One whose window opened before this copy
   * came still gets its draw here, so the rest of its window enters the draw (opening-draw.ts).
   */
  undecidedOpenings?: readonly number[] | undefined;
}

/** A resize shard 0 runs: phase `preparing` (fences being set) or `committing` (being applied). */
interface ResizePlanRow {
  plan: string;
  phase: ResizePhase;
}

const DEFAULTS = { perUserLimit: 1, holdSeconds: 900, status: "on_sale" } as const;

/** Thrown inside a transaction to roll it back whole and answer its refusal. */
class Refusal extends Error {
  constructor(readonly outcome: Outcome<SkuState>) {
    super("refused");
  }
}

const keep = <T>(next: T | undefined, prior: T | undefined, fallback: T): T =>
  next !== undefined ? next : prior !== undefined ? prior : fallback;

export class Configuration {
  readonly #ledger: Ledger;
  readonly #draw: OpeningDraw;
  readonly #waitlist: Waitlist;
  readonly #transfers: Transfers;
  readonly #payments: Payments;
  readonly #access: Access;
  readonly #newDraw: () => NewDraw;

  constructor(
    ledger: Ledger,
    units: { draw: OpeningDraw; waitlist: Waitlist; transfers: Transfers; payments: Payments; access: Access },
    newDraw: () => NewDraw,
  ) {
    this.#ledger = ledger;
    this.#draw = units.draw;
    this.#waitlist = units.waitlist;
    this.#transfers = units.transfers;
    this.#payments = units.payments;
    this.#access = units.access;
    this.#newDraw = newDraw;
  }

  /** Whether this object was ever configured (it has tables); before that it stores nothing. */
  get configured(): boolean {
    return this.#ledger.configured;
  }

  /** The SKU's configuration and counts, or null before the first `configure`. */
  state(): SkuState | null {
    const row = this.#ledger.row();
    return row ? this.#stateOf(row) : null;
  }

  /** The SKU's price and currency (no row: no price, the default currency). */
  pricing(): Pricing {
    return this.#ledger.pricing();
  }

  /**
   * A shard a cut left out takes shard 0's price and currency: no later change reaches it (changes go to
   * the shards of the count), yet a late payment of a hold it kept is checked here.
   */
  takePricing(lead: Pick<SkuState, "price" | "currency">): void {
    const ledger = this.#ledger;
    if (!ledger.configured) return;
    ledger.run(() => {
      // Still left out (a grow may have brought this shard back, with a newer price, while shard 0 was read).
      const row = ledger.row();
      const kept = row && row.shard >= row.shards ? ledger.pricing() : null;
      if (!kept || (kept.price === lead.price && kept.currency === lead.currency)) return;
      ledger.setPricing({ ...kept, price: lead.price, currency: lead.currency });
    });
  }

  /**
   * Creates or updates the SKU in one transaction: settings, this shard's total (absolute, or on
   * shard 0 of a sharded SKU `retarget`), price and currency. Refuses to drop the total below
   * held + sold. A refusal rolls the whole transaction back. Given `now`, units that become
   * available go to the waitlist first.
   */
  configure(settings: SkuSettings, now?: number): Outcome<SkuState> {
    const ledger = this.#ledger;
    const installing = !ledger.configured;
    try {
      return ledger.run(() => {
        if (installing) {
          ledger.install();
          this.#draw.install();
          this.#waitlist.load();
        }
        const outcome = this.#configure(settings, now);
        if (!outcome.ok) throw new Refusal(outcome);
        return outcome;
      });
    } catch (err) {
      if (installing) {
        ledger.uninstall();
        this.#draw.uninstall();
      } else this.#draw.reload(); // the draw's row in memory may be the rolled-back one
      this.#access.reload();
      if (err instanceof Refusal) return err.outcome;
      throw err;
    }
  }

  #configure(settings: SkuSettings, now: number | undefined): Outcome<SkuState> {
    const ledger = this.#ledger;
    const current = ledger.row();
    const config = ledger.config();
    if (settings.revision !== undefined && current && settings.revision <= config.revision) return ok(this.#state());
    if (config.fence !== null && settings.changeId !== config.fence) return fail("BUSY");
    // A resize's commit that this shard applied already (it is no longer fenced): a repeat.
    if (settings.changeId !== undefined && config.fence === null && current) return ok(this.#state());
    const skuTotal = this.#totalOf(settings, current);
    if (typeof skuTotal !== "number") return skuTotal;
    const variants = this.#variantsOf(settings, current, now ?? 0);
    if (!(variants instanceof Map)) return variants;
    // A SKU with sizes has no stock of its own: its total is its variants'.
    const total = variants.size > 0 ? [...variants.values()].reduce((n, v) => n + v.total, 0) : skuTotal;
    const refused = this.#refusal(settings, current, total, now ?? 0);
    if (refused) return refused;
    // Fair opening: a window is set before it opens and never moved once open (opening-draw.ts).
    const startsAt = keep(settings.startsAt, current?.starts_at, null);
    const newDraw = settings.shard === 0 ? this.#newDraw : null;
    // Shard 0: a tier whose draw is under way keeps its name and claim, which its entries were admitted by.
    if (newDraw !== null && settings.access !== undefined && this.#renamesDrawingTier(settings.access, now ?? 0)) {
      return fail("INVALID_STATE");
    }
    // A draw per opening: the public start and each early access tier's (those in force after this change).
    const tierStarts = (settings.access ?? this.#access.tiers()).map((t) => t.startsAt);
    const undecided = settings.undecidedOpenings ?? [];
    if (!this.#draw.configure(settings.openingWindowMs, startsAt, tierStarts, now ?? 0, newDraw, undecided)) {
      return fail("INVALID_STATE");
    }
    // A cut's commit that came after the opening (a fault delayed it): the shard it leaves out keeps no
    // draw of it pending (opening-draw.ts `retire`), or every later resize reaching it would be refused.
    if (settings.shard >= settings.shards) this.#draw.retire(now ?? 0);

    this.#write(settings, current, total, startsAt);
    this.#writeVariants(settings, variants);
    if (settings.access !== undefined) this.#access.set(settings.access);
    // Archived (shard 0 keeps the line): its waitlist could never be served, so nobody is left waiting.
    if (settings.status === "archived" && current?.status !== "archived") this.#waitlist.clear();
    // Shard 0 commits a new shard count only while nobody waits (its fence holds the line until then): no
    // unit is the line's, whatever mode a tell that failed left (a one-shard SKU has no pass to lift it).
    // Not a sibling, whose commit may come after a buyer joined and shard 0 told it so.
    else if (current && settings.shard === 0 && settings.shards !== current.shards && this.#waitlist.mode !== 0)
      this.#waitlist.setMode(0);
    ledger.writeConfig({
      revision: settings.revision ?? config.revision,
      fence: settings.changeId === config.fence ? null : config.fence,
      plan: settings.plan ?? config.plan,
      phase: settings.plan !== undefined ? "committing" : config.phase,
    });
    if (current && total > current.total) ledger.freed += total - current.total;
    if (now !== undefined) this.#waitlist.fill(now);
    if (settings.shard === 0) this.#logEntry(settings, current, now ?? Date.now());
    return ok(this.#state());
  }

  /** Whether `access` keeps a tier at the time of a draw under way, under another name or claim. */
  #renamesDrawingTier(access: readonly AccessTier[], now: number): boolean {
    return this.#access.tiers().some((was) => {
      const kept = access.find((t) => t.startsAt === was.startsAt);
      return kept !== undefined && !sameAdmission(kept, was) && this.#draw.drawing(was.startsAt, now);
    });
  }

  /**
   * Shard 0: the SKU's configuration entry (the verifiable sale, durable-objects/shared/sale-entries.ts),
   * written in the change's own transaction, so no change is ever made without its entry on its way
   * to the log; the outbox sender appends it. It states the totals the operator set (shard 0's record
   * on a sharded SKU: the shards' own figures move with transfers) and when shard 0 took the change;
   * a change its siblings take after it ({@link endPlan}) waits for the time they all had it (`until`).
   */
  #logEntry(settings: SkuSettings, current: SkuRow | undefined, now: number): void {
    const state = this.#state();
    const sharded = state.shards > 1;
    const targets = sharded ? this.variantTargets() : null;
    const { shards, status, perUserLimit, holdSeconds, startsAt, endsAt, price, currency, test } = state;
    const { openingWindowMs, access } = state;
    const figures: ConfiguredSku = {
      shards,
      status,
      perUserLimit,
      holdSeconds,
      startsAt,
      endsAt,
      price,
      currency,
      test,
      openingWindowMs,
      access,
      stock: { total: (sharded ? this.skuTarget() : null) ?? state.stock.total },
      variants: state.variants?.map((v) => ({
        id: v.id,
        name: v.name,
        stock: { total: targets?.get(v.id) ?? v.stock.total },
      })),
    };
    const draws = (this.#draw.info()?.openings ?? []).flatMap((o) =>
      o.seedHash === null
        ? []
        : [{ opensAt: o.opensAt, closesAt: o.closesAt, seedHash: o.seedHash, entryIdPrefix: o.entryIdPrefix }],
    );
    const archive = settings.status === "archived" && current?.status !== "archived";
    this.#ledger.sql.exec(
      "INSERT INTO log_outbox (id, type, time, until, figures) VALUES (?, ?, ?, ?, ?)",
      `config:${state.seq}`,
      archive ? "archive" : "config",
      now,
      settings.plan === undefined ? now : null,
      JSON.stringify({ sku: figures, draws }),
    );
  }

  /** This shard's new total: as given, kept, or shard 0's share of a new SKU total (`retarget`). */
  #totalOf(settings: SkuSettings, current: SkuRow | undefined): number | Outcome<SkuState> {
    const total = settings.totalStock ?? current?.total ?? 0;
    if (!settings.retarget || !current) return total;
    const change = settings.retarget.total - (this.skuTarget() ?? settings.retarget.assumed);
    const available = availableOf(current);
    if (change < 0 && available < -change) return { ok: false, code: "INVALID_STATE", missing: -change - available };
    return current.total + change;
  }

  /**
   * Sizes: this shard's variants as the change leaves them (a copy; written by {@link #writeVariants}),
   * or its refusal: variants given to a SKU without them that holds or sold units, has buyers waiting
   * or an opening draw pending; a variant's total below its held + sold (named); or a cut shard 0
   * cannot cover (`missing` units of the variant).
   */
  #variantsOf(
    settings: SkuSettings,
    current: SkuRow | undefined,
    now: number,
  ): Map<string, VariantRow> | Outcome<SkuState> {
    const existing = this.#ledger.variants();
    const out = new Map<string, VariantRow>();
    for (const [id, v] of existing) out.set(id, { ...v });
    if (!settings.variants || settings.variants.length === 0) return out;
    // Units held or sold, the line's entries and an undecided draw's entries have no size, and none
    // could be given one: only while there are none, as for a new shard count.
    const sizeless =
      current &&
      (current.held + current.sold > 0 || this.#waitlist.length() > 0 || this.#drawEntriesMatter(settings, now));
    if (existing.size === 0 && sizeless) return fail("INVALID_STATE");
    const targets = settings.retarget && current ? this.variantTargets() : null;
    for (const v of settings.variants) {
      const row = out.get(v.id);
      if (!row) {
        out.set(v.id, {
          id: v.id,
          name: v.name ?? v.id,
          position: out.size,
          total: v.totalStock ?? 0,
          held: 0,
          sold: 0,
        });
        continue;
      }
      if (v.name !== undefined) row.name = v.name;
      if (v.totalStock === undefined) continue;
      if (targets) {
        const change = v.totalStock - (targets.get(v.id) ?? row.total);
        const available = availableOf(row);
        if (change < 0 && available < -change) {
          return { ok: false, code: "INVALID_STATE", missing: -change - available, variant: v.id };
        }
        row.total += change;
      } else row.total = v.totalStock;
      if (row.total < row.held + row.sold) return { ok: false, code: "INVALID_STATE", variant: v.id };
    }
    return out;
  }

  /** Writes the variants a change added or changed, and shard 0's record of their SKU totals. */
  #writeVariants(settings: SkuSettings, variants: Map<string, VariantRow>): void {
    const ledger = this.#ledger;
    const existing = ledger.variants();
    for (const [id, v] of variants) {
      const before = existing.get(id);
      if (!before) ledger.addVariant(v);
      else if (before.total !== v.total || before.name !== v.name) {
        ledger.sql.exec("UPDATE variant_stock SET name = ?, total = ? WHERE id = ?", v.name, v.total, id);
        before.name = v.name;
        before.total = v.total;
      }
    }
    const targets = Object.entries(settings.skuVariantTotals ?? {});
    for (const [id, total] of targets) {
      ledger.sql.exec(
        "INSERT INTO variant_target (id, total) VALUES (?, ?) ON CONFLICT (id) DO UPDATE SET total = excluded.total",
        id,
        total,
      );
    }
    if (targets.length > 0) {
      ledger.sql.exec(
        `INSERT INTO sku_target (id, total) SELECT 1, SUM(total) FROM variant_target WHERE true
         ON CONFLICT (id) DO UPDATE SET total = excluded.total`,
      );
    }
  }

  /**
   * A sibling learns the variants shard 0 has and it lacks, at 0 units here (its hand-off of them
   * is late: the PUT that added them retries it): a buyer listing a new size is not refused for it.
   * Returns how many it learnt.
   */
  learnVariants(variants: readonly { id: string; name: string }[]): number {
    const ledger = this.#ledger;
    // Only a shard in sizes already: one that has none still has its plain stock, which only the
    // hand-off (a configure, total and sizes at once) turns into sizes.
    if (!ledger.configured || !ledger.row() || ledger.variants().size === 0) return 0;
    return ledger.run(() => {
      const known = ledger.variants();
      let learnt = 0;
      for (const v of variants) {
        if (known.has(v.id)) continue;
        ledger.addVariant({ id: v.id, name: v.name, position: known.size, total: 0, held: 0, sold: 0 });
        learnt++;
      }
      if (learnt > 0) ledger.bumpSeq();
      return learnt;
    });
  }

  /** Shard 0: each variant's total over all shards as the operator last set it (empty: none recorded). */
  variantTargets(): Map<string, number> {
    if (!this.#ledger.configured) return new Map();
    const rows = this.#ledger.sql.exec<{ id: string; total: number }>("SELECT id, total FROM variant_target");
    return new Map([...rows].map((r) => [r.id, r.total]));
  }

  /** Why the change cannot be made as it stands, if it cannot. */
  #refusal(
    settings: SkuSettings,
    current: SkuRow | undefined,
    total: number,
    now: number,
  ): Outcome<SkuState> | undefined {
    if (!current) return undefined;
    if (total < current.held + current.sold) return fail("INVALID_STATE");
    // A new shard count moves users between shards: only while this shard holds and sells nothing
    // (nor keeps entries of an opening draw that is not decided yet: they wait on their home shard).
    if (
      settings.shards !== current.shards &&
      (current.held + current.sold > 0 || this.#drawEntriesMatter(settings, now))
    ) {
      return fail("INVALID_STATE");
    }
    return undefined;
  }

  /**
   * Whether an opening draw not decided yet may hold entries this change cannot carry over. Not for
   * the commit of a resize this shard is fenced for: judged at the fence, and a fenced shard answers
   * BUSY, so no entry came since (a window opened meanwhile must not leave the resize half made).
   */
  #drawEntriesMatter(settings: SkuSettings, now: number): boolean {
    const fenced = settings.changeId !== undefined && this.#ledger.config().fence === settings.changeId;
    return !fenced && this.#draw.pending(now);
  }

  /** Writes the SKU row, the SKU's total record and the price (nothing is dirty at a transaction's start). */
  #write(settings: SkuSettings, current: SkuRow | undefined, total: number, startsAt: number | null): void {
    const ledger = this.#ledger;
    const written = ledger.sql.exec<SkuRow>(
      `INSERT INTO sku (id, sku, shard, shards, shards_ever, name, status, per_user_limit, hold_seconds, starts_at, ends_at, total, seq)
       VALUES (1, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, 1)
       ON CONFLICT (id) DO UPDATE SET
         shards = excluded.shards, shards_ever = MAX(sku.shards_ever, sku.shards, excluded.shards),
         name = excluded.name, status = excluded.status,
         per_user_limit = excluded.per_user_limit, hold_seconds = excluded.hold_seconds,
         starts_at = excluded.starts_at, ends_at = excluded.ends_at, total = excluded.total,
         seq = sku.seq + 1
       RETURNING *`,
      settings.sku,
      settings.shard,
      settings.shards,
      settings.shards,
      keep(settings.name, current?.name, settings.sku),
      keep(settings.status, current?.status as SaleStatus | undefined, DEFAULTS.status),
      keep(settings.perUserLimit, current?.per_user_limit, DEFAULTS.perUserLimit),
      keep(settings.holdSeconds, current?.hold_seconds, DEFAULTS.holdSeconds),
      startsAt,
      keep(settings.endsAt, current?.ends_at, null),
      total,
    );
    ledger.setRow(written.one());
    const skuTotal = settings.retarget?.total ?? settings.skuTotal;
    if (skuTotal !== undefined) {
      ledger.sql.exec(
        "INSERT INTO sku_target (id, total) VALUES (1, ?) ON CONFLICT (id) DO UPDATE SET total = excluded.total",
        skuTotal,
      );
    }
    const pricing = ledger.pricing();
    const next = {
      price: settings.price !== undefined ? settings.price : pricing.price,
      currency: settings.currency ?? pricing.currency,
      // Set only when the SKU is created here (API.md "Test sales"): an existing row keeps its flag,
      // whatever a change says (the edge sends it only for a new SKU; a sibling gets shard 0's).
      test: current ? pricing.test : (settings.test ?? pricing.test),
    };
    if (next.price !== pricing.price || next.currency !== pricing.currency || next.test !== pricing.test) {
      ledger.setPricing(next);
    }
  }

  #state(): SkuState {
    return this.#stateOf(this.#ledger.requireRow());
  }

  #stateOf(row: SkuRow): SkuState {
    const state: SkuState = toState(row, this.#ledger.pricing());
    const variants = this.#ledger.variants();
    if (variants.size > 0) {
      state.variants = [...variants.values()].map((v) => ({
        id: v.id,
        name: v.name,
        stock: { total: v.total, available: availableOf(v), held: v.held, sold: v.sold },
      }));
    }
    // Only when one is set: a SKU without a window answers exactly as the Lua script does (lua-parity).
    if (this.#draw.windowMs > 0) state.openingWindowMs = this.#draw.windowMs;
    const access = this.#access.tiers();
    if (access.length > 0) state.access = access;
    if (this.#ledger.config().plan !== null) state.reconfiguring = true;
    // The shard that keeps the line (shard 0) says how many wait; only when some do, as for the window.
    const waiting = this.#waitlist.length();
    if (waiting > 0) state.waiting = waiting;
    return state;
  }

  /** The SKU's total as the operator last set it (shard 0 only), or null if never recorded. */
  skuTarget(): number | null {
    if (!this.#ledger.configured) return null;
    return (
      this.#ledger.sql.exec<{ total: number }>("SELECT total FROM sku_target WHERE id = 1").toArray()[0]?.total ?? null
    );
  }

  /**
   * A resize, step 1 on each shard it reaches: stages this shard for change `changeId` if it is idle
   * (nothing held or sold, nobody waiting, no undecided draw, no transfer or payment claim in flight): from then on
   * it takes no new hold or waitlist entry (`BUSY`) until the change commits or is lifted. `plan`:
   * shard 0 records the resize it runs (phase `preparing`). A shard never configured is idle and
   * stays blank. Again with the same id: the same answer.
   */
  fence(changeId: string, now: number, plan?: string): Outcome<null> {
    const ledger = this.#ledger;
    if (!ledger.configured) return ok(null);
    return ledger.run(() => {
      ledger.expireDue(now, LAZY_EXPIRY_BATCH);
      const config = ledger.config();
      if (config.fence === changeId) return ok(null);
      if (config.fence !== null || config.plan !== null) return fail<null>("BUSY");
      const sku = ledger.row();
      // A shard a cut left out as an older deploy did (its opening kept, never decided there): no draw of it is pending.
      if (sku && sku.shard >= sku.shards) this.#draw.retire(now);
      if (sku && (sku.held + sku.sold > 0 || this.#waitlist.length() > 0 || this.#draw.pending(now))) {
        return fail<null>("INVALID_STATE");
      }
      // Units in flight (a transfer, or a late payment's claim on the buyer's home shard): retry.
      if (this.#transfers.pending().length > 0 || this.#payments.pendingClaims().length > 0) return fail<null>("BUSY");
      ledger.writeConfig({ ...config, fence: changeId, plan: plan ?? null, phase: plan ? "preparing" : null });
      return ok(null);
    });
  }

  /** Lifts the fence of a change that will not commit (and, on shard 0, its plan). */
  unfence(changeId: string): void {
    const ledger = this.#ledger;
    if (!ledger.configured) return;
    ledger.run(() => {
      const config = ledger.config();
      if (config.fence === changeId) ledger.writeConfig({ ...config, fence: null, plan: null, phase: null });
    });
  }

  /** The change that fenced this shard, if one did. */
  fencedBy(): string | null {
    return this.#ledger.configured ? this.#ledger.config().fence : null;
  }

  /** Shard 0: the resize it runs, if one is left (its alarm finishes or undoes it). */
  resizePlan(): ResizePlanRow | null {
    if (!this.#ledger.configured) return null;
    const config = this.#ledger.config();
    return config.plan !== null && config.phase !== null ? { plan: config.plan, phase: config.phase } : null;
  }

  /** Shard 0: every sibling applied the change: it is over, and its log entry says until when. */
  endPlan(now: number): void {
    const ledger = this.#ledger;
    if (!ledger.configured) return;
    ledger.run(() => {
      const config = ledger.config();
      if (config.phase !== "committing") return;
      ledger.writeConfig({ ...config, plan: null, phase: null });
      ledger.sql.exec("UPDATE log_outbox SET until = max(time, ?) WHERE until IS NULL", now);
    });
  }
}
