import { drizzle } from "drizzle-orm/d1";
import { log } from "../../durable-objects/shared/log";
import {
  type AccessTier,
  type DrawInfo,
  type SkuChange,
  type SkuState,
  sameAdmission,
  sumShards,
} from "../../durable-objects/stock/stock-model";
import { reconcileWatermarks, skus } from "../db/schema";
import { ApiError, busy } from "../http/errors";
import type { SkuSettingsRequest } from "../http/schemas";
import { adminShard, callStock, unwrap } from "../stock/stock-client";
import { rememberSku } from "./sku-catalog";
import { readShardStates, readWaitlist } from "./sku-state";

/** How many times a PUT is checked against a SKU that other PUTs change meanwhile before it answers 503. */
const CHECKS = 3;

/**
 * Creates or updates a SKU, then records it in the D1 catalog. Shard 0 applies the whole change,
 * all or nothing, on every shard (durable-objects/stock/sku-change.ts): a PUT that answers an error has
 * changed nothing.
 *
 * - A new SKU's stock is split evenly over its shards, and shard 0 records the SKU's total.
 * - `shards` can change only while nothing is held or sold and nobody waits (users are routed by
 *   `hash(user) % shards`: moving them while they hold stock would split their per-user count).
 * - `totalStock` is absolute. On one shard it is that shard's total. On a sharded SKU, shard 0
 *   applies it as the difference from the total it recorded for the last PUT: a rise lands on
 *   shard 0 (transfers spread it on demand), a cut takes available units, pulling them from
 *   siblings first when shard 0 lacks them; if the SKU has not enough, `409 INVALID_STATE`. Because
 *   the base is the recorded total, not a sum read from live shards, concurrent PUTs and transfers
 *   in flight cannot skew it: the SKU's total is the `totalStock` of the last PUT that answered 200.
 * Fields left out keep their value, `totalStock` included (a SKU is created with one: else 400).
 * An archived SKU takes no change (409). `test` is set when the SKU is created, in the change that
 * creates it (so no hold precedes it); another value later is 409 naming it.
 */
export async function configureSku(
  env: Env,
  sku: string,
  body: SkuSettingsRequest,
  now: number,
  requestId?: string,
): Promise<SkuState> {
  const time = (value: string | null | undefined) => (value == null ? value : Date.parse(value));
  // Checked against the SKU as read, applied only while what it leaves out is still so (another PUT
  // in between makes shard 0 answer \`stale\`): then read and checked again, CHECKS times at most.
  let current: SkuState[] | null = null;
  let sized: ReturnType<typeof checkVariants> = null;
  for (let check = 1; ; check++) {
    current = await readShardStates(env, sku, { anyId: true });
    if (!current && body.totalStock === undefined && body.variants === undefined) {
      throw new ApiError(
        "INVALID_REQUEST",
        `SKU ${sku} does not exist yet: creating it needs totalStock.`,
        {},
        {
          fields: [{ path: "totalStock", message: "required to create a SKU" }],
        },
      );
    }
    const stored = current?.[0] ?? null;
    if (stored?.status === "archived") throw archived(sku);
    sized = checkVariants(body, current ? sumShards(current) : null);
    if (stored && body.test !== undefined && body.test !== (stored.test === true))
      throw testIsFixed(sku, stored.test === true);
    const startsAt = time(body.startsAt);
    const endsAt = time(body.endsAt);
    checkOpeningWindow(body, stored, startsAt, now);
    const access = body.access?.map((t) => ({ ...t, startsAt: Date.parse(t.startsAt) }));
    // The SKU as this PUT leaves it: what the body names, else what is stored (API.md "Clarified").
    const after = {
      startsAt: startsAt === undefined ? (stored?.startsAt ?? null) : startsAt,
      endsAt: endsAt === undefined ? (stored?.endsAt ?? null) : endsAt,
      tiers: access ?? stored?.access ?? [],
      windowMs: body.openingWindowMs ?? stored?.openingWindowMs ?? 0,
    };
    checkSaleWindow(body, after);
    checkAccess(body, after);
    checkOpeningsApart(after.tiers, after.startsAt, after.windowMs, now);
    if (stored && (stored.openingWindowMs ?? 0) > 0 && movesOpenings(body)) {
      const refusal = openedDrawRefusal(sku, stored, after, await readDrawInfo(env, sku), now, false);
      if (refusal) throw refusal;
    }
    const change: SkuChange = {
      sku,
      // Left out, shard 0 keeps the count in force when the change's turn comes (a resize may commit first).
      shards: body.shards,
      // Sizes: a SKU with variants has no stock of its own; a new one's total is their sum.
      totalStock: sized ? (current ? undefined : sized.total) : body.totalStock,
      variants: body.variants,
      // Only for a SKU whose shard 0 never recorded its total (configured before it did so).
      assumedTotal: current ? sumShards(current).stock.total : 0,
      name: body.name,
      perUserLimit: body.perUserLimit,
      holdSeconds: body.holdSeconds,
      startsAt,
      endsAt,
      status: body.status,
      openingWindowMs: body.openingWindowMs,
      price: body.price,
      currency: body.currency,
      access,
      // A test sale is one from its creation (API.md v1.4 "Test sales"): marked in the change that makes it.
      ...(stored === null && body.test === true ? { test: true } : {}),
      // A create is checked against no SKU: one another PUT made meanwhile sends it back to be checked
      // (then as an update: its test flag the same as the SKU's, or 409 naming test).
      checked: {
        exists: stored !== null,
        test: stored?.test === true,
        startsAt: stored?.startsAt ?? null,
        endsAt: stored?.endsAt ?? null,
        openingWindowMs: stored?.openingWindowMs ?? 0,
        access: stored?.access ?? [],
        // Sizes: the count and sum checked above hold only while no other PUT gave the SKU sizes.
        variants: (stored?.variants ?? []).map((v) => v.id),
      },
    };
    const outcome = await callStock(() => adminShard(env, sku, 0).putSku(change, requestId));
    if (!outcome.ok && outcome.stale && check < CHECKS) continue;
    if (!outcome.ok && outcome.code === "INVALID_STATE") {
      const asked = { shards: body.shards, after, variant: outcome.variant, missing: outcome.missing };
      throw await explainRefusal(env, sku, body, asked, Math.max(now, Date.now()));
    }
    unwrap(outcome);
    break;
  }

  const states = await readShardStates(env, sku, { anyId: true });
  if (!states) throw new Error(`SKU ${sku} vanished while being configured`);
  const state = sumShards(states);
  const { shards } = state;
  // totalStock left out: the catalog keeps its copy of the total, as the stock objects kept theirs.
  const total = sized || body.totalStock !== undefined ? { totalStock: state.stock.total } : {};
  const d1 = drizzle(env.DB);
  const catalog = d1
    .insert(skus)
    .values({ sku, name: state.name, shards, totalStock: state.stock.total, ...total, createdAt: now, updatedAt: now })
    .onConflictDoUpdate({ target: skus.sku, set: { name: state.name, shards, ...total, updatedAt: now } });
  // Shards a cut leaves out keep their finished reservations, whose orders D1 counts: a watermark
  // row for each keeps them in reconciliation's reach (it visits every shard it has a mark for).
  const before = current?.[0]?.shards ?? 0;
  const left = Array.from({ length: Math.max(0, before - shards) }, (_, i) => shards + i);
  if (left.length === 0) await catalog;
  else {
    const marks = left.map((shard) => ({ sku, shard, seq: 0, updatedAt: now }));
    await d1.batch([catalog, d1.insert(reconcileWatermarks).values(marks).onConflictDoNothing()]);
  }
  rememberSku(sku, shards);
  return state;
}

/**
 * Archives a SKU (`DELETE /admin/skus/:sku`): its sale status becomes `archived` on every shard,
 * through the same all-or-nothing change as a PUT, so every shard refuses new holds in its own
 * transaction; holds it has keep their course. Archiving again changes nothing. Null: no such SKU
 * (an unknown id reaches no stock object).
 */
export async function archiveSku(env: Env, sku: string, requestId?: string): Promise<SkuState | null> {
  const current = await readShardStates(env, sku);
  if (!current?.[0]) return null;
  if (current[0].status === "archived") return sumShards(current);
  const change: SkuChange = { sku, assumedTotal: sumShards(current).stock.total, status: "archived" };
  unwrap(await callStock(() => adminShard(env, sku, 0).putSku(change, requestId)));
  const states = await readShardStates(env, sku);
  if (!states) throw new Error(`SKU ${sku} vanished while being archived`);
  return sumShards(states);
}

/**
 * Sizes (API.md v1.4): the variants a PUT leaves (those it names over those stored), checked as a
 * whole: at most 100, and a `totalStock` sent beside them must be their sum; a SKU with variants
 * takes no `totalStock` of its own. Null: the SKU has no variants after this PUT.
 */
function checkVariants(body: SkuSettingsRequest, stored: SkuState | null): { total: number } | null {
  const after = new Map((stored?.variants ?? []).map((v) => [v.id, v.stock.total]));
  for (const v of body.variants ?? []) after.set(v.id, v.totalStock);
  if (after.size === 0) return null;
  const refuse = (path: string, message: string, detail: string) =>
    new ApiError("INVALID_REQUEST", `${message} Nothing was changed.`, {}, { fields: [{ path, message: detail }] });
  if (after.size > 100) {
    throw refuse(
      "variants",
      `This PUT would leave ${after.size} variants: a SKU has at most 100.`,
      "at most 100 variants in all",
    );
  }
  const total = [...after.values()].reduce((n, t) => n + t, 0);
  if (body.totalStock !== undefined && body.totalStock !== total) {
    throw refuse(
      "totalStock",
      `totalStock ${body.totalStock} is not the sum of the variants' totalStock (${total}): a SKU with variants has no stock of its own; leave totalStock out, or send ${total}.`,
      `the sum of the variants' totalStock (${total}), or left out`,
    );
  }
  return { total };
}

/** `409 INVALID_STATE` of another `test` than the SKU was created with (set only at creation). */
function testIsFixed(sku: string, was: boolean): ApiError {
  return new ApiError(
    "INVALID_STATE",
    `SKU ${sku} is ${was ? "a test sale" : "a real sale"}: test is set only when a SKU is created (configure a new SKU id for a ${was ? "real" : "test"} sale).`,
    {},
    { fields: [{ path: "test", message: `set only when the SKU is created; this SKU has test: ${was}` }] },
  );
}

/** `409 INVALID_STATE` of a change to an archived SKU. */
function archived(sku: string): ApiError {
  return new ApiError(
    "INVALID_STATE",
    `SKU ${sku} is archived: it takes no change, and its id is not reused (configure a new SKU id instead).`,
    {},
    { state: "archived" },
  );
}

/**
 * A change the stock objects refused with INVALID_STATE, said with what they hold now (read again:
 * a refusal is rare, and the figures are those an operator acts on): archived, a total below what is
 * held or sold, or sizes or a new shard count while units are held or sold, buyers wait or a draw is
 * pending; else {@link unnamedRefusal} (units moving: 503; a drifted record: 500; else 409).
 */
async function explainRefusal(
  env: Env,
  sku: string,
  body: SkuSettingsRequest,
  asked: { shards: number | undefined; after: SkuAfter; variant?: string | undefined; missing?: number | undefined },
  now: number,
): Promise<ApiError> {
  const { after } = asked;
  const states = await readShardStates(env, sku, { anyId: true });
  const state = states ? sumShards(states) : null;
  if (!state) return new ApiError("INVALID_STATE", `SKU ${sku} refused this PUT and is gone now; nothing was changed.`);
  const shards = asked.shards ?? state.shards;
  if (state.status === "archived") return archived(sku);
  const heldOrSold = state.stock.held + state.stock.sold;
  const below = sizeBelowTaken(state, body, asked.variant);
  if (below) return below;
  if (body.variants && !state.variants) {
    const waiting = await readWaitlist(env, sku, state.shards);
    if (heldOrSold > 0 || waiting > 0) {
      return new ApiError(
        "INVALID_STATE",
        `SKU ${sku} has ${plural(heldOrSold, "unit")} held or sold and ${plural(waiting, "buyer")} waiting in its line, none of them of a variant: variants can be given to it only while nothing is held or sold and nobody waits (or configure a new SKU with them).`,
        {},
        {
          heldOrSold,
          waiting,
          fields: [{ path: "variants", message: "given only while nothing is held or sold and nobody waits" }],
        },
      );
    }
    // What else keeps sizes off it: the entries of an opening draw not decided yet (none lists a size),
    // its window opened by the stock object's clock, which refused.
    const draw = await readDrawInfo(env, sku);
    if (draw?.openings.some((o) => o.decidedAt === null)) {
      return new ApiError(
        "INVALID_STATE",
        `SKU ${sku}'s opening draw is not decided yet, and its entries list no variant: variants can be given to it only while nothing is held or sold, nobody waits and no opening draw is pending (before the window opens, or once its draw is decided).`,
        {},
        {
          state: "draw_pending",
          heldOrSold,
          waiting,
          fields: [{ path: "variants", message: "given only while no opening draw is pending" }],
        },
      );
    }
  }
  const totalStock = body.totalStock;
  if (totalStock !== undefined && totalStock < heldOrSold) {
    return new ApiError(
      "INVALID_STATE",
      `totalStock ${totalStock} is below the ${plural(heldOrSold, "unit")} held or sold: set at least ${heldOrSold}.`,
      {},
      { totalStock, heldOrSold },
    );
  }
  if (shards !== state.shards) {
    const waiting = await readWaitlist(env, sku, state.shards);
    if (heldOrSold === 0 && waiting === 0) {
      // What else keeps a shard from moving: the entries of an opening draw that is not decided yet.
      return new ApiError(
        "INVALID_STATE",
        `SKU ${sku}'s opening draw is not decided yet: shards can change from ${state.shards} to ${shards} only while nothing is held or sold, nobody waits and no opening draw is pending (before the window opens).`,
        {},
        { state: "draw_pending", shards: state.shards, heldOrSold, waiting },
      );
    }
    return new ApiError(
      "INVALID_STATE",
      `SKU ${sku} has ${plural(heldOrSold, "unit")} held or sold and ${plural(waiting, "buyer")} waiting: shards can change from ${state.shards} to ${shards} only while nothing is held or sold, nobody waits and no opening draw is pending (before the sale).`,
      {},
      { shards: state.shards, heldOrSold, waiting },
    );
  }
  // An opening this PUT moves or resizes whose window opened by the stock object's clock (which
  // refused it) though not by the edge's when it checked: named from the draws as they are now.
  if (movesOpenings(body)) {
    const refusal = openedDrawRefusal(sku, state, after, await readDrawInfo(env, sku), now, true);
    if (refusal) return refusal;
  }
  return unnamedRefusal(env, sku, body, states ?? [], asked);
}

/**
 * A refusal none of the reasons above names, the SKU as read again holding what the PUT asks for.
 * `503 BUSY` only for what passes: a cut short of units moving between shards (a transfer or a late
 * payment's claim not finished on some shard), or one whose shortfall the shards cover now (units
 * landed or holds ended meanwhile: the same PUT is decided again on figures that agree). A cut short
 * while shard 0's recorded total (the base of a cut) is not what its shards hold, nothing moving, is
 * refused the same way on every retry: `500 INTERNAL` naming the drift. That is concluded only from
 * figures no shard changed while they were read (each shard's seq the same before and after: a
 * transfer's give and landing, a hold and a PUT each move one); else the SKU is moving, and `503`.
 * Any other refusal: `409 INVALID_STATE` naming what was refused (a PUT that answers an error changed
 * nothing).
 */
async function unnamedRefusal(
  env: Env,
  sku: string,
  body: SkuSettingsRequest,
  states: SkuState[],
  asked: { variant?: string | undefined; missing?: number | undefined },
): Promise<ApiError> {
  const state = sumShards(states);
  const heldOrSold = state.stock.held + state.stock.sold;
  if (asked.missing !== undefined) {
    // Each shard's open work and shard 0's recorded totals: reconciliation's audit, with no page of
    // changes. Read after `states`, a shard's seq the same in both says its figures did not move.
    const audits = await Promise.all(states.map((_, i) => callStock(() => adminShard(env, sku, i).audit(0, 0))));
    const moving = audits.reduce((n, a) => n + (a?.pendingTransfers ?? 0), 0);
    if (moving > 0) {
      return busy(
        `SKU ${sku}'s cut was short of units moving between its shards (${plural(moving, "transfer or claim")} not landed yet; ${plural(heldOrSold, "unit")} held or sold now); nothing was changed`,
      );
    }
    if (!audits.every((a, i) => a !== null && a.state.seq === states[i]?.seq)) {
      return busy(
        `SKU ${sku} changed while this PUT was decided (its stock moved since; ${plural(heldOrSold, "unit")} held or sold); nothing was changed`,
      );
    }
    const variant = state.variants?.find((v) => v.id === asked.variant);
    const recorded = variant ? audits[0]?.variantTotals[variant.id] : audits[0]?.skuTotal;
    const holds = variant ? variant.stock.total : state.stock.total;
    if (recorded === undefined || recorded === null || recorded === holds) {
      return busy(
        `SKU ${sku} changed while this PUT was decided (the units its cut lacked are on its shards now; ${plural(heldOrSold, "unit")} held or sold); nothing was changed`,
      );
    }
    const what = variant ? `variant ${variant.id}` : `SKU ${sku}`;
    const totalStock = variant ? body.variants?.find((v) => v.id === variant.id)?.totalStock : body.totalStock;
    const taken = variant ? variant.stock.held + variant.stock.sold : heldOrSold;
    log("error", "a cut was refused: shard 0's recorded total is not what its shards hold", {
      sku,
      variant: variant?.id,
      recorded,
      shardsHold: holds,
    });
    return new ApiError(
      "INTERNAL",
      `Stock drift on ${what}: shard 0 recorded ${recorded} units; its shards hold ${holds}, none of them moving between shards. A cut is made as the difference from the recorded total, so this one (totalStock ${totalStock}, not below the ${plural(taken, "unit")} held or sold) was refused short of ${plural(asked.missing, "unit")}, and will be refused again until the shards' totals are repaired (POST /admin/reconcile reports it as ${variant ? "variant_totals" : "shard_totals"}). Nothing was changed.`,
      {},
      {
        ...(totalStock === undefined ? {} : { totalStock }),
        heldOrSold: taken,
        ...(variant ? { variant: variant.id } : {}),
      },
    );
  }
  const refusable = ["totalStock", "variants", "shards", "status", "startsAt", "openingWindowMs", "access"] as const;
  const named = refusable.filter((field) => body[field] !== undefined);
  log("warn", "a SKU change was refused for no reason found", { sku, fields: named });
  return new ApiError(
    "INVALID_STATE",
    `The stock objects refused this PUT's ${named.length > 0 ? named.join(", ") : "change"}, and none of the reasons a PUT is refused for is found on SKU ${sku} now (${plural(heldOrSold, "unit")} held or sold). Nothing was changed. Read the SKU (GET /admin/skus/${sku}): if it changed since, send the PUT again; a refusal that repeats is a fault to report (logged as "a SKU change was refused for no reason found").`,
    {},
    { heldOrSold, fields: named.map((path) => ({ path, message: "refused by the stock objects" })) },
  );
}

/**
 * `409 INVALID_STATE` naming the size a refused cut takes below its held + sold, or null: a size the
 * cut does not take that low is said by {@link unnamedRefusal} (units moving between shards: a retry).
 */
function sizeBelowTaken(state: SkuState, body: SkuSettingsRequest, id: string | undefined): ApiError | null {
  const variant = state.variants?.find((v) => v.id === id);
  if (!variant) return null;
  const taken = variant.stock.held + variant.stock.sold;
  const totalStock = body.variants?.find((v) => v.id === variant.id)?.totalStock ?? variant.stock.total;
  if (totalStock >= taken) return null;
  return new ApiError(
    "INVALID_STATE",
    `Variant ${variant.id}: totalStock ${totalStock} is below its ${plural(taken, "unit")} held or sold: set at least ${taken}. Nothing was changed.`,
    {},
    { variant: variant.id, totalStock, heldOrSold: taken },
  );
}

/** Whether a PUT may move, add, remove or resize an opening (a tier's or the public start's window). */
const movesOpenings = (body: SkuSettingsRequest) =>
  body.access !== undefined || body.startsAt !== undefined || body.openingWindowMs !== undefined;

/** The SKU's draws (shard 0), one per opening, or null without an opening window. */
function readDrawInfo(env: Env, sku: string): Promise<DrawInfo | null> {
  return callStock(() => adminShard(env, sku, 0).drawInfo());
}

/**
 * Fair opening with early access: an opening whose window has opened keeps its time and its window
 * while the window is open and until its draw is decided (its entries are being drawn by them); a
 * decided draw stays as it was, so its tier may move or go then, but the window's length never
 * changes once one opened. This names what a PUT that would move or resize such an opening waits
 * for: `window_open` (the window is open now, or opened with the length the PUT changes) or
 * `draw_pending` (closed, not decided yet). The public start's own window is checkOpeningWindow's.
 * `refused`: the stock object already refused the change, judging by its own clock, so the earliest
 * opening the PUT moves and whose draw is undecided is the one it found opened.
 */
function openedDrawRefusal(
  sku: string,
  stored: SkuState,
  after: SkuAfter,
  info: DrawInfo | null,
  now: number,
  refused: boolean,
): ApiError | null {
  if (!info) return null;
  const openings = new Set(after.tiers.map((t) => t.startsAt));
  if (after.startsAt !== null) openings.add(after.startsAt);
  for (const opening of info.openings) {
    const windowMs = opening.closesAt - opening.opensAt;
    const moved = !openings.has(opening.opensAt);
    const resized = after.windowMs !== windowMs;
    // Its tier kept at the same time, under another name or claim: the draw's entries name the tier
    // that admitted them, which would be gone at the decision.
    const was = stored.access?.find((t) => t.startsAt === opening.opensAt);
    const kept = after.tiers.find((t) => t.startsAt === opening.opensAt);
    const renamed = was !== undefined && kept !== undefined && !sameAdmission(kept, was);
    if (!moved && !resized && !renamed) continue;
    // A decided draw is history: its tier may move or go (the draw stays as it was decided).
    if (!resized && opening.decidedAt !== null) continue;
    if (opening.opensAt > now && !refused) continue;
    const tier = stored.access?.find((t) => t.startsAt === opening.opensAt);
    const what = tier
      ? `Early access tier ${tier.name}`
      : opening.opensAt === stored.startsAt
        ? "The public start"
        : `The opening at ${iso(opening.opensAt)}`;
    const change = resized
      ? `openingWindowMs (${windowMs} ms)`
      : renamed
        ? "its name and claim"
        : tier
          ? `its startsAt`
          : "its time";
    if (now < opening.closesAt || (refused && opening.decidedAt === null && opening.opensAt > now)) {
      return new ApiError(
        "INVALID_STATE",
        `${what}'s opening window is open (${iso(opening.opensAt)} to ${iso(opening.closesAt)}): ${change} cannot change while its entries are drawn: wait until it closes at ${iso(opening.closesAt)} and its draw is decided (GET /api/skus/${sku}/draw shows decidedAt), then send this PUT again.`,
        {},
        { state: "window_open" },
      );
    }
    if (opening.decidedAt === null) {
      return new ApiError(
        "INVALID_STATE",
        `${what}'s opening window closed at ${iso(opening.closesAt)} and its draw is not decided yet: ${change} cannot change until it is: wait for its draw (decided moments after the close; GET /api/skus/${sku}/draw shows decidedAt), then send this PUT again.`,
        {},
        { state: "draw_pending" },
      );
    }
    return new ApiError(
      "INVALID_STATE",
      `${what}'s opening window opened at ${iso(opening.opensAt)} with openingWindowMs ${windowMs}: openingWindowMs can no longer change (it is set before the first window opens).`,
      {},
      { state: "window_open" },
    );
  }
  return null;
}

const plural = (n: number, word: string) => `${n} ${word}${n === 1 ? "" : "s"}`;

/** The SKU's window, tiers and opening window as a PUT leaves them (its fields, else the stored ones). */
interface SkuAfter {
  startsAt: number | null;
  endsAt: number | null;
  tiers: readonly AccessTier[];
  windowMs: number;
}

const iso = (ms: number) => new Date(ms).toISOString();

/**
 * A sale ends after it starts, checked on the SKU as the PUT leaves it: a partial PUT that moves
 * `endsAt` before the stored `startsAt` (or `startsAt` past the stored `endsAt`) is refused too.
 * The field named is the one the body sent (`endsAt` when it sent both).
 */
function checkSaleWindow(body: SkuSettingsRequest, after: SkuAfter): void {
  const { startsAt, endsAt } = after;
  if (startsAt === null || endsAt === null || endsAt > startsAt) return;
  const path = body.endsAt !== undefined || body.startsAt === undefined ? "endsAt" : "startsAt";
  const keptStart = body.startsAt === undefined ? " (kept)" : "";
  const keptEnd = body.endsAt === undefined ? " (kept)" : "";
  throw new ApiError(
    "INVALID_REQUEST",
    `The sale would end before it starts: endsAt ${iso(endsAt)}${keptEnd} is not after startsAt ${iso(startsAt)}${keptStart}. Fields a PUT leaves out keep their value: send ${path === "endsAt" ? "an endsAt after startsAt" : "a startsAt before endsAt"} (or both). Nothing was changed.`,
    {},
    {
      fields: [{ path, message: path === "endsAt" ? "after startsAt" : "before endsAt" }],
    },
  );
}

/**
 * Early access: every tier opens before the public `startsAt` (checked against the tiers and start
 * in force after this PUT, so moving the start before a kept tier is refused too). The field named
 * is the one the body sent: the tier, or `startsAt` when the PUT moved the start before kept tiers.
 */
function checkAccess(body: SkuSettingsRequest, after: SkuAfter): void {
  const { tiers, startsAt } = after;
  const late = tiers.findIndex((t) => startsAt === null || t.startsAt >= startsAt);
  if (late < 0) return;
  const tier = tiers[late];
  const path = body.access !== undefined ? `access.${late}.startsAt` : "startsAt";
  const kept = body.access === undefined ? " (kept)" : "";
  throw new ApiError(
    "INVALID_REQUEST",
    startsAt === null
      ? `Early access tiers need a public startsAt to open before: ${body.access !== undefined ? "send one with the tiers" : `this PUT clears startsAt while tier ${tier?.name} is kept (send "access": [] to remove the tiers)`}. Nothing was changed.`
      : `Early access tier ${tier?.name}${kept} opens at ${iso(tier?.startsAt ?? 0)}, at or after the public startsAt ${iso(startsAt)}: a tier opens before it. Nothing was changed.`,
    {},
    {
      fields: [
        {
          path,
          message:
            path === "startsAt"
              ? `after every early access tier (${tier?.name} opens at ${iso(tier?.startsAt ?? 0)})`
              : "before the public startsAt",
        },
      ],
    },
  );
}

/**
 * Fair opening with early access: each tier's start opens a window and a draw of its own, and the
 * draws are decided one after another, so two openings closer than one window are refused (a
 * window would open before the one before it closed).
 */
function checkOpeningsApart(
  tiers: readonly AccessTier[],
  startsAt: number | null,
  windowMs: number,
  now: number,
): void {
  if (windowMs === 0 || tiers.length === 0) return;
  const openings = [...tiers.map((t, i) => ({ at: t.startsAt, name: t.name, i }))];
  if (startsAt !== null) openings.push({ at: startsAt, name: "the public start", i: -1 });
  // Openings whose windows closed already are past drawing (or had none): only the others must be apart.
  openings.sort((a, b) => a.at - b.at).splice(0, openings.filter((o) => o.at + windowMs <= now).length);
  for (let k = 1; k < openings.length; k++) {
    const before = openings[k - 1];
    const next = openings[k];
    if (!before || !next || next.at - before.at >= windowMs) continue;
    const label = (o: { name: string; i: number }) => (o.i < 0 ? o.name : `tier ${o.name}`);
    throw new ApiError(
      "INVALID_REQUEST",
      `${label(next)} opens ${next.at - before.at} ms after ${label(before)}: with openingWindowMs ${windowMs}, openings must be at least one window apart (each has its own draw).`,
      {},
      {
        fields: [
          {
            path: next.i < 0 ? "startsAt" : `access.${next.i}.startsAt`,
            message: "at least openingWindowMs after the opening before it",
          },
        ],
      },
    );
  }
}

/**
 * Fair opening: a window opens at `startsAt`, in the future (its seed hash is published before it
 * opens), and does not move once open. The stock objects check the same in their transaction (two
 * PUTs racing); this gives the clear error first, before any shard changes.
 */
function checkOpeningWindow(
  body: SkuSettingsRequest,
  current: SkuState | null,
  startsAt: number | null | undefined,
  now: number,
): void {
  const windowBefore = current?.openingWindowMs ?? 0;
  const startsBefore = current?.startsAt ?? null;
  const windowMs = body.openingWindowMs ?? windowBefore;
  const starts = startsAt === undefined ? startsBefore : startsAt;
  const changed = windowMs !== windowBefore || starts !== startsBefore;
  if (windowBefore > 0 && startsBefore !== null && now >= startsBefore) {
    if (changed) {
      throw new ApiError(
        "INVALID_STATE",
        `The opening window opened at ${new Date(startsBefore).toISOString()}: openingWindowMs and startsAt can no longer change (they can only be set before it opens).`,
        {},
        { state: "window_open" },
      );
    }
    return;
  }
  if (windowMs === 0 || !changed) return;
  if (starts === null) throw new ApiError("INVALID_REQUEST", "openingWindowMs > 0 needs a startsAt.");
  if (now >= starts) {
    throw new ApiError(
      "INVALID_STATE",
      `startsAt ${new Date(starts).toISOString()} is not in the future: an opening window can only be set to open later (its seed hash is published first).`,
      {},
      { state: "window_past" },
    );
  }
}
