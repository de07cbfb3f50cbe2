import { Hono } from "hono";
import { TILE_WIDTH } from "../../durable-objects/shared/merkle";
import { parseSigner } from "../../durable-objects/shared/signed-note";
import { skuExists } from "../catalog/sku-catalog";
import type { AppEnv } from "../http/context";
import { ApiError } from "../http/errors";
import { logOrigin, saleLogOn } from "../sale-log/sale-log";
import { SKU_ID } from "../stock/stock-client";
import { ROUTES } from "./contract";
import { register } from "./register";

/**
 * The verifiable sale's public routes (API.md v1.4): the log's verifier key, and each SKU's log as
 * C2SP tlog-tiles: its checkpoint (signed for `<LOG_ORIGIN or host>/api/skus/<sku>/log`), hash tiles
 * and entry bundles. No credentials. The log itself: durable-objects/log/sale-log.ts.
 */
export const saleLogRoutes = new Hono<AppEnv>();

/** The verifier key of LOG_SIGNING_KEY, parsed once per key text (it decides nothing: the key does). */
let verifierOf: { key: string; text: Promise<string | null> } | undefined;
function verifierKey(env: Env): Promise<string | null> {
  const key = env.LOG_SIGNING_KEY ?? "";
  if (verifierOf?.key !== key) verifierOf = { key, text: parseSigner(key).then((s) => s?.verifier.text ?? null) };
  return verifierOf.text;
}

/** The SKU's log; a SKU never configured reaches no object and makes none (its id is asked of the catalog first). */
async function logOf(env: Env, sku: string) {
  if (!SKU_ID.test(sku) || !saleLogOn(env) || !(await skuExists(env, sku))) throw new ApiError("SKU_NOT_FOUND");
  return env.SALE_LOG.getByName(sku);
}

register(saleLogRoutes, ROUTES.logKey, async (c) => {
  const text = saleLogOn(c.env) ? await verifierKey(c.env) : null;
  if (!text) throw new ApiError("NOT_FOUND", "This gateway keeps no sale log (LOG_SIGNING_KEY is not set).");
  return c.text(`${text}\n`, 200, { "Cache-Control": "public, max-age=300" });
});

register(saleLogRoutes, ROUTES.logCheckpoint, async (c) => {
  const sku = c.req.param("sku");
  const log = await logOf(c.env, sku);
  // A log with no entry is a SKU never configured (its first entry is its configuration).
  if ((await log.size()) === 0) throw new ApiError("SKU_NOT_FOUND");
  const note = await log.checkpoint(logOrigin(c.env, c.req.url, sku));
  if (!note) throw new ApiError("NOT_FOUND", "This gateway's LOG_SIGNING_KEY is not a signed-note private key.");
  return c.text(note, 200, { "Cache-Control": "no-store" });
});

/** `<L>/<N>[.p/<W>]` or `entries/<N>[.p/<W>]` (C2SP tlog-tiles), N in three-digit groups, each but the last `x`-prefixed. */
const TILE = /^(entries|[0-9]|[1-5][0-9]|6[0-3])\/((?:x[0-9]{3}\/)*[0-9]{3})(?:\.p\/([1-9][0-9]{0,2}))?$/;

export function parseTilePath(path: string): { level: number | "entries"; index: number; width: number } | null {
  const match = TILE.exec(path);
  if (!match) return null;
  const [, level = "", n = "", w] = match;
  const index = Number(n.replaceAll("x", "").replaceAll("/", ""));
  const width = w === undefined ? TILE_WIDTH : Number(w);
  if (!Number.isSafeInteger(index) || (w !== undefined && width >= TILE_WIDTH)) return null;
  return { level: level === "entries" ? "entries" : Number(level), index, width };
}

register(saleLogRoutes, ROUTES.logTile, async (c) => {
  const sku = c.req.param("sku");
  const tile = parseTilePath(c.req.param("tile"));
  if (!tile) throw new ApiError("NOT_FOUND", "Not a tile path: tile/<L>/<N>[.p/<W>] or tile/entries/<N>[.p/<W>].");
  const log = await logOf(c.env, sku);
  const bytes =
    tile.level === "entries"
      ? await log.entryBundle(tile.index, tile.width)
      : await log.tile(tile.level, tile.index, tile.width);
  if (!bytes) throw new ApiError("NOT_FOUND", "The log's last checkpoint has no such tile (yet).");
  // A tile never changes once served: a full one for good, a partial one for its width.
  return c.body(new Uint8Array(bytes), 200, {
    "Content-Type": "application/octet-stream",
    "Cache-Control": "public, max-age=31536000, immutable",
  });
});
