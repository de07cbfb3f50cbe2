import {
  createExecutionContext,
  runDurableObjectAlarm,
  runInDurableObject,
  waitOnExecutionContext,
} from "cloudflare:test";
import { env } from "cloudflare:workers";
import { describe, expect, it } from "vitest";
import {
  consistencyProof,
  type Hash,
  inclusionProof,
  leafHash,
  nodeHash,
  tilePath,
  verifyConsistency,
  verifyInclusion,
} from "../../durable-objects/shared/merkle";
import { saltSecret, userCommitment, userSalt } from "../../durable-objects/shared/sale-entries";
import { openNote, parseCheckpoint, parseVerifier } from "../../durable-objects/shared/signed-note";
import { forgetSoldOut } from "../../src/edge/sold-out-cache";
import worker from "../../src/index";
import { parseTilePath } from "../../src/routes/sale-log";
import { signHs256 } from "../../tools/jwt";
import { call, createSku, reserve, stockShard, tokenFor, uniqueSku } from "../support/client";
import { closeWindow } from "../support/draw-window";
import { eventually } from "../support/eventually";
import { logEntriesOf } from "../support/log-entries";
import { pay } from "../support/payments";

/**
 * The verifiable sale's log (API.md v1.4; durable-objects/log/sale-log.ts): every reservation change
 * of a SKU reaches its log through the shards' outboxes, once each, with buyers as salted
 * commitments only.
 */

/** RFC 6962's MTH over a list of leaf hashes, straight from its definition. */
function mth(leaves: Hash[]): Hash {
  if (leaves.length === 1) return leaves[0] as Hash;
  let k = 1;
  while (k * 2 < leaves.length) k *= 2;
  return nodeHash(mth(leaves.slice(0, k)), mth(leaves.slice(k)));
}

/** A GET through the Worker's fetch handler, its body as bytes. */
async function get(path: string): Promise<{ status: number; bytes: Uint8Array; headers: Headers }> {
  const ctx = createExecutionContext();
  const response = await worker.fetch(new Request(`http://flashgate.test${path}`), env, ctx);
  await waitOnExecutionContext(ctx);
  return { status: response.status, bytes: new Uint8Array(await response.arrayBuffer()), headers: response.headers };
}
const text = (bytes: Uint8Array) => new TextDecoder().decode(bytes);

const logOf = (sku: string) => env.SALE_LOG.getByName(sku);

describe("the sale log", () => {
  it("takes every hold, payment and cancel once, with the buyer as a salted commitment", async () => {
    const sku = uniqueSku("log");
    await createSku(sku, { totalStock: 10, perUserLimit: 2 });
    const users = ["alice-log", "bob-log", "carol-log"];
    const answers = await Promise.all(users.map(async (u) => reserve(u, sku, 1, await tokenFor(u, sku))));
    for (const a of answers) expect(a.status).toBe(202);
    const [a, b] = answers.map((x) => x.json.reservationId as string);
    await pay(a as string);
    expect((await call("POST", `/api/reservations/${b}/cancel`, { user: "bob-log" })).status).toBe(200);

    const entries = await eventually(async () => {
      const got = await logEntriesOf(sku);
      expect(got.length).toBe(6);
      return got;
    }, 20_000);
    expect(entries[0]).toMatchObject({ type: "config", total: 10, perUserLimit: 2, shards: 1, status: "on_sale" });
    expect(entries.filter((e) => e.type === "hold")).toHaveLength(3);
    expect(entries.find((e) => e.type === "paid")).toMatchObject({ reservation: a, quantity: 1, shard: 0 });
    expect(entries.find((e) => e.type === "cancelled")).toMatchObject({ reservation: b, quantity: 1 });

    // No user id anywhere; the buyer is hex SHA-256 of <salt>:<userId>.
    const text = JSON.stringify(entries);
    for (const u of users) expect(text).not.toContain(u);
    const secret = saltSecret(env.LOG_SIGNING_KEY);
    const salt = await userSalt(secret, sku, "alice-log");
    expect(salt).toMatch(/^[0-9a-f]{32}$/);
    const aliceHold = entries.find((e) => e.type === "hold" && e.reservation === a);
    expect(aliceHold?.user).toBe(userCommitment(salt, "alice-log"));
    expect(await userSalt(secret, `${sku}x`, "alice-log")).not.toBe(salt);

    // The same events again (a retried flush, a re-emit) add nothing.
    const again = JSON.stringify({
      events: [
        {
          id: crypto.randomUUID(),
          type: "reservation.paid",
          reservationId: a,
          sku,
          userId: "alice-log",
          quantity: 1,
          occurredAt: new Date().toISOString(),
          seq: 99,
        },
      ],
    });
    expect(await logOf(sku).append(0, [again])).toBe(0);
    expect(await logOf(sku).size()).toBe(6);

    // One batch with a known event, a new one twice and one lacking a field: the new one, once.
    const c = answers[2]?.json.reservationId as string;
    const event = (type: string, reservationId: string) => ({
      id: crypto.randomUUID(),
      type,
      reservationId,
      sku,
      userId: "carol-log",
      quantity: 1,
      occurredAt: new Date().toISOString(),
      seq: 100,
    });
    const expired = event("reservation.expired", c);
    const mixed = JSON.stringify({
      events: [event("reservation.paid", a as string), expired, expired, { ...expired, quantity: 0 }],
    });
    expect(await logOf(sku).append(0, [mixed, again])).toBe(1);
    expect(await logOf(sku).size()).toBe(7);
  });

  it("logs each payment refund_required that changed no reservation once, with its reason and money", async () => {
    const sku = uniqueSku("logrefund");
    await createSku(sku, { totalStock: 4, perUserLimit: 2, price: 1500, holdSeconds: 60 });
    const held = await reserve("amy-refund", sku);
    expect(held.status).toBe(202);
    const id = held.json.reservationId as string;
    const wrong = `evt_wrong_${sku}`;
    const answers = [
      await pay(id, "payment.succeeded", wrong, { amount: 1499 }),
      await pay(id, "payment.succeeded", wrong, { amount: 1499 }), // the same webhook again
      await pay(id, "payment.succeeded", `evt_eur_${sku}`, { amount: 1500, currency: "eur" }),
      await pay(id, "payment.succeeded", `evt_paid_${sku}`, { amount: 1500 }),
      await pay(id, "payment.succeeded", `evt_twice_${sku}`, { amount: 1500, currency: "USD" }),
    ];
    expect(answers.map((a) => a.json.outcome)).toEqual([
      "refund_required",
      "refund_required",
      "refund_required",
      "applied",
      "refund_required",
    ]);

    const entries = await eventually(async () => {
      const got = await logEntriesOf(sku);
      // A flush appends its events, then the payments read before them (outbox-sender.ts): a payment
      // follows what was decided before it, but may follow an event decided after it in the same flush.
      expect(got.map((e) => e.type).sort()).toEqual(["config", "hold", "paid", "payment", "payment", "payment"]);
      return got;
    }, 20_000);
    const user = entries[1]?.user;
    expect(user).toMatch(/^[0-9a-f]{64}$/);
    expect(entries.slice(0, 2).map((e) => e.type)).toEqual(["config", "hold"]);
    // already_paid follows the payment that paid the reservation.
    const paidAt = entries.findIndex((e) => e.type === "paid");
    expect(entries.findIndex((e) => e.type === "payment" && e.reason === "already_paid")).toBeGreaterThan(paidAt);
    const payments = entries.filter((e) => e.type === "payment");
    expect(payments.map(({ time, ...rest }) => rest)).toEqual([
      {
        type: "payment",
        reservation: id,
        user,
        outcome: "refund_required",
        reason: "amount_mismatch",
        amount: 1499,
        currency: "usd",
      },
      {
        type: "payment",
        reservation: id,
        user,
        outcome: "refund_required",
        reason: "currency_mismatch",
        amount: 1500,
        currency: "eur",
      },
      {
        type: "payment",
        reservation: id,
        user,
        outcome: "refund_required",
        reason: "already_paid",
        amount: 1500,
        currency: "usd",
      },
    ]);
    for (const p of payments) expect(Date.parse(String(p.time))).toBeGreaterThan(Date.now() - 60_000);
    // No provider event id, user id or token in an entry.
    const text = JSON.stringify(entries);
    for (const secret of ["evt_", "amy-refund"]) expect(text).not.toContain(secret);

    // The duplicate webhook, once more after the flush: nothing waits, nothing is added.
    expect((await pay(id, "payment.succeeded", wrong, { amount: 1499 })).json.outcome).toBe("refund_required");
    await runInDurableObject(stockShard(env, sku, 0), (object) => {
      expect(object.engine.outbox.paymentsDue()).toEqual([]);
    });
    await scheduler.wait(200);
    expect(await logOf(sku).size()).toBe(6);
  });

  it("gives a late payment's refund_required entry its reason", async () => {
    const sku = uniqueSku("loglate");
    await createSku(sku, { totalStock: 1, price: 700, holdSeconds: 60 });
    const first = await reserve("bea-late", sku, 1);
    const expiresAt = Date.parse(first.json.expiresAt);
    await runInDurableObject(stockShard(env, sku, 0), (object) => {
      object.now = () => expiresAt + 1;
      object.engine.holds.expireDue(expiresAt + 1);
    });
    forgetSoldOut(sku); // this isolate learnt "sold out" from the first hold
    expect((await reserve("cal-late", sku, 1)).status).toBe(202); // takes the unit the expired hold gave back
    const late = await pay(first.json.reservationId, "payment.succeeded", `evt_late_${sku}`, { amount: 700 });
    expect(late.json).toMatchObject({ reservationStatus: "refund_required", outcome: "refund_required" });
    const entries = await eventually(async () => {
      const got = await logEntriesOf(sku);
      expect(got.map((e) => e.type)).toEqual(["config", "hold", "expired", "hold", "refund_required"]);
      return got;
    }, 20_000);
    expect(entries[4]).toMatchObject({
      reservation: first.json.reservationId,
      reason: "too_late",
      amount: 700,
      currency: "usd",
    });
  });

  it("has every change shard 0 applied, one whose PUT never got its answer included, stating what the operator set", async () => {
    const sku = uniqueSku("logput");
    await createSku(sku, { totalStock: 7, shards: 2 });
    // The catalog's call to shard 0 as an attempt whose answer is lost: the change is made, and
    // nothing of the Worker's runs after it (the entry is shard 0's own, written with the change).
    const paused = await stockShard(env, sku, 0).putSku({ sku, shards: 2, assumedTotal: 7, status: "paused" });
    expect(paused.ok).toBe(true);
    const configs = await eventually(async () => {
      const got = (await logEntriesOf(sku)).filter((e) => e.type === "config");
      expect(got.map((e) => [e.status, e.total, e.shards])).toEqual([
        ["on_sale", 7, 2],
        ["paused", 7, 2],
      ]);
      return got;
    });
    // Shard 0 took the change first, its sibling by `until` (left out when that was the same moment).
    for (const entry of configs)
      expect(Date.parse(String(entry.until ?? entry.time))).toBeGreaterThanOrEqual(Date.parse(String(entry.time)));
  });

  it("records heads that only grow, whose roots match the entries, and receipts that prove them", async () => {
    const sku = uniqueSku("loghead");
    await createSku(sku, { totalStock: 50, perUserLimit: 1 });
    const log = logOf(sku);
    const sizes: number[] = [];
    for (let round = 0; round < 3; round++) {
      const users = Array.from({ length: 3 + round }, (_, i) => `h${round}-${i}`);
      await Promise.all(users.map(async (u) => reserve(u, sku, 1, await tokenFor(u, sku))));
      const want = sizes.at(-1) ?? 1; // the configuration's entry first
      const head = await eventually(async () => {
        const h = await log.recordHead();
        expect(h.size).toBe(want + users.length);
        return h;
      }, 20_000);
      sizes.push(head.size);
      const entries = await logEntriesOf(sku);
      const leaves = entries.map((e) => leafHash(new TextEncoder().encode(JSON.stringify(e))));
      const root = mth(leaves);
      expect([...root]).toEqual([...head.root]);
    }
    expect(sizes).toEqual([4, 8, 13]);

    const receipts = await log.receipts((await logEntriesOf(sku))[4]?.reservation as string, "example.test/log");
    expect(receipts).toHaveLength(1);
    const proof = receipts[0]?.proof ?? "";
    const [header, extra, index, ...rest] = proof.split("\n");
    expect(header).toBe("c2sp.org/tlog-proof@v1");
    expect(index).toBe("index 4");
    const blank = rest.indexOf("");
    const hashes = rest.slice(0, blank).map((h) => Uint8Array.from(atob(h), (c) => c.charCodeAt(0)));
    const checkpoint = rest.slice(blank + 1);
    expect(checkpoint[0]).toBe("example.test/log");
    expect(checkpoint[1]).toBe("13");
    const root = Uint8Array.from(atob(checkpoint[2] ?? ""), (c) => c.charCodeAt(0));
    const entry = Uint8Array.from(atob((extra ?? "").slice("extra ".length)), (c) => c.charCodeAt(0));
    expect(verifyInclusion(leafHash(entry), 4, 13, hashes, root)).toBe(true);
  });

  it("serves the key, signed checkpoints that only grow, tiles and entry bundles over HTTP", async () => {
    const sku = uniqueSku("logtiles");
    await createSku(sku, { totalStock: 400, perUserLimit: 1 });
    const keyAnswer = await get("/api/log/key");
    expect(keyAnswer.status).toBe(200);
    expect(keyAnswer.headers.get("content-type")).toContain("text/plain");
    const verifier = await parseVerifier(text(keyAnswer.bytes).trim());
    if (!verifier) throw new Error("no verifier key");

    /** The checkpoint as served, opened with the key. */
    const checkpoint = async () => {
      const answer = await get(`/api/skus/${sku}/log/checkpoint`);
      expect(answer.status).toBe(200);
      const opened = await openNote(text(answer.bytes), verifier);
      if (!opened) throw new Error("the checkpoint's signature does not verify");
      const parsed = parseCheckpoint(opened);
      if (!parsed) throw new Error("not a checkpoint");
      return parsed;
    };
    // The configuration's entry, in a checkpoint the alarm signs within LOG_CHECKPOINT_SECONDS.
    const first = await eventually(async () => {
      const c = await checkpoint();
      expect(c.size).toBe(1);
      return c;
    }, 10_000);
    expect(first.origin).toBe(`flashgate.test/api/skus/${sku}/log`);

    // 300 holds: a full level-0 tile and a partial one, with no recordHead called.
    const users = Array.from({ length: 299 }, (_, i) => `t${i}`);
    for (let i = 0; i < users.length; i += 50) {
      await Promise.all(users.slice(i, i + 50).map(async (u) => reserve(u, sku, 1, await tokenFor(u, sku))));
    }
    const second = await eventually(async () => {
      const c = await checkpoint();
      expect(c.size).toBe(300);
      return c;
    }, 20_000);

    // Tiles: the full one, the partial one, none past the tree.
    const full = await get(`/api/skus/${sku}/log/${tilePath(0, 0)}`);
    expect(full.status).toBe(200);
    expect(full.bytes.length).toBe(256 * 32);
    expect(full.headers.get("content-type")).toBe("application/octet-stream");
    const partial = await get(`/api/skus/${sku}/log/${tilePath(0, 1, 44)}`);
    expect(partial.bytes.length).toBe(44 * 32);
    expect((await get(`/api/skus/${sku}/log/${tilePath(0, 1, 45)}`)).status).toBe(404);
    expect((await get(`/api/skus/${sku}/log/${tilePath(0, 1)}`)).status).toBe(404);
    const level1 = await get(`/api/skus/${sku}/log/${tilePath(1, 0, 1)}`);
    expect(level1.bytes.length).toBe(32);
    const bundle = await get(`/api/skus/${sku}/log/${tilePath("entries", 1, 44)}`);
    expect(bundle.status).toBe(200);
    const leaves: Hash[] = [];
    for (let i = 0; i < 256; i++) leaves.push(full.bytes.slice(i * 32, i * 32 + 32));
    for (let i = 0; i < 44; i++) leaves.push(partial.bytes.slice(i * 32, i * 32 + 32));
    // The bundle's entries hash to the partial tile's leaves.
    let at = 0;
    for (let i = 0; i < 44; i++) {
      const length = ((bundle.bytes[at] ?? 0) << 8) | (bundle.bytes[at + 1] ?? 0);
      expect([...leafHash(bundle.bytes.slice(at + 2, at + 2 + length))]).toEqual([...(leaves[256 + i] as Hash)]);
      at += 2 + length;
    }
    expect(at).toBe(bundle.bytes.length);
    // The level-1 hash is the root of the first 256 leaves; the whole root, of all 300.
    expect([...level1.bytes]).toEqual([...mth(leaves.slice(0, 256))]);
    expect([...second.root]).toEqual([...mth(leaves)]);
    // The second checkpoint extends the first.
    const byIndex = (level: number, index: number) => mth(leaves.slice(index << level, (index + 1) << level));
    expect(verifyConsistency(1, first.root, 300, second.root, consistencyProof(1, 300, byIndex))).toBe(true);

    // Unknown SKUs and malformed paths.
    expect((await get(`/api/skus/${uniqueSku("nolog")}/log/checkpoint`)).status).toBe(404);
    expect((await get(`/api/skus/${sku}/log/tile/0/1`)).status).toBe(404);
    expect((await get(`/api/skus/${sku}/log/tile/0/000.p/256`)).status).toBe(404);
  });

  it("reads tile paths as C2SP writes them", () => {
    expect(parseTilePath("0/000")).toEqual({ level: 0, index: 0, width: 256 });
    expect(parseTilePath("entries/x001/x234/067.p/8")).toEqual({ level: "entries", index: 1234067, width: 8 });
    expect(parseTilePath("3/x001/000")).toEqual({ level: 3, index: 1000, width: 256 });
    for (const bad of ["0/1", "0/000.p/0", "0/000.p/256", "64/000", "0/x000", "a/000", "0/000/"]) {
      expect(parseTilePath(bad), bad).toBeNull();
    }
  });

  it("gives the owner receipts that prove their entries in a signed checkpoint, and their salt", async () => {
    const sku = uniqueSku("logreceipt");
    await createSku(sku, { totalStock: 5, perUserLimit: 1 });
    const held = await reserve("rita", sku, 1, await tokenFor("rita", sku));
    expect(held.status).toBe(202);
    expect(held.json.receipts).toEqual([]);
    const salt = held.json.salt as string;
    expect(salt).toMatch(/^[0-9a-f]{32}$/);
    const id = held.json.reservationId as string;
    await pay(id);

    const verifier = await parseVerifier(text((await get("/api/log/key")).bytes).trim());
    if (!verifier) throw new Error("no verifier key");
    const receipts = await eventually(async () => {
      const view = await call("GET", `/api/reservations/${id}`, { user: "rita" });
      expect(view.json.salt).toBe(salt);
      expect(view.json.receipts.map((r: { entry: string }) => r.entry)).toEqual(["hold", "paid"]);
      return view.json.receipts as { entry: string; index: number; proof: string }[];
    }, 10_000);
    for (const receipt of receipts) {
      const [header, extra = "", index = "", ...rest] = receipt.proof.split("\n");
      expect(header).toBe("c2sp.org/tlog-proof@v1");
      expect(index).toBe(`index ${receipt.index}`);
      const blank = rest.indexOf("");
      const hashes = rest.slice(0, blank).map((h) => Uint8Array.from(atob(h), (c) => c.charCodeAt(0)));
      const opened = await openNote(rest.slice(blank + 1).join("\n"), verifier);
      const checkpoint = opened && parseCheckpoint(opened);
      if (!checkpoint) throw new Error("the receipt's checkpoint does not verify");
      expect(checkpoint.origin).toBe(`flashgate.test/api/skus/${sku}/log`);
      const entry = Uint8Array.from(atob(extra.slice("extra ".length)), (c) => c.charCodeAt(0));
      expect(verifyInclusion(leafHash(entry), receipt.index, checkpoint.size, hashes, checkpoint.root)).toBe(true);
      const parsed = JSON.parse(text(entry));
      expect(parsed).toMatchObject({ type: receipt.entry, reservation: id, user: userCommitment(salt, "rita") });
    }
    // Nobody else sees them (nor the reservation).
    expect((await call("GET", `/api/reservations/${id}`, { user: "sam" })).status).toBe(404);
  });

  it("waits for a moved opening's reveal at its new close (found in a second reading)", async () => {
    // An opening moved earlier before it opens keeps its seed hash: the log's alarm must ask shard 0
    // for the draw once the new window closes, not the first one, or the reveal comes minutes after
    // the seed shows on /draw.
    const sku = uniqueSku("logmoved");
    const log = logOf(sku);
    const draw = (closesAt: string) => ({ opensAt: closesAt, closesAt, seedHash: "ef".repeat(32) });
    const config = (n: number, closesAt: string) => ({
      type: "config" as const,
      time: new Date(n).toISOString(),
      draws: [draw(closesAt)],
    });
    expect(await log.appendConfig(config(1, "2030-01-01T10:10:00.000Z"), "config:1", sku)).toBe(true);
    expect(await log.appendConfig(config(2, "2030-01-01T10:03:00.000Z"), "config:2", sku)).toBe(true);
    const due = await runInDurableObject(log, (_object, state) =>
      state.storage.sql.exec<{ closes_at: number }>("SELECT closes_at FROM draws").toArray(),
    );
    expect(due.map((row) => new Date(row.closes_at).toISOString())).toEqual(["2030-01-01T10:03:00.000Z"]);
  });

  it("stops waiting for a draw taken off before it opened, and goes idle (found in a third reading)", async () => {
    // An opening withdrawn before it opens owes no reveal (docs/VERIFY.md): its draw is in no later
    // configuration, and the log must not ask shard 0 for it every 2 s for good.
    const sku = uniqueSku("logwithdrawn");
    await createSku(sku, {
      totalStock: 3,
      startsAt: new Date(Date.now() + 60_000).toISOString(),
      openingWindowMs: 500,
    });
    const withdrawn = await call("PUT", `/admin/skus/${sku}`, { admin: true, body: { openingWindowMs: 0 } });
    expect(withdrawn.status).toBe(200);
    const entries = await eventually(async () => {
      const got = await logEntriesOf(sku);
      expect(got).toHaveLength(2);
      return got;
    }, 20_000);
    expect(entries[0]?.draws).toHaveLength(1);
    expect(entries[1]?.draws).toBeUndefined();
    const log = logOf(sku);
    await runDurableObjectAlarm(log);
    expect(await runInDurableObject(log, (_object, state) => state.storage.getAlarm())).toBeNull();
  });

  it("reveals a test SKU's draw in an entry that says test: true, as its configuration does", async () => {
    // API.md v1.4 "Test sales": every log entry of a test SKU carries the flag, the draw's reveal too.
    const sku = uniqueSku("logtestdraw");
    const opensAt = Date.now() + 60_000;
    await createSku(sku, {
      totalStock: 3,
      test: true,
      startsAt: new Date(opensAt).toISOString(),
      openingWindowMs: 1_000,
    });
    const log = logOf(sku);
    const committed = () =>
      runInDurableObject(log, (_object, state) =>
        state.storage.sql.exec<{ n: number }>("SELECT COUNT(*) AS n FROM sqlite_master WHERE name = 'draws'").one().n >
        0
          ? state.storage.sql.exec<{ seed_hash: string }>("SELECT seed_hash FROM draws").toArray()
          : [],
      );
    await eventually(async () => expect(await committed()).toHaveLength(1));
    await closeWindow(sku, 1, opensAt + 1_000);
    // The log's clock is the real one: its draw's close is moved to the past, as if the minute passed.
    await runInDurableObject(log, (_object, state) => state.storage.sql.exec("UPDATE draws SET closes_at = 0"));
    expect(await runDurableObjectAlarm(log)).toBe(true);
    const entries = await logEntriesOf(sku);
    expect(entries.filter((e) => e.type === "config").map((e) => e.test)).toEqual([true]);
    expect(entries.filter((e) => e.type === "draw-reveal")).toEqual([
      expect.objectContaining({ seedHash: (await committed())[0]?.seed_hash, test: true }),
    ]);
  });

  it("serves tiles, bundles and proofs that agree with the tree at the odd sizes (1, 2, 3, 255, 256, 257)", async () => {
    const sku = uniqueSku("logsizes");
    const log = logOf(sku);
    const leaves: Hash[] = [];
    let last: { size: number; root: Hash } | null = null;
    for (const size of [1, 2, 3, 255, 256, 257]) {
      while (leaves.length < size) {
        const entry = { type: "config" as const, time: new Date(0).toISOString(), n: leaves.length };
        expect(await log.appendConfig(entry)).toBe(true);
        leaves.push(leafHash(new TextEncoder().encode(JSON.stringify(entry))));
      }
      const head = await log.recordHead();
      expect(head.size).toBe(size);
      expect([...head.root]).toEqual([...mth(leaves)]);
      // Level-0 tiles: full ones, then the partial one; the level-1 tile once 256 leaves are there.
      for (let n = 0; n * 256 < size; n++) {
        const width = Math.min(256, size - n * 256);
        const tile = await log.tile(0, n, width);
        expect(tile?.length).toBe(width * 32);
        for (let i = 0; i < width; i++)
          expect([...(tile as Uint8Array).slice(i * 32, i * 32 + 32)]).toEqual([...(leaves[n * 256 + i] as Hash)]);
        expect(await log.tile(0, n, width + 1)).toBeNull();
        expect((await log.entryBundle(n, width))?.length).toBeGreaterThan(0);
        expect(await log.entryBundle(n, width + 1)).toBeNull();
      }
      const top = await log.tile(1, 0, 1);
      expect(top === null ? null : [...top]).toEqual(size >= 256 ? [...mth(leaves.slice(0, 256))] : null);
      // Every leaf's receipt-side proof verifies (the last and a middle one here), and the tree
      // extends the last head.
      const origin = "sizes.test/log";
      const note = await log.checkpoint(origin);
      expect(note?.split("\n")[1]).toBe(String(size));
      const byIndex = (level: number, index: number) => mth(leaves.slice(index << level, (index + 1) << level));
      for (const index of new Set([0, size >> 1, size - 1])) {
        const proof = inclusionProof(index, size, byIndex);
        expect(verifyInclusion(leaves[index] as Hash, index, size, proof, head.root)).toBe(true);
      }
      const extends_ =
        last === null ||
        verifyConsistency(last.size, last.root, size, head.root, consistencyProof(last.size, size, byIndex));
      expect(extends_).toBe(true);
      last = { size, root: head.root };
    }
    // A head never shrinks or stands still: recording again changes nothing.
    expect((await log.recordHead()).size).toBe(257);
  });

  it("keeps no user id, JWT, token, access code or claim value in any entry, early access included", async () => {
    const sku = uniqueSku("logprivate");
    const now = Date.now();
    const iso = (ms: number) => new Date(ms).toISOString();
    await createSku(sku, {
      totalStock: 10,
      perUserLimit: 1,
      startsAt: iso(now + 3_600_000),
      access: [
        { name: "members", startsAt: iso(now - 60_000), claim: { name: "member", value: "gold-claim-value" } },
        { name: "codes", startsAt: iso(now - 60_000) },
      ],
    });
    const made = await call("POST", `/admin/skus/${sku}/access-codes`, {
      admin: true,
      body: { tier: "codes", count: 2 },
    });
    expect(made.status).toBe(201);
    const [code] = made.json.codes as string[];
    // A member by claim, and a buyer by code, each holds a unit before the public start.
    const member = `private-member-${sku}`;
    const memberJwt = await signHs256(
      { sub: member, member: "gold-claim-value", exp: Math.floor(now / 1000) + 600 },
      "test-auth-secret",
    );
    const memberToken = await call("POST", `/api/skus/${sku}/tokens`, {
      headers: { authorization: `Bearer ${memberJwt}` },
    });
    expect(memberToken.status).toBe(201);
    const held = await call("POST", `/api/skus/${sku}/reservations`, {
      headers: { authorization: `Bearer ${memberJwt}` },
      body: { token: memberToken.json.token, quantity: 1 },
    });
    expect(held.status).toBe(202);
    const coder = `private-coder-${sku}`;
    const codeToken = await call("POST", `/api/skus/${sku}/tokens`, {
      user: coder,
      headers: { "Access-Code": code as string },
    });
    expect(codeToken.status).toBe(201);
    expect((await reserve(coder, sku, 1, codeToken.json.token)).status).toBe(202);

    const entries = await eventually(async () => {
      const got = await logEntriesOf(sku);
      expect(got.filter((e) => e.type === "hold")).toHaveLength(2);
      return got;
    }, 20_000);
    const text = JSON.stringify(entries);
    for (const secret of [
      member,
      coder,
      "gold-claim-value",
      code,
      memberJwt,
      memberToken.json.token,
      codeToken.json.token,
    ])
      expect(text).not.toContain(secret);
    // The tiers are there by name, time and kind: what a verifier needs to allow an early hold.
    expect(entries[0]?.tiers).toEqual([
      { name: "members", startsAt: iso(now - 60_000), claim: "member" },
      { name: "codes", startsAt: iso(now - 60_000), by: "code" },
    ]);
  });

  it("takes a flush's events in one append, each once, and keeps the very bytes it hashed", async () => {
    const sku = uniqueSku("logflush");
    const log = logOf(sku);
    const held = (reservationId: string, seq: number, variant: string) => ({
      type: "reservation.held",
      reservationId,
      sku,
      userId: `buyer-${reservationId}`,
      quantity: 1,
      seq,
      occurredAt: new Date(seq * 1000).toISOString(),
      expiresAt: new Date(seq * 1000 + 600_000).toISOString(),
      variant,
    });
    // Text of more than one byte a character (an astral one too): stored as the bytes hashed.
    const [a, b, c] = [held("r-a", 1, "größe-42"), held("r-b", 2, "größe-🦄"), held("r-c", 3, "m")];
    expect(await log.append(0, [JSON.stringify({ events: [a, b, a] })])).toBe(2);
    expect(await log.append(0, [JSON.stringify({ events: [b] }), JSON.stringify({ events: [c, c] })])).toBe(1);
    const head = await log.recordHead();
    expect(head.size).toBe(3);
    const bundle = (await log.entryBundle(0, 3)) as Uint8Array;
    const tile = (await log.tile(0, 0, 3)) as Uint8Array;
    const kept: Uint8Array[] = [];
    for (let at = 0; at < bundle.length; ) {
      const length = ((bundle[at] ?? 0) << 8) | (bundle[at + 1] ?? 0);
      kept.push(bundle.slice(at + 2, at + 2 + length));
      at += 2 + length;
    }
    expect(kept.map((bytes) => [...leafHash(bytes)])).toEqual(
      [0, 1, 2].map((i) => [...tile.slice(i * 32, i * 32 + 32)]),
    );
    expect(kept.map((bytes) => JSON.parse(text(bytes)).variant)).toEqual(["größe-42", "größe-🦄", "m"]);
    expect([...head.root]).toEqual([...mth(kept.map((bytes) => leafHash(bytes)))]);
  });

  it("forgets nothing and keeps nothing of an append that failed", async () => {
    const log = logOf(uniqueSku("logfail"));
    const time = new Date(0).toISOString();
    // A BigInt has no JSON: the append throws inside its transaction, the first one of a fresh log
    // included. Called inside the object, not over RPC: a call that throws there is an error the
    // runtime reports as unhandled, which fails the run though the test awaited it.
    const bad = { type: "config" as const, time, n: 1n };
    const badAppend = () =>
      runInDurableObject(log, async (object) => {
        await expect(object.appendConfig(bad)).rejects.toThrow(/BigInt/);
      });
    await badAppend();
    expect(await log.size()).toBe(0);
    const leaves: Hash[] = [];
    for (let n = 0; n < 3; n++) {
      const good = { type: "config" as const, time, n };
      expect(await log.appendConfig(good)).toBe(true);
      leaves.push(leafHash(new TextEncoder().encode(JSON.stringify(good))));
      await badAppend();
      expect(await log.size()).toBe(n + 1);
    }
    const head = await log.recordHead();
    expect(head.size).toBe(3);
    expect([...head.root]).toEqual([...mth(leaves)]);
  });
});
