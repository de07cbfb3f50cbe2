import { desc } from "drizzle-orm";
import { drizzle } from "drizzle-orm/d1";
import { Hono } from "hono";
import type { z } from "zod";
import { archiveSku, configureSku } from "../catalog/configure-sku";
import { skuExists } from "../catalog/sku-catalog";
import { readSkuState, readWaitlist } from "../catalog/sku-state";
import { skus } from "../db/schema";
import { forgetDraw } from "../edge/draw-cache";
import { accessCodeHash, newAccessCodes } from "../edge/early-access";
import { forgetSoldOut } from "../edge/sold-out-cache";
import { cursorOf, positionOf, TOP_POSITION } from "../handoff/change-feed";
import { wakeEndpoints } from "../handoff/delivery-consumer";
import type { AppEnv } from "../http/context";
import { ApiError } from "../http/errors";
import { booleanQuery, integerQuery } from "../http/query";
import { mirrorCounts } from "../mirror/admin-view";
import { forgetDisplay } from "../mirror/stock-display";
import { listDeadLetters, replayDeadLetter } from "../orders/dead-letter-consumer";
import { orderCounts } from "../orders/order-store";
import { revenueOf } from "../orders/revenue";
import { readPaymentTotals } from "../payments/pricing";
import { recentRuns, reconcile } from "../reconcile/reconcile";
import { adminShard, callStock, SKU_ID } from "../stock/stock-client";
import { ROUTES } from "./contract";
import type { AdminSku } from "./contract-schemas";
import { limitOf } from "./handoff";
import { register } from "./register";
import { adminSkuView, drawView } from "./views";

export const admin = new Hono<AppEnv>();

/** The admin SKU view: stock from the stock object, orders from D1, the mirror when on. */
async function skuView(env: Env, sku: string): Promise<z.infer<typeof AdminSku> | null> {
  const state = await readSkuState(env, sku);
  if (!state) return null;
  return {
    ...adminSkuView(state, Date.now()),
    orders: await orderCounts(env.DB, sku),
    revenue: await revenueOf(env.DB, sku, state.currency),
    waitlist: await readWaitlist(env, sku, state.shards),
    // Every shard the SKU ever had: one a cut left out keeps the payments it decided.
    payments: await readPaymentTotals(env, sku, Math.max(state.shards, state.shardsEver ?? 0)),
    mirror: await mirrorCounts(env, sku),
    // Fair opening: the draw of a SKU with a window (entrants, seed hash, revealed seed), else null.
    draw: await callStock(() => adminShard(env, sku, 0).drawInfo()).then((d) => (d ? drawView(sku, d) : null)),
  };
}

/** Creates or updates a SKU (see {@link configureSku}); `200` with the admin view. */
register(admin, ROUTES.putSku, async (c, body) => {
  const sku = c.req.param("sku");
  if (!SKU_ID.test(sku)) throw new ApiError("INVALID_REQUEST", "A SKU id is 1 to 64 of A-Z a-z 0-9 _ -.");
  await configureSku(c.env, sku, body, Date.now(), c.get("requestId"));
  forgetSoldOut(sku);
  forgetDisplay(sku);
  forgetDraw(sku); // its window may have been set, moved or removed
  return c.json(await skuView(c.env, sku));
});

/** A SKU id the catalog knows, else `404 SKU_NOT_FOUND` (a malformed id names none). */
async function requireSku(env: Env, sku: string): Promise<void> {
  if (!SKU_ID.test(sku) || !(await skuExists(env, sku))) throw new ApiError("SKU_NOT_FOUND");
}

/**
 * Makes access codes of an early access tier (API.md "Early access"): random codes answered once,
 * their SHA-256 hashes stored by shard 0 in one statement (engine/access.ts).
 */
register(admin, ROUTES.accessCodes, async (c, body) => {
  const sku = c.req.param("sku");
  await requireSku(c.env, sku);
  const stub = adminShard(c.env, sku, 0);
  const state = await callStock(() => stub.state());
  if (!state) throw new ApiError("SKU_NOT_FOUND");
  const unknownTier = () =>
    new ApiError(
      "INVALID_REQUEST",
      `SKU ${sku} has no early access tier ${body.tier}: its tiers are ${(state.access ?? []).map((t) => t.name).join(", ") || "none"}.`,
      {},
      { fields: [{ path: "tier", message: "a tier of the SKU's access" }] },
    );
  if (!state.access?.some((t) => t.name === body.tier)) throw unknownTier();
  const codes = newAccessCodes(body.count);
  const hashes = await Promise.all(codes.map(accessCodeHash));
  if (!(await callStock(() => stub.addAccessCodes(body.tier, hashes)))) throw unknownTier();
  return c.json({ tier: body.tier, codes }, 201);
});

register(admin, ROUTES.getSku, async (c) => {
  const sku = c.req.param("sku");
  const view = SKU_ID.test(sku) ? await skuView(c.env, sku) : null;
  if (!view) throw new ApiError("SKU_NOT_FOUND");
  return c.json(view);
});

/**
 * Archives a SKU (see {@link archiveSku}); `200` with the admin view, again `200` unchanged. The
 * caches of this isolate forget it; another isolate's lapse within their second.
 */
register(admin, ROUTES.archiveSku, async (c) => {
  const sku = c.req.param("sku");
  const state = SKU_ID.test(sku) ? await archiveSku(c.env, sku, c.get("requestId")) : null;
  if (!state) throw new ApiError("SKU_NOT_FOUND");
  forgetSoldOut(sku);
  forgetDisplay(sku);
  const view = await skuView(c.env, sku);
  if (!view) throw new ApiError("SKU_NOT_FOUND");
  return c.json(view);
});

/** Every SKU not archived (the stock object knows its status; D1 keeps only the catalog), or `?archived=true` only those. */
register(admin, ROUTES.listSkus, async (c) => {
  const wanted = booleanQuery(c.req.query("archived"), "archived");
  const rows = await drizzle(c.env.DB).select({ sku: skus.sku }).from(skus).orderBy(desc(skus.createdAt));
  // Shard 0 says the status in one call; only the SKUs listed pay for the whole view.
  const listed = await Promise.all(
    rows.map(async ({ sku }) => {
      const first = await callStock(() => adminShard(c.env, sku, 0).state());
      return first && (first.status === "archived") === wanted ? skuView(c.env, sku) : null;
    }),
  );
  return c.json({ skus: listed.filter((view) => view !== null) });
});

/**
 * Dead letters, newest stored first (`?pending=true`: only those not replayed yet), paged as the
 * order feed is: `limit`, and `after` a `next` this route gave, which is always given.
 */
register(admin, ROUTES.deadLetters, async (c) => {
  const pendingOnly = booleanQuery(c.req.query("pending"), "pending");
  const limit = limitOf(c.req.query("limit"));
  const after = c.req.query("after");
  const before = after === undefined ? TOP_POSITION : await positionOf(c.env.ADMIN_TOKEN, after, "dead letters");
  if (before === null) throw new ApiError("INVALID_REQUEST", "after is not a cursor this route gave.");
  const rows = await listDeadLetters(c.env.DB, { pendingOnly, before, limit });
  return c.json({
    deadLetters: rows.map((row) => ({
      id: row.id,
      queue: row.queue,
      body: JSON.parse(row.body) as unknown,
      attempts: row.attempts,
      receivedAt: new Date(row.received_at).toISOString(),
      replayedAt: row.replayed_at === null ? null : new Date(row.replayed_at).toISOString(),
    })),
    next: await cursorOf(c.env.ADMIN_TOKEN, rows.at(-1)?.position ?? before, "dead letters"),
  });
});

/** Re-applies one dead letter through the idempotent consumer path; again is harmless. */
register(admin, ROUTES.replayDeadLetter, async (c) => {
  const result = await replayDeadLetter(c.env.DB, c.req.param("id"), Date.now());
  if (!result.found) throw new ApiError("NOT_FOUND", "No such dead letter.");
  if (!result.applied) {
    throw new ApiError(
      "INVALID_STATE",
      `Dead letter ${c.req.param("id")} is ${result.error}: only a letter of valid order events can be replayed (it stays stored for inspection).`,
      {},
      { state: "invalid_event" },
    );
  }
  // As the order consumer does: the senders of the endpoints it named, the queue only for one unreachable.
  await wakeEndpoints(c.env, result.dueEndpoints ?? []);
  return c.json({ id: c.req.param("id"), replayed: true, replayedAt: new Date(result.replayedAt).toISOString() });
});

/**
 * Runs reconciliation now (`?full=true` rechecks every reservation, not only recent changes;
 * `?sku=` checks that SKU alone, so an operator need not wait for the whole catalog).
 */
register(admin, ROUTES.reconcile, async (c) => {
  const full = booleanQuery(c.req.query("full"), "full");
  const sku = c.req.query("sku");
  if (sku !== undefined) await requireSku(c.env, sku);
  const report = await reconcile(c.env, { trigger: "admin", full, sku });
  return c.json({
    runId: report.runId,
    skusChecked: report.skusChecked,
    differences: report.differences,
    rowsRead: report.rowsRead,
  });
});

register(admin, ROUTES.reconcileRuns, async (c) => {
  const limit = integerQuery(c.req.query("limit"), "limit", { min: 1, max: 50, fallback: 10 });
  return c.json({ runs: await recentRuns(c.env.DB, limit) });
});
