import { fromBase64Url, toBase64Url } from "../edge/base64url";
import { hmacKey } from "../http/hmac";
import { CHANGE_COLUMNS, type ChangeRow, type OrderObject, orderObjectOf } from "./order-object";

/**
 * The order change feed (`GET /admin/orders?after=<cursor>&limit=N`): the changes after a position,
 * in position order. A page is a range read of `order_changes`' primary key and one primary-key
 * lookup in `orders` per change, so it reads the same rows wherever in the feed it starts.
 *
 * The cursor is a position signed with a key derived from ADMIN_TOKEN: opaque to the client, and
 * one this route did not make is refused rather than read as some other position. (Rotating the
 * admin token therefore retires old cursors; a poller then starts over, which an idempotent
 * consumer of the feed absorbs.)
 */

const VERSION = 1;
const POSITION_BYTES = 6; // up to 2^48 changes
/** The highest position a cursor holds: where a list read newest first starts. */
export const TOP_POSITION = 2 ** (8 * POSITION_BYTES) - 1;
const MAC_BYTES = 16;

/**
 * The lists paged by these cursors. Each signs with its own key, so a cursor of one is refused by
 * the other rather than read as a position of another table.
 */
export type Feed = "order feed" | "payments" | "dead letters";

function cursorKey(adminToken: string, feed: Feed): Promise<CryptoKey> {
  return hmacKey(`flashgate ${feed} cursor\u0000${adminToken}`);
}

async function macOf(adminToken: string, feed: Feed, head: Uint8Array<ArrayBuffer>): Promise<Uint8Array> {
  const key = await cursorKey(adminToken, feed);
  return new Uint8Array(await crypto.subtle.sign("HMAC", key, head)).subarray(0, MAC_BYTES);
}

export async function cursorOf(adminToken: string, position: number, feed: Feed = "order feed"): Promise<string> {
  const head = new Uint8Array(1 + POSITION_BYTES);
  head[0] = VERSION;
  let rest = position;
  for (let i = POSITION_BYTES; i >= 1; i--) {
    head[i] = rest % 256;
    rest = Math.floor(rest / 256);
  }
  const cursor = new Uint8Array(head.length + MAC_BYTES);
  cursor.set(head);
  cursor.set(await macOf(adminToken, feed, head), head.length);
  return toBase64Url(cursor);
}

/** The position a cursor of this route names; null for anything this route did not make. */
export async function positionOf(
  adminToken: string,
  cursor: string,
  feed: Feed = "order feed",
): Promise<number | null> {
  const bytes = fromBase64Url(cursor);
  if (!bytes || bytes.length !== 1 + POSITION_BYTES + MAC_BYTES || bytes[0] !== VERSION) return null;
  const head = bytes.slice(0, 1 + POSITION_BYTES);
  const expected = await macOf(adminToken, feed, head);
  if (!crypto.subtle.timingSafeEqual(expected, bytes.subarray(1 + POSITION_BYTES))) return null;
  let position = 0;
  for (let i = 1; i <= POSITION_BYTES; i++) position = position * 256 + (head[i] as number);
  return position;
}

export interface FeedPage {
  orders: OrderObject[];
  /** The position of the last change on the page (the one asked after, when the page is empty). */
  last: number;
  /** Rows D1 read to answer (its `meta.rows_read`). */
  rowsRead: number;
}

export async function feedPage(db: D1Database, after: number, limit: number): Promise<FeedPage> {
  const { results, meta } = await db
    .prepare(
      `SELECT ${CHANGE_COLUMNS} FROM order_changes c JOIN orders o ON o.reservation_id = c.reservation_id
       WHERE c.position > ?1 ORDER BY c.position LIMIT ?2`,
    )
    .bind(after, limit)
    .all<ChangeRow>();
  return {
    orders: results.map(orderObjectOf),
    last: results.at(-1)?.position ?? after,
    rowsRead: meta.rows_read,
  };
}
