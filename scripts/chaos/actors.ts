/**
 * The actors of the chaos run: people whose requests found defects that random shoppers rarely
 * meet, each run on the seeded schedule (schedule.ts, `actorSchedule`) and each recording what it
 * was told in the shoppers' ledger (so every reservation it made is checked like any other):
 *
 * - `resizeRace`: an operator resizes the `resize` SKU (2..4 shards) while a burst of its shoppers
 *   reserve; tokens minted before the PUT are kept to try after it. Invariant 10: a 409 left every
 *   shard as it was (shard counts, totals) and the old tokens still work (any answer but
 *   TOKEN_INVALID); a 200 gave every shard the new count and Σ totals = totalStock.
 * - `refusedPut`: a PUT mid-sale that must be refused (`totalStock` below the units sold), carrying
 *   a new name, status, perUserLimit, holdSeconds and endsAt too. Invariant 10: the admin view and
 *   every shard's own state read just before and just after (in the SKU's operator turn, so no
 *   other PUT runs between) agree on every field only an operator changes, and a token minted
 *   before still works. A change found is undone by a PUT of the old values (counted).
 * - `waitlist`: on a sold-out `waitlist` SKU (2 shards), buyers at their perUserLimit, one homed on each
 *   shard, join the waitlist, buyers within their limit join after them, then other buyers cancel.
 *   Invariant 9 is checked after settling (invariants.ts, `checkNoStrandedStock`): no unit stays
 *   available while newcomers are answered SOLD_OUT or a line waits.
 * - `stranger`: a shopper asks about SKU ids never configured on every route that names one, the
 *   webhooks included, and the admin asks too. Invariant 11 (`checkNothingStored`): no stock
 *   object file and no D1 row for them.
 */
import { randomBytes } from "node:crypto";
import { homeShard } from "../../durable-objects/shard-name";
import { signPayment } from "../../src/payments/webhook-signature";
import { shopperJwt } from "../../tools/jwt";
import type { FaultInjector } from "./faults";
import { type Client, errorCode, type Reply, sleep, str } from "./http";
import { type SkuView, skuView } from "./invariants";
import type { Fault } from "./schedule";
import { type Acked, call, type Ledger } from "./shoppers";
import { checkoutSession, sendStripe, stripeEvent, stripeId } from "./stripe";

/** One shard's own state, as `GET /chaos/stock/:sku/shards` answers it (the stock object's SkuState). */
export interface ShardState {
  shard: number;
  shards: number;
  name: string;
  status: string;
  perUserLimit: number;
  holdSeconds: number;
  startsAt: number | null;
  endsAt: number | null;
  stock: { total: number; available: number; held: number; sold: number };
}

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

/** The first user ids `<prefix><k>` homed on each of `shards` shards, shard 0 first. */
function usersHomed(prefix: string, shards: number): string[] {
  const found = new Map<number, string>();
  for (let k = 0; found.size < shards && k < 10_000; k++) {
    const user = `${prefix}${k}`;
    const home = homeShard(user, shards);
    if (!found.has(home)) found.set(home, user);
  }
  return [...found.entries()].sort((a, b) => a[0] - b[0]).map(([, user]) => user);
}

const show = (value: unknown) => JSON.stringify(value);

export class Actors {
  /** Every SKU id never configured that a stranger asked about (invariant 11 names their files). */
  readonly ghosts = new Set<string>();
  /** What was checked on line for invariant 10, for the summary. */
  readonly checked = { refusedCompared: 0, resized200: 0, resized409: 0, oldTokens: 0, lineScenes: 0, strangers: 0 };
  readonly #jwts = new Map<string, string>();

  constructor(
    readonly faults: FaultInjector,
    readonly ledger: Ledger,
    readonly seed: number,
  ) {}

  get #client(): Client {
    return this.faults.client;
  }

  #fail(invariant: number, message: string): void {
    this.ledger.violations.push({ invariant, message });
    this.faults.log(`VIOLATION (invariant ${invariant}): ${message}`);
  }

  #note(key: string, n = 1): void {
    this.ledger.outcomes.set(key, (this.ledger.outcomes.get(key) ?? 0) + n);
  }

  async #auth(userId: string): Promise<Record<string, string>> {
    let jwt = this.#jwts.get(userId);
    if (!jwt) {
      jwt = await shopperJwt(userId, this.#client.secrets.authSecret);
      this.#jwts.set(userId, jwt);
      this.ledger.users.set(userId, jwt);
    }
    return { authorization: `Bearer ${jwt}` };
  }

  /** A purchase token for the user, or null (sold out, paused, no answer). */
  async #mint(userId: string, sku: string, op: string): Promise<string | null> {
    const headers = await this.#auth(userId);
    const reply = await call(this.ledger, `${op} token`, () => this.#client.mint(sku, headers));
    return reply?.status === 201 ? (str(reply.json, "token") ?? null) : null;
  }

  /** A reservation with the token; a 202 is recorded as acknowledged (invariants 1-5 check it). */
  async #reserve(userId: string, sku: string, token: string, quantity: number, op: string): Promise<Reply | null> {
    const headers = await this.#auth(userId);
    const reply = await call(this.ledger, op, () =>
      this.#client.request("POST", `/api/skus/${sku}/reservations`, { headers, body: { token, quantity } }),
    );
    if (reply === null || reply.status >= 500) this.ledger.unanswered.add(userId);
    const id = reply?.status === 202 ? str(reply.json, "reservationId") : undefined;
    if (reply && id && !this.ledger.acked.has(id)) {
      const acked: Acked = {
        id,
        sku,
        userId,
        quantity,
        expiresAt: Date.parse(str(reply.json, "expiresAt") ?? ""),
        lastKnown: "held",
        finalBy: null,
        origin: "reservation",
      };
      this.ledger.acked.set(id, acked);
    }
    return reply;
  }

  /** Cancels every hold these users were acknowledged on the SKU (the owners themselves). */
  async #cancelHolds(sku: string, users: ReadonlySet<string>, op: string): Promise<number> {
    const holds = [...this.ledger.acked.values()].filter(
      (a) => a.sku === sku && users.has(a.userId) && a.lastKnown === "held",
    );
    await Promise.all(
      holds.map(async (acked) => {
        const headers = await this.#auth(acked.userId);
        const reply = await call(this.ledger, op, () =>
          this.#client.request("POST", `/api/reservations/${acked.id}/cancel`, { headers }),
        );
        if (reply?.status === 200) acked.lastKnown = str(reply.json, "status") ?? acked.lastKnown;
      }),
    );
    return holds.length;
  }

  /** Each shard's own state, shards 0 to count - 1 (harness route: src/harness/chaos-routes.ts). */
  async #shardStates(sku: string, count: number): Promise<(ShardState | null)[]> {
    const reply = await this.#client.admin("GET", `/chaos/stock/${sku}/shards?count=${Math.min(64, count)}`);
    if (reply.status !== 200) throw new Error(`GET /chaos/stock/${sku}/shards answered ${reply.status}`);
    return (reply.json as { shards: (ShardState | null)[] }).shards;
  }

  /**
   * The admin view once its total reads the same twice (a transfer between shards in flight takes
   * units out of one shard before the other has them), or equals `expected` when given.
   */
  async #stableView(sku: string, expected?: number): Promise<SkuView> {
    let view = await skuView(this.#client, sku);
    for (let read = 0; read < 4; read++) {
      await sleep(250);
      const again = await skuView(this.#client, sku);
      const settled = expected === undefined ? again.stock.total === view.stock.total : again.stock.total === expected;
      view = again;
      if (settled) break;
    }
    return view;
  }

  // ---- (a) resizes raced by reservations

  async resizeRace(fault: Extract<Fault, { kind: "resize-race" }>): Promise<void> {
    const { sku } = fault;
    const plan = this.faults.skus.find((p) => p.sku === sku);
    await this.faults.exclusive(sku, async () => {
      const total = this.faults.lastPut.get(sku);
      if (total === null || total === undefined) return;
      const before = await skuView(this.#client, sku);
      const old = before.shards;
      const target = fault.shards !== old ? fault.shards : (old % 3) + 2;
      const reach = Math.max(old, target);
      const shardsBefore = await this.#shardStates(sku, reach);
      const round = `resize-${this.seed}-${fault.round}`;
      // A burst that reserves as the PUT goes out, and one buyer homed on each shard whose token,
      // minted before the PUT, is tried once the PUT has answered.
      const burst = [0, 1, 2, 3].map((k) => `${round}-b${k}`);
      const later = usersHomed(`${round}-k`, old);
      const users = new Set([...burst, ...later]);
      const tokens = new Map<string, string>();
      await Promise.all(
        [...users].map(async (user) => {
          const token = await this.#mint(user, sku, "resize");
          if (token) tokens.set(user, token);
        }),
      );
      const put = this.faults.putNow(sku, () => ({ totalStock: total, shards: target }));
      const reserves = burst.map(async (user, i) => {
        await sleep(i * 12);
        const token = tokens.get(user);
        return token ? this.#reserve(user, sku, token, 1, "resize burst reserve") : null;
      });
      const [reply, ...answers] = await Promise.all([put, ...reserves]);
      this.faults.count(`resizes raced by reservations answered ${reply.status}`);
      for (const answer of answers) {
        if (answer) this.#note(`resize burst answered ${answer.status} ${errorCode(answer.json) ?? ""}`.trim());
      }
      const what = `resize of ${sku} ${old} → ${target} shards (round ${fault.round})`;
      if (reply.status === 200) {
        this.checked.resized200++;
        if (plan) plan.shards = target;
        let problem: string | null = null;
        for (let read = 0; read < 4; read++) {
          problem = await this.#resizedProblem(sku, target, old, total);
          if (problem === null) break;
          await sleep(400);
        }
        if (problem) this.#fail(10, `${what} answered 200 but ${problem}`);
      } else if (reply.status === 409) {
        this.checked.resized409++;
        let problem: string | null = null;
        for (let read = 0; read < 4; read++) {
          problem = await this.#unchangedProblem(sku, old, reach, before, shardsBefore);
          if (problem === null) break;
          await sleep(400);
        }
        if (problem) this.#fail(10, `${what} answered 409 but the SKU is not as it was: ${problem}`);
        // Tokens minted before a change that answered 409 keep working.
        for (const user of later) {
          const token = tokens.get(user);
          if (!token) continue;
          this.checked.oldTokens++;
          const tried = await this.#reserve(user, sku, token, 1, "resize old-token reserve");
          if (tried && errorCode(tried.json) === "TOKEN_INVALID") {
            this.#fail(
              10,
              `${what} answered 409, yet a token minted before it (user ${user}, home shard ${homeShard(user, old)} of ${old}) now answers TOKEN_INVALID`,
            );
          }
        }
      }
      await this.#cancelHolds(sku, users, "resize cancel");
    });
  }

  /** After a resize answered 200: what is not as it must be, or null. */
  async #resizedProblem(sku: string, target: number, old: number, total: number): Promise<string | null> {
    const view = await skuView(this.#client, sku);
    const states = await this.#shardStates(sku, Math.max(old, target));
    const wrong = states
      .slice(0, target)
      .map((s, i) => (s?.shards === target ? null : `shard ${i} counts ${s?.shards ?? "no state"}`))
      .filter((x) => x !== null);
    if (wrong.length > 0) return `not every shard has the new count (${wrong.join(", ")})`;
    const sum = states.slice(0, target).reduce((n, s) => n + (s?.stock.total ?? 0), 0);
    if (sum !== total) return `its ${target} shards' totals sum to ${sum}, the PUT's totalStock is ${total}`;
    const beyond = states.slice(target).reduce((n, s) => n + (s?.stock.total ?? 0), 0);
    if (beyond !== 0) return `shards beyond the new count still hold ${beyond} units`;
    if (view.shards !== target || view.stock.total !== total)
      return `the admin view says ${view.shards} shards and total ${view.stock.total}`;
    return null;
  }

  /** After a change answered 409: how the SKU differs from before, or null. */
  async #unchangedProblem(
    sku: string,
    old: number,
    reach: number,
    before: SkuView,
    shardsBefore: (ShardState | null)[],
  ): Promise<string | null> {
    const view = await skuView(this.#client, sku);
    const states = await this.#shardStates(sku, reach);
    const problems: string[] = [];
    if (view.shards !== old) problems.push(`the admin view says ${view.shards} shards, ${old} before`);
    if (view.stock.total !== before.stock.total)
      problems.push(`the admin view's total is ${view.stock.total}, ${before.stock.total} before`);
    states.forEach((s, i) => {
      const was = shardsBefore[i] ?? null;
      // The SKU's shards keep their count (a token carries it); a shard beyond the count, which nobody is
      // routed to, may at most have been woken empty.
      if (i < old && s?.shards !== was?.shards)
        problems.push(`shard ${i} counts ${s?.shards ?? "no state"} shards, ${was?.shards ?? "no state"} before`);
      const busy = s !== null && s.stock.total + s.stock.held + s.stock.sold > 0;
      if (i >= old && was === null && s !== null && (busy || s.shards !== old))
        problems.push(`shard ${i}, which had no state, now has ${s.shards} shards and ${s.stock.total} units`);
      if (i >= old && was !== null && s?.shards !== was.shards && s?.shards !== old)
        problems.push(`shard ${i} counts ${s?.shards ?? "no state"} shards, ${was.shards} before`);
    });
    const sum = (list: (ShardState | null)[], from: number, to: number) =>
      list.slice(from, to).reduce((n, s) => n + (s?.stock.total ?? 0), 0);
    if (sum(states, 0, old) !== sum(shardsBefore, 0, old))
      problems.push(
        `shards 0-${old - 1} hold ${sum(states, 0, old)} units in total, ${sum(shardsBefore, 0, old)} before`,
      );
    if (sum(states, old, reach) !== sum(shardsBefore, old, reach))
      problems.push(
        `shards ${old}-${reach - 1} hold ${sum(states, old, reach)} units, ${sum(shardsBefore, old, reach)} before`,
      );
    return problems.length > 0 ? problems.join("; ") : null;
  }

  // ---- (b) a PUT that must be refused mid-sale

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
    const shardsBefore = await this.#shardStates(sku, before.shards);
    const user = `refused-${this.seed}-${round}-${sku}`;
    const token = await this.#mint(user, sku, "refused-put");
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
      this.#fail(10, `${what} answered 200: a total below what is sold must be refused`);
      changed = true;
    } else if (reply.status >= 400 && reply.status < 500) {
      this.checked.refusedCompared++;
      const after = await this.#stableView(sku, before.stock.total);
      const shardsAfter = await this.#shardStates(sku, Math.max(before.shards, after.shards));
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
        this.#fail(10, `${what} answered ${reply.status} ${code ?? ""} but changed ${diffs.join("; ")}`);
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
        this.#fail(10, `a token minted before ${what} (answered ${reply.status}) now answers TOKEN_INVALID`);
      await this.#cancelHolds(sku, new Set([user]), "refused-put cancel");
    }
    return true;
  }

  // ---- (c) a waitlist joined by buyers at their limit, then cancels by others

  async waitlistScene(fault: Extract<Fault, { kind: "waitlist" }>): Promise<void> {
    const { sku } = fault;
    const plan = this.faults.skus.find((p) => p.sku === sku);
    if (!plan) return;
    this.checked.lineScenes++;
    const limit = plan.perUserLimit;
    const prefix = `waitlist-${this.seed}-${fault.round}`;
    // Four buyers take everything, each their whole limit: two of them, one homed on each shard, then
    // ask to wait for one more unit (at their limit), the other two cancel later.
    const atLimit = usersHomed(`${prefix}-w`, plan.shards);
    const buyers = Math.floor(plan.totalStock / limit);
    const cancellers = Array.from({ length: Math.max(1, buyers - atLimit.length) }, (_, k) => `${prefix}-c${k}`);
    for (const user of [...atLimit, ...cancellers]) {
      const token = await this.#mint(user, sku, "waitlist scene");
      if (token) await this.#reserve(user, sku, token, limit, "waitlist scene reserve");
    }
    const soldOut = await skuView(this.#client, sku);
    this.faults.count(`waitlist scenes (sold out: ${soldOut.stock.available === 0 ? "yes" : "no"})`);
    const join = async (user: string, kind: string) => {
      this.ledger.waitlisted.add(user); // a join that got no answer may still have put them on the waitlist
      const headers = await this.#auth(user);
      const reply = await call(this.ledger, "waitlist scene join", () =>
        this.#client.request("POST", `/api/skus/${sku}/waitlist`, { headers, body: { quantity: 1 } }),
      );
      this.faults.count(`waitlist joins ${kind} answered ${reply?.status ?? 0} ${errorCode(reply?.json) ?? ""}`.trim());
    };
    for (const user of atLimit) await join(user, "at the perUserLimit");
    const waiters = [`${prefix}-n0`, `${prefix}-n1`];
    for (const user of waiters) await join(user, "within the limit");
    for (const user of cancellers) {
      await sleep(800);
      this.faults.count(
        "cancels releasing units to a line",
        await this.#cancelHolds(sku, new Set([user]), "waitlist scene cancel"),
      );
    }
    await sleep(3_000);
    const after = await skuView(this.#client, sku);
    this.faults.log(
      `waitlist scene ${sku}: after the cancels available ${after.stock.available}, held ${after.stock.held}, waitlist ${after.waitlist}`,
    );
  }

  // ---- (d) a stranger asking about SKUs never configured

  async stranger(fault: Extract<Fault, { kind: "stranger" }>): Promise<void> {
    const configured = new Set(this.faults.skus.map((p) => p.sku));
    const admin = { authorization: `Bearer ${this.#client.secrets.adminToken}` };
    for (const ghost of fault.ghosts) {
      if (configured.has(ghost)) continue;
      this.ghosts.add(ghost);
      this.checked.strangers++;
      const headers = await this.#auth(`stranger-${this.seed}-${fault.round}-${ghost}`.slice(0, 128));
      const hex = randomBytes(16).toString("hex");
      const reservation = `${ghost}.0.${hex}`;
      const payment = JSON.stringify({
        id: `evt_stranger_${hex}`,
        type: "payment.succeeded",
        reservationId: reservation,
        amount: 1999,
      });
      const requests: [string, () => Promise<Reply>][] = [
        ["GET /api/skus/:sku", () => this.#client.request("GET", `/api/skus/${ghost}`)],
        ["GET draw", () => this.#client.request("GET", `/api/skus/${ghost}/draw`)],
        ["GET draw entries", () => this.#client.request("GET", `/api/skus/${ghost}/draw/entries`)],
        ["POST tokens", () => this.#client.request("POST", `/api/skus/${ghost}/tokens`, { headers })],
        [
          "POST reservations",
          () =>
            this.#client.request("POST", `/api/skus/${ghost}/reservations`, {
              headers,
              body: { token: "eyJ9.c2ln", quantity: 1 },
            }),
        ],
        [
          "POST waitlist",
          () => this.#client.request("POST", `/api/skus/${ghost}/waitlist`, { headers, body: { quantity: 1 } }),
        ],
        ["GET reservation", () => this.#client.request("GET", `/api/reservations/${reservation}`, { headers })],
        [
          "GET reservation shard 3",
          () => this.#client.request("GET", `/api/reservations/${ghost}.3.${hex}`, { headers }),
        ],
        ["cancel", () => this.#client.request("POST", `/api/reservations/${reservation}/cancel`, { headers })],
        [
          "payment webhook",
          async () =>
            this.#client.request("POST", "/webhooks/payments", {
              body: payment,
              headers: {
                "payment-signature": await signPayment(
                  payment,
                  this.#client.secrets.webhookSecret,
                  Math.floor(Date.now() / 1000),
                ),
              },
            }),
        ],
        [
          "stripe webhook",
          () =>
            sendStripe(
              this.#client,
              stripeEvent(
                stripeId("evt", this.seed),
                "checkout.session.completed",
                checkoutSession(reservation, 1999, stripeId("pi", this.seed), "paid"),
              ),
            ),
        ],
        ["admin GET", () => this.#client.request("GET", `/admin/skus/${ghost}`, { headers: admin })],
      ];
      for (const [op, send] of requests) {
        await call(this.ledger, `stranger ${op}`, send);
        this.faults.count("stranger requests about never-configured SKUs");
      }
    }
  }

  /** Invariant 10's line for the summary: what was compared on line. */
  summary10(): string {
    const c = this.checked;
    return (
      `${c.refusedCompared} refused PUTs compared before/after (admin view and every shard), ` +
      `${c.resized200 + c.resized409} resizes raced by reservations checked on every shard (${c.resized200} answered 200, ${c.resized409} 409), ` +
      `${c.oldTokens} tokens minted before a refused change tried after it`
    );
  }
}
