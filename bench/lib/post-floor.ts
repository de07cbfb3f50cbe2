import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { PAGE } from "../../src/handoff/endpoint-lane";
import { cpuMeter } from "../../tools/proc";
import type { BareWorker } from "./bare-worker";
import { startScriptWorker } from "./bare-worker";
import { log } from "./log";
import type { ReceiverProcess } from "./receiver";

/**
 * The floor of a delivery: a Worker, in a workerd of its own, that POSTs the sender's body (an order
 * object, built and serialized per POST as src/handoff/sender.ts does), signed with the Standard
 * Webhooks scheme (src/handoff/signature.ts: HMAC-SHA256 by WebCrypto, the key imported once), to the
 * bench's receiver, six in flight as a sender object has, reading each answer's body. No D1, no
 * queue, no alarm, no bookkeeping: what workerd itself charges for one signed POST, which a delivery
 * cannot go below.
 *
 * With a D1 database bound (`startPostFloor(true)`), the same POSTs with the least bookkeeping that
 * loses nothing, a statement each per page of the sender's {@link PAGE}: the page's rows written (as the order
 * batch's trigger writes them), taken under a lease, and their outcomes recorded. No logic around
 * them: what a delivery that is kept in D1 costs at the least.
 */
const SCRIPT = `
const PAGE = ${PAGE};
const enc = new TextEncoder();
function base64(bytes) {
  let binary = "";
  for (const byte of bytes) binary += String.fromCharCode(byte);
  return btoa(binary);
}
export default {
  async fetch(request, env) {
    const { url, secret, count, connections, first } = await request.json();
    const raw = Uint8Array.from(atob(secret.slice(6)), (ch) => ch.charCodeAt(0));
    const key = await crypto.subtle.importKey("raw", raw, { name: "HMAC", hash: "SHA-256" }, false, ["sign"]);
    const bodyOf = (n) => {
      const at = new Date().toISOString();
      const data = { reservationId: crypto.randomUUID(), sku: "floor-sku", userId: "user-" + n, quantity: 1,
        status: "held", amount: null, currency: null, createdAt: at, updatedAt: at };
      return JSON.stringify({ type: "order.held", timestamp: at, data });
    };
    const started = Date.now();
    let ok = 0;
    const post = async (n, body) => {
      const now = Date.now();
      const id = "msg_" + n + "_bench-floor";
      const timestamp = Math.floor(now / 1000);
      const mac = await crypto.subtle.sign("HMAC", key, enc.encode(id + "." + timestamp + "." + body));
      const response = await fetch(url, {
        method: "POST",
        redirect: "manual",
        headers: {
          "content-type": "application/json",
          "user-agent": "Flashgate-Webhooks/1",
          "webhook-id": id,
          "webhook-timestamp": String(timestamp),
          "webhook-signature": "v1," + base64(new Uint8Array(mac)),
        },
        body,
      });
      await response.text();
      if (response.status >= 200 && response.status < 300) ok++;
      return response.status;
    };
    /** POSTs \`length\` items (\`itemAt(i)\`: \`[n, body]\`, made as it goes out), \`connections\` in flight; their statuses in order. */
    const send = async (length, itemAt) => {
      const statuses = [];
      let next = 0;
      const lane = async () => {
        while (next < length) {
          const i = next++;
          const [n, body] = itemAt(i);
          statuses[i] = await post(n, body);
        }
      };
      await Promise.all(Array.from({ length: connections }, lane));
      return statuses;
    };
    if (!env.DB) {
      await send(count, (i) => [first + i, bodyOf(first + i)]);
      return Response.json({ posts: count, ok, elapsedMs: Date.now() - started });
    }
    await env.DB.prepare(
      "CREATE TABLE IF NOT EXISTS deliveries (id INTEGER PRIMARY KEY, n INTEGER NOT NULL, body TEXT NOT NULL, " +
        "status TEXT NOT NULL DEFAULT 'pending', lease_until INTEGER, attempts INTEGER NOT NULL DEFAULT 0, last_status INTEGER)",
    ).run();
    await env.DB.prepare("CREATE INDEX IF NOT EXISTS deliveries_due ON deliveries (id) WHERE status = 'pending'").run();
    for (let done = 0; done < count; done += PAGE) {
      const size = Math.min(PAGE, count - done);
      const rows = Array.from({ length: size }, (_, i) => ({ n: first + done + i, body: bodyOf(first + done + i) }));
      await env.DB.prepare("INSERT INTO deliveries (n, body) SELECT value ->> 'n', value ->> 'body' FROM json_each(?)")
        .bind(JSON.stringify(rows))
        .run();
      const now = Date.now();
      const taken = await env.DB.prepare(
        "UPDATE deliveries SET lease_until = ?1 WHERE id IN (SELECT id FROM deliveries WHERE status = 'pending' " +
          "AND (lease_until IS NULL OR lease_until < ?2) ORDER BY id LIMIT ?3) RETURNING id, n, body",
      )
        .bind(now + 60_000, now, PAGE)
        .all();
      const statuses = await send(taken.results.length, (i) => [taken.results[i].n, taken.results[i].body]);
      const outcomes = taken.results.map((row, i) => ({ id: row.id, code: statuses[i] }));
      await env.DB.prepare(
        "UPDATE deliveries SET status = CASE WHEN o.value ->> 'code' BETWEEN 200 AND 299 THEN 'delivered' ELSE 'pending' END, " +
          "attempts = attempts + 1, lease_until = NULL, last_status = o.value ->> 'code' " +
          "FROM json_each(?) AS o WHERE deliveries.id = o.value ->> 'id'",
      )
        .bind(JSON.stringify(outcomes))
        .run();
    }
    return Response.json({ posts: count, ok, elapsedMs: Date.now() - started });
  },
};`;

/** The endpoint the floor POSTs to at the receiver (`/hooks/<name>`), apart from the sender's. */
const FLOOR_ENDPOINT = "bench-floor";

/** The floor's Worker; with `kept`, its deliveries kept in a D1 database on disk, as the gateway's are. */
export async function startPostFloor(kept = false): Promise<BareWorker> {
  if (!kept) return startScriptWorker("delivery floor", SCRIPT);
  const d1Persist = mkdtempSync(join(tmpdir(), "flashgate-floor-d1-"));
  const worker = await startScriptWorker("delivery floor kept in D1", SCRIPT, {
    d1Databases: { DB: "floor" },
    d1Persist,
  });
  return {
    ...worker,
    async stop() {
      await worker.stop();
      rmSync(d1Persist, { recursive: true, force: true });
    },
  };
}

export interface PostFloor {
  posts: number;
  connections: number;
  /** Answered 2xx and verified by the receiver. */
  verified: number;
  perSec: number;
  /** workerd CPU per POST: sign, serialize, fetch, read the answer. */
  cpuUsPerPost: number;
  /** The receiver process's CPU per POST (the same verification as a delivery's). */
  receiverCpuUsPerPost: number;
  /** Kept in D1: the rows a page (the sender's {@link PAGE} when it ran). */
  page?: number;
}

/**
 * `count` signed POSTs to the receiver, `connections` in flight (a sender object's six, or more to
 * show what that limit costs), after a warm-up of a tenth as many.
 */
export async function postFloor(
  worker: BareWorker,
  receiver: ReceiverProcess,
  secret: string,
  count: number,
  connections = 6,
): Promise<PostFloor> {
  const reset = await fetch(`${receiver.url}/control/${FLOOR_ENDPOINT}`, {
    method: "PUT",
    body: JSON.stringify({ secret, keep: false }),
  });
  if (!reset.ok) throw new Error(`the webhook receiver's control: ${reset.status}`);
  const url = `${receiver.url}/hooks/${FLOOR_ENDPOINT}`;
  const drive = async (posts: number, first: number) => {
    const res = await fetch(worker.url, {
      method: "POST",
      body: JSON.stringify({ url, secret, count: posts, connections, first }),
    });
    if (!res.ok) throw new Error(`delivery floor, ${connections} in flight: ${res.status} ${await res.text()}`);
    return (await res.json()) as { posts: number; ok: number; elapsedMs: number };
  };
  const warm = Math.ceil(count / 10);
  await drive(warm, 1);
  const meter = cpuMeter([worker.pid]);
  const receiverMeter = cpuMeter([receiver.pid]);
  const r = await drive(count, warm + 1);
  const cpu = meter.stop();
  const receiverCpu = receiverMeter.stop();
  const seen = (await (await fetch(`${receiver.url}/control/${FLOOR_ENDPOINT}?counts`)).json()) as {
    verified: number;
  };
  const fig: PostFloor = {
    posts: count,
    connections,
    verified: seen.verified - warm,
    perSec: (count * 1000) / Math.max(1, r.elapsedMs),
    cpuUsPerPost: cpu / count,
    receiverCpuUsPerPost: receiverCpu / count,
  };
  log(
    `delivery floor, ${connections} in flight: ${fig.perSec.toFixed(0)} signed POSTs/s, ${fig.cpuUsPerPost.toFixed(0)} µs workerd CPU each, receiver ${fig.receiverCpuUsPerPost.toFixed(0)} µs (${fig.verified}/${count} verified)`,
  );
  return fig;
}
