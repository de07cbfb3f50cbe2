/**
 * The actors of the chaos run: people whose requests found defects that random shoppers rarely meet
 * (`refusedPut`, `stranger`, `moneyScene`), each run on the seeded schedule
 * (schedule.ts, `actorSchedule`) and each recording what it was told in the shoppers' ledger, so every
 * reservation it made is checked like any other. What each scene does and which invariant it checks on
 * line: docs/DEVELOPMENT.md, "Chaos: `npm run chaos`".
 */
import { randomBytes } from "node:crypto";
import type { SkuState as ShardState } from "../../durable-objects/engine/types";
import { homeShard } from "../../durable-objects/shared/shard-name";
import { errorCode, type Reply, sleep, str } from "./http";
import { type SkuView, skuView } from "./invariants";
import { between, type Fault, prng } from "./schedule";
import { type Acked, call, reserveRecorded, Scene } from "./shoppers";
import { checkoutSession, sendPayment, sendStripe, stripeEvent, stripeId } from "./stripe";

/** The fields of the admin view only an operator changes (shoppers change none of them). */
const OPERATOR_FIELDS = [
  "name",
  "status",
  "perUserLimit",
  "holdSeconds",
  "startsAt",
  "endsAt",
  "shards",
  "price",
  "currency",
] as const;
const SHARD_FIELDS = ["name", "status", "perUserLimit", "holdSeconds", "startsAt", "endsAt", "shards"] as const;

/** A user id `<prefix><k>` whose home shard under `from` shards is not its home under `to`. */
function userWhoseHomeMoves(prefix: string, from: number, to: number): string {
  for (let k = 0; ; k++)
    if (homeShard(`${prefix}${k}`, from) !== homeShard(`${prefix}${k}`, to)) return `${prefix}${k}`;
}

const show = (value: unknown) => JSON.stringify(value);

export class Actors extends Scene {
  /** Every SKU id never configured that a stranger asked about (invariant 11 names their files). */
  readonly ghosts = new Set<string>();
  /** What was checked on line for invariant 10, for the summary. */
  readonly checked = {
    refusedCompared: 0,
    oldTokens: 0,
    strangers: 0,
  };

  /** A reservation with the token; a 202 is recorded as acknowledged (invariants 1-5 check it). */
  async #reserve(userId: string, sku: string, token: string, quantity: number, op: string): Promise<Reply | null> {
    const headers = await this.auth(userId);
    const body = { token, quantity };
    return (await reserveRecorded(this.ledger, this.client, op, sku, userId, headers, body)).reply;
  }

  /** Cancels every hold these users were acknowledged on the SKU (the owners themselves). */
  async #cancelHolds(sku: string, users: ReadonlySet<string>, op: string): Promise<number> {
    const holds = [...this.ledger.acked.values()].filter(
      (a) => a.sku === sku && users.has(a.userId) && a.lastKnown === "held",
    );
    await Promise.all(holds.map((acked) => this.cancel(acked, op)));
    return holds.length;
  }

  /**
   * The admin view once its total reads the same twice (a transfer between shards in flight takes
   * units out of one shard before the other has them), or equals `expected` when given.
   */
  async #stableView(sku: string, expected?: number): Promise<SkuView> {
    let view = await skuView(this.client, sku);
    for (let read = 0; read < 4; read++) {
      await sleep(250);
      const again = await skuView(this.client, sku);
      const settled = expected === undefined ? again.stock.total === view.stock.total : again.stock.total === expected;
      view = again;
      if (settled) break;
    }
    return view;
  }

  // ---- (a) a PUT that must be refused mid-sale

  async refusedPut(fault: Extract<Fault, { kind: "refused-put" }>): Promise<void> {
    const shopperSkus = this.faults.skus.filter((p) => p.role === undefined).map((p) => p.sku);
    for (const sku of [fault.sku, ...shopperSkus.filter((s) => s !== fault.sku)]) {
      if (await this.faults.exclusive(sku, () => this.#refusedPutOn(sku, fault.round))) return;
    }
    this.faults.count("refused PUTs skipped (no SKU has sold a unit yet)");
  }

  /** The refused PUT on one SKU; false when it has sold nothing yet (no total is certain to be refused). */
  async #refusedPutOn(sku: string, round: number): Promise<boolean> {
    const last = this.faults.lastPut.get(sku);
    if (last === null || last === undefined) return false;
    const before = await this.#stableView(sku);
    if (before.stock.sold === 0) return false;
    const shardsBefore = await this.shardStates<ShardState>(sku, before.shards);
    const user = `refused-${this.seed}-${round}-${sku}`;
    const token = await this.mint(user, sku, "refused-put");
    // Below what is sold: refused whatever holds lapse meanwhile (sold units never come back).
    const body = {
      totalStock: before.stock.sold - 1,
      name: `${before.name} (renamed by a refused PUT)`,
      status: before.status === "on_sale" ? "paused" : "on_sale",
      perUserLimit: before.perUserLimit + 1,
      holdSeconds: before.holdSeconds + 1,
      endsAt: before.endsAt === null ? new Date(Date.now() + 7 * 86_400_000).toISOString() : null,
    };
    const reply = await this.faults.putNow(sku, () => body);
    const code = errorCode(reply.json);
    this.faults.count(`refused PUTs mid-sale answered ${reply.status}${code ? ` ${code}` : ""}`);
    const what = `PUT ${sku} ${show(body)} (sold ${before.stock.sold}, held ${before.stock.held})`;
    let changed = false;
    if (reply.status === 200) {
      this.fail(10, `${what} answered 200: a total below what is sold must be refused`);
      changed = true;
    } else if (reply.status >= 400 && reply.status < 500) {
      this.checked.refusedCompared++;
      const after = await this.#stableView(sku, before.stock.total);
      const shardsAfter = await this.shardStates<ShardState>(sku, Math.max(before.shards, after.shards));
      const diffs: string[] = [];
      for (const f of OPERATOR_FIELDS) {
        if (show(after[f]) !== show(before[f])) diffs.push(`${f} ${show(before[f])} → ${show(after[f])}`);
      }
      if (after.stock.total !== before.stock.total)
        diffs.push(`stock.total ${before.stock.total} → ${after.stock.total}`);
      shardsAfter.forEach((s, i) => {
        const was = shardsBefore[i] ?? null;
        for (const f of SHARD_FIELDS) {
          if (was !== null && show(s?.[f]) !== show(was[f]))
            diffs.push(`shard ${i} ${f} ${show(was[f])} → ${show(s?.[f])}`);
        }
      });
      if (diffs.length > 0) {
        this.fail(10, `${what} answered ${reply.status} ${code ?? ""} but changed ${diffs.join("; ")}`);
        changed = true;
      }
    }
    if (changed) {
      // Put the SKU back as it was, so the rest of the run sells what it sold before.
      const undo = await this.faults.putNow(sku, (total) => ({
        totalStock: total,
        name: before.name,
        status: before.status,
        perUserLimit: before.perUserLimit,
        holdSeconds: before.holdSeconds,
        endsAt: before.endsAt,
      }));
      this.faults.count(`refused PUT's changes undone by a PUT answered ${undo.status}`);
    }
    if (token && reply.status !== 200) {
      this.checked.oldTokens++;
      const tried = await this.#reserve(user, sku, token, 1, "refused-put old-token reserve");
      if (tried && errorCode(tried.json) === "TOKEN_INVALID")
        this.fail(10, `a token minted before ${what} (answered ${reply.status}) now answers TOKEN_INVALID`);
      await this.#cancelHolds(sku, new Set([user]), "refused-put cancel");
    }
    return true;
  }

  // ---- (b) a stranger asking about SKUs never configured

  async stranger(fault: Extract<Fault, { kind: "stranger" }>): Promise<void> {
    const configured = new Set(this.faults.skus.map((p) => p.sku));
    const admin = { authorization: `Bearer ${this.client.secrets.adminToken}` };
    for (const ghost of fault.ghosts) {
      if (configured.has(ghost)) continue;
      this.ghosts.add(ghost);
      this.checked.strangers++;
      const headers = await this.auth(`stranger-${this.seed}-${fault.round}-${ghost}`.slice(0, 128));
      const hex = randomBytes(16).toString("hex");
      const reservation = `${ghost}.0.${hex}`;
      const payment = JSON.stringify({
        id: `evt_stranger_${hex}`,
        type: "payment.succeeded",
        reservationId: reservation,
        amount: 1999,
      });
      const requests: [string, () => Promise<Reply>][] = [
        ["GET /api/skus/:sku", () => this.client.request("GET", `/api/skus/${ghost}`)],
        ["GET draw", () => this.client.request("GET", `/api/skus/${ghost}/draw`)],
        ["GET draw entries", () => this.client.request("GET", `/api/skus/${ghost}/draw/entries`)],
        ["POST tokens", () => this.client.request("POST", `/api/skus/${ghost}/tokens`, { headers })],
        [
          "POST reservations",
          () =>
            this.client.request("POST", `/api/skus/${ghost}/reservations`, {
              headers,
              body: { token: "eyJ9.c2ln", quantity: 1 },
            }),
        ],
        [
          "POST waitlist",
          () => this.client.request("POST", `/api/skus/${ghost}/waitlist`, { headers, body: { quantity: 1 } }),
        ],
        ["GET reservation", () => this.client.request("GET", `/api/reservations/${reservation}`, { headers })],
        [
          "GET reservation shard 3",
          () => this.client.request("GET", `/api/reservations/${ghost}.3.${hex}`, { headers }),
        ],
        ["cancel", () => this.client.request("POST", `/api/reservations/${reservation}/cancel`, { headers })],
        ["payment webhook", () => sendPayment(this.client, payment)],
        [
          "stripe webhook",
          () =>
            sendStripe(
              this.client,
              stripeEvent(
                stripeId("evt", this.seed),
                "checkout.session.completed",
                checkoutSession(reservation, 1999, stripeId("pi", this.seed), "paid"),
              ),
            ),
        ],
        ["admin GET", () => this.client.request("GET", `/admin/skus/${ghost}`, { headers: admin })],
      ];
      for (const [op, send] of requests) {
        await call(this.ledger, `stranger ${op}`, send);
        this.faults.count("stranger requests about never-configured SKUs");
      }
    }
  }

  // ---- (c) money on a sharded SKU

  async moneyScene(fault: Extract<Fault, { kind: "money" }>): Promise<void> {
    const { sku } = fault;
    const plan = this.faults.skus.find((p) => p.sku === sku);
    if (!plan) return;
    await this.faults.exclusive(sku, async () => {
      const total = this.faults.lastPut.get(sku);
      if (total === null || total === undefined) return;
      const old = plan.shards;
      const prefix = `money-${this.seed}-${fault.round}`;
      const [limitUser, doubleUser, delayedUser] = ["l", "d", "s"].map((tag) =>
        userWhoseHomeMoves(`${prefix}-${tag}`, old, fault.shards),
      ) as [string, string, string];
      const first = new Map<string, Acked>();
      for (const user of [limitUser, doubleUser, delayedUser]) {
        const held = await this.#reserveOne(user, sku, "money scene reserve");
        if (held) first.set(user, held);
      }
      await this.#cancelHolds(sku, new Set(first.keys()), "money scene cancel");
      const resized = await this.faults.putNow(sku, () => ({ totalStock: total, shards: fault.shards }));
      this.faults.count(`money scenes: resize ${old} → ${fault.shards} answered ${resized.status}`);
      if (resized.status !== 200) return;
      plan.shards = fault.shards;
      const what = `${sku} resized ${old} → ${fault.shards}`;

      // (1) The buyer buys again under the new count and pays: the late payment of the first
      // reservation would take a second unit, past the limit of 1.
      const lapsed = first.get(limitUser);
      const again = await this.#reserveOne(limitUser, sku, "money scene reserve again");
      if (lapsed && again && (await this.payBy("webhook", again, "money scene pay"))?.status === "paid") {
        const late = await this.payBy("webhook", lapsed, "money scene late pay past the limit");
        this.faults.count(`money scenes: late payment past the limit answered ${late?.status ?? "nothing"}`);
        if (late?.status === "paid")
          this.fail(2, `${what}: a late payment of ${lapsed.id} made ${limitUser} own 2 units (perUserLimit 1)`);
      }

      // (2) Two payments of one lapsed reservation at once, its stock object aborted meanwhile: one
      // takes the unit (the SKU has units, the buyer none), the other is flagged.
      const doubled = first.get(doubleUser);
      if (doubled) {
        const shard = Number(doubled.id.split(".")[1]);
        const [a, b] = await Promise.all([
          this.payBy("webhook", doubled, "money scene double pay"),
          this.payBy("stripe", doubled, "money scene double pay"),
          sleep(between(prng(this.seed + fault.round), 0, 40)).then(() =>
            this.client.admin("POST", `/chaos/stock/${sku}/${shard}/abort`).catch(() => null),
          ),
        ]);
        const outcomes = [a?.outcome, b?.outcome].sort().join(",");
        this.faults.count(`money scenes: late payment twice at once answered ${outcomes}`);
        if (a && b && outcomes !== "applied,refund_required")
          this.fail(
            6,
            `${what}: two payments of ${doubled.id} at once answered ${outcomes} (one applied, one flagged)`,
          );
        for (const [sent, answer] of [
          [a, "money scene double pay replay"],
          [b, "money scene double pay replay"],
        ] as const) {
          if (sent) await sent.resend(answer);
        }
      }

      // (3) A Stripe delayed method pays a lapsed reservation: applied, the SKU has units.
      const delayed = first.get(delayedUser);
      if (delayed) {
        const paid = await this.payBy("stripe-delayed", delayed, "money scene delayed pay");
        this.faults.count(`money scenes: late delayed payment answered ${paid?.status ?? "nothing"}`);
        if (paid?.status === "refund_required")
          this.fail(9, `${what}: a late delayed payment of ${delayed.id} was refunded while the SKU had units`);
      }
    });
  }

  /** A token and a reservation of one unit; its acknowledgement, or null. */
  async #reserveOne(user: string, sku: string, op: string): Promise<Acked | null> {
    const token = await this.mint(user, sku, op);
    const reply = token ? await this.#reserve(user, sku, token, 1, op) : null;
    const id = reply?.status === 202 ? str(reply.json, "reservationId") : undefined;
    return (id && this.ledger.acked.get(id)) || null;
  }

  /** Invariant 10's line for the summary: what was compared on line. */
  summary10(): string {
    const c = this.checked;
    return `${c.refusedCompared} refused PUTs compared before/after (admin view and every shard), ${c.oldTokens} tokens minted before a refused change tried after it`;
  }
}
