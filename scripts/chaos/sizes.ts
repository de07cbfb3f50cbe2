/**
 * The sizes scene of the chaos run (issue #51, API.md v1.4 "Sizes (variants)") on the `sizes` SKU of
 * schedule.ts, sold while the run's faults go on: resizes before anything is held, two waves of shoppers
 * with preference lists, an operator mid-sale and the line by size, as docs/DEVELOPMENT.md, "Chaos",
 * describes. Everything it was told goes into the shoppers' ledger (each acknowledged reservation with
 * the sizes it listed and the one it got), so invariants.ts checks it like any other, per size at the
 * end (1, 2, 4, 5); what the operator's PUTs did is checked on line (10) and counted in the summary.
 */
import type { VariantState as Size, SkuState, StockCounts as Stock } from "../../durable-objects/engine/types";
import { errorCode, field, type Reply, settled, sleep, str } from "./http";
import { skuView } from "./invariants";
import { between, derive, prng, type SkuPlan } from "./schedule";
import { type Acked, call, reserveRecorded, Scene } from "./shoppers";

/** The size an operator adds mid-sale. */
const ADDED = { id: "46", name: "EU 46", totalStock: 4 };
/** Shoppers of each wave, and how many of them run at once (the machine is small). */
const WAVE = [20, 16] as const;
const AT_ONCE = 6;

const show = (value: unknown) => JSON.stringify(value);

/** The items in a seeded order (Fisher–Yates). */
function shuffled<T>(items: readonly T[], random: () => number): T[] {
  const out = [...items];
  for (let i = out.length - 1; i > 0; i--) {
    const j = Math.floor(random() * (i + 1));
    [out[i], out[j]] = [out[j] as T, out[i] as T];
  }
  return out;
}

export class SizesScene extends Scene {
  /** What was checked on line, for the summary (faults' counts). */
  readonly told = { acked: 0, soldOut: 0, joined: 0, served: 0, paid: 0, cancelled: 0, secondPairsRefused: 0 };
  /** Who joined the line (answered 202), with the sizes they listed. */
  readonly #waiters = new Map<string, string[]>();
  /** Waiters whose place was gone (404) at the line's check: served, their holds read once D1 has every order. */
  #served: { sku: string; users: string[] } | null = null;

  /** The scene, spread over `spanMs` of traffic (so Worker restarts and redis kills meet it). */
  async run(sku: string, spanMs: number): Promise<void> {
    const plan = this.faults.skus.find((p) => p.sku === sku);
    if (!plan?.variants) return;
    const start = Date.now();
    const until = (share: number) => sleep(Math.max(0, start + spanMs * share - Date.now()));
    const random = prng(derive(this.seed, 6_000_000));
    const prefix = `sizes-${this.seed}`;
    const sizes = plan.variants.map((v) => v.id);

    // (0) Nothing held yet: a resize may apply, and one that does keeps every size's total.
    await this.#resize(plan, 4, "before the sale");
    await this.#resize(plan, 3, "before the sale");

    // (1) The first wave: preference lists, then some pay, some cancel, some ask for a second pair.
    const first = await this.#wave(sku, `${prefix}-a`, WAVE[0], sizes, random, spanMs * 0.25);
    await this.#settleHolds(first, random);
    await this.#secondPairs(sku, first, sizes, random);
    await until(0.4);

    // (2) The operator mid-sale: a refused cut, a cut that applies, a size added, a refused resize.
    await this.#refusedCut(sku);
    await this.#cutWithin(sku);
    if (await this.#add(sku)) sizes.push(ADDED.id);
    await this.#resize(plan, 4, "mid-sale");
    await until(0.5);

    // (3) The second wave, the added size among the choices; SOLD_OUT ones join the line.
    const second = await this.#wave(sku, `${prefix}-b`, WAVE[1], sizes, random, spanMs * 0.25, true);
    await until(0.85);
    await this.#settleHolds(second, random);
    // (4) Holds of sizes the line wants are let go: each serves the first entry that listed it.
    await this.#releaseToLine([...first, ...second]);
    await sleep(3_000);
    await this.#checkLine(sku);
    const end = await this.#sizes(sku);
    this.faults.log(
      `sizes scene ${sku}: ${end.map((s) => `${s.id} ${s.stock.available}/${s.stock.total} (held ${s.stock.held}, sold ${s.stock.sold})`).join(", ")}`,
    );
  }

  /** The admin view's sizes. */
  async #sizes(sku: string): Promise<Size[]> {
    const view = (await skuView(this.client, sku)) as unknown as { variants?: Size[] };
    return view.variants ?? [];
  }

  /** Each size's total summed over the shards 0 to count - 1, by id. */
  async #shardTotals(sku: string, count: number): Promise<Map<string, number>> {
    const out = new Map<string, number>();
    for (const shard of await this.shardStates<SkuState>(sku, count))
      for (const v of shard?.variants ?? []) out.set(v.id, (out.get(v.id) ?? 0) + v.stock.total);
    return out;
  }

  /** What the operator's PUT of sizes answered 200 sets: the SKU's total is now the sum of its sizes'. */
  #record(sku: string, sizes: readonly Size[]): void {
    this.faults.lastPut.set(
      sku,
      sizes.reduce((n, s) => n + s.stock.total, 0),
    );
  }

  /** A PUT in the SKU's operator turn (its answer, read before and after in the same turn). */
  #put<T>(sku: string, work: () => Promise<T>): Promise<T> {
    return this.faults.exclusive(sku, work);
  }

  // ---- shoppers

  /** `n` shoppers arriving over `overMs`, `AT_ONCE` at a time, each reserving one pair by 1–3 sizes. */
  async #wave(
    sku: string,
    prefix: string,
    n: number,
    sizes: readonly string[],
    random: () => number,
    overMs: number,
    wait = false,
  ): Promise<Acked[]> {
    const plans = Array.from({ length: n }, (_, k) => {
      const listed = shuffled(sizes, random).slice(0, between(random, 1, 3));
      return { user: `${prefix}${k}`, listed, join: random() < 0.6 };
    });
    const held: Acked[] = [];
    const began = Date.now();
    for (let i = 0; i < plans.length; i += AT_ONCE) {
      await sleep(Math.max(0, began + (overMs * i) / plans.length - Date.now()));
      await Promise.all(
        plans.slice(i, i + AT_ONCE).map(async ({ user, listed, join }) => {
          const token = await this.mint(user, sku, "sizes");
          if (!token) return;
          const reply = await this.#reserve(user, sku, token, listed, "sizes reserve");
          const acked = reply && this.#acked(reply);
          if (acked) held.push(acked);
          else if (wait && join && errorCode(reply?.json) === "SOLD_OUT") await this.#join(user, sku, listed);
        }),
      );
    }
    return held;
  }

  /**
   * A reservation of one pair by `listed`: a 202 is recorded with the size it names (which must be
   * one listed: 4), a SOLD_OUT's sizes must be the ones listed, none with a unit.
   */
  async #reserve(user: string, sku: string, token: string, listed: string[], op: string): Promise<Reply | null> {
    const headers = await this.auth(user);
    const body = { token, quantity: 1, variants: listed };
    const { reply, acked } = await reserveRecorded(this.ledger, this.client, op, sku, user, headers, body);
    if (reply && acked) {
      const variant = str(reply.json, "variant") ?? "";
      if (!listed.includes(variant))
        this.fail(
          4,
          `${sku}: ${user} listed sizes ${show(listed)}, and reservation ${acked.id} holds size ${show(variant)}`,
        );
      acked.sizes = { listed, variant };
      this.told.acked++;
    }
    if (errorCode(reply?.json) === "SOLD_OUT") {
      this.told.soldOut++;
      const details = field(field(field(reply?.json, "error"), "details"), "variants");
      if (details !== undefined) {
        const named = Object.keys(details as object);
        const wrong =
          named.some((id) => !listed.includes(id)) || Object.values(details as object).some((left) => left !== 0);
        if (wrong) this.fail(4, `${sku}: ${user} listed ${show(listed)}, SOLD_OUT said ${show(details)}`);
      }
    }
    return reply;
  }

  #acked(reply: Reply): Acked | null {
    const id = reply.status === 202 ? str(reply.json, "reservationId") : undefined;
    return (id && this.ledger.acked.get(id)) || null;
  }

  /** Joins the line with the sizes listed (a join that got no answer may still have put them in it). */
  async #join(user: string, sku: string, listed: string[]): Promise<void> {
    this.ledger.waitlisted.add(user);
    const headers = await this.auth(user);
    const reply = await call(this.ledger, "sizes waitlist join", () =>
      this.client.request("POST", `/api/skus/${sku}/waitlist`, {
        headers,
        body: { quantity: 1, variants: listed },
      }),
    );
    if (reply?.status === 202) {
      this.told.joined++;
      this.#waiters.set(user, listed);
    }
  }

  /** Cancels up to three holds of sizes someone in the line listed. */
  async #releaseToLine(holds: readonly Acked[]): Promise<void> {
    const wanted = new Set([...this.#waiters.values()].flat());
    const mine = holds.filter((a) => a.lastKnown === "held" && wanted.has(a.sizes?.variant ?? "")).slice(0, 3);
    await Promise.all(mine.map((acked) => this.#cancel(acked)));
    this.faults.count("sizes: holds of sizes the line wants cancelled", mine.length);
  }

  /**
   * The line by size (9): nobody still waits while one of the sizes they listed has a unit available
   * (read again for a few seconds: a grant may be landing). Whoever is out of the line was served,
   * which {@link checkServed} checks once the order pipeline has drained.
   */
  async #checkLine(sku: string): Promise<void> {
    let problem: string | null = null;
    let served: string[] = [];
    for (let read = 0; read < 5; read++) {
      const left = new Map((await this.#sizes(sku)).map((s) => [s.id, s.stock.available]));
      const problems: string[] = [];
      served = [];
      for (const [user, listed] of this.#waiters) {
        const headers = await this.auth(user);
        const place = await call(this.ledger, "sizes waitlist place", () =>
          this.client.request("GET", `/api/skus/${sku}/waitlist`, { headers }),
        );
        const free = listed.filter((id) => (left.get(id) ?? 0) > 0);
        if (place?.status === 200 && free.length > 0)
          problems.push(
            `${user} still waits for ${show(listed)} while ${free.map((id) => `${id} has ${left.get(id)}`).join(", ")}`,
          );
        else if (place?.status === 404) served.push(user);
        else if (place?.status !== 200) problems.push(`${user}'s place answered ${place?.status ?? "nothing"}`);
      }
      problem = problems.length > 0 ? problems.join("; ") : null;
      if (problem === null) break;
      await sleep(1_000);
    }
    if (problem) this.fail(9, `${sku}: ${problem}`);
    this.#served = { sku, users: served };
  }

  /**
   * The line by size (14, 9), once D1 has every order (after the run's drain): whoever left the line
   * without leaving it holds a size they listed. A buyer's reservations are read from D1, which a
   * grant reaches through the queue, and while the run's consumer faults last (batches failed and
   * retried after a delay, poison messages) an order can take longer than any fixed wait; read
   * before the drain, a served buyer may look empty-handed.
   */
  async checkServed(): Promise<void> {
    if (!this.#served) return;
    const { sku, users } = this.#served;
    for (const user of users) {
      const listed = this.#waiters.get(user) ?? [];
      const headers = await this.auth(user);
      let mine: Awaited<ReturnType<typeof call>> = null;
      let held: Record<string, unknown>[] = [];
      for (let read = 0; read < 3 && held.length === 0; read++) {
        if (read > 0) await sleep(1_000);
        mine = await call(this.ledger, "sizes me", () =>
          this.client.request("GET", "/api/me/reservations", { headers }),
        );
        held = ((field(mine?.json, "reservations") ?? []) as Record<string, unknown>[]).filter(
          (r) => r.sku === sku && (r.status === "held" || r.status === "paid"),
        );
      }
      if (mine?.status === 200 && held.length === 0)
        this.fail(14, `${sku}: ${user} has no place in the line (404), never left it, and holds nothing`);
      for (const r of held) {
        const id = str(r, "reservationId") ?? "";
        const variant = str(r, "variant") ?? "";
        this.told.served++;
        if (!listed.includes(variant))
          this.fail(9, `${sku}: the line gave ${user}, who listed ${show(listed)}, size ${show(variant)} (${id})`);
        if (!id || this.ledger.acked.has(id)) continue;
        this.ledger.acked.set(id, {
          id,
          sku,
          userId: user,
          quantity: typeof r.quantity === "number" ? r.quantity : 1,
          expiresAt: Date.parse(str(r, "expiresAt") ?? ""),
          lastKnown: str(r, "status") ?? "held",
          finalBy: null,
          origin: "waitlist",
          sizes: { listed, variant },
        });
      }
    }
    this.faults.count(`sizes scene: ${this.summary()}`);
  }

  /** Some holds are paid (the webhook or Stripe), some cancelled, the rest kept. */
  async #settleHolds(holds: readonly Acked[], random: () => number): Promise<void> {
    const plans = holds.map((acked) => ({ acked, roll: random() }));
    for (let i = 0; i < plans.length; i += AT_ONCE) {
      await Promise.all(
        plans.slice(i, i + AT_ONCE).map(async ({ acked, roll }) => {
          if (roll < 0.3) await this.#pay(acked, "webhook");
          else if (roll < 0.45) await this.#pay(acked, "stripe");
          else if (roll < 0.7) await this.#cancel(acked);
        }),
      );
    }
  }

  async #cancel(acked: Acked): Promise<void> {
    if (await this.cancel(acked, "sizes cancel")) this.told.cancelled++;
  }

  /** A payment of the hold, its answer recorded for invariant 6 (as the money actor does). */
  async #pay(acked: Acked, via: "webhook" | "stripe"): Promise<void> {
    if ((await this.payBy(via, acked, `sizes pay (${via})`))?.status === "paid") this.told.paid++;
  }

  /**
   * A few holders and buyers ask for another size with a fresh token: one pair per customer across
   * sizes, so none may be acknowledged a second one (2, on line).
   */
  async #secondPairs(sku: string, holds: readonly Acked[], sizes: readonly string[], random: () => number) {
    const owners = holds.filter((a) => a.lastKnown === "held" || a.lastKnown === "paid").slice(0, 4);
    await Promise.all(
      owners.map(async (acked) => {
        const others = sizes.filter((s) => s !== acked.sizes?.variant);
        const listed = shuffled(others, random).slice(0, 2);
        const token = await this.mint(acked.userId, sku, "sizes");
        if (!token) return;
        const reply = await this.#reserve(acked.userId, sku, token, listed, "sizes second pair");
        if (reply?.status === 202) {
          this.fail(
            2,
            `${sku}: ${acked.userId}, who ${acked.lastKnown === "paid" ? "bought" : "holds"} size ${acked.sizes?.variant} (${acked.id}), was given a second pair: ${str(reply.json, "variant")} (perUserLimit 1 across sizes)`,
          );
        } else if (reply) {
          this.told.secondPairsRefused++;
          this.faults.count(
            `sizes: a second pair asked answered ${reply.status} ${errorCode(reply.json) ?? ""}`.trim(),
          );
        }
      }),
    );
  }

  // ---- the operator

  /**
   * A cut of one size below its held + sold (sold units never come back, so it is refused whatever holds
   * do meanwhile when the size has sold): `409 INVALID_STATE` naming that size, and every size, the
   * SKU's total and each shard's sizes as they were (10).
   */
  async #refusedCut(sku: string): Promise<void> {
    await this.#put(sku, async () => {
      const before = await this.#sizes(sku);
      const shards = (await skuView(this.client, sku)).shards;
      const target =
        before.filter((s) => s.stock.sold > 0).sort((a, b) => b.stock.sold - a.stock.sold)[0] ??
        before.filter((s) => s.stock.held > 0)[0];
      if (!target) {
        this.faults.count("sizes: refused cuts skipped (nothing held or sold)");
        return;
      }
      const cut = target.stock.sold > 0 ? target.stock.sold - 1 : target.stock.held + target.stock.sold - 1;
      const spread = await this.#shardTotals(sku, shards);
      const reply = await this.faults.putNow(sku, () => ({ variants: [{ id: target.id, totalStock: cut }] }));
      const details = field(field(reply.json, "error"), "details");
      this.faults.count(`sizes: cuts below held + sold answered ${reply.status} ${errorCode(reply.json) ?? ""}`.trim());
      const what = `cut of size ${target.id} of ${sku} to ${cut} (held ${target.stock.held}, sold ${target.stock.sold})`;
      if (reply.status === 200) {
        this.fail(10, `${what} answered 200: a size's total below its held + sold must be refused`);
        this.#record(sku, await this.#sizes(sku));
        return;
      }
      if (reply.status !== 409 || errorCode(reply.json) !== "INVALID_STATE" || field(details, "variant") !== target.id)
        this.fail(10, `${what} answered ${reply.status} ${reply.text.slice(0, 200)}, not 409 INVALID_STATE naming it`);
      const problem = await settled(async () => {
        const after = await this.#sizes(sku);
        const afterSpread = await this.#shardTotals(sku, shards);
        const diffs: string[] = [];
        for (const was of before) {
          const now = after.find((s) => s.id === was.id);
          if (now?.stock.total !== was.stock.total || now.name !== was.name)
            diffs.push(`size ${was.id} ${was.stock.total} → ${now?.stock.total} (${show(now?.name)})`);
          if ((afterSpread.get(was.id) ?? 0) !== (spread.get(was.id) ?? 0))
            diffs.push(`size ${was.id} over the shards ${spread.get(was.id)} → ${afterSpread.get(was.id)}`);
        }
        if (after.length !== before.length) diffs.push(`${before.length} sizes → ${after.length}`);
        const view = await skuView(this.client, sku);
        if (view.stock.total !== this.faults.lastPut.get(sku))
          diffs.push(`the SKU's total ${this.faults.lastPut.get(sku)} → ${view.stock.total}`);
        return diffs.length > 0 ? diffs.join("; ") : null;
      });
      this.faults.count("sizes: refused cuts compared before/after (every size, the total, every shard)");
      if (problem) this.fail(10, `${what} answered ${reply.status} but changed ${problem}`);
    });
  }

  /** A cut within a size's available units: applied, that size alone changed, the SKU's total their sum. */
  async #cutWithin(sku: string): Promise<void> {
    await this.#put(sku, async () => {
      const before = await this.#sizes(sku);
      const target = before
        .filter((s) => s.stock.available >= 2)
        .sort((a, b) => b.stock.available - a.stock.available)[0];
      if (!target) {
        this.faults.count("sizes: cuts within available skipped (no size has 2 units left)");
        return;
      }
      const by = Math.floor(target.stock.available / 2);
      const reply = await this.faults.putNow(sku, () => ({
        variants: [{ id: target.id, totalStock: target.stock.total - by }],
      }));
      this.faults.count(`sizes: cuts within available answered ${reply.status}`);
      const what = `cut of size ${target.id} of ${sku} by ${by} (available ${target.stock.available})`;
      if (reply.status !== 200) {
        this.fail(10, `${what} answered ${reply.status} ${reply.text.slice(0, 200)}: a cut within available applies`);
        return;
      }
      const expected = before.map((s) => (s.id === target.id ? s.stock.total - by : s.stock.total));
      this.#record(
        sku,
        before.map((s, i) => ({ ...s, stock: { ...s.stock, total: expected[i] ?? 0 } })),
      );
      const problem = await settled(async () => {
        const after = await this.#sizes(sku);
        const wrong = before.filter((s, i) => after.find((a) => a.id === s.id)?.stock.total !== expected[i]);
        return wrong.length > 0
          ? `sizes ${wrong.map((s) => s.id).join(", ")} hold ${show(after.map((a) => [a.id, a.stock.total]))}, expected ${show(expected)}`
          : null;
      });
      if (problem) this.fail(10, `${what} answered 200, yet ${problem}`);
    });
  }

  /** A size added mid-sale: on sale at once with its units, the SKU's total grown by them. */
  async #add(sku: string): Promise<boolean> {
    return this.#put(sku, async () => {
      const before = await this.#sizes(sku);
      if (before.some((s) => s.id === ADDED.id)) return true;
      const reply = await this.faults.putNow(sku, () => ({ variants: [ADDED] }));
      this.faults.count(`sizes: a size added mid-sale answered ${reply.status}`);
      if (reply.status !== 200) {
        this.fail(
          10,
          `adding size ${ADDED.id} to ${sku} mid-sale answered ${reply.status} ${reply.text.slice(0, 200)}`,
        );
        return false;
      }
      this.#record(sku, [...before, { id: ADDED.id, name: ADDED.name, stock: { ...zero, total: ADDED.totalStock } }]);
      const problem = await settled(async () => {
        const added = (await this.#sizes(sku)).find((s) => s.id === ADDED.id);
        return added?.stock.total === ADDED.totalStock && added.stock.sold === 0 ? null : `it shows ${show(added)}`;
      });
      if (problem) this.fail(10, `size ${ADDED.id} added to ${sku} with ${ADDED.totalStock} units: ${problem}`);
      return true;
    });
  }

  /**
   * A change of shards: refused (409) while anything is held or sold, and then nothing changed (the
   * shards, every size's total, a token minted before still good); applied when nothing is, and then
   * every shard has the new count and every size its total over them (10).
   */
  async #resize(plan: SkuPlan, target: number, when: string): Promise<void> {
    const sku = plan.sku;
    const user = `sizes-${this.seed}-resize-${when === "mid-sale" ? "m" : "p"}${target}`;
    const token = when === "mid-sale" ? await this.mint(user, sku, "sizes") : null;
    await this.#put(sku, async () => {
      const view = await skuView(this.client, sku);
      const old = view.shards;
      if (old === target) return;
      const before = await this.#sizes(sku);
      const busy = before.some((s) => s.stock.held + s.stock.sold > 0);
      const reply = await this.faults.putNow(sku, () => ({ shards: target }));
      this.faults.count(`sizes: resizes ${when} answered ${reply.status}`);
      const what = `resize of ${sku} ${old} → ${target} shards ${when}`;
      const totals = (sizes: readonly Size[]) => show(sizes.map((s) => [s.id, s.stock.total]));
      if (reply.status === 200) {
        plan.shards = target;
        const sold = before.reduce((n, s) => n + s.stock.sold, 0);
        if (sold > 0) this.fail(10, `${what} answered 200 with ${sold} pairs sold: it must be refused`);
        const problem = await settled(async () => {
          const after = await this.#sizes(sku);
          const states = await this.shardStates<SkuState>(sku, Math.max(old, target));
          const spread = await this.#shardTotals(sku, target);
          const wrongCount = states.slice(0, target).some((s) => s?.shards !== target);
          const wrongSpread = before.filter((s) => (spread.get(s.id) ?? 0) !== s.stock.total).map((s) => s.id);
          return totals(after) !== totals(before)
            ? `sizes ${totals(before)} became ${totals(after)}`
            : wrongCount
              ? `shards count ${show(states.map((s) => s?.shards ?? null))}`
              : wrongSpread.length > 0
                ? `sizes ${wrongSpread.join(", ")} over its ${target} shards do not sum to their totals`
                : null;
        });
        if (problem) this.fail(10, `${what} answered 200 but ${problem}`);
        return;
      }
      if (reply.status === 409 && !busy) {
        this.faults.count(`sizes: resizes ${when} refused with nothing held or sold`);
        return;
      }
      if (reply.status !== 409) {
        this.fail(10, `${what} answered ${reply.status} ${reply.text.slice(0, 200)}`);
        return;
      }
      const problem = await settled(async () => {
        const after = await this.#sizes(sku);
        const now = await skuView(this.client, sku);
        const states = await this.shardStates<SkuState>(sku, old);
        const problems: string[] = [];
        if (now.shards !== old) problems.push(`the admin view says ${now.shards} shards`);
        if (states.some((s) => s?.shards !== old)) problems.push(`shards count ${show(states.map((s) => s?.shards))}`);
        if (totals(after) !== totals(before)) problems.push(`sizes ${totals(before)} became ${totals(after)}`);
        return problems.length > 0 ? problems.join("; ") : null;
      });
      this.faults.count("sizes: refused resizes compared before/after (shards, every size)");
      if (problem) this.fail(10, `${what} answered 409 but ${problem}`);
    });
    if (!token) return;
    // A token minted before a refused resize still works (whatever its answer, not TOKEN_INVALID).
    const listed = plan.variants?.slice(0, 3).map((v) => v.id) ?? [];
    const tried = await this.#reserve(user, sku, token, listed, "sizes old-token reserve");
    if (errorCode(tried?.json) === "TOKEN_INVALID")
      this.fail(10, `a token minted before a resize of ${sku} (refused) now answers TOKEN_INVALID`);
    const acked = tried && this.#acked(tried);
    if (acked) await this.#cancel(acked);
  }

  /** The scene's line for the summary. */
  summary(): string {
    const t = this.told;
    return `${t.acked} pairs held by preference lists (${t.paid} paid, ${t.cancelled} cancelled), ${t.soldOut} SOLD_OUT, ${t.joined} joined the line with sizes (${t.served} served a size listed), ${t.secondPairsRefused} second pairs refused`;
  }
}

const zero: Stock = { total: 0, available: 0, held: 0, sold: 0 };
