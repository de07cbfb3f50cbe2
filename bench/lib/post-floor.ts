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
 */
const SCRIPT = `
const enc = new TextEncoder();
function base64(bytes) {
  let binary = "";
  for (const byte of bytes) binary += String.fromCharCode(byte);
  return btoa(binary);
}
export default {
  async fetch(request) {
    const { url, secret, count, connections, first } = await request.json();
    const raw = Uint8Array.from(atob(secret.slice(6)), (ch) => ch.charCodeAt(0));
    const key = await crypto.subtle.importKey("raw", raw, { name: "HMAC", hash: "SHA-256" }, false, ["sign"]);
    const started = Date.now();
    let next = 0;
    let ok = 0;
    const lane = async () => {
      while (next < count) {
        const n = first + next++;
        const now = Date.now();
        const at = new Date(now).toISOString();
        const data = { reservationId: crypto.randomUUID(), sku: "floor-sku", userId: "user-" + n, quantity: 1,
          status: "held", amount: null, currency: null, createdAt: at, updatedAt: at };
        const body = JSON.stringify({ type: "order.held", timestamp: at, data });
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
      }
    };
    await Promise.all(Array.from({ length: connections }, lane));
    return Response.json({ posts: count, ok, elapsedMs: Date.now() - started });
  },
};`;

/** The endpoint the floor POSTs to at the receiver (`/hooks/<name>`), apart from the sender's. */
const FLOOR_ENDPOINT = "bench-floor";

export function startPostFloor(): Promise<BareWorker> {
  return startScriptWorker("delivery floor", SCRIPT);
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
