/**
 * The checks of `npm run verify-sale` (scripts/verify-sale.ts, API.md v1.4 "The verifiable sale")
 * that need no network: RFC 6962 tree hashes and C2SP tiles, signed-note checkpoints, a receipt's
 * inclusion proof, the replay of a log's entries under the sale's rules, and a draw's order from its
 * seed. The command fetches a log over HTTP and calls these; the simulator (tools/sim/) calls the
 * replay and the draw's order on its sale log at the end of every seed. Like the command, this
 * module uses nothing of the gateway's code: only Node's own crypto.
 */
import { createHash, createHmac, createPublicKey, verify } from "node:crypto";

export type Hash = Buffer;
export const TILE_HEIGHT = 8;
export const TILE_WIDTH = 1 << TILE_HEIGHT;

export class Broken extends Error {
  /** The time of the entry that broke a rule (ms), when an entry did. */
  readonly at: number | undefined;
  constructor(message: string, at?: number) {
    super(message);
    this.at = at;
  }
}
/** A stock or limit rule broken by an entry of the last minute: a release may still be on its way. */
export class Unsettled extends Error {}

/**
 * How long a decision may take to reach the log: a shard logs its decisions in order, but shards
 * flush independently (a failed flush is retried within seconds), so a hold made with units a
 * sibling released may be logged before that release. A stock or limit excess younger than this
 * (by the verifier's clock) is not yet a broken rule; older, every shard's entries are in and the
 * excess stands. An entry written after a checkpoint the verifier kept, and this much older than
 * that checkpoint's newest entry, is broken: appended with an old time, it would rewrite the
 * history that checkpoint showed (a release slipped in before an excess already judged).
 */
export const SETTLE_MS = 60_000;
/**
 * How long after an opening's close its draw may take to be decided and revealed before a missing
 * reveal is broken: a sharded draw asks a shard per entrant, and shard 0 retries a busy one.
 */
export const DECIDE_MS = 60 * 60_000;
/** How far ahead of the verifier's clock an entry's time may be (clocks differ) before it is broken. */
export const CLOCK_SKEW_MS = 5 * 60_000;
/**
 * How far apart two shards' clocks may be when both stamp one draw: shard 0 decides at the close by
 * its clock, and each entrant's home shard stamps the hold by its own.
 */
export const SHARD_CLOCK_MS = 1_000;

const sha256 = (...parts: Buffer[]): Hash => createHash("sha256").update(Buffer.concat(parts)).digest();
export const leafHash = (entry: Buffer): Hash => sha256(Buffer.from([0]), entry);
export const nodeHash = (left: Hash, right: Hash): Hash => sha256(Buffer.from([1]), left, right);

/** RFC 6962 MTH of leaves [start, end), from `levels` (complete subtrees, bottom up). */
function rangeHash(levels: Hash[][], start: number, end: number): Hash {
  const n = end - start;
  if ((n & (n - 1)) === 0 && start % n === 0) {
    const hash = levels[Math.log2(n)]?.[start / n];
    if (!hash) throw new Error(`no hash of ${start}..${end}`);
    return hash;
  }
  let k = 1;
  while (k * 2 < n) k *= 2;
  return nodeHash(rangeHash(levels, start, start + k), rangeHash(levels, start + k, end));
}
export const treeHash = (levels: Hash[][], size: number): Hash => (size === 0 ? sha256() : rangeHash(levels, 0, size));

/** The complete subtrees' hashes of a list of leaf hashes, level by level. */
export function levelsOf(leaves: Hash[]): Hash[][] {
  const levels = [leaves];
  for (let below = leaves; below.length >= 2; ) {
    const up: Hash[] = [];
    for (let i = 0; i + 1 < below.length; i += 2) up.push(nodeHash(below[i] as Hash, below[i + 1] as Hash));
    levels.push(up);
    below = up;
  }
  return levels;
}

/** C2SP tlog-tiles path of a tile. */
export function tilePath(level: number | "entries", index: number, width: number): string {
  const groups: string[] = [];
  let n = index;
  do {
    groups.unshift(String(n % 1000).padStart(3, "0"));
    n = Math.floor(n / 1000);
  } while (n > 0);
  const encoded = groups.map((g, i) => (i < groups.length - 1 ? `x${g}` : g)).join("/");
  return `tile/${level}/${encoded}${width < TILE_WIDTH ? `.p/${width}` : ""}`;
}

export interface Verifier {
  name: string;
  id: Buffer;
  key: ReturnType<typeof createPublicKey>;
}

/** A signed-note verifier key: `<name>+<hex id>+<base64(0x01 ‖ key)>`. */
export function parseVerifier(text: string): Verifier {
  const [name = "", idHex = "", ...rest] = text.trim().split("+");
  const raw = Buffer.from(rest.join("+"), "base64");
  if (!name || !/^[0-9a-f]{8}$/.test(idHex) || raw.length !== 33 || raw[0] !== 1)
    throw new Broken(`the log key is not an Ed25519 signed-note key: ${text.trim()}`);
  const id = sha256(Buffer.from(`${name}\n`), raw).subarray(0, 4);
  if (id.toString("hex") !== idHex) throw new Broken("the log key's id does not match its name and key");
  const spki = Buffer.concat([Buffer.from("302a300506032b6570032100", "hex"), raw.subarray(1)]);
  return { name, id, key: createPublicKey({ key: spki, format: "der", type: "spki" }) };
}

export interface Checkpoint {
  origin: string;
  size: number;
  root: Hash;
  note: string;
}

/** Opens a signed note with `verifier` and reads it as a checkpoint. */
export function openCheckpoint(note: string, verifier: Verifier, what: string): Checkpoint {
  const split = note.lastIndexOf("\n\n");
  if (split < 0) throw new Broken(`${what} is not a signed note`);
  const text = note.slice(0, split + 1);
  let signed = false;
  for (const line of note.slice(split + 2).split("\n")) {
    const match = /^— (\S+) (\S+)$/u.exec(line);
    if (!match || match[1] !== verifier.name) continue;
    const raw = Buffer.from(match[2] ?? "", "base64");
    if (raw.length !== 68 || !raw.subarray(0, 4).equals(verifier.id)) continue;
    if (verify(null, Buffer.from(text), verifier.key, raw.subarray(4))) signed = true;
  }
  if (!signed) throw new Broken(`${what}: no valid signature by ${verifier.name}`);
  const [origin = "", size = "", root = ""] = text.split("\n");
  const hash = Buffer.from(root, "base64");
  if (!origin || !/^(0|[1-9][0-9]*)$/.test(size) || hash.length !== 32) throw new Broken(`${what} is not a checkpoint`);
  return { origin, size: Number(size), root: hash, note };
}

export type Entry = Record<string, unknown> & { type: string; time: string };

/** The entries of a bundle: each a big-endian uint16 length and its bytes. */
export function entriesOf(bundle: Buffer, want: number, first: number): Buffer[] {
  const out: Buffer[] = [];
  let at = 0;
  while (at < bundle.length) {
    if (at + 2 > bundle.length) throw new Broken(`entry bundle at ${first}: truncated`);
    const length = bundle.readUInt16BE(at);
    if (at + 2 + length > bundle.length) throw new Broken(`entry bundle at ${first}: truncated`);
    out.push(bundle.subarray(at + 2, at + 2 + length));
    at += 2 + length;
  }
  if (out.length !== want) throw new Broken(`entry bundle at ${first}: ${out.length} entries, not ${want}`);
  return out;
}

/**
 * The order of entries of the same millisecond, which their times cannot tell apart: releases first
 * (they only make room, and no rule checks them against the configuration), then configurations, then
 * payments and holds, which are checked against what came before them (a `payment`, a payment that
 * changed no reservation, with them: in the log it follows whatever of its reservation came before it).
 */
const RANK: Record<string, number> = {
  cancelled: 0,
  expired: 0,
  refund_required: 0,
  config: 1,
  archive: 1,
  "draw-reveal": 1,
  paid: 2,
  payment: 2,
  hold: 3,
};

/** Why a late payment's reservation is `refund_required` (its entry's `reason`, when it has one). */
const LATE_REASONS = ["too_late", "limit_exceeded"];

/** A fair opening a configuration committed to: when first, and its window as last set before it opened. */
interface Commitment {
  at: number;
  opensAt: number;
  closesAt: number;
}

interface Sale {
  status: string;
  total: number;
  perUserLimit: number;
  /** How long a hold lasts (null in a log written before configurations named it). */
  holdSeconds: number | null;
  startsAt: number | null;
  endsAt: number | null;
  tiers: number[];
  variants: Map<string, number> | null;
  /** The price of a unit in minor units (null: none; undefined: a configuration that does not say). */
  price: number | null | undefined;
  /** The sale's currency, lower case (null: a configuration that does not say). */
  currency: string | null;
}

/** A hold that names the draw that made it (its entry's `draw`): where the log has it. */
export interface TaggedHold {
  index: number;
  time: string;
  reservation: string;
  quantity: number;
  /** The buyer's `user`. */
  user: string;
}

/** A fair opening's draw as the log shows its outcomes: the holds naming each position, and its reveal. */
export interface DrawHolds {
  /**
   * Whether the log's holds name their draw at all: false for a log written before holds did, whose
   * outcomes nothing ties to the order (its late holds are judged by the count its reveal allows).
   */
  tagged: boolean;
  /** The holds naming this draw, by position. */
  holds: Map<number, TaggedHold>;
  /** The entrants its reveal logged (null: not revealed). */
  entrants: number | null;
  /** When its reveal was logged (ms), or null. */
  revealedAt: number | null;
  /** Whether the sale was in sizes when it was revealed (then a refusal says nothing of the next entry). */
  sizes: boolean;
  /**
   * A configuration promised before it opened that its entry ids are its buyers' `user` here
   * (`entryIdPrefix` `salt`): then each drawn hold must be its entry's buyer's ({@link checkDrawBuyers}).
   */
  salted?: boolean;
  /**
   * A sale without sizes: the units the replay proves were there for the draw (see
   * {@link drawStockOf}), by which its refusals are judged. Left out with sizes, or with no
   * configuration in force at its close.
   */
  stock?: DrawStock;
}

/**
 * The units a draw of a sale without sizes had at least, from its close to its reveal: the least
 * stock any configuration in force then set, less every unit any other reservation took at any
 * moment of that span (a hold, a sale, a late payment; a hold counted until its release is logged,
 * though the engine may expire it sooner). The draw decides in order, each entry against what is
 * left, so an entry is `SOLD_OUT` only once the entries before it held at least `units`, and (one
 * shard) `INSUFFICIENT_STOCK` only if they left fewer than it asked.
 */
export interface DrawStock {
  units: number;
  /** The least stock in force. */
  total: number;
  /**
   * The units other reservations took in the span, at most (a new hold naming no draw from the
   * close on, past any earlier draw's reveal, is the draw's own or came after it: not counted).
   */
  others: number;
  /** Whether every configuration in force in the span had one shard (sharded: a pull may fall short). */
  oneShard: boolean;
}

/**
 * {@link DrawStock} of the draw `seedHash`, closed at `closesAt` and revealed at `revealedAt`, from
 * the log's entries in time order (each end of the span widened by {@link SHARD_CLOCK_MS}), or
 * undefined when the sale had sizes in that span or no configuration.
 */
function drawStockOf(
  order: readonly { entry: Entry; at: number }[],
  seedHash: string,
  opensAt: number,
  closesAt: number,
  revealedAt: number,
  otherReveals: readonly number[],
): DrawStock | undefined {
  const from = closesAt - SHARD_CLOCK_MS;
  const to = revealedAt + SHARD_CLOCK_MS;
  // The configurations in force: the last one by the close (and, in its change's span, the one
  // before it), and every one written before the reveal.
  const configs = order.filter((o) => o.entry.type === "config" || o.entry.type === "archive");
  let last = -1;
  for (const [i, o] of configs.entries()) if (o.at <= from) last = i;
  const inForce = configs.filter((o, i) => {
    if (i === last || (o.at > from && o.at <= to)) return true;
    const next = configs[i + 1];
    const until = typeof next?.entry.until === "string" ? Date.parse(next.entry.until) : Number.NaN;
    return i === last - 1 && until >= from;
  });
  if (inForce.length === 0 || inForce.some((o) => Array.isArray(o.entry.variants))) return undefined;
  const total = Math.min(...inForce.map((o) => Number(o.entry.total)));
  if (!Number.isSafeInteger(total)) return undefined;
  const oneShard = inForce.every((o) => o.entry.shards === 1);
  // Never before the opening: a hold before it (an early-access tier's, a window shorter than a
  // shard's clock) is neither the draw's nor after it, and counted (a draw hold a sibling stamped
  // that early is counted too: a lower floor, never a false alarm).
  const cutoff = Math.max(from, opensAt, ...otherReveals.filter((r) => r <= revealedAt).map((r) => r + SHARD_CLOCK_MS));
  // Each other reservation's statuses in time order: it counts if it held units at any moment of the span.
  const lives = new Map<string, { quantity: number; skip: boolean; changes: { at: number; takes: boolean }[] }>();
  for (const { entry, at } of order) {
    if (
      !(entry.type in RANK) ||
      entry.type === "config" ||
      entry.type === "archive" ||
      entry.type === "draw-reveal" ||
      entry.type === "payment"
    )
      continue;
    const id = String(entry.reservation);
    let life = lives.get(id);
    if (!life) {
      const draw = entry.draw as { seedHash?: unknown } | undefined;
      // A hold naming no draw from the close on is this draw's own (a log written before holds named
      // it: its entries count it) or came after the decision: the line's, an arrival's (from the
      // opening every request waits for its draw). Not another draw's: draws are decided one at a
      // time, each hold by the reveal (and a sibling's clock), so past every earlier reveal. It is not
      // counted against the draw (an operator's SOLD_OUT would leave the units to the line).
      const after = entry.type === "hold" && draw === undefined && at >= cutoff;
      life = { quantity: Number(entry.quantity) || 0, skip: draw?.seedHash === seedHash || after, changes: [] };
      lives.set(id, life);
    }
    life.changes.push({ at, takes: entry.type !== "expired" && entry.type !== "cancelled" });
  }
  let others = 0;
  for (const life of lives.values()) {
    if (life.skip) continue;
    const during = life.changes.some(
      (c, i) => c.takes && c.at <= to && (life.changes[i + 1]?.at ?? Number.POSITIVE_INFINITY) >= from,
    );
    if (during) others += life.quantity;
  }
  return { units: total - others, total, others, oneShard };
}

/** What a replay takes besides the entries. */
export interface ReplayOptions {
  /** The verifier's clock (ms): what is recent, and what is in the future. Now by default. */
  now?: number;
  /** How far back from `now` an excess is not settled yet ({@link SETTLE_MS}; 0: all is in). */
  settleMs?: number;
  /** How long after its close an opening's reveal is not missing yet ({@link DECIDE_MS}; 0: all is in). */
  decideMs?: number;
  /** The size of a checkpoint the verifier kept (`--since`): no entry after it may be older than its newest by {@link SETTLE_MS}. */
  since?: number;
  /** Filled with each draw's holds by seed hash, for {@link checkDrawOutcomes}. */
  draws?: Map<string, DrawHolds>;
}

const iso = (ms: number) => new Date(ms).toISOString();

/**
 * The checks of each entry's time in the log's order: none after the verifier's clock (past the
 * skew clocks may have), and none after the kept checkpoint (`since` entries) older than that
 * checkpoint's newest entry by more than {@link SETTLE_MS}. A configuration is written once every
 * shard had it (its `until`), so that is when it counts as written.
 */
function checkTimes(entries: readonly Entry[], now: number, since: number): void {
  let newest = Number.NEGATIVE_INFINITY;
  for (const [index, entry] of entries.entries()) {
    const at = Date.parse(entry.time);
    const until = typeof entry.until === "string" ? Date.parse(entry.until) : at;
    const fail = (rule: string) => {
      throw new Broken(`entry ${index} (${entry.type} at ${entry.time}): ${rule}`, at);
    };
    if (!Number.isFinite(at) || !ISO_TIME.test(entry.time)) fail("its time is not a date");
    if (!Number.isFinite(until) || until < at) fail("its `until` is not a date after its time");
    if (Math.max(at, until) > now + CLOCK_SKEW_MS)
      fail(`its time is after the verifier's clock (${iso(now)}) by more than clocks differ`);
    if (index >= since && until < newest - SETTLE_MS)
      fail(
        `written after the checkpoint of ${since} entries you kept, though more than ${SETTLE_MS / 1000} s older than its newest entry (${iso(newest)}): it changes the history that checkpoint showed`,
      );
    if (index < since) newest = Math.max(newest, until);
  }
}

/** An ISO 8601 time as the gateway writes them (`Date#toISOString`). */
const ISO_TIME = /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{3}Z$/;

/** A hold's `draw` as the log has it: a seed hash and a position, or the entry is broken. */
function drawTagOf(value: unknown, fail: (rule: string) => never): { seedHash: string; position: number } {
  const tag = value as Record<string, unknown> | null;
  if (
    typeof tag !== "object" ||
    tag === null ||
    typeof tag.seedHash !== "string" ||
    !/^[0-9a-f]{64}$/.test(tag.seedHash) ||
    !Number.isSafeInteger(tag.position) ||
    (tag.position as number) < 1
  )
    return fail("its `draw` is not a seed hash and a position");
  return { seedHash: tag.seedHash, position: tag.position as number };
}

/** Replays the entries; returns the summary, or throws {@link Broken} naming the first entry that breaks a rule. */
export function replay(
  entries: Entry[],
  reveals: Map<string, string>,
  options: ReplayOptions = {},
): Record<string, unknown> {
  const now = options.now ?? Date.now();
  const settleMs = options.settleMs ?? SETTLE_MS;
  const decideMs = options.decideMs ?? DECIDE_MS;
  checkTimes(entries, now, options.since ?? entries.length);
  const order = entries
    .map((entry, index) => ({ entry, index, at: Date.parse(entry.time) }))
    .sort((a, b) => a.at - b.at || (RANK[a.entry.type] ?? 9) - (RANK[b.entry.type] ?? 9) || a.index - b.index);
  let sale: Sale | null = null;
  /** The last change while it reached the siblings: the configuration and windows before it, and until when. */
  let changing: { before: Sale | null; windows: Map<string, Commitment>; until: number } | null = null;
  const held = new Map<string, number>();
  const sold = new Map<string, number>();
  /** Every size a configuration listed: each stays listed. */
  const sizesListed = new Set<string>();
  const users = new Map<string, number>();
  const reservations = new Map<
    string,
    { status: string; quantity: number; variant: string; user: string; expires: number | null }
  >();
  const counts: Record<string, number> = {};
  /** Seed hashes committed by a configuration: when first, and the opening's window as last set before it opened. */
  const commitments = new Map<string, Commitment>();
  /** When each seed hash's reveal was logged: an opening's draw decides its holds up to then. */
  const revealedAt = new Map<string, number>();
  /** The windows a decision is judged by: the configuration's, or (in a change's span) the ones before it. */
  let inForce = commitments;
  /**
   * A log whose holds name their draw (a gateway that tags them made it): then a draw's outcomes are
   * exact, and a hold inside a window must name the earlier draw that made it. A log none of whose
   * holds does (written before they did) keeps the rule before: a draw's late holds are counted.
   */
  const tagged = entries.some((e) => e.type === "hold" && e.draw !== undefined);
  /**
   * A log can span the gateway's upgrade: draws decided before it hold untagged, those after tag
   * every hold. A draw is judged by its tags when some hold names it, or when its reveal is not
   * before the log's first tagged hold (the gateway tagged by then); an earlier one by the rule before.
   */
  const namedDraws = new Set<string>();
  let firstTag = Number.POSITIVE_INFINITY;
  for (const e of entries) {
    if (e.type !== "hold" || e.draw === undefined) continue;
    const hash = (e.draw as { seedHash?: unknown }).seedHash;
    if (typeof hash === "string") namedDraws.add(hash);
    const time = Date.parse(String(e.time));
    if (time < firstTag) firstTag = time;
  }
  /**
   * Draws a configuration committed to before they opened with the promise that their holds name
   * their place (`holdsNamed`): judged by their tags whatever the log's holds do, so a gateway that
   * made the promise cannot fall back to the count by leaving every tag out.
   */
  const promised = new Set<string>();
  /** Draws a configuration promised, before they opened, entry ids of their buyers' `user` here. */
  const saltPromised = new Set<string>();
  const taggedDraw = (hash: string): boolean =>
    promised.has(hash) || namedDraws.has(hash) || (revealTimes.get(hash) ?? Number.POSITIVE_INFINITY) >= firstTag;
  const draws = options.draws ?? new Map<string, DrawHolds>();
  const drawOf = (hash: string): DrawHolds => {
    let draw = draws.get(hash);
    if (!draw) {
      draw = { tagged: taggedDraw(hash), holds: new Map(), entrants: null, revealedAt: null, sizes: false };
      draws.set(hash, draw);
    }
    return draw;
  };
  /** The buyers each draw held (one entry per buyer, so one hold), by its seed hash. */
  const drawBuyers = new Map<string, Set<string>>();
  /** An untagged log: the buyers held inside a later window while an earlier opening's draw was decided. */
  const lateHolds = new Map<string, Set<string>>();
  /**
   * A fair opening whose window holds `at`: its requests wait for its draw, decided after the close,
   * so none is held there. Only an earlier opening's draw, decided late (from its close to its
   * reveal), may hold inside a later window (a tier's draw is due at its close, which may be the
   * public start). Each end gives {@link SHARD_CLOCK_MS}: a draw's holds are stamped by the entrants'
   * home shards. What a hold at `at` breaks, or the seed hash of the earlier draw that may make it
   * (`late`), or null when no window holds `at`. That is an untagged log's rule: in a tagged one a
   * hold naming a draw (`named`) is judged by {@link drawRule}, and one naming none by
   * {@link pendingRule}.
   */
  const windowRule = (
    at: number,
    named: string | undefined,
  ): { broken: string } | { late: string } | { unrevealed: string } | null => {
    if (named !== undefined) return null;
    const pending = pendingRule(at);
    if (pending !== null) return lateUntagged(at, pending.window) ?? pending.verdict;
    for (const [hash, window] of inForce) {
      if (taggedDraw(hash) || at < window.opensAt || at >= window.closesAt - SHARD_CLOCK_MS) continue;
      const inside = `a hold inside the opening's window (${iso(window.opensAt)} to ${iso(window.closesAt)}), whose requests its draw decides after the close`;
      return lateUntagged(at, window) ?? { broken: inside };
    }
    return null;
  };
  /**
   * The earlier draw, decided by a gateway from before holds named their draw, that may have made an
   * untagged hold at `at` inside a later `window` (its late holds are counted against its entrants).
   */
  const lateUntagged = (at: number, window: Commitment): { late: string } | null => {
    const candidates = [...commitments].filter(
      ([hash, earlier]) =>
        !taggedDraw(hash) &&
        earlier.opensAt < window.opensAt &&
        earlier.closesAt - SHARD_CLOCK_MS <= at &&
        (revealedAt.get(hash) ?? Number.POSITIVE_INFINITY) + SHARD_CLOCK_MS >= at,
    );
    // Draws are decided one at a time, earliest opening first: the one deciding at `at` is the
    // earliest not revealed by then; else the latest revealed (a sibling's clock a little ahead).
    const revealed = (h: string) => revealedAt.get(h) ?? Number.POSITIVE_INFINITY;
    const late =
      candidates.filter(([h]) => revealed(h) >= at).sort((a, b) => a[1].opensAt - b[1].opensAt)[0] ??
      candidates.sort((a, b) => b[1].opensAt - a[1].opensAt)[0];
    return late ? { late: late[0] } : null;
  };
  /** When each draw's reveal was logged, looked up ahead: a sibling may stamp a hold a second before it. */
  const revealTimes = new Map<string, number>();
  for (const entry of entries) {
    if (entry.type === "draw-reveal" && typeof entry.seedHash === "string" && !revealTimes.has(entry.seedHash))
      revealTimes.set(entry.seedHash, Date.parse(entry.time));
  }
  /**
   * A tagged log: from an opening to its draw's reveal every reservation waits for the draw, so the
   * only holds are those a draw makes, each naming it (a hold naming a draw is judged by
   * {@link drawRule}). An untagged hold then is one nobody drew: broken (a second's margin before
   * the reveal, for a sibling's clock). Without the reveal in the log (`unrevealed`), a hold of the
   * last minute is not settled yet.
   */
  const pendingRule = (
    at: number,
  ): { window: Commitment; verdict: { broken: string } | { unrevealed: string } } | null => {
    for (const [hash, window] of inForce) {
      if (!taggedDraw(hash)) continue;
      const decided = revealTimes.get(hash) ?? Number.POSITIVE_INFINITY;
      if (at < window.opensAt || at >= decided - SHARD_CLOCK_MS) continue;
      if (at < window.closesAt)
        return {
          window,
          verdict: {
            broken: `a hold inside the opening's window (${iso(window.opensAt)} to ${iso(window.closesAt)}), whose requests its draw decides after the close, and it names no draw that made it`,
          },
        };
      const rule = `a hold after the opening's window closed (${iso(window.closesAt)}) and before its draw was decided (${decided === Number.POSITIVE_INFINITY ? "no reveal in the log" : `its reveal at ${iso(decided)}`}), and it names no draw: the draw's units are its entrants'`;
      return { window, verdict: decided === Number.POSITIVE_INFINITY ? { unrevealed: rule } : { broken: rule } };
    }
    return null;
  };
  /**
   * A hold that names a draw: a draw some configuration committed to, made once its window closed and
   * before its reveal (each by {@link SHARD_CLOCK_MS}), at a position of that draw (1 to the entrants
   * its reveal logged), no position and no buyer twice (a buyer is one entry).
   */
  const drawRule = (
    tag: { seedHash: string; position: number },
    user: string,
    at: number,
    fail: (rule: string) => never,
  ) => {
    const named = `the draw ${tag.seedHash.slice(0, 12)}…`;
    const committed = commitments.get(tag.seedHash);
    if (!committed) return fail(`a hold naming ${named}, which no configuration committed to`);
    if (at < committed.closesAt - SHARD_CLOCK_MS)
      fail(`a hold naming ${named} before its window closed (${iso(committed.closesAt)})`);
    const draw = draws.get(tag.seedHash);
    if (draw?.revealedAt != null && at > draw.revealedAt + SHARD_CLOCK_MS)
      fail(`a hold naming ${named} after it was decided (its reveal at ${iso(draw.revealedAt)})`);
    if (draw?.entrants != null && tag.position > draw.entrants)
      fail(`a hold naming position ${tag.position} of ${named}, which had ${draw.entrants} entrants`);
    const twice = draw?.holds.get(tag.position);
    if (twice) fail(`a second hold for position ${tag.position} of ${named} (the first: entry ${twice.index})`);
    if (drawBuyers.get(tag.seedHash)?.has(user)) fail(`a second hold of one buyer by ${named} (one entry each)`);
  };
  const skipped = new Set<string>();
  const get = (m: Map<string, number>, k: string) => m.get(k) ?? 0;
  const add = (m: Map<string, number>, k: string, n: number) => m.set(k, get(m, k) + n);
  const sum = (m: Map<string, number>) => [...m.values()].reduce((n, v) => n + v, 0);

  /** Where the log has a reservation's hold, for a message about an entry that came before it. */
  const holdOf = (id: string) => {
    const found = order.find((o) => o.entry.type === "hold" && o.entry.reservation === id);
    return found ? ` (its hold is entry ${found.index}, at ${found.entry.time})` : " (no hold of it in the log)";
  };
  let unsettled: string | null = null;
  /** Units held and sold past the stock `sale` sets (per size), or null. */
  const overStock = (): string | null => {
    for (const [variant, total] of sale?.variants ?? new Map([["", sale?.total ?? 0]])) {
      if (get(held, variant) + get(sold, variant) > total)
        return `stock ${total}${variant ? ` of ${variant}` : ""} is less than the ${get(held, variant)} held + ${get(sold, variant)} sold`;
    }
    // In sizes, units held or sold before the SKU had them have no size: they still take its stock.
    if (sale?.variants && sum(held) + sum(sold) > sale.total)
      return `stock ${sale.total} is less than the ${sum(held)} held + ${sum(sold)} sold, units without a size included`;
    return null;
  };
  /**
   * A change's span is over: from its `until` every shard decides under it, so what is held and
   * sold must fit its stock (inside the span a sibling may still have held under the stock before).
   */
  const endSpan = (span: { until: number }) => {
    const over = overStock();
    if (over === null) return;
    const rule = `at ${iso(span.until)}, when every shard had the change: ${over}`;
    if (span.until > now - settleMs) throw new Unsettled(rule);
    throw new Broken(rule, span.until);
  };
  for (const { entry, index, at } of order) {
    const fail = (rule: string): never => {
      throw new Broken(`entry ${index} (${entry.type} at ${entry.time}): ${rule}`, at);
    };
    /** A stock or limit excess: broken, or unsettled within `settleMs` of the verifier's clock. */
    const exceeds = (rule: string): never => {
      if (at > now - settleMs) throw new Unsettled(`entry ${index} (${entry.type} at ${entry.time}): ${rule}`);
      return fail(rule);
    };
    try {
      if (changing && at > changing.until) {
        const span = changing;
        changing = null;
        endSpan(span);
      }
      counts[entry.type] = (counts[entry.type] ?? 0) + 1;
      const totalOf = (variant: string): number => {
        if (!sale) return fail("no configuration before it");
        if (!sale.variants) return variant === "" ? sale.total : fail(`variant ${variant} on a SKU without variants`);
        const total = sale.variants.get(variant);
        return total === undefined ? fail(`unknown variant ${JSON.stringify(variant)}`) : total;
      };
      const take = (variant: string, user: string, quantity: number) => {
        const total = totalOf(variant);
        if (get(held, variant) + get(sold, variant) + quantity > total)
          exceeds(
            `${get(held, variant)} held + ${get(sold, variant)} sold + ${quantity} is more than the stock of ${total}${variant ? ` of ${variant}` : ""}`,
          );
        // Units held or sold before the SKU had sizes count against its stock too (they have no size).
        if (sale?.variants && sum(held) + sum(sold) + quantity > sale.total)
          exceeds(
            `${sum(held)} held + ${sum(sold)} sold + ${quantity} is more than the stock of ${sale.total}, units without a size included`,
          );
        if (sale && get(users, user) + quantity > sale.perUserLimit)
          exceeds(
            `user ${user.slice(0, 12)}… would have ${get(users, user) + quantity} units, past the limit of ${sale.perUserLimit}`,
          );
        add(users, user, quantity);
      };
      if (entry.type === "config" || entry.type === "archive") {
        const num = (v: unknown) =>
          typeof v === "number" && Number.isInteger(v) && v >= 0 ? v : fail("a figure is not a count");
        const date = (v: unknown) =>
          typeof v === "string" && ISO_TIME.test(v) ? Date.parse(v) : fail(`${JSON.stringify(v)} is not a time`);
        const time = (v: unknown) => (v === null || v === undefined ? null : date(v));
        const variants = Array.isArray(entry.variants)
          ? new Map((entry.variants as { id: string; total: number }[]).map((v) => [String(v.id), num(v.total)]))
          : null;
        const before = sale;
        const until = typeof entry.until === "string" ? Date.parse(entry.until) : at;
        // An archived SKU is closed for good: its id takes no configuration after the archive.
        if (before?.status === "archived") fail("a configuration of an archived SKU");
        sale = {
          status: String(entry.status),
          total: num(entry.total),
          perUserLimit: num(entry.perUserLimit),
          holdSeconds: entry.holdSeconds === undefined ? null : num(entry.holdSeconds),
          startsAt: time(entry.startsAt),
          endsAt: time(entry.endsAt),
          tiers: Array.isArray(entry.tiers) ? (entry.tiers as { startsAt: string }[]).map((t) => date(t.startsAt)) : [],
          variants,
          price: entry.price === undefined ? undefined : entry.price === null ? null : num(entry.price),
          currency: typeof entry.currency === "string" ? entry.currency.toLowerCase() : null,
        };
        if (entry.type === "archive") sale.status = "archived";
        // A size is never removed (its held and sold units would stop counting against any stock).
        for (const size of sizesListed) {
          if (!variants?.has(size)) fail(`size ${JSON.stringify(size)} is no longer listed: a size is never removed`);
        }
        for (const size of variants?.keys() ?? []) sizesListed.add(size);
        if (variants && [...variants.values()].reduce((n, v) => n + v, 0) !== sale.total)
          fail(
            `the sizes' stock adds up to ${[...variants.values()].reduce((n, v) => n + v, 0)}, not the total ${sale.total}`,
          );
        const windows = new Map([...commitments].map(([hash, c]) => [hash, { ...c }]));
        // Up to `until` (its own time when it names none: in that millisecond, which came first is not told).
        changing = until >= at ? { before, windows, until } : null;
        // The fair opening's commitments: the first configuration naming a seed hash commits to it. An
        // opening moved before it opens keeps its seed hash, and one withdrawn then owes no reveal.
        const listed = new Set<string>();
        for (const draw of Array.isArray(entry.draws) ? (entry.draws as Record<string, unknown>[]) : []) {
          const hash = String(draw.seedHash);
          const window = { opensAt: date(draw.opensAt), closesAt: date(draw.closesAt) };
          // An opening to come is the public start's or a tier's: any other would exempt a window from
          // its rule. (One that opened stays listed as history, its tier moved or gone since.)
          if (at < window.opensAt && window.opensAt !== sale.startsAt && !sale.tiers.includes(window.opensAt))
            fail(`an opening at ${iso(window.opensAt)}, which is neither the sale's start nor a tier's`);
          listed.add(hash);
          if (draw.holdsNamed === true && at < window.opensAt) promised.add(hash);
          if (draw.entryIdPrefix === "salt" && at < window.opensAt) saltPromised.add(hash);
          const committed = commitments.get(hash);
          if (!committed) commitments.set(hash, { at, ...window });
          else if (at < committed.opensAt) Object.assign(committed, window);
        }
        for (const [hash, committed] of commitments) {
          if (!listed.has(hash) && at < committed.opensAt && !reveals.has(hash)) commitments.delete(hash);
        }
        const over = overStock();
        if (over !== null) exceeds(over);
        continue;
      }
      if (entry.type === "draw-reveal") {
        const hash = String(entry.seedHash);
        const committed = commitments.get(hash);
        if (!committed) fail(`a draw revealed whose seed hash ${hash.slice(0, 12)}… no configuration committed to`);
        else {
          if (committed.at > committed.opensAt) fail("the draw's seed hash was committed after its opening opened");
          if (at < committed.closesAt) fail("the draw was revealed before its window closed");
          if (entry.opensAt !== iso(committed.opensAt) || entry.closesAt !== iso(committed.closesAt))
            fail(
              `the reveal names the window ${String(entry.opensAt)} to ${String(entry.closesAt)}, not the one committed (${iso(committed.opensAt)} to ${iso(committed.closesAt)})`,
            );
        }
        if (typeof entry.seed !== "string" || createHash("sha256").update(entry.seed, "utf8").digest("hex") !== hash)
          fail("the revealed seed does not hash to the committed seed hash");
        const entrants =
          Number.isSafeInteger(entry.entrants) && (entry.entrants as number) >= 0
            ? (entry.entrants as number)
            : fail("the reveal's `entrants` is not a count");
        reveals.set(hash, String(entry.seed));
        revealedAt.set(hash, at);
        const late = lateHolds.get(hash)?.size ?? 0;
        if (late > entrants)
          fail(`${late} buyers held inside a later window while this draw of ${entrants} entrants was decided`);
        const draw = drawOf(hash);
        Object.assign(draw, { entrants, revealedAt: at, sizes: sale?.variants != null });
        for (const [position, hold] of draw.holds) {
          if (position > entrants)
            fail(
              `entry ${hold.index} (hold at ${hold.time}) names position ${position} of this draw of ${entrants} entrants`,
            );
        }
        continue;
      }
      if (!(entry.type in RANK)) {
        skipped.add(entry.type);
        continue;
      }
      /**
       * A payment answered `refund_required` that changed no reservation (`payment`): of a reservation
       * the log holds, by that buyer, for a reason its rules give at that point. `already_paid`: the
       * reservation was paid (or refund_required: its payment decided) already. A money mismatch: the
       * sale has a price, and the money the payment said is not the price × quantity in the sale's
       * currency (`currency_mismatch`: another currency; `amount_mismatch`: the currency, another
       * amount). A configuration that does not say its price is not checked for it.
       */
      const refundRule = (id: string): null => {
        const user =
          typeof entry.user === "string" && /^[0-9a-f]{64}$/.test(entry.user) ? entry.user : fail("no user commitment");
        const known = reservations.get(id);
        if (!known) return fail(`a payment of reservation ${id}, which the log never held${holdOf(id)}`);
        if (known.user !== user) fail(`a payment of reservation ${id} by another user than its hold's`);
        if (entry.outcome !== "refund_required")
          fail(`a payment entry whose outcome is ${JSON.stringify(entry.outcome)}, not refund_required`);
        const amount =
          entry.amount === null
            ? null
            : Number.isSafeInteger(entry.amount) && (entry.amount as number) >= 0
              ? (entry.amount as number)
              : fail("the payment's amount is not a count of minor units");
        const currency =
          entry.currency === null
            ? null
            : typeof entry.currency === "string"
              ? entry.currency.toLowerCase()
              : fail("the payment's currency is not a text");
        const reason = entry.reason;
        if (reason === "already_paid") {
          if (known.status !== "paid" && known.status !== "refund_required")
            fail(`already_paid, but reservation ${id} is ${known.status} in the log at that point`);
          return null;
        }
        if (reason !== "amount_mismatch" && reason !== "currency_mismatch")
          return fail(
            `a payment refund_required for ${JSON.stringify(reason)}, which is not a reason that changes no reservation (amount_mismatch, currency_mismatch, already_paid)`,
          );
        if (amount === null || currency === null) return fail(`${reason} without the money the payment said`);
        if (!sale) return fail("a payment before any configuration");
        if (sale.price === undefined) return null; // a configuration from before it named the price: not checked
        if (sale.price === null) return fail(`${reason}, but the sale has no price: any amount is taken`);
        const due = sale.price * known.quantity;
        if (reason === "currency_mismatch" && currency === sale.currency)
          fail(`currency_mismatch, but ${currency} is the sale's currency`);
        if (reason === "amount_mismatch" && currency !== sale.currency)
          fail(`amount_mismatch, but ${currency} is not the sale's currency ${sale.currency} (a currency_mismatch)`);
        if (reason === "amount_mismatch" && amount === due)
          fail(`amount_mismatch, but ${amount} is the price ${sale.price} × ${known.quantity}`);
        return null;
      };
      /** The entry under the sale's rules as `sale` states them; it changes nothing unless they allow it. */
      const decide = () => {
        const id = typeof entry.reservation === "string" ? entry.reservation : fail("no reservation id");
        if (entry.type === "payment") {
          refundRule(id);
          return;
        }
        const quantity =
          Number.isSafeInteger(entry.quantity) && (entry.quantity as number) >= 1
            ? (entry.quantity as number)
            : fail("no quantity");
        const variant = typeof entry.variant === "string" ? entry.variant : "";
        const user =
          typeof entry.user === "string" && /^[0-9a-f]{64}$/.test(entry.user) ? entry.user : fail("no user commitment");
        const known = reservations.get(id);
        if (known && (known.quantity !== quantity || known.variant !== variant || known.user !== user))
          fail(`reservation ${id} changes its quantity, variant or user`);
        switch (entry.type) {
          case "hold": {
            if (known) fail(`reservation ${id} is held a second time`);
            if (!sale) return fail("a hold before any configuration");
            if (sale.status !== "on_sale") fail(`a hold while the sale is ${sale.status}`);
            if (sale.endsAt !== null && at >= sale.endsAt) fail("a hold after the sale's end");
            if (sale.startsAt !== null && at < sale.startsAt && !sale.tiers.some((t) => t <= at))
              fail("a hold before the start, under no tier that had opened");
            const tag = entry.draw === undefined ? undefined : drawTagOf(entry.draw, fail);
            if (tag) drawRule(tag, user, at, fail);
            const inWindow = windowRule(at, tag?.seedHash);
            if (inWindow && "broken" in inWindow) fail(inWindow.broken);
            // The reveal may still be on its way to the log (within the minute): as an excess, unsettled till then.
            if (inWindow && "unrevealed" in inWindow) exceeds(inWindow.unrevealed);
            // An untagged log: a draw decided late holds once per entrant, each a buyer of their own: its reveal counts them.
            const lateDraw = inWindow && "late" in inWindow ? inWindow.late : null;
            const lateUsers = lateDraw === null ? null : (lateHolds.get(lateDraw) ?? new Set<string>());
            if (lateUsers?.has(user))
              fail("a second hold of one buyer inside a window while an earlier draw was decided");
            const expires = typeof entry.expires === "string" ? Date.parse(entry.expires) : Number.NaN;
            // A hold lasts the sale's holdSeconds from when it was made, no longer (a hold that never
            // lapses keeps its units from everyone else).
            if (sale.holdSeconds !== null && expires > at + sale.holdSeconds * 1000)
              fail(`a hold until ${iso(expires)}, past the ${sale.holdSeconds} s a hold lasts`);
            take(variant, user, quantity);
            add(held, variant, quantity);
            if (lateDraw !== null && lateUsers) lateHolds.set(lateDraw, lateUsers.add(user));
            if (tag) {
              drawOf(tag.seedHash).holds.set(tag.position, {
                index,
                time: entry.time,
                reservation: id,
                quantity,
                user,
              });
              drawBuyers.set(tag.seedHash, (drawBuyers.get(tag.seedHash) ?? new Set()).add(user));
            }
            reservations.set(id, {
              status: "held",
              quantity,
              variant,
              user,
              expires: Number.isFinite(expires) ? expires : null,
            });
            break;
          }
          case "paid": {
            if (!known) return fail(`a payment of reservation ${id}, which the log never held${holdOf(id)}`);
            if (known.status === "held") {
              add(held, variant, -quantity);
            } else if (known.status === "expired" || known.status === "cancelled") {
              // A late payment is a new sale (it takes its units again): none once the SKU is archived.
              if (!sale || sale.status === "archived") fail(`a late payment of reservation ${id} after the archive`);
              // It takes its units as a new reservation would: not while a draw is pending (the
              // engine answers it busy until the draw is decided; the units are the entrants').
              const pending = pendingRule(at)?.verdict;
              if (pending && "broken" in pending) fail(`a late payment of reservation ${id} (${pending.broken})`);
              if (pending && "unrevealed" in pending)
                exceeds(`a late payment of reservation ${id} (${pending.unrevealed})`);
              take(variant, user, quantity);
            } else fail(`a payment of reservation ${id}, which is ${known.status}`);
            add(sold, variant, quantity);
            known.status = "paid";
            break;
          }
          case "cancelled":
          case "expired":
          case "refund_required": {
            if (!known) return fail(`reservation ${id} released, which the log never held${holdOf(id)}`);
            // A hold lapses at its end, not before (its buyer had until then to pay).
            if (entry.type === "expired" && known.status === "held" && known.expires !== null && at < known.expires)
              fail(`reservation ${id} expired before its hold's end (${new Date(known.expires).toISOString()})`);
            if (known.status === "held") {
              add(held, variant, -quantity);
              add(users, user, -quantity);
            } else if (entry.type !== "refund_required" || known.status === "paid")
              fail(`reservation ${id} ${entry.type}, but it is ${known.status}`);
            if (
              entry.type === "refund_required" &&
              entry.reason !== undefined &&
              !LATE_REASONS.includes(String(entry.reason))
            )
              fail(
                `reservation ${id} refund_required for ${JSON.stringify(entry.reason)}, which is no late payment's reason (${LATE_REASONS.join(", ")})`,
              );
            known.status = entry.type;
            break;
          }
        }
      };
      try {
        decide();
      } catch (err) {
        // While a change reached the siblings (its entry's time to its `until`), a shard may still
        // have decided under the configuration before it.
        if (!(err instanceof Broken || err instanceof Unsettled) || !changing || at > changing.until) throw err;
        const after = sale;
        sale = changing.before;
        inForce = changing.windows;
        try {
          decide();
        } catch {
          throw err;
        } finally {
          sale = after;
          inForce = commitments;
        }
      }
    } catch (err) {
      if (!(err instanceof Unsettled)) throw err;
      unsettled = err.message;
      break;
    }
  }
  // A draw's refusals are judged by the units the log proves it had (checkDrawOutcomes).
  for (const [hash, draw] of draws) {
    const committed = commitments.get(hash);
    if (draw.revealedAt === null || !committed) continue;
    const others = [...revealedAt].filter(([h]) => h !== hash).map(([, r]) => r);
    const stock = drawStockOf(order, hash, committed.opensAt, committed.closesAt, draw.revealedAt, others);
    if (stock) draw.stock = stock;
  }
  try {
    if (unsettled === null && changing) endSpan(changing);
    // Every opening committed to and closed has its seed revealed (decided after its close, logged then).
    for (const [hash, committed] of unsettled === null ? commitments : []) {
      if (reveals.has(hash) || committed.closesAt > now) continue;
      const rule = `the opening at ${iso(committed.opensAt)} closed at ${iso(committed.closesAt)}, and its seed (hash ${hash.slice(0, 12)}…) is not revealed in the log`;
      if (committed.closesAt > now - decideMs) throw new Unsettled(`${rule} yet`);
      throw new Broken(rule, committed.closesAt);
    }
  } catch (err) {
    if (!(err instanceof Unsettled)) throw err;
    unsettled = err.message;
  }
  for (const hash of saltPromised) drawOf(hash).salted = true;
  return {
    entries: entries.length,
    byType: counts,
    reservations: reservations.size,
    buyers: [...new Set([...reservations.values()].map((r) => r.user))].length,
    held: sum(held),
    sold: sum(sold),
    ...(sale?.variants
      ? {
          variants: Object.fromEntries(
            [...sale.variants.keys()].map((v) => [v, { held: get(held, v), sold: get(sold, v) }]),
          ),
        }
      : {}),
    stock: sale?.total ?? null,
    // Whether the draws' holds name their positions (a log from before they did: outcomes not tied).
    ...(reveals.size > 0 ? { drawOutcomes: tagged || promised.size > 0 ? "tied to positions" : "untagged log" } : {}),
    ...(skipped.size > 0 ? { notReplayed: [...skipped] } : {}),
    // The replay stopped at an excess of the log's last minute: run again once the shards' flushes are in.
    ...(unsettled ? { settled: false, unsettled } : { settled: true }),
  };
}

/** RFC 9162 §2.1.3.2: whether `proof` puts the leaf hash at `index` of the tree (size, root). */
export function verifyInclusion(leaf: Hash, index: number, size: number, proof: Hash[], root: Hash): boolean {
  if (index < 0 || index >= size) return false;
  let fn = index;
  let sn = size - 1;
  let r = leaf;
  for (const p of proof) {
    if (sn === 0) return false;
    if (fn % 2 === 1 || fn === sn) {
      r = nodeHash(p, r);
      while (fn % 2 === 0 && fn !== 0) {
        fn = Math.floor(fn / 2);
        sn = Math.floor(sn / 2);
      }
    } else r = nodeHash(r, p);
    fn = Math.floor(fn / 2);
    sn = Math.floor(sn / 2);
  }
  return sn === 0 && r.equals(root);
}

/**
 * A buyer's receipt (`--receipt <file>`: one `proof` of their reservation's `receipts`, a C2SP
 * tlog-proof): its checkpoint signed by the log's key for this log, the inclusion proof of the entry
 * its `extra` line carries, and the log as fetched holding that same entry at that index and that
 * same tree (so the receipt's checkpoint is consistent with today's).
 */
export function checkReceipt(
  text: string,
  verifier: Verifier,
  current: Checkpoint,
  levels: Hash[][],
  entries: Buffer[],
) {
  const lines = text.split("\n");
  const blank = lines.indexOf("");
  if (lines[0] !== "c2sp.org/tlog-proof@v1" || blank < 0) throw new Broken("the receipt is not a C2SP tlog-proof");
  let at = 1;
  const extra = lines[at]?.startsWith("extra ") ? Buffer.from((lines[at++] ?? "").slice(6), "base64") : null;
  const index = /^index (0|[1-9][0-9]*)$/.exec(lines[at++] ?? "")?.[1];
  if (!extra || index === undefined) throw new Broken("the receipt lacks its entry (extra) or its index");
  const proof = lines.slice(at, blank).map((h) => Buffer.from(h, "base64"));
  if (proof.some((h) => h.length !== 32)) throw new Broken("the receipt's proof has a hash that is not 32 bytes");
  const signed = openCheckpoint(lines.slice(blank + 1).join("\n"), verifier, "the receipt's checkpoint");
  if (signed.origin !== current.origin) throw new Broken(`the receipt is of another log (${signed.origin})`);
  const i = Number(index);
  if (!verifyInclusion(leafHash(extra), i, signed.size, proof, signed.root))
    throw new Broken(`the receipt's entry ${i} is not in its checkpoint: the proof does not lead to its root`);
  if (signed.size > current.size || !treeHash(levels, signed.size).equals(signed.root))
    throw new Broken("the receipt's checkpoint is not consistent with the log as it is now");
  if (!entries[i]?.equals(extra)) throw new Broken(`the log's entry ${i} is not the receipt's`);
  return { index: i, entry: (JSON.parse(extra.toString("utf8")) as Entry).type, checkpointSize: signed.size };
}

/** A drawn or announced opening as `/draw` (and its `openings`) shows it. */
export interface ShownDraw {
  opensAt: string;
  seedHash: string;
  seed: string | null;
  decidedAt: string | null;
  /** `salt`: its entry ids are the buyers' `user` (a gateway before salted ids leaves it out). */
  entryIdPrefix?: "salt" | "sku";
}

/**
 * The draws `/draw` shows against the log's reveals: each decided one's seed must be the one the log
 * revealed for its seed hash. One decided within {@link SETTLE_MS} before `now` (the verifier's
 * clock, ms) whose reveal the log lacks is not settled yet (the reveal reaches the log a moment
 * after the seed shows), as an excess there is not. Returns why the draws are not settled, or null;
 * throws {@link Broken} otherwise.
 */
export function checkShownDraws(
  shown: readonly ShownDraw[],
  reveals: ReadonlyMap<string, string>,
  now: number,
  settleMs = SETTLE_MS,
): string | null {
  let unsettled: string | null = null;
  for (const draw of shown) {
    if (draw.seed === null) continue;
    const logged = reveals.get(draw.seedHash);
    if (logged === undefined && Date.parse(draw.decidedAt ?? "") > now - settleMs) {
      unsettled = `the draw of the opening at ${draw.opensAt}, decided at ${draw.decidedAt}, is not revealed in the log yet`;
      continue;
    }
    if (logged === undefined)
      throw new Broken(`the draw's seed hash ${draw.seedHash.slice(0, 12)}… has no reveal in the log`);
    if (draw.seed !== logged) throw new Broken("the draw shows another seed than the log revealed");
  }
  return unsettled;
}

/**
 * The other way round: every draw the log revealed is one `/draw` shows decided (`shown`: its
 * openings; empty when it answers 404), else its order and outcomes would go unchecked. The reveal
 * is logged once shard 0 decided, and `/draw` shows the seed within a second or so: one logged
 * within {@link SETTLE_MS} before `now` may not show yet (returns why it is not settled), older, it
 * is broken. `draws`: {@link replay}'s, by seed hash.
 */
export function checkRevealsShown(
  shown: readonly ShownDraw[],
  draws: ReadonlyMap<string, DrawHolds>,
  now: number,
  settleMs = SETTLE_MS,
): string | null {
  let unsettled: string | null = null;
  for (const [hash, draw] of draws) {
    if (draw.revealedAt === null) continue;
    const listed = shown.find((d) => d.seedHash === hash);
    if (listed?.seed != null) continue;
    const rule = `the log revealed the draw ${hash.slice(0, 12)}… at ${iso(draw.revealedAt)}, but /draw shows it ${listed ? "undecided" : "nowhere"}: its order and outcomes go unchecked`;
    if (draw.revealedAt > now - settleMs) unsettled ??= rule;
    else throw new Broken(rule, draw.revealedAt);
  }
  return unsettled;
}

/**
 * A draw's public entries (`/draw/entries`, from position `from` + 1 on) against its revealed
 * seed: positions 1, 2, … by ascending hex HMAC-SHA256(seed, entryId), the order anyone recomputes
 * from the seed, each entry once (its key after the one before, not equal). `previous`: the last key
 * of the page before. Returns the last key; throws {@link Broken} at the first entry out of place.
 */
export function checkDrawPage(
  seed: string,
  entries: readonly { entryId: string; position: number }[],
  from: number,
  previous = "",
): string {
  let position = from;
  let last = previous;
  for (const entry of entries) {
    position++;
    if (entry.position !== position)
      throw new Broken(`draw entry ${entry.entryId.slice(0, 12)}…: position ${entry.position}, not ${position}`);
    const key = createHmac("sha256", seed).update(entry.entryId, "utf8").digest("hex");
    if (key <= last) throw new Broken(`draw position ${position} is out of the order the seed gives, or listed twice`);
    last = key;
  }
  return last;
}

/** A draw's public entry as `/draw/entries` lists it. */
export type DrawnEntry = {
  entryId: string;
  position: number;
  quantity: number;
  result: string;
};

/** What {@link checkDrawOutcomes} found: the held positions, and why it could not tell more (when it could not). */
export interface DrawOutcomesChecked {
  held: number;
  /** The log's holds name no draw (written before they did): the outcomes are not tied to the order. */
  unproven?: string;
  /** A held position whose hold is not in the log yet, within {@link SETTLE_MS} of the reveal. */
  unsettled?: string;
  /** A sale without sizes: the units the log proves were there for the draw, its refusals judged by them. */
  stock?: number;
}

/**
 * A draw's public entries (all of them, in position order) against the holds the log has naming
 * that draw (`drawn`, from {@link replay}): each entry `HELD` has exactly one hold at its position,
 * of its quantity; an entry refused has none, and no hold names a position the draw does not list.
 * On a sale without sizes the draw decides in order until nothing is left, so no entry is held
 * after the first `SOLD_OUT` (with sizes, one size gone says nothing of another's). A held position
 * whose hold the log lacks within `settleMs` of the reveal (by `now`) is not settled yet: a home
 * shard's hold may reach the log after shard 0's reveal. Throws {@link Broken} at the first entry
 * that breaks a rule.
 */
export function checkDrawOutcomes(
  entries: readonly DrawnEntry[],
  drawn: DrawHolds | undefined,
  now: number,
  settleMs = SETTLE_MS,
): DrawOutcomesChecked {
  const held = entries.filter((e) => e.result === "HELD").length;
  if (drawn && !drawn.tagged && held > 0) {
    // Just revealed: its holds (the first that would name it) may still be on their way.
    if (drawn.revealedAt !== null && drawn.revealedAt > now - settleMs)
      return { held, unsettled: "the draw's holds are not in the log yet" };
    return { held, unproven: "the log's holds name no draw position (written before they did)" };
  }
  const holds = drawn?.holds ?? new Map<number, TaggedHold>();
  const name = (e: DrawnEntry) => `draw position ${e.position} (entry ${e.entryId.slice(0, 12)}…)`;
  let soldOut: DrawnEntry | null = null;
  let unsettled: string | undefined;
  /** The units the entries before this one held (a sale without sizes decides each against what is left). */
  let heldBefore = 0;
  const stock = drawn?.sizes === true ? undefined : drawn?.stock;
  const recent = drawn?.revealedAt != null && drawn.revealedAt > now - settleMs;
  /** A refusal the log's stock disproves: broken, or unsettled while an entry may still be on its way. */
  const refused = (e: DrawnEntry, rule: string) => {
    if (!stock) return;
    const why = `${name(e)} was answered ${e.result}, but ${rule}: the log leaves at least ${stock.units} units for the draw (stock ${stock.total}, at most ${stock.others} taken by others from its close to its reveal), and the entries before it held ${heldBefore}`;
    if (recent) unsettled ??= why;
    else throw new Broken(why);
  };
  for (const e of entries) {
    const hold = holds.get(e.position);
    if (e.result !== "HELD") {
      if (hold)
        throw new Broken(
          `${name(e)} was answered ${e.result}, yet the log's entry ${hold.index} (hold at ${hold.time}) names that position`,
        );
      if (e.result === "SOLD_OUT") soldOut ??= e;
      if (e.result === "SOLD_OUT" && stock && heldBefore < stock.units)
        refused(e, `${stock.units - heldBefore} of them were left at its turn`);
      // One shard decides each entry against its own stock; a sharded one's pull may fall short.
      if (e.result === "INSUFFICIENT_STOCK" && stock?.oneShard && heldBefore + e.quantity <= stock.units)
        refused(e, `the ${e.quantity} it asked were left at its turn`);
      continue;
    }
    heldBefore += e.quantity;
    if (soldOut && drawn?.sizes !== true)
      throw new Broken(
        `${name(e)} was held after position ${soldOut.position} was answered SOLD_OUT: the draw decides in order until nothing is left`,
      );
    if (!hold) {
      const revealedAt = drawn?.revealedAt ?? null;
      if (revealedAt !== null && revealedAt > now - settleMs) {
        unsettled ??= `${name(e)} is held, and its hold is not in the log yet`;
        continue;
      }
      throw new Broken(`${name(e)} is held, but no hold in the log names that position`);
    }
    if (hold.quantity !== e.quantity)
      throw new Broken(
        `${name(e)} asked ${e.quantity} units, but the log's entry ${hold.index} holds ${hold.quantity} for it`,
      );
  }
  const listed = new Set(entries.map((e) => e.position));
  for (const [position, hold] of holds) {
    if (!listed.has(position))
      throw new Broken(
        `the log's entry ${hold.index} (hold at ${hold.time}) names position ${position}, which the draw does not list`,
      );
  }
  return { held, ...(unsettled ? { unsettled } : {}), ...(stock ? { stock: stock.units } : {}) };
}

/**
 * A draw whose entry ids are its buyers' `user` (`entryIdPrefix` `salt`, as `/draw` shows it, or as the
 * configuration that committed to it promised): each hold the log has naming one of its positions is
 * that entry's buyer's, so the draw's order and the log's holds name the same buyers. Returns whether
 * the draw is salted (checked); throws {@link Broken} at the first hold of someone else, or when
 * `/draw` takes back the promise.
 */
export function checkDrawBuyers(
  entries: readonly DrawnEntry[],
  drawn: DrawHolds | undefined,
  shown: "salt" | "sku" | undefined,
): boolean {
  if (shown !== "salt" && drawn?.salted !== true) return false;
  if (shown !== "salt")
    throw new Broken(
      `the configuration that committed to the draw promised entry ids of its buyers' \`user\`, but /draw says ${shown === undefined ? "nothing of them" : `they are of \`<${shown}>:<userId>\``}`,
    );
  for (const [position, hold] of drawn?.holds ?? []) {
    const entry = entries[position - 1];
    if (entry && entry.position === position && hold.user !== entry.entryId)
      throw new Broken(
        `the log's entry ${hold.index} (hold at ${hold.time}) holds draw position ${position} for a buyer other than that entry's (${entry.entryId.slice(0, 12)}…)`,
      );
  }
  return true;
}
