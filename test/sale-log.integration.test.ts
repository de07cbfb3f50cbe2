import { env } from "cloudflare:workers";
import { describe, expect, it } from "vitest";
import { type Hash, leafHash, nodeHash, verifyInclusion } from "../durable-objects/shared/merkle";
import { saltSecret, userCommitment, userSalt } from "../durable-objects/shared/sale-entries";
import { call, createSku, reserve, tokenFor, uniqueSku } from "./support/client";
import { eventually } from "./support/eventually";
import { pay } from "./support/payments";

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

const logOf = (sku: string) => env.SALE_LOG.getByName(sku);

/** The log's entries as stored, by reading the entry bundles of its last head. */
async function entriesOf(sku: string): Promise<Record<string, unknown>[]> {
  const log = logOf(sku);
  await log.recordHead();
  const size = (await log.head()).size;
  const out: Record<string, unknown>[] = [];
  for (let n = 0; n * 256 < size; n++) {
    const width = Math.min(256, size - n * 256);
    const bundle = await log.entryBundle(n, width);
    if (!bundle) throw new Error(`no bundle ${n}`);
    for (let at = 0; at < bundle.length; ) {
      const length = ((bundle[at] ?? 0) << 8) | (bundle[at + 1] ?? 0);
      out.push(JSON.parse(new TextDecoder().decode(bundle.slice(at + 2, at + 2 + length))));
      at += 2 + length;
    }
  }
  return out;
}

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
      const got = await entriesOf(sku);
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
    const salt = userSalt(secret, sku, "alice-log");
    expect(salt).toMatch(/^[0-9a-f]{32}$/);
    const aliceHold = entries.find((e) => e.type === "hold" && e.reservation === a);
    expect(aliceHold?.user).toBe(userCommitment(salt, "alice-log"));
    expect(userSalt(secret, `${sku}x`, "alice-log")).not.toBe(salt);

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
      const entries = await entriesOf(sku);
      const leaves = entries.map((e) => leafHash(new TextEncoder().encode(JSON.stringify(e))));
      const root = mth(leaves);
      expect([...root]).toEqual([...head.root]);
    }
    expect(sizes).toEqual([4, 8, 13]);

    const receipts = await log.receipts((await entriesOf(sku))[4]?.reservation as string, "example.test/log");
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
});
