import type { ReserveOutcome, ReserveRequest } from "../../durable-objects/engine/types";
import { isOnSale } from "../../durable-objects/engine/types";
import { homeShard, shardName } from "../../durable-objects/shared/shard-name";
import type { CodeAnswer } from "../../durable-objects/stock/code-asks";
import { SIBLINGS_EMPTY_MS } from "../../durable-objects/stock/shard-pulls";
import type { SkuStock } from "../../durable-objects/stock/sku-stock";
import type { NodeStorage } from "../sqlite-storage";
import type { SimObject, World } from "./world";

/**
 * Two checks of the simulator (docs/SIMULATOR.md, invariants 11 and 12) that need the objects' inner
 * moments, not the state after a step: the world tells this of every instance built, every
 * transaction ended and every answer given ({@link World.onBuild}, `onCommit`, `onAnswer`), and the
 * engine's grants to the line are observed where they are decided.
 *
 * 11, the line is first-come-first-served (API.md: "waitlisted users receive holds in FIFO order
 * (first fit)"): an entry held while an entry that joined before it still waits, wants no more units
 * than it got (with sizes: lists the size it got) and is within its buyer's limit, is a violation.
 * On one shard a pass is one transaction (engine/waitlist.ts `fill`), judged in it; on many, shard 0
 * walks the line asking each entry's home shard in turn (stock/waitlist-server.ts), so an entry ahead
 * is excused when its home shard refused it in the same pass (units freed after its turn are the
 * next pass's).
 *
 * 12, a SOLD_OUT is true: when a shard answers a shopper's reservation (or shard 0 a code's token)
 * `SOLD_OUT`, every shard of the SKU had no unit of what they asked (any unit; with sizes, of each
 * size listed) at some moment since the shopper asked. Excused: a shard whose units the line holds
 * (a sharded SKU's mode 1; one shard's line while its sale is not on: the units are the line's), a draw's
 * answer (verify-sale checks those against the draw's floor), and on a sharded SKU the siblings'
 * last `SIBLINGS_EMPTY_MS` before the ask (stock/shard-pulls.ts: siblings found empty are not asked
 * again so soon).
 */
export class AnswerChecks {
  readonly #world: World;
  readonly #sku: string;
  readonly #start: number;
  /** How long before an ask a sibling's emptiness still answers it (the memo, and its asks' round trips). */
  readonly #memoMs: number;
  #violation: string | null = null;
  /** Each shard's available units (and each size's) after each transaction that changed them: the last few seconds. */
  readonly #counts = new Map<number, Counts[]>();
  /** When shard 0 began a walk of the line (its `entries` read), and when it was rebuilt. */
  readonly #passes: number[] = [];
  readonly #shard0Built: number[] = [];
  /** When each entry's home shard refused it. */
  readonly #refused = new Map<string, number[]>();
  /** One shard's passes that served someone, judged once their transaction commits. */
  readonly #fills = new Map<string, Fill[]>();

  constructor(world: World, sku: string, start: number, maxDelayMs: number, maxShards: number) {
    this.#world = world;
    this.#sku = sku;
    this.#start = start;
    this.#memoMs = SIBLINGS_EMPTY_MS + 2 * maxDelayMs * (maxShards - 1);
    world.onBuild = (object) => this.#built(object as unknown as SimObject<SkuStock>);
    world.onCommit = (name, committed) => this.#committed(name, committed);
    world.onAnswer = (name, method, args, value, sentAt) => this.#answered(name, method, args, value, sentAt);
  }

  /** The first violation seen, if any. */
  get violation(): string | null {
    return this.#violation;
  }

  #fail(message: string): void {
    this.#violation ??= message;
  }

  #t(at: number): string {
    return `t=${((at - this.#start) / 1000).toFixed(3)}`;
  }

  /** A stock shard's index, or null for another object (the log). */
  #shardOf(name: string): number | null {
    if (!name.startsWith(`${this.#sku}#`)) return null;
    return Number(name.slice(this.#sku.length + 1));
  }

  #storage(shard: number): NodeStorage | undefined {
    return this.#world.shard(shardName(this.#sku, shard))?.storage;
  }

  /** Watches a new instance's grants to the line, its passes (shard 0) and its one-shard fills. */
  #built(object: SimObject<SkuStock>): void {
    const shard = this.#shardOf(object.name);
    if (shard === null) return;
    const { engine } = object.instance;
    const { holds, waitlist } = engine;
    const forWaitlist = holds.forWaitlist.bind(holds);
    holds.forWaitlist = (entryId, userId, quantity, now, variants, pulled) => {
      const answer = forWaitlist(entryId, userId, quantity, now, variants, pulled);
      if (!answer.ok) this.#refused.set(entryId, [...(this.#refused.get(entryId) ?? []).slice(-3), now]);
      else if (!answer.value.replayed) this.#servedAcross(shard, entryId, quantity, answer.value.reservation.variant);
      return answer;
    };
    if (shard === 0) {
      this.#shard0Built.push(this.#world.now);
      const entries = waitlist.entries.bind(waitlist);
      waitlist.entries = (now) => {
        this.#passes.push(now);
        if (this.#passes.length > 64) this.#passes.splice(0, 32);
        return entries(now);
      };
    }
    const fill = waitlist.fill.bind(waitlist);
    waitlist.fill = (now) => {
      // A sharded SKU's shard serves no line here (shard 0 walks it, watched above).
      if (this.#counts.get(shard)?.at(-1)?.shards !== 1 || waitlist.length() === 0) return fill(now);
      const before = lineOf(object.storage);
      fill(now);
      const after = lineOf(object.storage);
      if (after.length === before.length) return;
      const state = engine.configuration.state();
      if (!state || state.shards > 1 || (state.endsAt !== null && now >= state.endsAt)) return; // lapsed
      const served = before.filter((e) => !after.some((a) => a.id === e.id));
      const quotas = new Map(after.map((a) => [a.user_id, holds.quotaOf(a.user_id)]));
      const fills = this.#fills.get(object.name) ?? [];
      fills.push({ at: now, served, after, quotas, limit: state.perUserLimit });
      this.#fills.set(object.name, fills);
    };
  }

  #committed(name: string, committed: boolean): void {
    const shard = this.#shardOf(name);
    if (shard === null) return;
    const fills = this.#fills.get(name);
    this.#fills.delete(name);
    const storage = this.#storage(shard);
    if (!storage) return;
    if (committed) for (const fill of fills ?? []) this.#servedOnOne(storage, fill);
    this.#count(shard, storage);
  }

  /** 11 on one shard: each entry a pass served, against the entries ahead of it that it left waiting. */
  #servedOnOne(storage: NodeStorage, fill: Fill): void {
    for (const e of fill.served) {
      // The hold the pass made for it (none: it left the line otherwise).
      const hold = storage.sql
        .exec<{ variant: string | null }>(
          "SELECT variant FROM reservations WHERE user_id = ? AND quantity = ? AND created_at = ? AND nonce IS NULL",
          e.user_id,
          e.quantity,
          fill.at,
        )
        .toArray()[0];
      if (!hold) continue;
      for (const f of fill.after) {
        if (f.position > e.position || f.quantity > e.quantity || !listsSize(f, hold.variant)) continue;
        if ((fill.quotas.get(f.user_id) ?? 0) + f.quantity > fill.limit) continue;
        this.#fail(
          `${e.user_id} was served from the line (x${e.quantity}${hold.variant ? ` of ${hold.variant}` : ""}) at ${this.#t(fill.at)} while ${f.user_id}, ahead of them, waits for x${f.quantity}${f.variants ? ` of ${f.variants}` : ""} within the limit ${fill.limit} (invariant 11)`,
        );
      }
    }
  }

  /**
   * 11 on many shards: entry `entryId` held on its home shard `shard` now. Every entry ahead of it that
   * still waits and would have taken those units had to be refused by its home shard in this pass.
   */
  #servedAcross(shard: number, entryId: string, quantity: number, variant: string | null | undefined): void {
    const lead = this.#storage(0);
    if (!lead) return;
    const line = lineOf(lead);
    const e = line.find((w) => w.id === entryId);
    if (!e) return;
    const now = this.#world.now;
    const shards = lead.sql.exec<{ shards: number }>("SELECT shards FROM sku").toArray()[0]?.shards ?? 1;
    // The pass that asked began at its walk's start; a pass of an instance since reset may still be
    // asking, so with a reset of shard 0 lately, the pass before the reset.
    const reset = this.#shard0Built.findLast((at) => at <= now && at >= now - RESET_MS);
    const since = this.#passes.findLast((at) => at <= (reset ?? now)) ?? 0;
    for (const f of line) {
      if (f.position >= e.position || f.quantity > quantity || !listsSize(f, variant ?? null)) continue;
      if ((this.#refused.get(f.id) ?? []).some((at) => at >= since)) continue;
      const home = this.#storage(homeShard(f.user_id, shards));
      if (!home) continue;
      const quota =
        home.sql.exec<{ active: number }>("SELECT active FROM user_quota WHERE user_id = ?", f.user_id).toArray()[0]
          ?.active ?? 0;
      const limit = home.sql.exec<{ limit: number }>("SELECT per_user_limit AS 'limit' FROM sku").toArray()[0]?.limit;
      if (limit === undefined || quota + f.quantity > limit) continue;
      this.#fail(
        `${e.user_id} was served from the line (x${quantity}${variant ? ` of ${variant}` : ""}) on shard ${shard} at ${this.#t(now)} while ${f.user_id}, ahead of them, waits for x${f.quantity}${f.variants ? ` of ${f.variants}` : ""} within the limit ${limit}, not refused in that pass (invariant 11)`,
      );
    }
  }

  /** A shard's available units after a transaction, kept when they changed (the last few seconds and the one before). */
  #count(shard: number, storage: NodeStorage): void {
    const list = this.#counts.get(shard) ?? [];
    const last = list.at(-1);
    if (last?.changes === storage.changes) return; // nothing written since
    let row: { shards: number; available: number; sizes: string | null } | undefined;
    try {
      row = storage.sql
        .exec<{ shards: number; available: number; sizes: string | null }>(
          `SELECT shards, total - held - sold AS available,
                  (SELECT group_concat(id || ' ' || (total - held - sold)) FROM variant_stock) AS sizes
             FROM sku`,
        )
        .toArray()[0];
    } catch {
      return; // not configured yet: no tables
    }
    if (!row) return;
    const now = this.#world.now;
    if (last && last.shards === row.shards && last.available === row.available && last.sizesText === row.sizes) {
      last.changes = storage.changes;
      return;
    }
    const sizes = row.sizes === null ? null : new Map(row.sizes.split(",").map((v) => sizeOf(v)));
    list.push({
      at: now,
      changes: storage.changes,
      shards: row.shards,
      available: row.available,
      sizesText: row.sizes,
      sizes,
    });
    // Kept: what a window of an ask can reach back to (the longest ask lasts well under this).
    const keepFrom = list.findLastIndex((c) => c.at <= now - KEEP_MS);
    if (keepFrom > 0) list.splice(0, keepFrom);
    this.#counts.set(shard, list);
  }

  #answered(name: string, method: string, args: unknown[], value: unknown, sentAt: number): void {
    const shard = this.#shardOf(name);
    if (shard === null) return;
    if (method === "reserve") {
      const requests = args[0] as ReserveRequest[];
      (value as ReserveOutcome[]).forEach((answer, i) => {
        const request = requests[i];
        // A draw's answer is the draw's (verify-sale checks it against what the draw had).
        if (!request || answer.ok || answer.code !== "SOLD_OUT" || answer.draw !== undefined) return;
        this.#soldOut(
          shard,
          `${request.userId} (x${request.quantity}${request.variants ? ` of ${request.variants}` : ""})`,
          request.variants,
          sentAt,
          true,
        );
      });
    } else if (method === "tokenState") {
      const answer = value as CodeAnswer;
      if (answer.soldOut && answer.codeTier !== null)
        this.#soldOut(shard, `${args[0]}'s code token`, undefined, sentAt, false);
    }
  }

  /** 12: shard `shard` answered SOLD_OUT now to a request sent at `sentAt`. */
  #soldOut(shard: number, who: string, variants: readonly string[] | undefined, sentAt: number, memo: boolean): void {
    const object = this.#world.shard(shardName(this.#sku, shard));
    const state = object?.instance.engine.configuration.state();
    if (!object || !state) return;
    const { waitlist } = object.instance.engine;
    const now = this.#world.now;
    // The units are the line's: shard 0 says so (sharded), or a paused sale's line claims them (one shard).
    if (state.shards > 1 && waitlist.mode === 1) return;
    if (state.shards === 1 && waitlist.length() > 0 && !isOnSale(state, now)) return;
    const from = sentAt - (memo && state.shards > 1 ? this.#memoMs : 0);
    for (let s = 0; s < state.shards; s++) {
      const seen = this.#window(s, from, now);
      if (seen.length === 0) continue;
      for (const id of variants ?? [null]) {
        const units = seen.map((c) => (id === null ? c.available : (c.sizes?.get(id) ?? 0)));
        if (units.every((n) => n > 0))
          this.#fail(
            `${who} was answered SOLD_OUT by shard ${shard} at ${this.#t(now)} while shard ${s} had ${Math.min(...units)}${id ? ` of ${id}` : ""} available throughout since ${this.#t(from)} (invariant 12)`,
          );
      }
    }
  }

  /** A shard's counts in force at some moment of [from, to]. */
  #window(shard: number, from: number, to: number): Counts[] {
    const list = this.#counts.get(shard) ?? [];
    const first = list.findLastIndex((c) => c.at <= from);
    return list.slice(Math.max(0, first)).filter((c) => c.at <= to);
  }
}

/** Seconds of counts kept: an ask's window reaches back the memo and its round trips, well within it. */
const KEEP_MS = 5_000;
/** How long a pass of shard 0's instance before a reset may still be holding (its asks in flight). */
const RESET_MS = 2_000;

type Entry = { id: string; user_id: string; quantity: number; position: number; variants: string | null };
type Counts = {
  at: number;
  /** The storage's count of writes when read (a transaction that wrote nothing is not read again). */
  changes: number;
  /** The SKU's shard count as this shard has it. */
  shards: number;
  available: number;
  sizesText: string | null;
  sizes: Map<string, number> | null;
};
type Fill = { at: number; served: Entry[]; after: Entry[]; quotas: Map<string, number>; limit: number };

function lineOf(storage: NodeStorage): Entry[] {
  return storage.sql
    .exec<Entry>("SELECT id, user_id, quantity, position, variants FROM waitlist ORDER BY position")
    .toArray();
}

/** Whether an entry would take units of `variant` (none: a SKU without sizes). */
function listsSize(entry: Entry, variant: string | null): boolean {
  if (variant === null) return true;
  return entry.variants !== null && (JSON.parse(entry.variants) as string[]).includes(variant);
}

/** A size's id and units as the counts' query lists them (ids are of [A-Za-z0-9._-]). */
function sizeOf(text: string): [string, number] {
  const [id = "", units = "0"] = text.split(" ");
  return [id, Number(units)];
}
