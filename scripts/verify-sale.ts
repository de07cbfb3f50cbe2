/**
 * `npm run verify-sale -- <base-url> <sku> [--since <checkpoint file>]`: checks a SKU's public log
 * (API.md v1.4 "The verifiable sale") from the outside, with nothing of the gateway's code: only
 * Node's own crypto and the C2SP formats (signed-note, tlog-checkpoint, tlog-tiles) and RFC 6962.
 *
 * 1. fetches the verifier key (`/api/log/key`) and the checkpoint, and checks its Ed25519 signature
 *    and its origin (`…/api/skus/<sku>/log`);
 * 2. fetches every entry bundle and every hash tile of the checkpoint's tree, rebuilds the tree from
 *    the entries, and checks each tile and the root against it;
 * 3. with `--since`, checks that the earlier checkpoint (a file holding its signed note) is signed
 *    by the same key, for the same origin, and that the tree extends it (its first `size` entries
 *    have its root);
 * 4. replays the entries under the sale's rules, in the order of their times (the log's order among
 *    equal times; at one time, releases first, then configurations, payments, holds): no hold before
 *    a configuration, outside the sale's status and window (unless an early-access tier had opened),
 *    while a fair opening's draw is pending, from its opening to its reveal (but a hold naming the
 *    draw that made it: this one after its close, or an earlier opening's decided late),
 *    lasting past the sale's holdSeconds,
 *    or past the stock in force (per variant); no `user` past the per-user limit; a payment, release
 *    or refund only of a reservation the log holds, in a status it may leave; no size taken off, no
 *    configuration after the archive, no opening but at the start or a tier's. No entry's time is
 *    after this machine's clock (past the skew clocks have), and with `--since` none after the kept
 *    checkpoint is a minute older than its newest entry. A stock or limit excess of the last minute (by this machine's clock) is
 *    reported as not settled (`settled: false`), not as broken: shards flush independently, so a
 *    release may still be on its way; run again later.
 * 5. a fair opening's draw: its seed hash committed by a configuration before the opening opened
 *    (an opening moved before it opens keeps its hash), the reveal after the (last) window closed
 *    with a seed that hashes to it, a reveal for every opening closed more than an hour ago, every
 *    decided opening `/draw` shows revealed in the log, and the draw's public entries
 *    (`/draw/entries`) all there, each once, in the order that seed gives (ascending hex
 *    HMAC-SHA256(seed, entryId)); every hold a draw made names that draw and its position (once
 *    each, 1 to its entrants, made between its close and its reveal), a hold inside a window only
 *    by an earlier opening's draw, and the entries' results match the log: each `HELD` entry has
 *    its one hold at its position, of its quantity, held by its buyer (salted entry ids, which
 *    are the buyers' `user`), no refused one has any, and (a sale without
 *    sizes) none is held after the first `SOLD_OUT`, nor refused `SOLD_OUT` while units the log
 *    leaves it remained. A draw whose holds name it not, and whose configuration promised no such
 *    names (`holdsNamed`: a gateway from before they did), has its outcomes reported as unproven,
 *    its late holds counted as before.
 *
 * With `--receipt <file>` (a buyer's receipt, one `proof` of their reservation), also checks that
 * receipt against the signed log. Prints a summary and exits 0, or names the first entry that breaks
 * a rule and exits 1 (2: the log could not be read). Progress goes to stderr. Writes the checkpoint it checked to
 * `--save <file>`, for the next run's `--since`.
 *
 * The checks that need no network (the tree, signatures, receipts, the replay, a draw's order) are
 * tools/sale-verifier.ts, which the simulator (docs/SIMULATOR.md) runs on its own sale log too.
 */
import { readFileSync, writeFileSync } from "node:fs";
import {
  Broken,
  checkDrawBuyers,
  checkDrawOutcomes,
  checkDrawPage,
  checkReceipt,
  checkRevealsShown,
  checkShownDraws,
  type DrawHolds,
  type DrawnEntry,
  type Entry,
  entriesOf,
  leafHash,
  levelsOf,
  openCheckpoint,
  parseVerifier,
  replay,
  type ShownDraw,
  TILE_HEIGHT,
  TILE_WIDTH,
  tilePath,
  treeHash,
} from "../tools/sale-verifier";

async function fetchBytes(url: string): Promise<Buffer>;
async function fetchBytes(url: string, absent: 404): Promise<Buffer | null>;
async function fetchBytes(url: string, absent?: 404): Promise<Buffer | null> {
  for (let attempt = 1; ; attempt++) {
    const response = await fetch(url);
    if (response.ok) return Buffer.from(await response.arrayBuffer());
    if (response.status === absent) return null;
    if (attempt >= 3 || response.status < 500) throw new Error(`GET ${url}: ${response.status}`);
    await new Promise((r) => setTimeout(r, 500 * attempt));
  }
}

/**
 * The draws as the gateway shows them (API.md "Fair opening"), asked whatever the log holds (a log
 * that revealed nothing is checked too; a SKU without a window has no `/draw`, 404): each decided
 * opening `/draw` lists against the log's reveals (`checkShownDraws`), and the public opening's
 * entries (`/draw/entries`, the last opening's), once its draw is decided and revealed, in ascending
 * hex HMAC-SHA256(seed, entryId), positions 1, 2, … up to the entrants its reveal logged: the order
 * anyone recomputes from the seed. A public opening not drawn yet (a tier's draw done and the public
 * one to come) has nothing to order.
 */
async function checkDrawOrder(
  root: string,
  sku: string,
  entries: readonly Entry[],
  reveals: Map<string, string>,
  draws: ReadonlyMap<string, DrawHolds>,
  now: number,
  progress: (line: string) => void,
): Promise<
  | {
      seedHash: string;
      entries: number;
      decided: boolean;
      held?: number;
      outcomes?: string;
      unsettled?: string;
      tiers?: TierDrawChecked[];
    }
  | undefined
> {
  const base = `${root}/api/skus/${encodeURIComponent(sku)}/draw`;
  const shown = await fetchBytes(base, 404);
  if (shown === null) {
    // No window: then the log revealed no draw either (a window that opened is never taken off), so a
    // reveal with a 404 is broken at once, not after the minute a decided draw may take to show.
    const pending = checkRevealsShown([], draws, now);
    if (pending) throw new Broken(pending);
    return undefined;
  }
  const info = JSON.parse(shown.toString("utf8")) as ShownDraw & { openings?: ShownDraw[] };
  const hidden = checkRevealsShown(info.openings ?? [info], draws, now);
  const unsettled = checkShownDraws(info.openings ?? [info], reveals, now) ?? hidden;
  // Every earlier opening's draw (a tier's) decided and revealed: its entries by `opensAt` (API.md v1.4).
  const tiers: TierDrawChecked[] = [];
  for (const opening of (info.openings ?? []).slice(0, -1)) {
    const seed = reveals.get(opening.seedHash);
    if (opening.seed === null || seed === undefined) continue;
    try {
      tiers.push(await checkOneDraw(base, opening, seed, entries, draws, now, progress));
    } catch (err) {
      throw err instanceof Broken ? new Broken(`the draw of the opening at ${opening.opensAt}: ${err.message}`) : err;
    }
  }
  const seed = reveals.get(info.seedHash);
  if (info.seed === null || seed === undefined) {
    progress(`the public opening's draw is not ${info.seed === null ? "decided" : "in the log"} yet: nothing to order`);
    return {
      seedHash: info.seedHash,
      entries: 0,
      decided: info.seed !== null,
      ...(unsettled ? { unsettled } : {}),
      ...(tiers.length > 0 ? { tiers } : {}),
    };
  }
  const one = await checkOneDraw(base, null, seed, entries, draws, now, progress, info);
  const pending = unsettled ?? one.unsettled ?? tiers.find((t) => t.unsettled)?.unsettled;
  return {
    seedHash: info.seedHash,
    entries: one.entries,
    decided: true,
    held: one.held ?? 0,
    outcomes: one.outcomes,
    ...(pending ? { unsettled: pending } : {}),
    ...(tiers.length > 0 ? { tiers } : {}),
  };
}

/** What {@link checkOneDraw} found of one draw. */
interface TierDrawChecked {
  opensAt?: string;
  entries: number;
  held?: number;
  outcomes: string;
  unsettled?: string;
}

/**
 * One decided draw's entries (`/draw/entries`; `opening`: an earlier opening's, by its `opensAt`,
 * null: the public one's), in its seed's order, as many as its reveal logged, against the log's
 * holds and the stock the log leaves it (`checkDrawOutcomes`). A gateway that lists no earlier
 * opening's draw (it answers the public one's, or 404) leaves that draw's outcomes unproven.
 */
async function checkOneDraw(
  base: string,
  opening: ShownDraw | null,
  seed: string,
  entries: readonly Entry[],
  draws: ReadonlyMap<string, DrawHolds>,
  now: number,
  progress: (line: string) => void,
  shownPublic?: ShownDraw,
): Promise<TierDrawChecked> {
  const seedHash = opening?.seedHash ?? shownPublic?.seedHash ?? "";
  const which = opening ? `the draw of the opening at ${opening.opensAt}` : "the draw";
  const named = opening ? `&opensAt=${encodeURIComponent(opening.opensAt)}` : "";
  const tag = opening ? { opensAt: opening.opensAt } : {};
  let previous = "";
  const listed: DrawnEntry[] = [];
  for (;;) {
    const url = `${base}/entries?offset=${listed.length}&limit=1000${named}`;
    const bytes = opening ? await fetchBytes(url, 404) : await fetchBytes(url);
    const page = bytes && (JSON.parse(bytes.toString("utf8")) as { seed?: string | null; entries: DrawnEntry[] });
    if (opening && (!page || page.seed !== seed)) {
      const outcomes = "unproven: the gateway does not list this opening's entries (`opensAt`)";
      progress(`${which}: ${outcomes.slice(10)}`);
      return { ...tag, entries: 0, outcomes };
    }
    if (!page) throw new Broken(`GET ${url}: no entries`);
    previous = checkDrawPage(seed, page.entries, listed.length, previous);
    listed.push(...page.entries);
    if (page.entries.length < 1000) break;
  }
  const position = listed.length;
  const revealed = entries.find((e) => e.type === "draw-reveal" && e.seedHash === seedHash);
  if (position !== revealed?.entrants)
    throw new Broken(`${which} lists ${position} entries; its reveal logged ${String(revealed?.entrants)} entrants`);
  progress(`${which}'s ${position} entries are in the order its revealed seed gives`);
  // Its results against the log: each held entry's hold names its position, and nothing else does.
  const outcomes = checkDrawOutcomes(listed, draws.get(seedHash), now);
  // Salted entry ids are the buyers' `user`: a drawn hold must be its entry's buyer's.
  const buyers = checkDrawBuyers(listed, draws.get(seedHash), (opening ?? shownPublic)?.entryIdPrefix);
  progress(
    outcomes.unproven
      ? `${which}'s outcomes are not tied to its order: ${outcomes.unproven}`
      : `${which}'s ${outcomes.held} held entries each have their hold in the log, at their position${buyers ? ", held for the buyer the draw placed there" : ""}${outcomes.stock === undefined ? "" : `, and its refusals fit the ${outcomes.stock} units the log leaves it`}`,
  );
  return {
    ...tag,
    entries: position,
    held: outcomes.held,
    outcomes: outcomes.unproven
      ? `unproven: ${outcomes.unproven}`
      : `each held entry's hold is in the log${buyers ? ", its buyer's" : ""}`,
    ...(outcomes.unsettled ? { unsettled: outcomes.unsettled } : {}),
  };
}

async function main(): Promise<number> {
  const args = process.argv.slice(2);
  const flag = (name: string) => {
    const i = args.indexOf(name);
    if (i < 0) return undefined;
    const value = args[i + 1];
    args.splice(i, 2);
    return value;
  };
  const since = flag("--since");
  const receipt = flag("--receipt");
  const save = flag("--save");
  const [base, sku] = args;
  if (!base || !sku) {
    console.error(
      "usage: npm run verify-sale -- <base-url> <sku> [--since <checkpoint file>] [--save <file>] [--receipt <file>]",
    );
    return 2;
  }
  const root = base.replace(/\/+$/, "");
  const logUrl = `${root}/api/skus/${encodeURIComponent(sku)}/log`;
  const progress = (line: string) => process.stderr.write(`[verify-sale] ${line}\n`);

  const verifier = parseVerifier((await fetchBytes(`${root}/api/log/key`)).toString("utf8"));
  progress(`key ${verifier.name}+${verifier.id.toString("hex")}`);
  const checkpoint = openCheckpoint(
    (await fetchBytes(`${logUrl}/checkpoint`)).toString("utf8"),
    verifier,
    "the checkpoint",
  );
  if (!checkpoint.origin.endsWith(`/api/skus/${sku}/log`))
    throw new Broken(`the checkpoint's origin ${checkpoint.origin} is not this SKU's log`);
  progress(`checkpoint ${checkpoint.origin}: ${checkpoint.size} entries, signed`);

  // Entries, then the tree they make, then every hash tile against it.
  const entries: Buffer[] = [];
  const bundles = Math.ceil(checkpoint.size / TILE_WIDTH);
  for (let n = 0; n < bundles; n++) {
    const width = Math.min(TILE_WIDTH, checkpoint.size - n * TILE_WIDTH);
    entries.push(...entriesOf(await fetchBytes(`${logUrl}/${tilePath("entries", n, width)}`), width, n * TILE_WIDTH));
    if (n % 16 === 15 || n === bundles - 1) progress(`entries: ${entries.length} of ${checkpoint.size}`);
  }
  const levels = levelsOf(entries.map(leafHash));
  let tiles = 0;
  for (let level = 0; TILE_HEIGHT * level < levels.length; level++) {
    const hashes = levels[TILE_HEIGHT * level] ?? [];
    for (let n = 0; n * TILE_WIDTH < hashes.length; n++) {
      const want = hashes.slice(n * TILE_WIDTH, (n + 1) * TILE_WIDTH);
      const tile = await fetchBytes(`${logUrl}/${tilePath(level, n, want.length)}`);
      if (!tile.equals(Buffer.concat(want)))
        throw new Broken(`tile ${tilePath(level, n, want.length)} does not match the entries`);
      tiles++;
    }
  }
  progress(`${tiles} hash tiles match the entries`);
  if (!treeHash(levels, checkpoint.size).equals(checkpoint.root))
    throw new Broken("the entries' root is not the checkpoint's: the log was changed after it was signed");
  progress("root rebuilt from the entries: matches");

  let kept: number | undefined;
  if (since !== undefined) {
    const earlier = openCheckpoint(readFileSync(since, "utf8"), verifier, `the checkpoint of ${since}`);
    if (earlier.origin !== checkpoint.origin) throw new Broken(`${since} is of another log (${earlier.origin})`);
    if (earlier.size > checkpoint.size)
      throw new Broken(`the log shrank: ${since} has ${earlier.size} entries, the checkpoint ${checkpoint.size}`);
    if (!treeHash(levels, earlier.size).equals(earlier.root))
      throw new Broken(`the log is not consistent with ${since}: its first ${earlier.size} entries have another root`);
    progress(`consistent with ${since} (${earlier.size} entries)`);
    kept = earlier.size;
  }
  if (save !== undefined) writeFileSync(save, checkpoint.note);
  const receiptChecked =
    receipt === undefined
      ? undefined
      : checkReceipt(readFileSync(receipt, "utf8"), verifier, checkpoint, levels, entries);
  if (receiptChecked) progress(`receipt: entry ${receiptChecked.index} is in the signed log, as the log has it`);

  const parsed = entries.map((bytes, i) => {
    try {
      const entry = JSON.parse(bytes.toString("utf8")) as Entry;
      if (typeof entry.type !== "string" || typeof entry.time !== "string") throw new Error("no type or time");
      return entry;
    } catch (err) {
      throw new Broken(`entry ${i}: not an entry (${err instanceof Error ? err.message : String(err)})`);
    }
  });
  const reveals = new Map<string, string>();
  const draws = new Map<string, DrawHolds>();
  const now = Date.now();
  const summary = replay(parsed, reveals, { now, draws, ...(kept === undefined ? {} : { since: kept }) });
  const draw = await checkDrawOrder(root, sku, parsed, reveals, draws, now, progress);
  const result = {
    ok: true,
    origin: checkpoint.origin,
    size: checkpoint.size,
    tiles,
    ...summary,
    // A draw's reveal still on its way leaves the sale unsettled, as an excess of the last minute does.
    ...(draw?.unsettled && summary.settled ? { settled: false, unsettled: draw.unsettled } : {}),
    ...(receiptChecked ? { receipt: receiptChecked } : {}),
  };
  console.log(JSON.stringify(draw ? { ...result, draw } : result, null, 2));
  return 0;
}

main().then(
  (code) => process.exit(code),
  (err) => {
    if (err instanceof Broken) {
      console.log(JSON.stringify({ ok: false, broken: err.message }, null, 2));
      process.exit(1);
    }
    console.error(`[verify-sale] could not read the log: ${err instanceof Error ? err.message : String(err)}`);
    process.exit(2);
  },
);
