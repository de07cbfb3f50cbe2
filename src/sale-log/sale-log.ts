import { log } from "../../durable-objects/shared/log";
import {
  type ConfiguredSku,
  configEntry,
  type DrawCommitment,
  saltSecret,
  userSalt,
} from "../../durable-objects/shared/sale-entries";
import { adminShard, callStock } from "../stock/stock-client";

/**
 * The Worker's side of the verifiable sale (API.md v1.4; the log itself is
 * durable-objects/log/sale-log.ts, one object per SKU): the configuration entries the catalog
 * appends, the origin line of a SKU's checkpoints, and a buyer's receipts and salt.
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

/** How many times the catalog tries a configuration entry (the draws, the append). */
const ATTEMPTS = 5;
/** How often, and how many times, the catalog asks shard 0 whether every sibling has a change yet. */
const SETTLED_POLL_MS = 200;
const SETTLED_POLLS = 25;

/**
 * Appends the entry of a configuration applied (`config`) or of the archive (`archive`) to the SKU's
 * log: the catalog's success path calls it once the change answered, `began` being when its request
 * began. The entry states the totals the operator set (shard 0's record, not the shards' figures
 * summed: a unit on its way between shards, or a sibling not at the change yet, would make a total
 * nobody set), and the time by which every shard had the change (`until`; shard 0 is asked until it
 * says so, for about 5 s at most). A failure is logged, never answered: the change is made (API.md:
 * an operator change that answers an error changed nothing).
 */
export async function logConfiguration(
  env: Env,
  sku: string,
  type: "config" | "archive",
  state: ConfiguredSku,
  began: number,
): Promise<void> {
  if (!saleLogOn(env)) return;
  // Asked once, not again on each try: a failed append says nothing new of the shards.
  const set = await settledTargets(env, sku);
  const until = Math.max(began, Date.now());
  const figures: ConfiguredSku = {
    ...state,
    stock: { total: set?.total ?? state.stock.total },
    ...(state.variants && {
      variants: state.variants.map((v) => ({ ...v, stock: { total: set?.variants[v.id] ?? v.stock.total } })),
    }),
  };
  for (let attempt = 1; ; attempt++) {
    try {
      // A fair opening's commitments (each opening's seed hash), as shard 0 fixed them with the window.
      const draws = (state.openingWindowMs ?? 0) > 0 ? await drawCommitments(env, sku) : [];
      const entry = configEntry(type, figures, began, draws, until);
      await env.SALE_LOG.getByName(sku).appendConfig(entry, undefined, sku);
      return;
    } catch (err) {
      if (attempt >= ATTEMPTS) {
        log("error", "sale log: configuration entry not appended", { sku, type, error: String(err) });
        return;
      }
    }
  }
}

/**
 * Shard 0's record of the totals the operator set, once every sibling has the last change or the
 * polls run out; null if shard 0 never answered (the entry then states the shards' figures). A
 * poll that fails is only asked again: the entry must not wait on a lossy read.
 */
async function settledTargets(env: Env, sku: string) {
  let last: { total: number | null; variants: Record<string, number>; settled: boolean } | null = null;
  for (let poll = 1; poll <= SETTLED_POLLS; poll++) {
    last = await callStock(() => adminShard(env, sku, 0).configured()).catch(() => last);
    if (last?.settled) return last;
    await scheduler.wait(SETTLED_POLL_MS);
  }
  log("warn", "sale log: a sibling has not taken the SKU's change yet", { sku, answered: last !== null });
  return last;
}

/** The draws shard 0 has committed to: each opening's window and seed hash. */
async function drawCommitments(env: Env, sku: string): Promise<DrawCommitment[]> {
  const info = await callStock(() => adminShard(env, sku, 0).drawInfo());
  return (info?.openings ?? []).flatMap((o) =>
    o.seedHash === null ? [] : [{ opensAt: o.opensAt, closesAt: o.closesAt, seedHash: o.seedHash }],
  );
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
