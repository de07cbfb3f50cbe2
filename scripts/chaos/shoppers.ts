/**
 * Simulated shoppers: each one a seeded script of tokens, reservations (random quantities, concurrent
 * double submits, token replays), cancels, payments (valid, duplicated, late, failed, reordered) and
 * waitlists. Everything they were told is recorded in a {@link Ledger} for the invariant checks.
 */
import { randomBytes } from "node:crypto";
import { shopperJwt } from "../../tools/jwt";
import type { FaultInjector } from "./faults";
import { type Client, errorCode, field, type Reply, sleep, str } from "./http";
import { between, derive, type Options, pick, prng, type SkuPlan } from "./schedule";
import { checkoutSession, sendPayment, sendStripe, stripeEvent, stripeId } from "./stripe";

export interface Acked {
  id: string;
  sku: string;
  userId: string;
  quantity: number;
  expiresAt: number;
  /** Status from the last answer about it (reservation, cancel, payment, read). */
  lastKnown: string;
  /** A payment.succeeded answered `paid` or `refund_required` for it: those are final. */
  finalBy: string | null;
  /**
   * Statuses a request about it may have led to though it got no answer after its retries (a cancel:
   * cancelled; a payment: paid, refund_required or cancelled): it may have applied (invariant 5).
   */
  unanswered?: Set<string>;
  origin: "reservation" | "waitlist";
}

export interface Ledger {
  acked: Map<string, Acked>;
  /** Users with a reservation attempt that got no contract answer (it may have committed). */
  unanswered: Set<string>;
  /** Users who joined a waitlist (they may receive holds nobody acknowledged to them). */
  waitlisted: Set<string>;
  /** Payment event id -> every `reservationStatus` answered for it. */
  payments: Map<string, { reservationId: string; answers: string[] }>;
  outcomes: Map<string, number>;
  /**
   * `money` SKUs: the payment event ids answered `refund_required` (each must be counted once in the
   * SKU's `payments.refund_required`), or null once one of its payments went unanswered (unknown).
   */
  flagged: Map<string, Set<string> | null>;
  /** Violations seen on line (invariant 3, 6): the first one is reported. */
  violations: { invariant: number; message: string }[];
  users: Map<string, string>;
  /** The first few 5xx answers (kept to show what a fault looked like from outside). */
  serverErrors: string[];
  /**
   * Every 5xx other than 503 (the contract's `BUSY`, or wrangler dev's proxy dropping a request): the
   * contract never means one (a `500 INTERNAL` is a bug), so any fails the run. With its request id,
   * to find the Worker's log line.
   */
  unexpected: string[];
}

export function newLedger(): Ledger {
  return {
    acked: new Map(),
    unanswered: new Set(),
    waitlisted: new Set(),
    payments: new Map(),
    flagged: new Map(),
    outcomes: new Map(),
    violations: [],
    users: new Map(),
    serverErrors: [],
    unexpected: [],
  };
}

/** A hold just acknowledged to its buyer (a 202, or one found in their list): held, nothing final yet. */
export function heldAcked(
  id: string,
  sku: string,
  userId: string,
  quantity: number,
  answer: unknown,
  origin: Acked["origin"] = "reservation",
): Acked {
  const expiresAt = Date.parse(str(answer, "expiresAt") ?? "");
  return { id, sku, userId, quantity, expiresAt, lastKnown: "held", finalBy: null, origin };
}

/** What a payment.succeeded may leave a reservation as. */
const PAID = ["paid", "refund_required"];

/** Whether a request got no answer of the contract's, after its retries (it may have applied). */
export function noAnswer(reply: Reply | null): boolean {
  return reply === null || reply.status === 429 || reply.status >= 500;
}

/** A request about `acked` that got no answer may have left it in any of `statuses` (invariant 5). */
export function mayHave(acked: Acked | undefined, ...statuses: string[]): void {
  if (!acked) return;
  acked.unanswered ??= new Set();
  for (const status of statuses) acked.unanswered.add(status);
}

/** A shopper's `authorization` header: the JWT signed on first use and kept in the ledger's users. */
export async function shopperAuth(ledger: Ledger, userId: string, secret: string): Promise<Record<string, string>> {
  let jwt = ledger.users.get(userId);
  if (!jwt) {
    jwt = await shopperJwt(userId, secret);
    ledger.users.set(userId, jwt);
  }
  return { authorization: `Bearer ${jwt}` };
}

/**
 * A reservation through the contract: no contract answer marks the user unanswered (it may have
 * committed); a 202 is recorded as acknowledged (invariants 1-5 check it), and returned when new.
 */
export async function reserveRecorded(
  ledger: Ledger,
  client: Client,
  op: string,
  sku: string,
  userId: string,
  headers: Record<string, string>,
  body: { token: string; quantity: number; variants?: string[] },
): Promise<{ reply: Reply | null; acked?: Acked }> {
  const reply = await call(ledger, op, () =>
    client.request("POST", `/api/skus/${sku}/reservations`, { headers, body }),
  );
  if (reply === null || reply.status >= 500) ledger.unanswered.add(userId);
  const id = reply?.status === 202 ? str(reply.json, "reservationId") : undefined;
  if (!reply || !id || ledger.acked.has(id)) return { reply };
  const acked = heldAcked(id, sku, userId, body.quantity, reply.json);
  ledger.acked.set(id, acked);
  return { reply, acked };
}

export function count(ledger: Ledger, op: string, reply: Reply | null): void {
  const key =
    reply === null
      ? `${op} network-error`
      : `${op} ${reply.status}${errorCode(reply.json) ? ` ${errorCode(reply.json)}` : ""}`;
  ledger.outcomes.set(key, (ledger.outcomes.get(key) ?? 0) + 1);
  if (reply && reply.status >= 500 && ledger.serverErrors.length < 5) {
    ledger.serverErrors.push(`${op} ${reply.status}: ${reply.text.slice(0, 160).replace(/\s+/g, " ")}`);
  }
  if (reply && reply.status >= 500 && reply.status !== 503) {
    const id = reply.headers.get("X-Request-Id") ?? "no request id";
    ledger.unexpected.push(`${op} ${reply.status} (request ${id}): ${reply.text.slice(0, 160).replace(/\s+/g, " ")}`);
  }
}

/** Calls with retries on 429/503/5xx/network errors (all our mutations are idempotent to repeat). */
export async function call(ledger: Ledger, op: string, send: () => Promise<Reply>, retries = 6): Promise<Reply | null> {
  for (let attempt = 0; ; attempt++) {
    let reply: Reply | null = null;
    try {
      reply = await send();
    } catch {
      reply = null;
    }
    count(ledger, op, reply);
    const retryable = reply === null || reply.status === 429 || reply.status >= 500;
    if (!retryable || attempt >= retries) return reply;
    await sleep(reply?.status === 429 ? 1_500 + attempt * 500 : 300 + attempt * 300);
  }
}

/** What the chaos scenes share (actors, sizes, early access, the gatherer witness): the client, ledger, requests. */
export class Scene {
  constructor(
    readonly faults: FaultInjector,
    readonly ledger: Ledger,
    readonly seed: number,
  ) {}

  get client(): Client {
    return this.faults.client;
  }

  protected fail(invariant: number, message: string): void {
    this.ledger.violations.push({ invariant, message });
    this.faults.log(`VIOLATION (invariant ${invariant}): ${message}`);
  }

  protected auth(userId: string): Promise<Record<string, string>> {
    return shopperAuth(this.ledger, userId, this.client.secrets.authSecret);
  }

  /** A purchase token for the user, or null (sold out, paused, no answer). */
  protected async mint(userId: string, sku: string, op: string): Promise<string | null> {
    const headers = await this.auth(userId);
    const reply = await call(this.ledger, `${op} token`, () => this.client.mint(sku, headers));
    return reply?.status === 201 ? (str(reply.json, "token") ?? null) : null;
  }

  /** The owner cancels the hold; true when answered 200 (its status then recorded). */
  protected async cancel(acked: Acked, op: string): Promise<boolean> {
    const headers = await this.auth(acked.userId);
    const reply = await call(this.ledger, op, () =>
      this.client.request("POST", `/api/reservations/${acked.id}/cancel`, { headers }),
    );
    if (noAnswer(reply)) mayHave(acked, "cancelled");
    if (reply?.status !== 200) return false;
    acked.lastKnown = str(reply.json, "status") ?? acked.lastKnown;
    return true;
  }

  /** Each shard's own state, shards 0 to count - 1 (harness route: src/harness/chaos-routes.ts). */
  protected async shardStates<T>(sku: string, count: number): Promise<(T | null)[]> {
    const reply = await this.client.admin("GET", `/chaos/stock/${sku}/shards?count=${Math.min(64, count)}`);
    if (reply.status !== 200) throw new Error(`GET /chaos/stock/${sku}/shards answered ${reply.status}`);
    return (reply.json as { shards: (T | null)[] }).shards;
  }

  /**
   * A payment of the reservation (`webhook`: /webhooks/payments; `stripe`: checkout.session.completed;
   * `stripe-delayed`: completed unpaid, then async_payment_succeeded), its answer recorded for
   * invariant 6. Returns the answer and a way to send the same event again (a provider's retry).
   */
  protected async payBy(
    via: "webhook" | "stripe" | "stripe-delayed",
    acked: Acked,
    op: string,
  ): Promise<{ status: string; outcome: string; resend: (op: string) => Promise<unknown> } | null> {
    let eventId: string;
    let send: () => Promise<Reply>;
    if (via === "webhook") {
      eventId = `evt_${randomBytes(12).toString("hex")}`;
      const raw = JSON.stringify({ id: eventId, type: "payment.succeeded", reservationId: acked.id, amount: 1999 });
      send = () => sendPayment(this.client, raw);
    } else {
      eventId = stripeId("pi", this.seed); // Stripe's money is one event by its PaymentIntent
      const session = (status: "paid" | "unpaid") => checkoutSession(acked.id, 1999, eventId, status);
      if (via === "stripe-delayed") {
        const unpaid = await call(this.ledger, `${op} unpaid`, () =>
          sendStripe(
            this.client,
            stripeEvent(stripeId("evt", this.seed), "checkout.session.completed", session("unpaid")),
          ),
        );
        if (unpaid?.status === 200 && field(unpaid.json, "ignored") !== true)
          this.fail(6, `an unpaid checkout.session.completed for ${acked.id} took effect: no money has arrived`);
      }
      const type = via === "stripe" ? "checkout.session.completed" : "checkout.session.async_payment_succeeded";
      const event = stripeEvent(stripeId("evt", this.seed), type, session("paid"));
      send = () => sendStripe(this.client, event);
    }
    const answer = async (op: string) => {
      const reply = await call(this.ledger, op, send);
      const status = reply?.status === 200 ? str(reply.json, "reservationStatus") : undefined;
      const outcome = reply?.status === 200 ? str(reply.json, "outcome") : undefined;
      // What the 200 said, in the summary: a failing invariant 5 or 6 then shows which answer it was.
      if (reply?.status === 200) {
        const said =
          `${op} answered ${status ?? (field(reply.json, "ignored") === true ? "ignored" : "?")} ${outcome ?? ""}`.trim();
        this.ledger.outcomes.set(said, (this.ledger.outcomes.get(said) ?? 0) + 1);
      }
      const flagged = this.ledger.flagged.get(acked.sku);
      if (noAnswer(reply)) mayHave(acked, ...PAID);
      if (!status || !outcome) {
        this.ledger.flagged.set(acked.sku, null); // an event that got no answer may have been flagged
        return null;
      }
      const record = this.ledger.payments.get(eventId) ?? { reservationId: acked.id, answers: [] };
      record.answers.push(`${status} ${outcome}`);
      this.ledger.payments.set(eventId, record);
      acked.lastKnown = status;
      if (status === "paid" || status === "refund_required") acked.finalBy = status;
      if (outcome === "refund_required" && flagged !== null)
        this.ledger.flagged.set(acked.sku, new Set([...(flagged ?? []), eventId]));
      return { status, outcome };
    };
    const first = await answer(op);
    return first && { ...first, resend: answer };
  }
}

export class Shoppers {
  readonly ledger = newLedger();
  /** Stripe delayed payments by ending (`async_payment_succeeded` / `_failed`), for the summary. */
  readonly stripeFlows = new Map<string, number>();
  #nextPaymentId = 0;

  constructor(
    readonly client: Client,
    readonly opts: Options,
    readonly skus: SkuPlan[],
  ) {}

  #as(userId: string): Record<string, string> {
    const jwt = this.ledger.users.get(userId);
    if (!jwt) throw new Error(`no JWT for ${userId}`);
    return { authorization: `Bearer ${jwt}` };
  }

  async #pay(
    reservationId: string,
    type: "payment.succeeded" | "payment.failed",
    eventId: string,
  ): Promise<string | null> {
    const raw = JSON.stringify({ id: eventId, type, reservationId, amount: 1999 });
    const reply = await call(this.ledger, `pay ${type === "payment.succeeded" ? "ok" : "failed"}`, () =>
      sendPayment(this.client, raw),
    );
    const status = reply?.status === 200 ? (str(reply.json, "reservationStatus") ?? null) : null;
    if (noAnswer(reply))
      mayHave(this.ledger.acked.get(reservationId), ...(type === "payment.failed" ? ["cancelled"] : PAID));
    if (status) {
      const record = this.ledger.payments.get(eventId) ?? { reservationId, answers: [] };
      record.answers.push(status);
      this.ledger.payments.set(eventId, record);
      const acked = this.ledger.acked.get(reservationId);
      if (acked) {
        acked.lastKnown = status;
        if (type === "payment.succeeded" && (status === "paid" || status === "refund_required")) acked.finalBy = status;
      }
    }
    return status;
  }

  #eventId(index: number): string {
    this.#nextPaymentId++;
    return `evt_chaos_${this.opts.seed}_${index}_${this.#nextPaymentId}`;
  }

  /** One shopper's whole visit. */
  async run(index: number): Promise<void> {
    const random = prng(derive(this.opts.seed, index));
    const userId = `shopper-${this.opts.seed}-${index}`;
    this.ledger.users.set(userId, await shopperJwt(userId, this.client.secrets.authSecret));
    const auth = this.#as(userId);
    const weights = this.skus.flatMap((s) => Array.from({ length: s.weight }, () => s));
    const plan = pick(random, weights);
    const sku = plan.sku;
    const { ledger, client } = this;

    const minted = await call(ledger, "token", () => client.mint(sku, auth));
    if (!minted) return;
    if (minted.status === 409 && errorCode(minted.json) === "SOLD_OUT") {
      if (random() < 0.6) await this.#waitlist(random, userId, sku, plan);
      return;
    }
    const token = str(minted.json, "token");
    if (minted.status !== 201 || !token) return;

    // Mostly within the limit; sometimes over it (LIMIT_EXCEEDED / INSUFFICIENT_STOCK expected).
    const quantity =
      random() < 0.85
        ? between(random, 1, plan.perUserLimit)
        : between(random, plan.perUserLimit + 1, plan.perUserLimit + 3);
    const reserve = (q: number) =>
      call(ledger, "reserve", () =>
        client.request("POST", `/api/skus/${sku}/reservations`, { headers: auth, body: { token, quantity: q } }),
      );
    const copies = random() < 0.2 ? between(random, 2, 3) : 1;
    const replies = await Promise.all(Array.from({ length: copies }, () => reserve(quantity)));
    const accepted = replies.filter((r): r is Reply => r?.status === 202);
    if (replies.some((r) => r === null || r.status >= 500)) ledger.unanswered.add(userId);
    const ids = new Set(accepted.map((r) => str(r.json, "reservationId")));
    for (const r of accepted.filter((a) => str(a.json, "reservationId") === undefined)) {
      const text = r.text.slice(0, 200).replace(/\s+/g, " ");
      ledger.violations.push({ invariant: 3, message: `a 202 for ${userId} without a reservationId: ${text}` });
    }
    ids.delete(undefined);
    if (ids.size > 1) {
      ledger.violations.push({
        invariant: 3,
        message: `one token (user ${userId}) created reservations ${[...ids].join(", ")}`,
      });
    }
    const first = accepted[0];
    const id = first ? str(first.json, "reservationId") : undefined;
    if (!first || !id) return;
    const acked = heldAcked(id, sku, userId, quantity, first.json);
    ledger.acked.set(id, acked);

    // Token replays: same body (same reservation, flagged), other quantity (422).
    if (random() < 0.25) {
      await sleep(between(random, 0, 1_500));
      const again = await reserve(quantity);
      if (
        again?.status === 202 &&
        (str(again.json, "reservationId") !== id || again.headers.get("idempotent-replayed") !== "true")
      ) {
        ledger.violations.push({
          invariant: 3,
          message: `token replay for ${id} answered ${str(again.json, "reservationId")} (Idempotent-Replayed: ${again.headers.get("idempotent-replayed")})`,
        });
      }
    }
    if (random() < 0.1) {
      const other = await reserve(quantity + 1);
      if (other?.status === 202) {
        ledger.violations.push({ invariant: 3, message: `token of ${id} accepted again with another quantity` });
      }
    }

    // What the shopper does with the hold.
    const roll = random();
    if (roll < 0.5) {
      // Pay, on time or (short holds) around expiry; sometimes duplicated or raced by a failure.
      const late = plan.holdSeconds <= 10 && random() < 0.45;
      await sleep(
        late
          ? between(random, plan.holdSeconds * 1000 - 800, plan.holdSeconds * 1000 + 2_500)
          : between(random, 200, 3_000),
      );
      const eventId = this.#eventId(index);
      const style = random();
      if (style < 0.2) {
        // Concurrent duplicate deliveries of one event.
        await Promise.all([this.#pay(id, "payment.succeeded", eventId), this.#pay(id, "payment.succeeded", eventId)]);
      } else if (style < 0.35) {
        // Reordered events: a failure and a success race; the answer read back is what counts.
        const failId = this.#eventId(index);
        const pair = [() => this.#pay(id, "payment.failed", failId), () => this.#pay(id, "payment.succeeded", eventId)];
        if (random() < 0.5) pair.reverse();
        await Promise.all(pair.map((f) => f()));
        await this.#read(acked);
        acked.finalBy = acked.lastKnown === "paid" || acked.lastKnown === "refund_required" ? acked.lastKnown : null;
      } else if (style < 0.55) {
        // A delayed payment method through Stripe: the session completes unpaid, the money comes later (or not).
        await this.#stripeDelayed(random, acked, random() < 0.65 ? "succeeded" : "failed");
      } else {
        await this.#pay(id, "payment.succeeded", eventId);
      }
      // (The Stripe flow replays its own event; `eventId` was never sent there.)
      if (!(style >= 0.35 && style < 0.55) && random() < 0.3) {
        // A late replay of the same event: same answer, no second effect.
        await sleep(between(random, 500, 4_000));
        await this.#pay(id, "payment.succeeded", eventId);
      }
    } else if (roll < 0.62) {
      await sleep(between(random, 200, 2_000));
      await this.#pay(id, "payment.failed", this.#eventId(index));
    } else if (roll < 0.82) {
      await sleep(between(random, 200, 3_000));
      await this.#cancel(acked, auth);
      if (random() < 0.3) await this.#cancel(acked, auth);
      if (random() < 0.15) {
        // A payment after the cancel: re-takes stock if it can, else refund_required.
        await this.#pay(id, "payment.succeeded", this.#eventId(index));
      }
    }
    if (random() < 0.3) await this.#read(acked);
  }

  /**
   * Stripe's delayed payment methods (API.md, `POST /webhooks/stripe`): `checkout.session.completed`
   * with `payment_status: "unpaid"` must change nothing (answered `ignored`, the hold still held),
   * then `checkout.session.async_payment_succeeded` pays (answered with a `reservationStatus`, never
   * `ignored`) or `checkout.session.async_payment_failed` releases the hold. Sometimes the final
   * event comes twice (same id: same answer). What is wrong is recorded on line (invariants 5, 6).
   */
  async #stripeDelayed(random: () => number, acked: Acked, ending: "succeeded" | "failed"): Promise<void> {
    const { ledger, client } = this;
    const seed = this.opts.seed;
    const intent = stripeId("pi", seed);
    const flow = `async_payment_${ending}`;
    this.stripeFlows.set(flow, (this.stripeFlows.get(flow) ?? 0) + 1);
    const note = (key: string) => ledger.outcomes.set(key, (ledger.outcomes.get(key) ?? 0) + 1);
    const answerOf = (reply: Reply | null) =>
      reply?.status !== 200
        ? `${reply?.status ?? "network-error"}`
        : field(reply.json, "ignored") === true
          ? "ignored"
          : (str(reply.json, "reservationStatus") ?? "no status");

    const unpaid = stripeEvent(stripeId("evt", seed), "checkout.session.completed", {
      ...checkoutSession(acked.id, 1999 * acked.quantity, intent, "unpaid"),
    });
    const first = await call(ledger, "stripe completed unpaid", () => sendStripe(client, unpaid));
    note(`stripe completed unpaid answered ${answerOf(first)}`);
    if (first?.status === 200 && field(first.json, "ignored") !== true) {
      ledger.violations.push({
        invariant: 6,
        message: `checkout.session.completed with payment_status "unpaid" for ${acked.id} took effect (answered ${answerOf(first)}): no money has arrived`,
      });
    }
    await this.#read(acked);
    if (acked.lastKnown === "paid" || acked.lastKnown === "cancelled") {
      ledger.violations.push({
        invariant: 6,
        message: `reservation ${acked.id} is ${acked.lastKnown} after an unpaid checkout.session.completed (it must change nothing)`,
      });
    }

    await sleep(between(random, 300, 2_500));
    const type = `checkout.session.${flow}`;
    const event = stripeEvent(
      stripeId("evt", seed),
      type,
      checkoutSession(acked.id, 1999 * acked.quantity, intent, "paid"),
    );
    const eventId = String(event.id);
    const copies = random() < 0.3 ? 2 : 1;
    for (let copy = 0; copy < copies; copy++) {
      if (copy > 0) await sleep(between(random, 200, 1_500));
      const reply = await call(ledger, `stripe ${ending === "succeeded" ? "async ok" : "async failed"}`, () =>
        sendStripe(client, event),
      );
      const answer = answerOf(reply);
      note(`stripe ${type.slice(17)} answered ${answer}`);
      if (reply?.status !== 200) continue;
      if (answer === "ignored") {
        ledger.violations.push(
          ending === "succeeded"
            ? {
                invariant: 6,
                message: `${type} for reservation ${acked.id} (${acked.lastKnown}) was answered ignored: the money that arrived took no effect`,
              }
            : {
                invariant: 5,
                message: `${type} for reservation ${acked.id} (${acked.lastKnown}) was answered ignored: the failed payment did not release the hold`,
              },
        );
        continue;
      }
      const record = ledger.payments.get(eventId) ?? { reservationId: acked.id, answers: [] };
      record.answers.push(answer);
      ledger.payments.set(eventId, record);
      acked.lastKnown = answer;
      if (ending === "succeeded" && (answer === "paid" || answer === "refund_required")) acked.finalBy = answer;
      if (ending === "failed" && answer === "held") {
        ledger.violations.push({
          invariant: 5,
          message: `${type} for reservation ${acked.id} answered held: the failed payment did not release the hold`,
        });
      }
    }
  }

  async #cancel(acked: Acked, auth: Record<string, string>): Promise<void> {
    const reply = await call(this.ledger, "cancel", () =>
      this.client.request("POST", `/api/reservations/${acked.id}/cancel`, { headers: auth }),
    );
    if (noAnswer(reply)) mayHave(acked, "cancelled");
    if (reply?.status === 200) acked.lastKnown = str(reply.json, "status") ?? acked.lastKnown;
  }

  async #read(acked: Acked): Promise<void> {
    const reply = await call(this.ledger, "read", () =>
      this.client.request("GET", `/api/reservations/${acked.id}`, { headers: this.#as(acked.userId) }),
    );
    if (reply?.status === 200) acked.lastKnown = str(reply.json, "status") ?? acked.lastKnown;
  }

  async #waitlist(random: () => number, userId: string, sku: string, plan: SkuPlan): Promise<void> {
    const auth = this.#as(userId);
    const joined = await call(this.ledger, "waitlist", () =>
      this.client.request("POST", `/api/skus/${sku}/waitlist`, {
        headers: auth,
        body: { quantity: between(random, 1, plan.perUserLimit) },
      }),
    );
    if (joined?.status !== 202) return;
    this.ledger.waitlisted.add(userId);
    if (random() < 0.4) await this.#leaveAndRejoin(random, userId, sku, plan, auth);
    // Come back later: a hold the waitlist gave shows in /api/me/reservations once persisted.
    await sleep(between(random, 5_000, 15_000));
    const mine = await call(this.ledger, "me", () =>
      this.client.request("GET", "/api/me/reservations", { headers: auth }),
    );
    const list = mine?.status === 200 ? (mine.json as { reservations?: unknown[] }).reservations : undefined;
    for (const item of list ?? []) {
      const id = str(item, "reservationId");
      if (!id || str(item, "status") !== "held" || this.ledger.acked.has(id)) continue;
      const quantity = Number((item as { quantity?: unknown }).quantity);
      this.ledger.acked.set(id, heldAcked(id, sku, userId, quantity, item, "waitlist"));
      this.ledger.outcomes.set("waitlist hold received", (this.ledger.outcomes.get("waitlist hold received") ?? 0) + 1);
      if (random() < 0.6) await this.#pay(id, "payment.succeeded", this.#eventId(Number(userId.split("-").pop())));
    }
  }

  /**
   * A waiting shopper looks at its place, leaves the line and comes back. Its place is 1 or more with
   * at least one unit ahead per entry before it; once it left (200), its place is gone (404) until it
   * joins again (invariant 14, on line). A 404 to the leave: the line served it meanwhile.
   */
  async #leaveAndRejoin(
    random: () => number,
    userId: string,
    sku: string,
    plan: SkuPlan,
    auth: Record<string, string>,
  ): Promise<void> {
    const place = () =>
      call(this.ledger, "waitlist place", () =>
        this.client.request("GET", `/api/skus/${sku}/waitlist`, { headers: auth }),
      );
    const before = await place();
    if (before?.status === 200) {
      const position = Number(field(before.json, "position"));
      const ahead = Number(field(before.json, "unitsAhead"));
      if (!(position >= 1 && ahead >= position - 1 && ahead <= (position - 1) * plan.perUserLimit))
        this.#violation(
          14,
          `${sku}: ${userId}'s place ${before.text.slice(0, 160)} (${position - 1} entries ahead of at most ${plan.perUserLimit} units)`,
        );
    }
    await sleep(between(random, 200, 2_000));
    const left = await call(this.ledger, "waitlist leave", () =>
      this.client.request("DELETE", `/api/skus/${sku}/waitlist`, { headers: auth }),
    );
    if (left?.status !== 200) return;
    const gone = await place();
    if (gone?.status === 200) this.#violation(14, `${sku}: ${userId} left the line (200), yet its place answers 200`);
    await sleep(between(random, 200, 2_000));
    await call(this.ledger, "waitlist rejoin", () =>
      this.client.request("POST", `/api/skus/${sku}/waitlist`, {
        headers: auth,
        body: { quantity: between(random, 1, plan.perUserLimit) },
      }),
    );
  }

  #violation(invariant: number, message: string): void {
    this.ledger.violations.push({ invariant, message });
    console.log(`VIOLATION (invariant ${invariant}): ${message}`);
  }

  /** Runs every shopper, `concurrency` at a time, arrivals spread over the traffic period. */
  async runAll(progress: (line: string) => void, stopAt: number): Promise<void> {
    const start = Date.now();
    let next = 0;
    let done = 0;
    const worker = async () => {
      for (;;) {
        const index = next++;
        if (index >= this.opts.shoppers) return;
        const due = start + (index * this.opts.trafficMs) / this.opts.shoppers;
        if (Date.now() < due) await sleep(due - Date.now());
        if (Date.now() > stopAt) return;
        try {
          await this.run(index);
        } catch (err) {
          this.ledger.outcomes.set(
            `shopper crashed: ${String(err).slice(0, 80)}`,
            (this.ledger.outcomes.get(`shopper crashed: ${String(err).slice(0, 80)}`) ?? 0) + 1,
          );
        }
        done++;
      }
    };
    const ticker = setInterval(() => {
      const s = Math.round((Date.now() - start) / 1000);
      progress(
        `t+${s}s shoppers done ${done}/${this.opts.shoppers}, reservations acknowledged ${this.ledger.acked.size}`,
      );
    }, 10_000);
    try {
      await Promise.all(Array.from({ length: this.opts.concurrency }, worker));
    } finally {
      clearInterval(ticker);
    }
  }
}
