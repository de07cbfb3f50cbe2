/**
 * The shop's side of the order hand-off under chaos: a webhook receiver (tools/webhook-receiver.ts,
 * in this process, verifying every request with the `standardwebhooks` package) and three endpoints
 * registered before the sale:
 *
 * - `shop`: every event type (`payment.refund_required` too); slow (each answer 1–3 s), and the faults of the schedule (schedule.ts,
 *   `receiverSchedule`) reach it: fail windows (500), drops (recorded, then the connection cut: it
 *   processed them, Flashgate sees a failure and sends them again), outages longer than the whole
 *   retry schedule (503: some deliveries end `failed`), stalls past the sender's 10-s timeout;
 * - `paid`: `order.paid` only, healthy, in batches of up to 10 (API.md v1.4 "Webhook batches"):
 *   the Worker's restarts reach its batches in flight;
 * - `refunds`: `order.cancelled`, `order.expired`, `order.refund_required`; drops now and then.
 *
 * After the traffic every endpoint is made healthy, and invariant 12 is awaited by bounded polling
 * ({@link ShopHooks.settle}): every order change of the feed (`GET /admin/orders`) is delivered to every
 * endpoint subscribed to its type, by its webhook-id, with one body per webhook-id. The operator
 * retries the deliveries that ended `failed` (`POST /admin/webhooks/:id/deliveries/:deliveryId/retry`),
 * and the cron's check-back (the `scheduled` handler) is fired when a pending delivery is overdue.
 */
import type { z } from "zod";
import type { CONTRACT_SCHEMAS } from "../../src/routes/contract-schemas";
import { SCHEDULED_PATH } from "../../tools/dev-server";
import {
  type Behaviour,
  type Received,
  startWebhookReceiver,
  type WebhookReceiver,
} from "../../tools/webhook-receiver";
import { type Client, sleep } from "./http";
import { d1Query, type Violation } from "./invariants";
import type { Fault, HookRole } from "./schedule";

/** WEBHOOK_RETRY_SCHEDULE of the chaos run: six attempts in about 15 s, then `failed`. */
export const CHAOS_RETRY_SCHEDULE = "1,1,2,2,3";

type Role = HookRole | "paid";
const REFUND_REQUIRED = "payment.refund_required";
type Delays = Pick<Behaviour, "delayMs" | "delayMaxMs">;
const NO_DELAY: Delays = { delayMs: 0, delayMaxMs: 0 };
const SLOW: Delays = { delayMs: 1_000, delayMaxMs: 3_000 };
const STALLED: Delays = { delayMs: 11_000, delayMaxMs: 12_000 };

const PLANS: { role: Role; events?: string[]; batch?: { maxEvents: number; maxWaitMs: number }; delays: Delays }[] = [
  { role: "shop", delays: SLOW },
  { role: "paid", events: ["order.paid"], batch: { maxEvents: 10, maxWaitMs: 500 }, delays: NO_DELAY },
  { role: "refunds", events: ["order.cancelled", "order.expired", "order.refund_required"], delays: NO_DELAY },
];

interface Endpoint {
  role: Role;
  id: string;
  secret: string;
  events: string[];
  batch: { maxEvents: number } | null;
  /** How its answers are delayed when no stall is on. */
  delays: Delays;
}

interface ReceiverLog {
  received: Received[];
  count: number;
  verified: number;
  unverified: number;
}

/** `GET /admin/webhooks/:id/deliveries`, as the contract describes it. */
type Deliveries = z.infer<(typeof CONTRACT_SCHEMAS)["WebhookDeliveryList"]>;

/** What the receiver got for one webhook-id. */
interface ById {
  key: string;
  bodies: Set<string>;
  requests: number;
  /** Answered 2xx (Flashgate may still have timed out on it). */
  delivered: boolean;
  /** Answered 2xx or dropped: times the shop processed it. */
  processed: number;
  firstLagMs: number | null;
}

export interface EndpointFigures {
  role: Role;
  id: string;
  events: string[];
  owed: number;
  delivered: number;
  requests: number;
  answers: Record<string, number>;
  /** Webhook-ids that arrived more than once, and those the shop processed more than once. */
  seenTwice: number;
  processedTwice: number;
  unverified: number;
  lagP50Ms: number | null;
  lagMaxMs: number | null;
}

export interface HookCheck {
  violations: Violation[];
  summary: string;
  endpoints: EndpointFigures[];
}

const percentile = (sorted: number[], p: number) =>
  sorted.length === 0 ? null : (sorted[Math.min(sorted.length - 1, Math.floor(p * sorted.length))] ?? null);

export class ShopHooks {
  /** Failed deliveries the operator retried after the faults, and the check-backs fired. */
  operatorRetries = 0;
  checkBacks = 0;

  private constructor(
    readonly receiver: WebhookReceiver,
    readonly client: Client,
    readonly endpoints: Endpoint[],
  ) {}

  /** Starts the receiver on a free port of 127.0.0.1 and registers the endpoints (before the sale). */
  static async start(client: Client, seed: number): Promise<ShopHooks> {
    const receiver = await startWebhookReceiver();
    const endpoints: Endpoint[] = [];
    try {
      for (const plan of PLANS) {
        const id = `chaos${seed}-${plan.role}`;
        const body = {
          url: `${receiver.url}/hooks/${id}`,
          ...(plan.events ? { events: plan.events } : {}),
          ...(plan.batch ? { batch: plan.batch } : {}),
        };
        const reply = await client.admin("PUT", `/admin/webhooks/${id}`, body);
        const view = reply.json as { secret?: string; events?: string[] } | null;
        if (reply.status !== 200 || !view?.secret || !view.events)
          throw new Error(`PUT /admin/webhooks/${id} answered ${reply.status}: ${reply.text.slice(0, 200)}`);
        const batch = plan.batch ?? null;
        const endpoint = { role: plan.role, id, secret: view.secret, events: view.events, batch, delays: plan.delays };
        await control(receiver, "PUT", id, { secret: endpoint.secret, ...plan.delays });
        endpoints.push(endpoint);
      }
    } catch (err) {
      await receiver.close();
      throw err;
    }
    return new ShopHooks(receiver, client, endpoints);
  }

  describe(): string {
    return this.endpoints
      .map(
        (e) =>
          `${e.id} (${e.events.length >= 6 ? "all events" : e.events.join(", ")}${e.batch ? `; batches of up to ${e.batch.maxEvents}` : ""})`,
      )
      .join("; ");
  }

  #endpoint(role: Role): Endpoint {
    const endpoint = this.endpoints.find((e) => e.role === role);
    if (!endpoint) throw new Error(`no ${role} endpoint`);
    return endpoint;
  }

  #patch(endpoint: Endpoint, changes: Partial<Behaviour>): Promise<void> {
    return control(this.receiver, "PATCH", endpoint.id, changes);
  }

  /** One scheduled fault of the receiver; an outage or a stall resolves when it is over. */
  async apply(fault: Extract<Fault, { kind: "receiver-window" | "receiver-outage" | "receiver-stall" }>) {
    const endpoint = this.#endpoint(fault.endpoint);
    if (fault.kind === "receiver-window") return this.#patch(endpoint, { fail: fault.fail, drop: fault.drop });
    if (fault.kind === "receiver-outage") {
      await this.#patch(endpoint, { status: 503, ...NO_DELAY });
      await sleep(fault.downMs);
      return this.#patch(endpoint, { status: 204, ...endpoint.delays });
    }
    await this.#patch(endpoint, STALLED);
    await sleep(fault.stallMs);
    return this.#patch(endpoint, endpoint.delays);
  }

  /** The faults stop: every endpoint answers 204 at once from now on. */
  async healthy(): Promise<void> {
    for (const endpoint of this.endpoints) await this.#patch(endpoint, { fail: 0, drop: 0, status: 204, ...NO_DELAY });
  }

  async #deliveries(endpoint: Endpoint, status: "pending" | "failed"): Promise<Deliveries["deliveries"]> {
    const reply = await this.client.admin(
      "GET",
      `/admin/webhooks/${endpoint.id}/deliveries?status=${status}&limit=1000`,
    );
    if (reply.status !== 200)
      throw new Error(`GET /admin/webhooks/${endpoint.id}/deliveries answered ${reply.status}: ${reply.text}`);
    return (reply.json as Deliveries).deliveries;
  }

  /** Every change of the feed, from the beginning, page by page until an empty one. */
  async #feed(): Promise<{ reservationId: string; status: string }[]> {
    const changes: { reservationId: string; status: string }[] = [];
    let after: string | null = null;
    for (;;) {
      const query: string = after === null ? "" : `&after=${encodeURIComponent(after)}`;
      const reply = await this.client.admin("GET", `/admin/orders?limit=1000${query}`);
      const page = reply.json as { orders?: { reservationId: string; status: string }[]; next?: string } | null;
      if (reply.status !== 200 || !page?.orders || typeof page.next !== "string")
        throw new Error(`GET /admin/orders answered ${reply.status}: ${reply.text.slice(0, 200)}`);
      changes.push(...page.orders);
      if (page.orders.length === 0) return changes;
      after = page.next;
    }
  }

  /**
   * The operator's pass over the delivery logs: every delivery that ended `failed` is retried
   * (`POST /admin/webhooks/:id/deliveries/:deliveryId/retry`, a few at a time); then the pending ones
   * are counted, and those overdue (due more than 5 s ago: their wake-up lost) fire the cron's
   * check-back (the `scheduled` handler).
   */
  async retryFailed(): Promise<{ failed: number; pending: number; overdue: number }> {
    let failed = 0;
    let pending = 0;
    let overdue = 0;
    for (const endpoint of this.endpoints) {
      const ids = (await this.#deliveries(endpoint, "failed")).map((d) => d.id);
      failed += ids.length;
      const lane = async () => {
        for (let id = ids.pop(); id !== undefined; id = ids.pop()) {
          const path = `/admin/webhooks/${endpoint.id}/deliveries/${encodeURIComponent(id)}/retry`;
          const reply = await this.client.admin("POST", path);
          if (reply.status !== 202) throw new Error(`POST ${path} answered ${reply.status}: ${reply.text}`);
          this.operatorRetries++;
        }
      };
      await Promise.all([lane(), lane(), lane(), lane()]);
      const waiting = await this.#deliveries(endpoint, "pending");
      pending += waiting.length;
      overdue += waiting.filter((d) => d.nextAttemptAt && Date.parse(d.nextAttemptAt) < Date.now() - 5_000).length;
    }
    if (overdue > 0) {
      const fired = await this.client.request("GET", `${SCHEDULED_PATH}?cron=${encodeURIComponent("* * * * *")}`);
      if (fired.status !== 200) throw new Error(`the scheduled handler answered ${fired.status}: ${fired.text}`);
      this.checkBacks++;
    }
    return { failed, pending, overdue };
  }

  /**
   * Waits, by bounded polling, until invariant 12 holds or `deadline` passes; returns the last check.
   * Each round is the operator's pass ({@link retryFailed}); the check runs once the delivery logs
   * hold nothing pending or failed (and at the deadline).
   */
  async settle(stateDir: string, deadline: number, log: (line: string) => void): Promise<HookCheck> {
    let same = 0;
    let previous: string | undefined;
    for (let round = 1; ; round++) {
      const { failed, pending, overdue } = await this.retryFailed();
      const late = Date.now() > deadline;
      const said = `webhooks round ${round}: ${failed} failed deliveries retried by the operator, ${pending} pending (${overdue} overdue${overdue > 0 ? ": check-back fired" : ""})`;
      if (failed + pending > 0 && !late) {
        if (round % 10 === 1) log(said);
        await sleep(1_000);
        continue;
      }
      const check = await this.check(stateDir, failed + pending);
      const first = check.violations[0]?.message;
      log(`${said}; ${first ?? "every change delivered"}`);
      // Nothing left to send and the same gap three times over: nothing will close it.
      same = first === previous ? same + 1 : 0;
      previous = first;
      if (first === undefined || late || same >= 2) return check;
      await sleep(1_000);
    }
  }

  /**
   * Invariant 12, as things stand: the feed has every change D1 wrote (as many as `order_changes`,
   * each order's last change its status), and each change was delivered (answered 2xx) to every
   * endpoint subscribed to its type under a webhook-id of its own, every request of which carried the
   * same body; no request failed verification, no endpoint got what it is not subscribed to.
   * `undelivered`: the delivery log's pending and failed rows, which must be none.
   */
  async check(stateDir: string, undelivered: number): Promise<HookCheck> {
    const violations: Violation[] = [];
    const fail = (message: string) => violations.push({ invariant: 12, message });
    const feed = await this.#feed();
    const orders = await d1Query<{ reservation_id: string; status: string; changes: number }>(
      stateDir,
      "SELECT reservation_id, status, (SELECT COUNT(*) FROM order_changes) AS changes FROM orders",
    );
    const changes = orders[0]?.changes ?? 0;
    if (changes !== feed.length) fail(`the feed has ${feed.length} changes, D1's order_changes ${changes}`);
    const last = new Map(feed.map((c) => [c.reservationId, c.status]));
    for (const order of orders) {
      const status = last.get(order.reservation_id);
      if (status !== order.status) {
        fail(`order ${order.reservation_id} is ${order.status} in D1, its last change in the feed ${status ?? "none"}`);
        break;
      }
    }
    if (undelivered > 0) fail(`${undelivered} deliveries pending or failed in the delivery logs`);
    // Payments owed back are pushed too (`payment.refund_required`, one per flagged payment in D1).
    const flagged = await d1Query<{ event_id: string }>(
      stateDir,
      "SELECT event_id FROM payments WHERE outcome = 'refund_required'",
    );
    const owner = new Map<string, string>();
    const figures: EndpointFigures[] = [];
    for (const endpoint of this.endpoints) {
      const log = (await (await fetch(`${this.receiver.url}/control/${endpoint.id}`)).json()) as ReceiverLog;
      if (log.unverified > 0) fail(`${endpoint.id}: ${log.unverified} requests failed signature verification`);
      const owed = new Map<string, number>();
      for (const change of feed) {
        const key = `${change.reservationId} order.${change.status}`;
        if (endpoint.events.includes(`order.${change.status}`)) owed.set(key, (owed.get(key) ?? 0) + 1);
      }
      if (endpoint.events.includes(REFUND_REQUIRED)) {
        for (const payment of flagged) owed.set(`${payment.event_id} ${REFUND_REQUIRED}`, 1);
      }
      const byId = new Map<string, ById>();
      const answers: Record<string, number> = {};
      for (const r of log.received) {
        answers[String(r.answered)] = (answers[String(r.answered)] ?? 0) + 1;
        if (!r.verified || !r.body) continue;
        // A batch's events each count under the webhook-id they carry, as if each had come alone.
        const events =
          r.body.type === "batch"
            ? (r.body.data.events ?? []).map(({ id, ...body }) => ({ webhookId: id, body }))
            : [{ webhookId: r.webhookId, body: r.body }];
        for (const { webhookId, body } of events) {
          const other = owner.get(webhookId);
          if (other !== undefined && other !== endpoint.id)
            fail(`webhook-id ${webhookId} reached ${other} and ${endpoint.id}`);
          owner.set(webhookId, endpoint.id);
          // A payment is named by its event id (and dated by its receipt), an order change by its reservation.
          const payment =
            body.type === REFUND_REQUIRED ? (body.data as { eventId?: string; receivedAt?: string }) : null;
          const key = `${payment ? payment.eventId : body.data.reservationId} ${body.type}`;
          let seen = byId.get(webhookId);
          if (!seen) {
            seen = { key, bodies: new Set(), requests: 0, delivered: false, processed: 0, firstLagMs: null };
            byId.set(webhookId, seen);
            const at = Date.parse((payment ? payment.receivedAt : body.data.updatedAt) ?? "");
            seen.firstLagMs = Number.isNaN(at) ? null : r.receivedAt - at;
          }
          seen.bodies.add(JSON.stringify(body));
          seen.requests++;
          const ok = typeof r.answered === "number" && r.answered >= 200 && r.answered < 300;
          if (ok) seen.delivered = true;
          if (ok || r.answered === "dropped") seen.processed++;
          if (!payment && body.type !== `order.${body.data.status}`)
            fail(`${endpoint.id}: webhook-id ${webhookId} is ${body.type} carrying an order ${body.data.status}`);
        }
      }
      const ids = new Map<string, { all: number; delivered: number }>();
      for (const [webhookId, seen] of byId) {
        if (seen.bodies.size > 1)
          fail(`${endpoint.id}: webhook-id ${webhookId} came with ${seen.bodies.size} different bodies`);
        const n = ids.get(seen.key) ?? { all: 0, delivered: 0 };
        n.all++;
        if (seen.delivered) n.delivered++;
        ids.set(seen.key, n);
      }
      let delivered = 0;
      for (const [key, n] of owed) {
        const got = ids.get(key) ?? { all: 0, delivered: 0 };
        delivered += Math.min(n, got.delivered);
        if (got.delivered < n)
          fail(
            `${endpoint.id}: change ${key} never delivered (${got.all} webhook-ids seen, ${got.delivered} answered 2xx, ${n} owed)`,
          );
        else if (got.all > n) fail(`${endpoint.id}: change ${key} came under ${got.all} webhook-ids, ${n} owed`);
      }
      for (const [key, n] of ids)
        if (!owed.has(key))
          fail(`${endpoint.id}: got ${key} (${n.all} webhook-ids), which is not in the feed or not subscribed`);
      const lags = [...byId.values()]
        .flatMap((s) => (s.firstLagMs === null ? [] : [s.firstLagMs]))
        .sort((a, b) => a - b);
      figures.push({
        role: endpoint.role,
        id: endpoint.id,
        events: endpoint.events,
        owed: [...owed.values()].reduce((a, b) => a + b, 0),
        delivered,
        requests: log.count,
        answers,
        seenTwice: [...byId.values()].filter((s) => s.requests > 1).length,
        processedTwice: [...byId.values()].filter((s) => s.processed > 1).length,
        unverified: log.unverified,
        lagP50Ms: percentile(lags, 0.5),
        lagMaxMs: lags.at(-1) ?? null,
      });
    }
    const sum = (f: (e: EndpointFigures) => number) => figures.reduce((a, e) => a + f(e), 0);
    return {
      violations,
      endpoints: figures,
      summary: `${feed.length} order changes in the feed (= D1's order_changes), ${sum((e) => e.owed)} deliveries owed to ${figures.length} endpoints, ${sum((e) => e.delivered)} delivered by webhook-id, one body each; ${sum((e) => e.requests)} requests, ${sum((e) => e.seenTwice)} webhook-ids seen twice or more (${sum((e) => e.processedTwice)} processed twice), ${sum((e) => e.unverified)} unverified; ${this.operatorRetries} failed deliveries retried by the operator, ${this.checkBacks} check-backs fired`,
    };
  }

  close(): Promise<void> {
    return this.receiver.close();
  }
}

async function control(receiver: WebhookReceiver, method: "PUT" | "PATCH", id: string, body: Partial<Behaviour>) {
  const res = await fetch(`${receiver.url}/control/${id}`, { method, body: JSON.stringify(body) });
  if (res.status !== 200) throw new Error(`${method} /control/${id} answered ${res.status}: ${await res.text()}`);
}
