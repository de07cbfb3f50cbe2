import { createScheduledController } from "cloudflare:test";
import { env } from "cloudflare:workers";
import { afterEach, describe, expect, it, vi } from "vitest";
import { feedPage, positionOf } from "../src/handoff/change-feed";
import worker from "../src/index";
import type { Received } from "../tools/webhook-receiver";
import { ADMIN_TOKEN, call, createSku, reserve, uniqueSku } from "./support/client";
import { eventually } from "./support/eventually";
import {
  configure,
  conforms,
  deliveries,
  endpoint,
  endpoints,
  forgetEndpoints,
  logOf,
  receiver,
} from "./support/handoff";
import { pay } from "./support/payments";
// Test sales (what the feed, the webhooks, D1 and the payments list say of them) share this file's
// workerd (one start-up, issue #56); they run first and leave no change still on its way.
import "./suites/test-sales";
import "./suites/endpoint-isolation";
import "./suites/webhook-batches";

/**
 * API.md "Order hand-off", through the real queues: order events → D1 (whose triggers write each
 * change's feed position and deliveries) → `webhook-deliveries` → the sender → a shop's receiver
 * (tools/webhook-receiver.ts), which checks every request with the `standardwebhooks` package.
 * Retries: WEBHOOK_RETRY_SCHEDULE "1,2" (vitest.config.ts), so three attempts, then failed.
 */

afterEach(forgetEndpoints);

describe("order hand-off: signed webhooks", () => {
  it("POSTs every order change, signed, to each endpoint subscribed to its type, once", async () => {
    const all = await endpoint();
    const paidOnly = await endpoint({}, { events: ["order.paid"] });
    const sku = uniqueSku("hand");
    await createSku(sku, { totalStock: 10, perUserLimit: 2, price: 1999 });
    const first = await reserve("h1", sku, 2);
    const second = await reserve("h2", sku, 1);
    expect([first.status, second.status]).toEqual([202, 202]);
    expect((await pay(first.json.reservationId, "payment.succeeded", undefined, { amount: 3998 })).status).toBe(200);
    expect((await call("POST", `/api/reservations/${second.json.reservationId}/cancel`, { user: "h2" })).status).toBe(
      200,
    );

    const log = await eventually(async () => {
      const log = await logOf(all.id);
      expect(log.count).toBe(4);
      return log;
    });
    expect(log.unverified).toBe(0);
    for (const request of log.received) conforms("WebhookEvent", request.body);
    const seen = log.received.map((r) => `${r.body?.data.reservationId}:${r.body?.type}`).sort();
    expect(seen).toEqual(
      [
        `${first.json.reservationId}:order.held`,
        `${first.json.reservationId}:order.paid`,
        `${second.json.reservationId}:order.cancelled`,
        `${second.json.reservationId}:order.held`,
      ].sort(),
    );
    const paid = log.received.find((r) => r.body?.type === "order.paid");
    expect(paid?.body?.data).toMatchObject({
      reservationId: first.json.reservationId,
      sku,
      userId: "h1",
      quantity: 2,
      status: "paid",
      amount: 3998,
      currency: "usd",
    });
    expect(new Set(log.received.map((r) => r.webhookId)).size).toBe(4);
    const onlyPaid = await eventually(async () => {
      const log = await logOf(paidOnly.id);
      expect(log.count).toBe(1);
      return log;
    });
    expect(onlyPaid.received[0]?.body?.type).toBe("order.paid");
    expect(onlyPaid.received[0]?.webhookId).not.toBe(paid?.webhookId); // one id per event and endpoint
    const rows = await deliveries(all.id);
    expect(rows.map((d) => [d.status, d.attempts, d.lastStatusCode])).toEqual(Array(4).fill(["delivered", 1, 204]));

    // The sender runs again (the cron's check-back, then a new change wakes it): what was delivered
    // is not sent again; only the new change arrives.
    await worker.scheduled(createScheduledController({ scheduledTime: Date.now(), cron: "* * * * *" }), env);
    const third = await reserve("h3", sku, 1);
    expect(third.status).toBe(202);
    const after = await eventually(async () => {
      const log = await logOf(all.id);
      expect(log.count).toBe(5);
      return log;
    });
    expect(after.received.filter((r) => r.body?.data.reservationId === third.json.reservationId)).toHaveLength(1);
    expect(new Set(after.received.map((r) => r.webhookId)).size).toBe(5);
  });

  it("a receiver that fails gets the same webhook-id again after each backoff, until it answers 2xx", async () => {
    const hook = await endpoint({ fail: 2 });
    const sku = uniqueSku("retry");
    await createSku(sku, { totalStock: 5 });
    expect((await reserve("r1", sku)).status).toBe(202);
    const log = await eventually(async () => {
      const log = await logOf(hook.id);
      expect(log.count).toBe(3);
      return log;
    }, 20_000);
    const [a, b, c] = log.received as [Received, Received, Received];
    expect([a.answered, b.answered, c.answered]).toEqual([500, 500, 204]);
    expect(new Set([a.webhookId, b.webhookId, c.webhookId]).size).toBe(1);
    expect(log.unverified).toBe(0);
    // The schedule is 1 s, then 2 s (each attempt is signed with its own timestamp).
    expect(b.receivedAt - a.receivedAt).toBeGreaterThanOrEqual(1000);
    expect(c.receivedAt - b.receivedAt).toBeGreaterThanOrEqual(2000);
    const [row] = await eventually(async () => {
      const rows = await deliveries(hook.id, "?status=delivered");
      expect(rows).toHaveLength(1);
      return rows;
    });
    expect(row).toMatchObject({ id: a.webhookId, attempts: 3, lastStatusCode: 204, type: "order.held" });
  });

  it("an endpoint that keeps failing ends failed, visible in the log and the metric; a manual retry delivers it", async () => {
    const hook = await endpoint({ fail: 1000, answerBody: "x".repeat(5000) });
    const brief = await endpoint({ fail: 1000, answerBody: "pas aujourd’hui" });
    const sku = uniqueSku("dead");
    await createSku(sku, { totalStock: 5 });
    const held = await reserve("d1", sku);
    expect(held.status).toBe(202);
    const [failed] = await eventually(async () => {
      const rows = await deliveries(hook.id, "?status=failed");
      expect(rows).toHaveLength(1);
      return rows;
    }, 20_000);
    expect(failed).toMatchObject({ attempts: 3, lastStatusCode: 500, reservationId: held.json.reservationId });
    expect(failed?.lastResponse).toBe("x".repeat(1024)); // at most 1 KB of the answer is kept
    // A short answer is kept whole, whatever its characters.
    const [short] = await eventually(async () => {
      const rows = await deliveries(brief.id, "?status=failed");
      expect(rows).toHaveLength(1);
      return rows;
    }, 20_000);
    expect(short?.lastResponse).toBe("pas aujourd’hui");
    expect((await logOf(hook.id)).count).toBe(3);
    const metrics = (await call("GET", "/metrics", { admin: true })).json.text as string;
    expect(metrics).toMatch(/flashgate_webhook_deliveries_total\{result="failed"\} [1-9]/);
    expect(metrics).toMatch(/flashgate_webhook_deliveries_total\{result="retried"\} [1-9]/);

    // The shop fixes its receiver; the operator retries the failed delivery.
    await configure(hook.id, { secret: hook.secret });
    const retry = await call("POST", `/admin/webhooks/${hook.id}/deliveries/${failed?.id}/retry`, { admin: true });
    expect(retry.status).toBe(202);
    const log = await eventually(async () => {
      const log = await logOf(hook.id);
      expect(log.count).toBe(1);
      return log;
    });
    expect(log.received[0]).toMatchObject({ webhookId: failed?.id, verified: true, answered: 204 });
    const [row] = await eventually(async () => {
      const rows = await deliveries(hook.id, "?status=delivered");
      expect(rows).toHaveLength(1);
      return rows;
    });
    expect(row?.attempts).toBe(4);
    const unknown = await call("POST", `/admin/webhooks/${hook.id}/deliveries/msg_0_nope/retry`, { admin: true });
    expect(unknown.status).toBe(404);
  });

  it("lists deliveries newest change first, a payment owed back among the order changes", async () => {
    const hook = await endpoint();
    const sku = uniqueSku("newest");
    await createSku(sku, { totalStock: 5, price: 1999 });
    const a = (await reserve("n1", sku)).json.reservationId as string;
    expect((await pay(a)).status).toBe(200);
    await eventually(async () => expect(await deliveries(hook.id, "?status=delivered")).toHaveLength(2));
    const b = (await reserve("n2", sku)).json.reservationId as string;
    await eventually(async () => expect(await deliveries(hook.id, "?status=delivered")).toHaveLength(3));
    // Paid again: the payment is owed back, the newest change of all.
    expect((await pay(a)).status).toBe(200);
    await eventually(async () => expect(await deliveries(hook.id, "?status=delivered")).toHaveLength(4));

    const newest = [
      ["payment.refund_required", a],
      ["order.held", b],
      ["order.paid", a],
      ["order.held", a],
    ];
    const listed = (rows: { type: string; reservationId: string }[]) => rows.map((d) => [d.type, d.reservationId]);
    expect(listed(await deliveries(hook.id))).toEqual(newest);
    expect(listed(await deliveries(hook.id, "?status=delivered&limit=2"))).toEqual(newest.slice(0, 2));
  });

  it("does not follow a redirect and never logs an endpoint's secret", async () => {
    const target = await endpoint();
    const lines: string[] = [];
    for (const level of ["log", "info", "warn", "error"] as const) {
      vi.spyOn(console, level).mockImplementation((...args: unknown[]) => {
        lines.push(args.map(String).join(" "));
      });
    }
    try {
      const hook = await endpoint({ status: 307, location: target.url });
      const sku = uniqueSku("redir");
      await createSku(sku, { totalStock: 5 });
      expect((await reserve("x1", sku)).status).toBe(202);
      await eventually(async () => expect(await deliveries(hook.id, "?status=failed")).toHaveLength(1), 20_000);
      // The target got the order itself (it is subscribed), never the redirected copy.
      const targetLog = await logOf(target.id);
      expect(targetLog.received.map((r) => r.webhookId).filter((id) => id.endsWith(`_${hook.id}`))).toEqual([]);
      expect(lines.length).toBeGreaterThan(0);
      for (const secret of [hook.secret, target.secret, hook.secret.slice("whsec_".length)]) {
        expect(lines.filter((line) => line.includes(secret))).toEqual([]);
      }
    } finally {
      vi.restoreAllMocks();
    }
  });
});

describe("order hand-off: managing endpoints", () => {
  it("PUT creates with a whsec_ secret and keeps it; GET, list and DELETE; unknown ids are 404", async () => {
    const id = uniqueSku("ep");
    const url = `${receiver.url}/hooks/${id}`;
    const created = await call("PUT", `/admin/webhooks/${id}`, { admin: true, body: { url } });
    expect(created.status).toBe(200);
    endpoints.push(id);
    conforms("WebhookEndpoint", created.json);
    expect(created.json).toMatchObject({
      id,
      url,
      enabled: true,
      events: [
        "order.held",
        "order.paid",
        "order.expired",
        "order.cancelled",
        "order.refund_required",
        "payment.refund_required",
      ],
    });
    const secret = created.json.secret as string;
    expect(secret).toMatch(/^whsec_[A-Za-z0-9+/]{43}=$/);
    const updated = await call("PUT", `/admin/webhooks/${id}`, {
      admin: true,
      body: { url, enabled: false, events: ["order.paid"] },
    });
    expect(updated.json).toMatchObject({
      secret,
      enabled: false,
      events: ["order.paid"],
      createdAt: created.json.createdAt,
    });
    expect((await call("GET", `/admin/webhooks/${id}`, { admin: true })).json).toEqual(updated.json);
    const list = await call("GET", "/admin/webhooks", { admin: true });
    conforms("WebhookEndpointList", list.json);
    expect(list.json.webhooks.map((w: { id: string }) => w.id)).toContain(id);
    expect((await call("DELETE", `/admin/webhooks/${id}`, { admin: true })).status).toBe(200);
    expect((await call("GET", `/admin/webhooks/${id}`, { admin: true })).status).toBe(404);
    expect((await call("DELETE", `/admin/webhooks/${id}`, { admin: true })).status).toBe(404);
    expect((await call("GET", `/admin/webhooks/${id}/deliveries`, { admin: true })).status).toBe(404);
    expect((await call("GET", `/admin/webhooks/${id}`)).status).toBe(401);
  });

  it("refuses URLs that are not https (http only to this machine, only when allowed) and bodies that fail validation", async () => {
    const id = uniqueSku("bad");
    const cases: [unknown, string][] = [
      [{ url: "http://example.com/hook" }, "https"],
      [{ url: "ftp://127.0.0.1/hook" }, "https"],
      [{ url: "https://user:pw@example.com/hook" }, "user or password"],
      [{ url: "not a url" }, "not a URL"],
      [{ url: "https://example.com/hook", evnets: ["order.paid"] }, "evnets"],
      [{ url: "https://example.com/hook", events: ["order.shipped"] }, "events"],
      [{ url: "https://example.com/hook", events: ["order.paid", "order.paid"] }, "once"],
      [{ url: "https://example.com/hook", events: [] }, "events"],
      [{ events: ["order.paid"] }, "url"],
    ];
    for (const [body, says] of cases) {
      const answer = await call("PUT", `/admin/webhooks/${id}`, { admin: true, body });
      expect(answer.status, JSON.stringify(body)).toBe(400);
      expect(answer.json.error.code).toBe("INVALID_REQUEST");
      expect(answer.json.error.message).toContain(says);
    }
    const local = { url: "http://127.0.0.1:9/hook" };
    const off = { WEBHOOK_ALLOW_HTTP_LOCALHOST: "false" } as unknown as Partial<Env>;
    const refused = await call("PUT", `/admin/webhooks/${id}`, { admin: true, body: local, env: off });
    expect(refused.status).toBe(400);
    expect(refused.json.error.message).toContain("WEBHOOK_ALLOW_HTTP_LOCALHOST");
    expect((await call("PUT", "/admin/webhooks/bad%20id", { admin: true, body: local })).status).toBe(400);
    expect((await call("GET", `/admin/webhooks/${id}`, { admin: true })).status).toBe(404); // nothing stored
    expect(await env.DB.prepare("SELECT count(*) AS n FROM webhook_endpoints WHERE id = ?").bind(id).first("n")).toBe(
      0,
    );
  });
});

describe("order hand-off: the change feed", () => {
  /** Pages from `cursor` to the end; the orders and the last `next`. */
  async function drain(cursor?: string) {
    const orders: { reservationId: string; status: string }[] = [];
    let next = cursor;
    for (;;) {
      const answer = await call("GET", `/admin/orders?limit=1000${next ? `&after=${next}` : ""}`, { admin: true });
      expect(answer.status).toBe(200);
      orders.push(...answer.json.orders);
      next = answer.json.next;
      if (answer.json.orders.length === 0) return { orders, next: next as string };
    }
  }

  it("pages through 10,000 changes 100 at a time, each page reading what the first read, an order again after it changes", async () => {
    const start = (await drain()).next;
    const sku = uniqueSku("feed");
    const n = 5000;
    const now = Date.now();
    // 5,000 orders, then each paid: 10,000 changes, written as the consumer writes rows.
    await env.DB.batch([
      env.DB.prepare(
        `WITH RECURSIVE i(k) AS (SELECT 1 UNION ALL SELECT k + 1 FROM i WHERE k < ?1)
         INSERT INTO orders (reservation_id, sku, user_id, quantity, status, expires_at, created_at, updated_at, last_seq, amount, currency)
         SELECT ?2 || '-' || k, ?2, 'u' || k, 1, 'held', NULL, ?3 + k, ?3 + k, 1, 500, 'usd' FROM i`,
      ).bind(n, sku, now),
      env.DB.prepare("UPDATE orders SET status = 'paid', updated_at = updated_at + 1, last_seq = 2 WHERE sku = ?").bind(
        sku,
      ),
    ]);
    const rowsRead: number[] = [];
    const seen: { reservationId: string; status: string }[] = [];
    let cursor = start;
    for (let page = 0; page < 100; page++) {
      const answer = await call("GET", `/admin/orders?limit=100&after=${cursor}`, { admin: true });
      expect(answer.status).toBe(200);
      expect(answer.json.orders).toHaveLength(100);
      if (page === 0) conforms("OrderFeed", answer.json);
      seen.push(...answer.json.orders);
      if (page === 0 || page === 99) {
        const position = (await positionOf(ADMIN_TOKEN, cursor)) as number;
        rowsRead.push((await feedPage(env.DB, position, 100)).rowsRead);
      }
      cursor = answer.json.next;
    }
    expect(rowsRead[1]).toBe(rowsRead[0]);
    expect(rowsRead[0]).toBeLessThanOrEqual(300);
    expect(seen.slice(0, n).every((o) => o.status === "held")).toBe(true);
    expect(seen.slice(n).every((o) => o.status === "paid")).toBe(true);
    expect(new Set(seen.slice(n).map((o) => o.reservationId))).toEqual(
      new Set(seen.slice(0, n).map((o) => o.reservationId)),
    );
    expect(seen[n]).toMatchObject({
      reservationId: `${sku}-1`,
      sku,
      userId: "u1",
      quantity: 1,
      amount: 500,
      currency: "usd",
    });

    // At the end: an empty page still gives `next`; the next change appears after it.
    const empty = await call("GET", `/admin/orders?after=${cursor}`, { admin: true });
    expect(empty.json).toEqual({ orders: [], next: expect.any(String) });
    await env.DB.prepare("UPDATE orders SET status = 'refund_required', last_seq = 3 WHERE reservation_id = ?")
      .bind(`${sku}-7`)
      .run();
    const later = await call("GET", `/admin/orders?after=${empty.json.next}`, { admin: true });
    expect(later.json.orders).toMatchObject([{ reservationId: `${sku}-7`, status: "refund_required" }]);
  });

  it("refuses a cursor it did not make, and limits out of range", async () => {
    const { next } = await drain();
    const flipped = `${next.slice(0, 5)}${next[5] === "A" ? "B" : "A"}${next.slice(6)}`;
    for (const query of [
      "after=abc",
      `after=${flipped}`,
      "after=",
      `after=${next}x`,
      "limit=0",
      "limit=1001",
      "limit=abc",
    ]) {
      const answer = await call("GET", `/admin/orders?${query}`, { admin: true });
      expect(answer.status, query).toBe(400);
      expect(answer.json.error.code).toBe("INVALID_REQUEST");
    }
    const other = await call("GET", `/admin/orders?after=${next}`, {
      env: { ADMIN_TOKEN: "another-admin-token" } as Partial<Env>,
      headers: { authorization: "Bearer another-admin-token" },
    });
    expect(other.status).toBe(400); // signed under another admin token
    expect((await call("GET", "/admin/orders")).status).toBe(401);
  });
});

describe("order hand-off: a backlog", () => {
  it("goes out page after page, each change answered 2xx once, after a start that failed", async () => {
    // The first three requests answer 500; each answer waits a little, so the changes queue up and
    // the sender goes one round at a time, then takes each next page while the last of one goes out.
    const hook = await endpoint({ fail: 3, delayMs: 5 });
    const sku = uniqueSku("backlog");
    await createSku(sku, { totalStock: 300 });
    const answers = await Promise.all(Array.from({ length: 300 }, (_, i) => reserve(`b${i}`, sku)));
    expect(answers.filter((a) => a.status === 202)).toHaveLength(300);
    const rows = await eventually(async () => {
      const rows = await deliveries(hook.id, "?status=delivered&limit=1000");
      expect(rows).toHaveLength(300);
      return rows;
    }, 30_000);
    // Three deliveries took a retry; no change was sent twice beyond that (a page that did not leave out the rows of the one still out would take them again).
    expect(rows.map((row) => row.attempts).sort()).toEqual([...Array(297).fill(1), 2, 2, 2]);
    const log = await logOf(hook.id);
    expect(log.count).toBe(303);
    const delivered = log.received
      .filter((r) => r.verified && r.answered === 204)
      .map((r) => r.body?.data.reservationId);
    expect(new Set(delivered).size).toBe(300);
    expect(delivered).toHaveLength(300);
  });
});

// Last in the file: its hanging attempts keep a sender busy for up to 10 s after it.
describe("order hand-off: an endpoint that hangs", () => {
  it("an endpoint that hangs delays only its own deliveries", async () => {
    const hanging = await endpoint({ delayMs: 11_000, keep: false });
    const healthy = await endpoint({ keep: false });
    const sku = uniqueSku("hang");
    await createSku(sku, { totalStock: 100 });
    // 100 changes owed to each: more than a sender takes at once, so the hanging endpoint's rows
    // would fill the pages of a sender that did not keep endpoints apart.
    const answers = await Promise.all(Array.from({ length: 100 }, (_, i) => reserve(`g${i}`, sku)));
    expect(answers.filter((a) => a.status === 202)).toHaveLength(100);
    await eventually(async () => expect((await logOf(healthy.id)).count).toBe(100));
    // None of the hanging endpoint's attempts has been answered yet (each waits 11 s, past the 10 s timeout).
    expect((await deliveries(hanging.id, "?status=delivered")).length).toBe(0);
    expect((await deliveries(healthy.id, "?status=delivered&limit=1000")).length).toBe(100);
  });
});
