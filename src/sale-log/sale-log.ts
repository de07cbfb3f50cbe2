import { log } from "../../durable-objects/shared/log";
import { saltSecret, userSalt } from "../../durable-objects/shared/sale-entries";

/**
 * The Worker's side of the verifiable sale (API.md v1.4; the log itself is
 * durable-objects/log/sale-log.ts, one object per SKU, whose entries the stock shards send): the
 * origin line of a SKU's checkpoints, and a buyer's receipts and salt.
 */

/** Whether SKUs keep a log: a log key is set. */
export function saleLogOn(env: Env): boolean {
  return Boolean(env.LOG_SIGNING_KEY);
}

/** The origin line of a SKU's checkpoints: `<LOG_ORIGIN or the request's host>/api/skus/<sku>/log`. */
export function logOrigin(env: Env, requestUrl: string, sku: string): string {
  const base = (env.LOG_ORIGIN || new URL(requestUrl).host).replace(/^[a-z]+:\/\//i, "").replace(/\/+$/, "");
  return `${base}/api/skus/${sku}/log`;
}

/** A buyer's salt on a SKU (shown only to that buyer), or null when no log is kept. */
export function saltOf(env: Env, sku: string, userId: string): Promise<string> | null {
  if (!saleLogOn(env)) return null;
  if (secretOf?.key !== env.LOG_SIGNING_KEY)
    secretOf = { key: env.LOG_SIGNING_KEY, secret: saltSecret(env.LOG_SIGNING_KEY) };
  return userSalt(secretOf.secret, sku, userId);
}

/** The salts' secret, derived once per key text (the key decides it: nothing is remembered but a hash). */
let secretOf: { key: string; secret: Uint8Array } | undefined;

export interface ReceiptView {
  entry: string;
  index: number;
  proof: string;
}

/**
 * What a reservation's body adds (API.md v1.4): `receipts` (the entries of the reservation already
 * in a signed checkpoint, each a C2SP tlog-proof) and `salt`. Nothing when no log is kept; an empty
 * list when the log cannot be reached (the receipts come on a later read).
 */
export async function receiptsOf(
  env: Env,
  requestUrl: string,
  sku: string,
  reservationId: string,
  userId: string,
): Promise<{ receipts: ReceiptView[]; salt: string } | Record<string, never>> {
  const salting = saltOf(env, sku, userId);
  if (salting === null) return {};
  const salt = await salting;
  try {
    const receipts = await env.SALE_LOG.getByName(sku).receipts(reservationId, logOrigin(env, requestUrl, sku));
    return { receipts, salt };
  } catch (err) {
    log("warn", "sale log: receipts not read", { sku, error: String(err) });
    return { receipts: [], salt };
  }
}

/**
 * The receipts part of a reservation's `202`: a hold just made is in no checkpoint yet (its entry
 * leaves with the shard's next outbox flush), so only a replayed one asks the log.
 */
export function receiptsOfHeld(
  env: Env,
  requestUrl: string,
  reservation: { id: string; sku: string; userId: string },
  replayed: boolean,
): Promise<{ receipts: ReceiptView[]; salt: string } | Record<string, never>> {
  if (replayed) return receiptsOf(env, requestUrl, reservation.sku, reservation.id, reservation.userId);
  const salting = saltOf(env, reservation.sku, reservation.userId);
  return salting === null ? Promise.resolve({}) : salting.then((salt) => ({ receipts: [], salt }));
}
