import { execFile } from "node:child_process";
import { createHash, createHmac, randomUUID } from "node:crypto";
import { mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { createServer, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { promisify } from "node:util";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { appendedHashes, type Hash, leafHash, tilePath, treeHash } from "../durable-objects/shared/merkle";
import { checkpointText, parseSigner, signNote } from "../durable-objects/shared/signed-note";
import { signPayment } from "../src/payments/webhook-signature";
import { SECRETS } from "../tools/dev-vars";
import { shopperJwt, signHs256 } from "../tools/jwt";
import { startWorker, type WorkerServer } from "../tools/worker";
import { eventually } from "./support/eventually";
import { bundledScript } from "./support/script-bundle";

/**
 * `npm run verify-sale` (API.md v1.4 "The verifiable sale") against a real Worker: a sale's log
 * checks out, and stays consistent with an earlier checkpoint; a log tampered with on its way (an
 * entry edited, entries reordered or dropped, a checkpoint swapped, a forged sale) fails, naming
 * what broke.
 */

const run = promisify(execFile);
/**
 * `npm run verify-sale`'s script, bundled once and run by node: the same code, without npx, npm and
 * tsx's loader in front of each of the file's runs (test/support/script-bundle.ts; receipts.e2e runs
 * the command as a buyer copies it).
 */
const VERIFY_SALE = "scripts/verify-sale.ts";
const SECRET = "verify-webhook-secret";
const ADMIN = { authorization: "Bearer dev-admin-token", "content-type": "application/json" };
const sku = `verify-${randomUUID().slice(0, 8)}`;
let server: WorkerServer;
let dir: string;

async function send(method: string, path: string, body?: unknown, headers: Record<string, string> = {}) {
  const response = await fetch(`${server.url}${path}`, {
    method,
    headers: { "content-type": "application/json", ...headers },
    ...(body === undefined ? {} : { body: typeof body === "string" ? body : JSON.stringify(body) }),
  });
  const text = await response.text();
  return { status: response.status, json: text ? JSON.parse(text) : null };
}
const jwt = async (user: string) => ({ authorization: `Bearer ${await shopperJwt(user, "dev-auth-secret")}` });

async function hold(user: string, quantity = 1): Promise<string> {
  const token = await send("POST", `/api/skus/${sku}/tokens`, {}, await jwt(user));
  const held = await send(
    "POST",
    `/api/skus/${sku}/reservations`,
    { token: token.json.token, quantity },
    await jwt(user),
  );
  expect(held.status, JSON.stringify(held.json)).toBe(202);
  return held.json.reservationId;
}

async function pay(reservationId: string, quantity: number) {
  const amount = 1000 * quantity;
  const raw = JSON.stringify({ id: `evt_${randomUUID()}`, type: "payment.succeeded", reservationId, amount });
  const signature = await signPayment(raw, SECRET, Math.floor(Date.now() / 1000));
  const paid = await send("POST", "/webhooks/payments", raw, { "payment-signature": signature });
  expect(paid.json).toMatchObject({ reservationStatus: "paid", outcome: "applied" });
}

/** Runs the command as a buyer would; its exit code, summary (stdout) and progress (stderr). */
function verifySale(base: string, ...args: string[]) {
  return verifySaleOf(base, sku, ...args);
}

/** {@link verifySale} of another SKU. */
async function verifySaleOf(base: string, of: string, ...args: string[]) {
  try {
    const { stdout, stderr } = await run(process.execPath, [await bundledScript(VERIFY_SALE), base, of, ...args], {
      timeout: 60_000,
    });
    return { code: 0, out: JSON.parse(stdout), stderr };
  } catch (err) {
    const e = err as { code: number; stdout: string; stderr: string };
    return { code: e.code, out: e.stdout ? JSON.parse(e.stdout) : null, stderr: e.stderr };
  }
}

/** The checkpoint's size, once every entry the sale made is in it. */
async function settled(entries: number) {
  await eventually(async () => {
    const note = await (await fetch(`${server.url}/api/skus/${sku}/log/checkpoint`)).text();
    expect(Number(note.split("\n")[1])).toBe(entries);
  }, 20_000);
}

/** A front that serves the Worker's log but lets a test change what passes. */
function tamperingFront(change: (path: string, body: Buffer) => Buffer): Promise<{ url: string; close(): void }> {
  return new Promise((resolve) => {
    const front: Server = createServer(async (request, response) => {
      const upstream = await fetch(`${server.url}${request.url}`);
      const body = change(request.url ?? "", Buffer.from(await upstream.arrayBuffer()));
      response.writeHead(upstream.status, { "content-type": upstream.headers.get("content-type") ?? "text/plain" });
      response.end(body);
    });
    front.listen(0, "127.0.0.1", () =>
      resolve({ url: `http://127.0.0.1:${(front.address() as AddressInfo).port}`, close: () => front.close() }),
    );
  });
}

/** The entries of a bundle, and a bundle of entries. */
function unbundle(bundle: Buffer): Buffer[] {
  const out: Buffer[] = [];
  for (let at = 0; at < bundle.length; at += 2 + bundle.readUInt16BE(at))
    out.push(bundle.subarray(at + 2, at + 2 + bundle.readUInt16BE(at)));
  return out;
}
const bundle = (entries: Buffer[]) =>
  Buffer.concat(entries.flatMap((e) => [Buffer.from([e.length >> 8, e.length & 0xff]), e]));

/**
 * A front serving a log made up here, signed with the dev key as the gateway would sign it: a sale
 * whose log is well formed and signed, but whose decisions break the sale's rules.
 */
async function forgedLog(
  entries: object[],
  shown: Record<string, object> = {},
): Promise<{ url: string; close(): void }> {
  const signer = await parseSigner(SECRETS.LOG_SIGNING_KEY);
  if (!signer) throw new Error("no dev key");
  const bytes = entries.map((e) => Buffer.from(JSON.stringify(e)));
  const hashes = new Map<string, Hash>();
  const at = (level: number, index: number) => hashes.get(`${level}/${index}`) as Hash;
  bytes.forEach((entry, i) => {
    for (const h of appendedHashes(i, leafHash(entry), at)) hashes.set(`${h.level}/${h.index}`, h.hash);
  });
  const paths = new Map<string, Buffer>();
  paths.set("/api/log/key", Buffer.from(`${signer.verifier.text}\n`));
  const origin = `forged.example/api/skus/${sku}/log`;
  const root = treeHash(bytes.length, at);
  paths.set(
    `/api/skus/${sku}/log/checkpoint`,
    Buffer.from(await signNote(checkpointText({ origin, size: bytes.length, root }), signer)),
  );
  paths.set(`/api/skus/${sku}/log/${tilePath("entries", 0, bytes.length)}`, bundle(bytes));
  paths.set(
    `/api/skus/${sku}/log/${tilePath(0, 0, bytes.length)}`,
    Buffer.concat(bytes.map((_, i) => Buffer.from(at(0, i)))),
  );
  // What the front shows besides the log (its draw, say), by path.
  for (const [path, body] of Object.entries(shown)) paths.set(path, Buffer.from(JSON.stringify(body)));
  return new Promise((resolve) => {
    const front: Server = createServer((request, response) => {
      const body = paths.get(request.url ?? "");
      response.writeHead(body ? 200 : 404);
      response.end(body ?? "");
    });
    front.listen(0, "127.0.0.1", () =>
      resolve({ url: `http://127.0.0.1:${(front.address() as AddressInfo).port}`, close: () => front.close() }),
    );
  });
}

beforeAll(async () => {
  dir = mkdtempSync(join(tmpdir(), "verify-sale-"));
  server = await startWorker("verify-sale", { PAYMENT_WEBHOOK_SECRET: SECRET });
  const created = await send(
    "PUT",
    `/admin/skus/${sku}`,
    { name: "Verify", totalStock: 6, perUserLimit: 2, price: 1000, currency: "usd" },
    ADMIN,
  );
  expect(created.status, JSON.stringify(created.json)).toBe(200);
});

afterAll(async () => {
  await server?.stop();
  if (dir) rmSync(dir, { recursive: true, force: true });
});

describe("npm run verify-sale", () => {
  it("checks a sale's log and its consistency with an earlier checkpoint", async () => {
    const a = await hold("ann", 2);
    const b = await hold("ben");
    await pay(a, 2);
    await settled(4); // config, 2 holds, 1 payment
    const first = await verifySale(server.url, "--save", join(dir, "first.checkpoint"));
    expect(first.code, first.stderr).toBe(0);
    expect(first.out).toMatchObject({ ok: true, size: 4, held: 1, sold: 2, stock: 6, reservations: 2, buyers: 2 });
    expect(first.stderr).toContain("root rebuilt from the entries: matches");

    const cancel = await send("POST", `/api/reservations/${b}/cancel`, {}, await jwt("ben"));
    expect(cancel.status).toBe(200);
    for (const user of ["cat", "dan", "eve"]) await hold(user);
    await settled(8);
    const second = await verifySale(server.url, "--since", join(dir, "first.checkpoint"));
    expect(second.code, second.stderr).toBe(0);
    expect(second.out).toMatchObject({ ok: true, size: 8, held: 3, sold: 2 });
    expect(second.stderr).toContain(`consistent with ${join(dir, "first.checkpoint")} (4 entries)`);
  });

  it("checks a sharded sale that sold out, released and sold again", async () => {
    const other = `verify-sharded-${randomUUID().slice(0, 8)}`;
    const created = await send(
      "PUT",
      `/admin/skus/${other}`,
      { name: "Sharded", totalStock: 12, perUserLimit: 2, shards: 4 },
      ADMIN,
    );
    expect(created.status, JSON.stringify(created.json)).toBe(200);
    const reserveOn = async (user: string) => {
      const token = await send("POST", `/api/skus/${other}/tokens`, {}, await jwt(user));
      if (token.status !== 201) return null;
      const held = await send(
        "POST",
        `/api/skus/${other}/reservations`,
        { token: token.json.token, quantity: 1 },
        await jwt(user),
      );
      return held.status === 202 ? { user, id: held.json.reservationId as string } : null;
    };
    const first = (await Promise.all(Array.from({ length: 20 }, (_, i) => reserveOn(`s${i}`)))).flatMap((h) =>
      h ? [h] : [],
    );
    expect(first.length).toBe(12);
    // Half released, then sold again to others, through whichever shards have the units.
    for (const h of first.slice(0, 6)) await send("POST", `/api/reservations/${h.id}/cancel`, {}, await jwt(h.user));
    const second = (await Promise.all(Array.from({ length: 10 }, (_, i) => reserveOn(`t${i}`)))).flatMap((h) =>
      h ? [h] : [],
    );
    expect(second.length).toBe(6);
    const entries = 1 + 12 + 6 + 6;
    await eventually(async () => {
      const note = await (await fetch(`${server.url}/api/skus/${other}/log/checkpoint`)).text();
      expect(Number(note.split("\n")[1])).toBe(entries);
    }, 20_000);
    const { stdout } = await run(process.execPath, [await bundledScript(VERIFY_SALE), server.url, other], {
      timeout: 60_000,
    });
    expect(JSON.parse(stdout)).toMatchObject({ ok: true, size: entries, held: 12, sold: 0, buyers: 18 });
  });

  it("checks the payments that changed nothing: a wrong amount, a wrong currency, a reservation paid twice", async () => {
    const other = `verify-refunds-${randomUUID().slice(0, 8)}`;
    const created = await send(
      "PUT",
      `/admin/skus/${other}`,
      { name: "Refunds", totalStock: 4, perUserLimit: 2, price: 1000, currency: "usd" },
      ADMIN,
    );
    expect(created.status, JSON.stringify(created.json)).toBe(200);
    const token = await send("POST", `/api/skus/${other}/tokens`, {}, await jwt("pam"));
    const held = await send(
      "POST",
      `/api/skus/${other}/reservations`,
      { token: token.json.token, quantity: 1 },
      await jwt("pam"),
    );
    expect(held.status, JSON.stringify(held.json)).toBe(202);
    const payOf = async (money: { amount: number; currency?: string }) => {
      const raw = JSON.stringify({
        id: `evt_${randomUUID()}`,
        type: "payment.succeeded",
        reservationId: held.json.reservationId,
        ...money,
      });
      const signature = await signPayment(raw, SECRET, Math.floor(Date.now() / 1000));
      return (await send("POST", "/webhooks/payments", raw, { "payment-signature": signature })).json.outcome;
    };
    expect(await payOf({ amount: 999 })).toBe("refund_required");
    expect(await payOf({ amount: 1000, currency: "eur" })).toBe("refund_required");
    expect(await payOf({ amount: 1000 })).toBe("applied");
    expect(await payOf({ amount: 1000 })).toBe("refund_required");
    const entries = 6; // config, hold, 2 payments, paid, 1 payment
    await eventually(async () => {
      const note = await (await fetch(`${server.url}/api/skus/${other}/log/checkpoint`)).text();
      expect(Number(note.split("\n")[1])).toBe(entries);
    }, 20_000);
    const checked = await verifySaleOf(server.url, other);
    expect(checked.code, checked.stderr).toBe(0);
    expect(checked.out).toMatchObject({ ok: true, size: entries, sold: 1, byType: { payment: 3, paid: 1 } });
    expect(checked.out.notReplayed).toBeUndefined();
  });

  it("checks a fair opening's draws: committed before they opened, revealed after they closed, in the seed's order", async () => {
    const drawn = `verify-drawn-${randomUUID().slice(0, 8)}`;
    // An early access tier's draw first, the public one 18 s later: each 6-s window's buyers wait for its
    // draw. On a loaded machine a buyer's two requests can take seconds, and the check between the draws
    // (a process of its own, run until the tier's reveal is in the log) must end before the public window
    // does: it has the 12 s between the windows and some of the public one's.
    const WINDOW_MS = 6_000;
    const tierAt = Date.now() + 2_500;
    const startsAt = tierAt + WINDOW_MS + 12_000;
    const created = await send(
      "PUT",
      `/admin/skus/${drawn}`,
      {
        name: "Drawn",
        totalStock: 4,
        perUserLimit: 1,
        startsAt: new Date(startsAt).toISOString(),
        openingWindowMs: WINDOW_MS,
        access: [
          { name: "members", startsAt: new Date(tierAt).toISOString(), claim: { name: "plan", value: "member" } },
        ],
      },
      ADMIN,
    );
    expect(created.status, JSON.stringify(created.json)).toBe(200);
    const member = async (user: string) => {
      const now = Math.floor(Date.now() / 1000);
      const claims = { sub: user, iat: now, exp: now + 600, plan: "member" };
      return { authorization: `Bearer ${await signHs256(claims, "dev-auth-secret")}` };
    };
    const buy = (users: string[], auth: (user: string) => Promise<Record<string, string>>) =>
      Promise.all(
        users.map(async (user) => {
          const token = await send("POST", `/api/skus/${drawn}/tokens`, {}, await auth(user));
          const body = { token: token.json.token, quantity: 1 };
          return (await send("POST", `/api/skus/${drawn}/reservations`, body, await auth(user))).status;
        }),
      );
    // Checked once the log has `size` entries and the draw's reveal, which reaches the log a moment
    // after the seed shows on /draw (until then the command says "settled": false).
    const verify = (size: number) =>
      eventually(async () => {
        const note = await (await fetch(`${server.url}/api/skus/${drawn}/log/checkpoint`)).text();
        expect(Number(note.split("\n")[1])).toBe(size);
        const { code, out } = await verifySaleOf(server.url, drawn);
        expect({ code, broken: out?.broken, settled: out?.settled }).toEqual({
          code: 0,
          broken: undefined,
          settled: true,
        });
        return out;
      }, 30_000);
    await new Promise((resolve) => setTimeout(resolve, tierAt - Date.now() + 100));
    expect(await buy(["m1", "m2", "m3"], member)).toEqual([202, 202, 202]);
    // Between the two draws: the tier's drawn and revealed, the public one's still to come.
    expect(await verify(5)).toMatchObject({
      ok: true,
      held: 3,
      byType: { config: 1, hold: 3, "draw-reveal": 1 },
      // The tier's draw is listed by its opening (`?opensAt=`): its entries and outcomes checked too.
      draw: {
        entries: 0,
        decided: false,
        tiers: [{ entries: 3, held: 3, outcomes: "each held entry's hold is in the log, its buyer's" }],
      },
    });
    await new Promise((resolve) => setTimeout(resolve, startsAt - Date.now() + 100));
    // Five buyers in the public window: each request waits for the draw, which holds the one unit left.
    expect((await buy(["d1", "d2", "d3", "d4", "d5"], jwt)).filter((s) => s === 202)).toHaveLength(1);
    expect(await verify(7)).toMatchObject({
      ok: true,
      size: 7,
      held: 4,
      byType: { config: 1, hold: 4, "draw-reveal": 2 },
      drawOutcomes: "tied to positions",
      draw: {
        entries: 5,
        decided: true,
        held: 1,
        outcomes: "each held entry's hold is in the log, its buyer's",
        tiers: [{ entries: 3, held: 3 }],
      },
    });
    // Each hold names the draw that made it and its place there: the tier's three, the public one's winner.
    const bundle = await fetch(`${server.url}/api/skus/${drawn}/log/${tilePath("entries", 0, 7)}`);
    const holds = unbundle(Buffer.from(await bundle.arrayBuffer()))
      .map((bytes) => JSON.parse(bytes.toString("utf8")) as { type: string; draw?: object })
      .filter((e) => e.type === "hold");
    const shown = (await send("GET", `/api/skus/${drawn}/draw`)).json;
    const [tier, open] = (shown.openings as { seedHash: string }[]).map((o) => o.seedHash);
    const listed = (await send("GET", `/api/skus/${drawn}/draw/entries`)).json.entries as {
      position: number;
      result: string;
    }[];
    const won = listed.filter((e) => e.result === "HELD").map((e) => e.position);
    // The tier's draw, named by its opening (API.md v1.4): its seed and its three winners; an
    // opening the SKU does not have is 404.
    const tierOpens = (shown.openings as { opensAt: string; seed: string }[])[0];
    const tierPage = await send(
      "GET",
      `/api/skus/${drawn}/draw/entries?opensAt=${encodeURIComponent(tierOpens?.opensAt ?? "")}`,
    );
    expect(tierPage.status).toBe(200);
    expect(tierPage.json).toMatchObject({ seed: tierOpens?.seed, entrants: 3 });
    expect((tierPage.json.entries as { result: string }[]).map((e) => e.result)).toEqual(["HELD", "HELD", "HELD"]);
    const unknown = await send("GET", `/api/skus/${drawn}/draw/entries?opensAt=2020-01-01T00:00:00.000Z`);
    expect(unknown.status).toBe(404);
    expect(unknown.json.error.code).toBe("NOT_FOUND");
    expect(unknown.json.error.message).toMatch(/^opensAt: /);
    // The same opening in another ISO 8601 form names it too; a value that is no time is 400.
    const seconds = tierOpens?.opensAt.replace(/\.000Z$/, "Z") ?? "";
    const sameTier = await send("GET", `/api/skus/${drawn}/draw/entries?opensAt=${encodeURIComponent(seconds)}`);
    expect(sameTier.json).toMatchObject({ seed: tierOpens?.seed, entrants: 3 });
    const notATime = await send("GET", `/api/skus/${drawn}/draw/entries?opensAt=yesterday`);
    expect([notATime.status, notATime.json.error.code, notATime.json.error.details]).toEqual([
      400,
      "INVALID_REQUEST",
      { fields: [{ path: "opensAt", message: "a time in ISO 8601, as /draw's openings write it" }] },
    ]);
    expect(holds.map((e) => e.draw)).toEqual(
      expect.arrayContaining([
        ...[1, 2, 3].map((position) => ({ seedHash: tier, position })),
        ...won.map((position) => ({ seedHash: open, position })),
      ]),
    );
    expect(holds).toHaveLength(4);
  });

  it("checks a buyer's receipt against the signed log, and refuses a forged one", async () => {
    const other = `verify-receipt-${randomUUID().slice(0, 8)}`;
    expect(
      (await send("PUT", `/admin/skus/${other}`, { name: "Receipt", totalStock: 4, perUserLimit: 2 }, ADMIN)).status,
    ).toBe(200);
    const holdOn = async (user: string, quantity: number) => {
      const token = await send("POST", `/api/skus/${other}/tokens`, {}, await jwt(user));
      return (
        await send("POST", `/api/skus/${other}/reservations`, { token: token.json.token, quantity }, await jwt(user))
      ).json.reservationId as string;
    };
    const mine = await holdOn("rui", 2);
    await holdOn("sol", 1);
    const receipts = await eventually(async () => {
      const view = await send("GET", `/api/reservations/${mine}`, undefined, await jwt("rui"));
      expect(view.json.receipts).toHaveLength(1);
      return view.json.receipts as { index: number; proof: string }[];
    }, 20_000);
    const proof = receipts[0]?.proof ?? "";
    const file = join(dir, "rui.tlog-proof");
    const check = async (text: string) => {
      writeFileSync(file, text);
      const { code, out } = await (async () => {
        try {
          const { stdout } = await run(
            process.execPath,
            [await bundledScript(VERIFY_SALE), server.url, other, "--receipt", file],
            {
              timeout: 60_000,
            },
          );
          return { code: 0, out: JSON.parse(stdout) };
        } catch (err) {
          const e = err as { code: number; stdout: string };
          return { code: e.code, out: JSON.parse(e.stdout) };
        }
      })();
      return { code, out };
    };
    const good = await check(proof);
    expect(good.code).toBe(0);
    expect(good.out.receipt).toMatchObject({ index: receipts[0]?.index, entry: "hold" });

    // The entry edited (2 units claimed as 1), a proof hash changed, the index moved.
    const [header = "", extra = "", ...rest] = proof.split("\n");
    const entry = Buffer.from(extra.slice("extra ".length), "base64").toString("utf8");
    const edited = `extra ${Buffer.from(entry.replace('"quantity":2', '"quantity":1')).toString("base64")}`;
    expect((await check([header, edited, ...rest].join("\n"))).out.broken).toMatch(/is not in its checkpoint/);
    const hashLine = rest.findIndex((line) => /^[A-Za-z0-9+/]{43}=$/.test(line));
    const flipped = [...rest];
    flipped[hashLine] = `${(flipped[hashLine] ?? "").startsWith("A") ? "B" : "A"}${(flipped[hashLine] ?? "").slice(1)}`;
    expect((await check([header, extra, ...flipped].join("\n"))).out.broken).toMatch(/is not in its checkpoint/);
    const moved = [...rest];
    moved[0] = `index ${Number((moved[0] ?? "").slice(6)) + 1}`;
    expect((await check([header, extra, ...moved].join("\n"))).out.broken).toMatch(/is not in its checkpoint/);
  });

  it("stores nothing for a SKU never configured, whichever log route names it", async () => {
    const files = () => {
      const dir = join(server.stateDir, "v3", "do");
      const logs = readdirSync(dir).find((d) => d.endsWith("-SaleLog"));
      return logs ? readdirSync(join(dir, logs)).filter((f) => f.endsWith(".sqlite") && f !== "metadata.sqlite") : [];
    };
    const before = files();
    const ghost = `ghost-${randomUUID().slice(0, 8)}`;
    for (const path of ["checkpoint", "tile/0/000.p/1", "tile/entries/000", "tile/1/000"]) {
      expect((await fetch(`${server.url}/api/skus/${ghost}/log/${path}`)).status, path).toBe(404);
    }
    expect(files()).toEqual(before);
  });

  it("is read alike by an outside reader, Go's golang.org/x/mod/sumdb/tlog and note", async () => {
    // Built offline in GOPATH mode from Debian's golang-go and golang-golang-x-mod-dev (.ci/run installs them).
    const binary = join(dir, "tlog-reader");
    const env = { ...process.env, GOPATH: "/usr/share/gocode", GO111MODULE: "off", GOFLAGS: "" };
    try {
      await run("go", ["build", "-o", binary, "./tools/tlog-reader"], { env, timeout: 120_000 });
    } catch (err) {
      throw new Error(
        `the Go reader does not build (apt-get install golang-go golang-golang-x-mod-dev): ${String(err)}`,
      );
    }
    // A log past one full tile (301 entries: the level-1 tile and the partial tiles are read too).
    const big = `verify-big-${randomUUID().slice(0, 8)}`;
    expect(
      (await send("PUT", `/admin/skus/${big}`, { name: "Big", totalStock: 300, perUserLimit: 1 }, ADMIN)).status,
    ).toBe(200);
    for (let i = 0; i < 300; i += 30) {
      await Promise.all(
        Array.from({ length: 30 }, async (_, k) => {
          const user = `g${i + k}`;
          const token = await send("POST", `/api/skus/${big}/tokens`, {}, await jwt(user));
          await send(
            "POST",
            `/api/skus/${big}/reservations`,
            { token: token.json.token, quantity: 1 },
            await jwt(user),
          );
        }),
      );
    }
    const entries = 301;
    await eventually(async () => {
      const note = await (await fetch(`${server.url}/api/skus/${big}/log/checkpoint`)).text();
      expect(Number(note.split("\n")[1])).toBe(entries);
    }, 20_000);
    const go = JSON.parse((await run(binary, [server.url, big], { timeout: 60_000 })).stdout);
    const note = await (await fetch(`${server.url}/api/skus/${big}/log/checkpoint`)).text();
    const [origin, size, root] = note.split("\n");
    expect(Number(size)).toBe(entries);
    expect(go).toMatchObject({ origin, size: entries, root, entries, proved: 150, key: "flashgate-dev" });
    // And verify-sale agrees with it.
    const ours = JSON.parse(
      (await run(process.execPath, [await bundledScript(VERIFY_SALE), server.url, big], { timeout: 60_000 })).stdout,
    );
    expect(ours).toMatchObject({ ok: true, origin, size: entries, held: 300 });
  });

  it("fails on a log tampered with, naming what broke", async () => {
    const cases: [string, (path: string, body: Buffer) => Buffer, RegExp][] = [
      [
        "an entry edited",
        (path, body) =>
          path.includes("/tile/entries/")
            ? Buffer.from(body.toString("latin1").replace('"quantity":2', '"quantity":1'), "latin1")
            : body,
        /does not match the entries|root is not the checkpoint/,
      ],
      [
        "two entries reordered",
        (path, body) => {
          if (!path.includes("/tile/entries/")) return body;
          const entries = unbundle(body);
          [entries[1], entries[2]] = [entries[2] as Buffer, entries[1] as Buffer];
          return bundle(entries);
        },
        /does not match the entries/,
      ],
      [
        "an entry dropped",
        (path, body) => (path.includes("/tile/entries/") ? bundle(unbundle(body).slice(0, -1)) : body),
        /entry bundle at 0: 7 entries, not 8/,
      ],
      [
        "a checkpoint whose signature is not the key's",
        (path, body) => (path.endsWith("/checkpoint") ? Buffer.from(body.toString().replace(/\n8\n/, "\n9\n")) : body),
        /no valid signature/,
      ],
    ];
    for (const [name, change, broken] of cases) {
      const front = await tamperingFront(change);
      try {
        const result = await verifySale(front.url);
        expect(result.code, name).toBe(1);
        expect(result.out?.broken, name).toMatch(broken);
      } finally {
        front.close();
      }
    }
  });

  it("fails on a checkpoint not consistent with an earlier one", async () => {
    const first = readFileSync(join(dir, "first.checkpoint"), "utf8");
    // The same signature cannot cover another root: an earlier checkpoint of another tree is refused by
    // its signature; one of this key but another log by its origin.
    const forged = first.replace(
      /\n4\n(.{44})\n/,
      (_, root: string) => `\n4\n${root.slice(0, 10)}AAAA${root.slice(14)}\n`,
    );
    writeFileSync(join(dir, "forged.checkpoint"), forged);
    const result = await verifySale(server.url, "--since", join(dir, "forged.checkpoint"));
    expect(result.code).toBe(1);
    expect(result.out.broken).toMatch(/no valid signature/);
  });

  it("fails on a signed log whose decisions break the sale's rules, naming the entry", async () => {
    const config = (total: number, perUserLimit: number) => ({
      type: "config",
      time: "2026-12-01T10:00:00.000Z",
      status: "on_sale",
      total,
      perUserLimit,
      startsAt: null,
      endsAt: null,
      tiers: [],
    });
    const user = (n: number) => String(n).repeat(64);
    const hold = (id: string, who: number, quantity = 1, minute = 1, time = `2026-12-01T10:0${minute}:00.000Z`) => ({
      type: "hold",
      time,
      reservation: id,
      quantity,
      shard: 0,
      seq: minute,
      user: user(who),
    });
    const seed = "a seed";
    const seedHash = createHash("sha256").update(seed).digest("hex");
    const window = { opensAt: "2026-12-01T10:01:00.000Z", closesAt: "2026-12-01T10:02:00.000Z" };
    const drawn = { ...config(5, 1), startsAt: window.opensAt, draws: [{ ...window, seedHash }] };
    const reveal = (entrants: number) => ({
      type: "draw-reveal",
      time: "2026-12-01T10:02:01.000Z",
      ...window,
      seedHash,
      seed,
      entrants,
    });
    const shownDraw = { ...window, seedHash, seed, decidedAt: "2026-12-01T10:02:00.000Z" };
    /** `/draw` and its entries as the front shows them: `ids` in the seed's order, each answered `results[i]`. */
    const draw = (ids: string[], results: string[] = []) => ({
      [`/api/skus/${sku}/draw`]: { ...shownDraw, openings: [shownDraw] },
      [`/api/skus/${sku}/draw/entries?offset=0&limit=1000`]: {
        entries: ids
          .map((entryId) => ({ entryId, key: createHmac("sha256", seed).update(entryId).digest("hex") }))
          .sort((a, b) => (a.key < b.key ? -1 : 1))
          .map(({ entryId }, i) => ({ entryId, position: i + 1, quantity: 1, result: results[i] ?? "SOLD_OUT" })),
      },
    });
    /** A hold the draw made, half a second after its close, naming `position`. */
    const drawHold = (id: string, position: number) => ({
      ...hold(id, position, 1, 2, "2026-12-01T10:02:00.500Z"),
      draw: { seedHash, position },
    });
    // The log's entries are days old: an excess is settled, not a release still on its way.
    const cases: [string, object[], RegExp, Record<string, object>?][] = [
      [
        "oversold",
        [config(1, 2), hold("r1", 1), hold("r2", 2, 1, 2)],
        /entry 2 \(hold .*\): 1 held \+ 0 sold \+ 1 is more than the stock of 1/,
      ],
      [
        "past the limit",
        [config(5, 1), hold("r1", 1), hold("r2", 1, 1, 2)],
        /entry 2 \(hold .*\): user 111111111111… would have 2 units, past the limit of 1/,
      ],
      [
        "a payment of nothing",
        [config(5, 1), { ...hold("r9", 1), type: "paid" }],
        /entry 1 \(paid .*\): a payment of reservation r9, which the log never held/,
      ],
      ["a hold before any configuration", [hold("r1", 1)], /entry 0 \(hold .*\): a hold before any configuration/],
      [
        "a hold expired early",
        [
          config(5, 1),
          { ...hold("r1", 1), expires: "2026-12-01T10:11:00.000Z" },
          { ...hold("r1", 1, 1, 5), type: "expired" },
        ],
        /entry 2 \(expired .*\): reservation r1 expired before its hold's end \(2026-12-01T10:11:00.000Z\)/,
      ],
      [
        "a draw's seed other than the one committed",
        [
          {
            ...config(5, 1),
            startsAt: "2026-12-01T10:01:00.000Z",
            draws: [
              { opensAt: "2026-12-01T10:01:00.000Z", closesAt: "2026-12-01T10:02:00.000Z", seedHash: "ab".repeat(32) },
            ],
          },
          {
            type: "draw-reveal",
            time: "2026-12-01T10:03:00.000Z",
            opensAt: "2026-12-01T10:01:00.000Z",
            closesAt: "2026-12-01T10:02:00.000Z",
            seedHash: "ab".repeat(32),
            seed: "not it",
            entrants: 0,
          },
        ],
        /entry 1 \(draw-reveal .*\): the revealed seed does not hash to the committed seed hash/,
      ],
      [
        "a draw no configuration committed to",
        [
          config(5, 1),
          { type: "draw-reveal", time: "2026-12-01T10:03:00.000Z", seedHash: "cd".repeat(32), seed: "s", entrants: 0 },
        ],
        /entry 1 \(draw-reveal .*\): a draw revealed whose seed hash cdcdcdcdcdcd… no configuration committed to/,
      ],
      // Found in an audit: a draw the log never revealed went unchecked, and so did missing entries.
      [
        "an opening that closed and was never revealed",
        [drawn],
        /the opening at 2026-12-01T10:01:00\.000Z closed at 2026-12-01T10:02:00\.000Z, and its seed .* is not revealed in the log/,
      ],
      [
        "a draw /draw shows decided that the log never committed to",
        [config(5, 1)],
        /the draw's seed hash [0-9a-f]{12}… has no reveal in the log/,
        draw(["e1", "e2"]),
      ],
      [
        "a draw whose published entries leave one out",
        [drawn, reveal(3)],
        /the draw lists 2 entries; its reveal logged 3 entrants/,
        draw(["e1", "e2"]),
      ],
      // Found in an audit: the order was checked, the outcomes not. The unit of position 1, answered
      // SOLD_OUT, held for position 2; or a winner listed whose hold the log does not have.
      [
        // (Position 1's refusal breaks first: 5 units were there, none held before it.)
        "a hold at a position the draw answered SOLD_OUT",
        [drawn, drawHold("r1", 2), reveal(2)],
        /draw position 1 \(entry .*\) was answered SOLD_OUT, but 5 of them were left at its turn/,
        draw(["e1", "e2"], ["SOLD_OUT", "SOLD_OUT"]),
      ],
      // Found in an audit: every entrant answered SOLD_OUT while units remained, which the line
      // then took after the reveal (holds the log allows).
      [
        "SOLD_OUT while units remained",
        [drawn, reveal(2), hold("r1", 1, 1, 2, "2026-12-01T10:02:01.500Z"), hold("r2", 2, 1, 2)],
        /draw position 1 \(entry .*\) was answered SOLD_OUT, but 5 of them were left at its turn: the log leaves at least 5 units for the draw \(stock 5, at most 0 taken by others from its close to its reveal\), and the entries before it held 0/,
        draw(["e1", "e2"], ["SOLD_OUT", "SOLD_OUT"]),
      ],
      [
        "a winner listed whose hold the log lacks",
        [drawn, drawHold("r1", 1), reveal(2)],
        /draw position 2 \(entry .*\) is held, but no hold in the log names that position/,
        draw(["e1", "e2"], ["HELD", "HELD"]),
      ],
      // Found in a third reading: a draw the log revealed that /draw calls undecided, or a /draw
      // that answers 404, had its order and outcomes go unchecked (exit 0, "decided": false).
      [
        "a revealed draw /draw shows undecided",
        [drawn, drawHold("r1", 2), reveal(2)],
        /the log revealed the draw [0-9a-f]{12}… at 2026-12-01T10:02:01\.000Z, but \/draw shows it undecided/,
        (() => {
          const undecided = { ...shownDraw, seed: null, decidedAt: null };
          return { [`/api/skus/${sku}/draw`]: { ...undecided, openings: [undecided] } };
        })(),
      ],
      [
        "a revealed draw /draw does not show",
        [drawn, drawHold("r1", 2), reveal(2)],
        /the log revealed the draw [0-9a-f]{12}… at 2026-12-01T10:02:01\.000Z, but \/draw shows it nowhere/,
      ],
    ];
    // A tier's draw (an earlier opening), listed with `opensAt` (API.md v1.4): its refusals are
    // checked too. Its units went to the line after the reveal while its entrants were refused.
    const later = { opensAt: "2027-06-01T10:00:00.000Z", closesAt: "2027-06-01T10:01:00.000Z" };
    const laterHash = createHash("sha256").update("later").digest("hex");
    const tiered = {
      ...drawn,
      startsAt: later.opensAt,
      tiers: [{ name: "early", startsAt: window.opensAt }],
      draws: [
        { ...window, seedHash },
        { ...later, seedHash: laterHash },
      ],
    };
    const shownLater = { ...later, seedHash: laterHash, seed: null, decidedAt: null };
    const tierDraw = (results: string[]) => ({
      [`/api/skus/${sku}/draw`]: { ...shownLater, openings: [shownDraw, shownLater] },
      [`/api/skus/${sku}/draw/entries?offset=0&limit=1000&opensAt=${encodeURIComponent(window.opensAt)}`]: {
        seed,
        entries: (
          draw(["e1", "e2"], results)[`/api/skus/${sku}/draw/entries?offset=0&limit=1000`] as {
            entries: object[];
          }
        ).entries,
      },
    });
    cases.push([
      "a tier's draw answered SOLD_OUT while units remained",
      [tiered, reveal(2), hold("r1", 1, 1, 2, "2026-12-01T10:02:01.500Z")],
      /the draw of the opening at 2026-12-01T10:01:00\.000Z: draw position 1 \(entry .*\) was answered SOLD_OUT, but 5 of them were left at its turn/,
      tierDraw(["SOLD_OUT", "SOLD_OUT"]),
    ]);
    for (const [name, entries, broken, shown] of cases) {
      const front = await forgedLog(entries, shown);
      try {
        const result = await verifySale(front.url);
        expect(result.code, name).toBe(1);
        expect(result.out?.broken, name).toMatch(broken);
      } finally {
        front.close();
      }
    }
    // An excess of the last minute (by the verifier's clock) may be a release still on its way: not yet broken, and said so.
    const recent = (ago: number) => new Date(Date.now() - ago).toISOString();
    const fresh = await forgedLog([
      { ...config(1, 2), time: recent(30_000) },
      hold("r1", 1, 1, 1, recent(20_000)),
      hold("r2", 2, 1, 2, recent(10_000)),
    ]);
    try {
      const result = await verifySale(fresh.url);
      expect(result.code).toBe(0);
      expect(result.out).toMatchObject({ ok: true, settled: false });
      expect(result.out.unsettled).toMatch(/entry 2 \(hold .*\): 1 held \+ 0 sold \+ 1 is more than the stock of 1/);
    } finally {
      fresh.close();
    }
    // The same made-up logs without the broken entry pass: the failures are the rules', not the format's.
    for (const [entries, shown] of [
      [[config(1, 2), hold("r1", 1)], {}],
      // (A draw's SOLD_OUT once nothing was left: no stock, or its one unit held at position 1.)
      [[{ ...drawn, total: 0 }, reveal(2)], draw(["e1", "e2"])],
      [[{ ...drawn, total: 1 }, drawHold("r1", 1), reveal(2)], draw(["e1", "e2"], ["HELD", "SOLD_OUT"])],
      [[{ ...tiered, total: 1 }, drawHold("r1", 1), reveal(2)], tierDraw(["HELD", "SOLD_OUT"])],
    ] as const) {
      const front = await forgedLog([...entries], shown);
      try {
        const result = await verifySale(front.url);
        expect(result.code, JSON.stringify(result.out)).toBe(0);
      } finally {
        front.close();
      }
    }
  });
});
