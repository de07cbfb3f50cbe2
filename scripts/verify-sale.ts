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
 *    equal times; at one time, configurations first, then releases, payments, holds): no hold before
 *    a configuration, outside the sale's status and window (unless an early-access tier had opened),
 *    or past the stock in force (per variant); no `user` past the per-user limit; a payment, release
 *    or refund only of a reservation the log holds, in a status it may leave. A stock or limit excess
 *    within a minute of the log's last entry is reported as not settled (`settled: false`), not as
 *    broken: shards flush independently, so a release may still be on its way; run again later.
 * 5. a fair opening's draw: its seed hash committed by a configuration before the opening opened,
 *    the reveal after the window closed with a seed that hashes to it, and the draw's public entries
 *    (`/draw/entries`) in the order that seed gives (ascending hex HMAC-SHA256(seed, entryId)).
 *
 * With `--receipt <file>` (a buyer's receipt, one `proof` of their reservation), also checks that
 * receipt against the signed log. Prints a summary and exits 0, or names the first entry that breaks
 * a rule and exits 1 (2: the log could not be read). Progress goes to stderr. Writes the checkpoint it checked to
 * `--save <file>`, for the next run's `--since`.
 */
import { createHash, createHmac, createPublicKey, verify } from "node:crypto";
import { readFileSync, writeFileSync } from "node:fs";

type Hash = Buffer;
const TILE_HEIGHT = 8;
const TILE_WIDTH = 1 << TILE_HEIGHT;

class Broken extends Error {}
/** A stock or limit rule broken by an entry of the log's last minute: a release may still be on its way. */
class Unsettled extends Error {}

/**
 * How far back from the log's last entry a stock or limit excess is not yet a broken rule: a shard
 * logs its decisions in order, but shards flush independently (a failed flush is retried within
 * seconds), so a hold made with units a sibling released may be logged before that release. Older
 * than this, every shard's entries are in: the excess stands.
 */
const SETTLE_MS = 60_000;

const sha256 = (...parts: Buffer[]): Hash => createHash("sha256").update(Buffer.concat(parts)).digest();
const leafHash = (entry: Buffer): Hash => sha256(Buffer.from([0]), entry);
const nodeHash = (left: Hash, right: Hash): Hash => sha256(Buffer.from([1]), left, right);

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
const treeHash = (levels: Hash[][], size: number): Hash => (size === 0 ? sha256() : rangeHash(levels, 0, size));

/** The complete subtrees' hashes of a list of leaf hashes, level by level. */
function levelsOf(leaves: Hash[]): Hash[][] {
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
function tilePath(level: number | "entries", index: number, width: number): string {
  const groups: string[] = [];
  let n = index;
  do {
    groups.unshift(String(n % 1000).padStart(3, "0"));
    n = Math.floor(n / 1000);
  } while (n > 0);
  const encoded = groups.map((g, i) => (i < groups.length - 1 ? `x${g}` : g)).join("/");
  return `tile/${level}/${encoded}${width < TILE_WIDTH ? `.p/${width}` : ""}`;
}

interface Verifier {
  name: string;
  id: Buffer;
  key: ReturnType<typeof createPublicKey>;
}

/** A signed-note verifier key: `<name>+<hex id>+<base64(0x01 ‖ key)>`. */
function parseVerifier(text: string): Verifier {
  const [name = "", idHex = "", ...rest] = text.trim().split("+");
  const raw = Buffer.from(rest.join("+"), "base64");
  if (!name || !/^[0-9a-f]{8}$/.test(idHex) || raw.length !== 33 || raw[0] !== 1)
    throw new Broken(`the log key is not an Ed25519 signed-note key: ${text.trim()}`);
  const id = sha256(Buffer.from(`${name}\n`), raw).subarray(0, 4);
  if (id.toString("hex") !== idHex) throw new Broken("the log key's id does not match its name and key");
  const spki = Buffer.concat([Buffer.from("302a300506032b6570032100", "hex"), raw.subarray(1)]);
  return { name, id, key: createPublicKey({ key: spki, format: "der", type: "spki" }) };
}

interface Checkpoint {
  origin: string;
  size: number;
  root: Hash;
  note: string;
}

/** Opens a signed note with `verifier` and reads it as a checkpoint. */
function openCheckpoint(note: string, verifier: Verifier, what: string): Checkpoint {
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

async function fetchBytes(url: string): Promise<Buffer> {
  for (let attempt = 1; ; attempt++) {
    const response = await fetch(url);
    if (response.ok) return Buffer.from(await response.arrayBuffer());
    if (attempt >= 3 || response.status < 500) throw new Error(`GET ${url}: ${response.status}`);
    await new Promise((r) => setTimeout(r, 500 * attempt));
  }
}

type Entry = Record<string, unknown> & { type: string; time: string };

/** The entries of a bundle: each a big-endian uint16 length and its bytes. */
function entriesOf(bundle: Buffer, want: number, first: number): Buffer[] {
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

const RANK: Record<string, number> = {
  config: 0,
  archive: 0,
  "draw-reveal": 0,
  cancelled: 1,
  expired: 1,
  refund_required: 1,
  paid: 2,
  hold: 3,
};

interface Sale {
  status: string;
  total: number;
  perUserLimit: number;
  startsAt: number | null;
  endsAt: number | null;
  tiers: number[];
  variants: Map<string, number> | null;
}

/** Replays the entries; returns the summary, or throws {@link Broken} naming the first entry that breaks a rule. */
function replay(entries: Entry[], reveals: Map<string, string>): Record<string, unknown> {
  const order = entries
    .map((entry, index) => ({ entry, index, at: Date.parse(entry.time) }))
    .sort((a, b) => a.at - b.at || (RANK[a.entry.type] ?? 9) - (RANK[b.entry.type] ?? 9) || a.index - b.index);
  let sale: Sale | null = null;
  const held = new Map<string, number>();
  const sold = new Map<string, number>();
  const users = new Map<string, number>();
  const reservations = new Map<
    string,
    { status: string; quantity: number; variant: string; user: string; expires: number | null }
  >();
  const counts: Record<string, number> = {};
  /** Seed hashes committed by a configuration: when, and the opening's window. */
  const commitments = new Map<string, { at: number; opensAt: number; closesAt: number }>();
  const skipped = new Set<string>();
  const get = (m: Map<string, number>, k: string) => m.get(k) ?? 0;
  const add = (m: Map<string, number>, k: string, n: number) => m.set(k, get(m, k) + n);

  /** Where the log has a reservation's hold, for a message about an entry that came before it. */
  const holdOf = (id: string) => {
    const found = order.find((o) => o.entry.type === "hold" && o.entry.reservation === id);
    return found ? ` (its hold is entry ${found.index}, at ${found.entry.time})` : " (no hold of it in the log)";
  };
  const latest = order.reduce((t, o) => (Number.isFinite(o.at) ? Math.max(t, o.at) : t), 0);
  let unsettled: string | null = null;
  for (const { entry, index, at } of order) {
    const fail = (rule: string): never => {
      throw new Broken(`entry ${index} (${entry.type} at ${entry.time}): ${rule}`);
    };
    /** A stock or limit excess: broken, or unsettled within {@link SETTLE_MS} of the last entry. */
    const exceeds = (rule: string): never => {
      if (at > latest - SETTLE_MS) throw new Unsettled(`entry ${index} (${entry.type} at ${entry.time}): ${rule}`);
      return fail(rule);
    };
    if (!Number.isFinite(at)) fail("its time is not a date");
    try {
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
        if (sale && get(users, user) + quantity > sale.perUserLimit)
          exceeds(
            `user ${user.slice(0, 12)}… would have ${get(users, user) + quantity} units, past the limit of ${sale.perUserLimit}`,
          );
        add(users, user, quantity);
      };
      if (entry.type === "config" || entry.type === "archive") {
        const num = (v: unknown) =>
          typeof v === "number" && Number.isInteger(v) && v >= 0 ? v : fail("a figure is not a count");
        const time = (v: unknown) => (v === null || v === undefined ? null : Date.parse(String(v)));
        const variants = Array.isArray(entry.variants)
          ? new Map((entry.variants as { id: string; total: number }[]).map((v) => [String(v.id), num(v.total)]))
          : null;
        sale = {
          status: String(entry.status),
          total: num(entry.total),
          perUserLimit: num(entry.perUserLimit),
          startsAt: time(entry.startsAt),
          endsAt: time(entry.endsAt),
          tiers: Array.isArray(entry.tiers)
            ? (entry.tiers as { startsAt: string }[]).map((t) => Date.parse(t.startsAt))
            : [],
          variants,
        };
        if (entry.type === "archive") sale.status = "archived";
        // The fair opening's commitments: the first configuration naming a seed hash commits to it.
        for (const draw of Array.isArray(entry.draws) ? (entry.draws as Record<string, unknown>[]) : []) {
          const hash = String(draw.seedHash);
          if (!commitments.has(hash))
            commitments.set(hash, {
              at,
              opensAt: Date.parse(String(draw.opensAt)),
              closesAt: Date.parse(String(draw.closesAt)),
            });
        }
        for (const [variant, total] of variants ?? new Map([["", sale.total]])) {
          if (get(held, variant) + get(sold, variant) > total)
            fail(
              `stock ${total}${variant ? ` of ${variant}` : ""} is less than the ${get(held, variant)} held + ${get(sold, variant)} sold`,
            );
        }
        continue;
      }
      if (entry.type === "draw-reveal") {
        const hash = String(entry.seedHash);
        const committed = commitments.get(hash);
        if (!committed) fail(`a draw revealed whose seed hash ${hash.slice(0, 12)}… no configuration committed to`);
        else {
          if (committed.at > committed.opensAt) fail("the draw's seed hash was committed after its opening opened");
          if (at < committed.closesAt) fail("the draw was revealed before its window closed");
        }
        if (typeof entry.seed !== "string" || createHash("sha256").update(entry.seed, "utf8").digest("hex") !== hash)
          fail("the revealed seed does not hash to the committed seed hash");
        reveals.set(hash, String(entry.seed));
        continue;
      }
      if (!(entry.type in RANK)) {
        skipped.add(entry.type);
        continue;
      }
      const id = typeof entry.reservation === "string" ? entry.reservation : fail("no reservation id");
      const quantity = typeof entry.quantity === "number" && entry.quantity >= 1 ? entry.quantity : fail("no quantity");
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
          take(variant, user, quantity);
          add(held, variant, quantity);
          const expires = typeof entry.expires === "string" ? Date.parse(entry.expires) : Number.NaN;
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
            take(variant, user, quantity); // a late payment takes its units again
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
          known.status = entry.type;
          break;
        }
      }
    } catch (err) {
      if (!(err instanceof Unsettled)) throw err;
      unsettled = err.message;
      break;
    }
  }
  const sum = (m: Map<string, number>) => [...m.values()].reduce((n, v) => n + v, 0);
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
    ...(skipped.size > 0 ? { notReplayed: [...skipped] } : {}),
    // The replay stopped at an excess of the log's last minute: run again once the shards' flushes are in.
    ...(unsettled ? { settled: false, unsettled } : { settled: true }),
  };
}

/** RFC 9162 §2.1.3.2: whether `proof` puts the leaf hash at `index` of the tree (size, root). */
function verifyInclusion(leaf: Hash, index: number, size: number, proof: Hash[], root: Hash): boolean {
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
function checkReceipt(text: string, verifier: Verifier, current: Checkpoint, levels: Hash[][], entries: Buffer[]) {
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

/**
 * The public opening's draw order (API.md "Fair opening"): its seed as `/draw` shows it must be the
 * one the log revealed, and `/draw/entries` must list the entries by ascending hex
 * HMAC-SHA256(seed, entryId), positions 1, 2, …: the order anyone recomputes from the seed.
 */
async function checkDrawOrder(
  root: string,
  sku: string,
  reveals: Map<string, string>,
  progress: (line: string) => void,
): Promise<{ seedHash: string; entries: number }> {
  const base = `${root}/api/skus/${encodeURIComponent(sku)}/draw`;
  const info = JSON.parse((await fetchBytes(base)).toString("utf8")) as { seedHash: string; seed: string | null };
  const logged = reveals.get(info.seedHash);
  if (logged === undefined)
    throw new Broken(`the draw's seed hash ${info.seedHash.slice(0, 12)}… has no reveal in the log`);
  if (info.seed !== logged) throw new Broken("the draw shows another seed than the log revealed");
  let previous = "";
  let position = 0;
  for (;;) {
    const url = `${base}/entries?offset=${position}&limit=1000`;
    const page = JSON.parse((await fetchBytes(url)).toString("utf8")) as {
      entries: { entryId: string; position: number }[];
    };
    for (const entry of page.entries) {
      position++;
      if (entry.position !== position)
        throw new Broken(`draw entry ${entry.entryId.slice(0, 12)}…: position ${entry.position}, not ${position}`);
      const key = createHmac("sha256", logged).update(entry.entryId, "utf8").digest("hex");
      if (key < previous) throw new Broken(`draw position ${position} is out of the order the seed gives`);
      previous = key;
    }
    if (page.entries.length < 1000) break;
  }
  progress(`the draw's ${position} entries are in the order its revealed seed gives`);
  return { seedHash: info.seedHash, entries: position };
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

  if (since !== undefined) {
    const earlier = openCheckpoint(readFileSync(since, "utf8"), verifier, `the checkpoint of ${since}`);
    if (earlier.origin !== checkpoint.origin) throw new Broken(`${since} is of another log (${earlier.origin})`);
    if (earlier.size > checkpoint.size)
      throw new Broken(`the log shrank: ${since} has ${earlier.size} entries, the checkpoint ${checkpoint.size}`);
    if (!treeHash(levels, earlier.size).equals(earlier.root))
      throw new Broken(`the log is not consistent with ${since}: its first ${earlier.size} entries have another root`);
    progress(`consistent with ${since} (${earlier.size} entries)`);
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
  const summary = replay(parsed, reveals);
  const draw = reveals.size > 0 ? await checkDrawOrder(root, sku, reveals, progress) : undefined;
  const result = {
    ok: true,
    origin: checkpoint.origin,
    size: checkpoint.size,
    tiles,
    ...summary,
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
