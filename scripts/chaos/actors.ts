/**
 * The actors of the chaos run: people whose requests found defects that random shoppers rarely meet
 * (`resizeRace`, `refusedPut`, `waitlist`, `stranger`, `moneyScene`), each run on the seeded schedule
 * (schedule.ts, `actorSchedule`) and each recording what it was told in the shoppers' ledger, so every
 * reservation it made is checked like any other. What each scene does and which invariant it checks on
 * line: docs/DEVELOPMENT.md, "Chaos: `npm run chaos`".
 */
import { randomBytes } from "node:crypto";
import type { SkuState as ShardState } from "../../durable-objects/engine/types";
import { homeShard } from "../../durable-objects/shared/shard-name";
import { errorCode, field, type Reply, settled, sleep, str } from "./http";
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
    resized200: 0,
    resized409: 0,
    oldTokens: 0,
    lineScenes: 0,
    strangers: 0,
    lineReads: 0,
  };

  #note(key: string, n = 1): void {
    this.ledger.outcomes.set(key, (this.ledger.outcomes.get(key) ?? 0) + n);
  }

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

  // ---- (a) resizes raced by reservations

  async resizeRace(fault: Extract<Fault, { kind: "resize-race" }>): Promise<void> {
    const { sku } = fault;
    const plan = this.faults.skus.find((p) => p.sku === sku);
    await this.faults.exclusive(sku, async () => {
      const total = this.faults.lastPut.get(sku);
      if (total === null || total === undefined) return;
      const before = await skuView(this.client, sku);
      const old = before.shards;
      const target = fault.shards !== old ? fault.shards : (old % 3) + 2;
      const reach = Math.max(old, target);
      const shardsBefore = await this.shardStates<ShardState>(sku, reach);
      const round = `resize-${this.seed}-${fault.round}`;
      // A burst that reserves as the PUT goes out, and one buyer homed on each shard whose token,
      // minted before the PUT, is tried once the PUT has answered.
      const burst = [0, 1, 2, 3].map((k) => `${round}-b${k}`);
      const later = usersHomed(`${round}-k`, old);
      const users = new Set([...burst, ...later]);
      const tokens = new Map<string, string>();
      await Promise.all(
        [...users].map(async (user) => {
          const token = await this.mint(user, sku, "resize");
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
        const problem = await settled(() => this.#resizedProblem(sku, target, old, total));
        if (problem) this.fail(10, `${what} answered 200 but ${problem}`);
      } else if (reply.status === 409) {
        this.checked.resized409++;
        const problem = await settled(() => this.#unchangedProblem(sku, old, reach, before, shardsBefore));
        if (problem) this.fail(10, `${what} answered 409 but the SKU is not as it was: ${problem}`);
        // Tokens minted before a change that answered 409 keep working.
        for (const user of later) {
          const token = tokens.get(user);
          if (!token) continue;
          this.checked.oldTokens++;
          const tried = await this.#reserve(user, sku, token, 1, "resize old-token reserve");
          if (tried && errorCode(tried.json) === "TOKEN_INVALID") {
            this.fail(
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
    const view = await skuView(this.client, sku);
    const states = await this.shardStates<ShardState>(sku, Math.max(old, target));
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
    const view = await skuView(this.client, sku);
    const states = await this.shardStates<ShardState>(sku, reach);
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
      const token = await this.mint(user, sku, "waitlist scene");
      if (token) await this.#reserve(user, sku, token, limit, "waitlist scene reserve");
    }
    const soldOut = await skuView(this.client, sku);
    this.faults.count(`waitlist scenes (sold out: ${soldOut.stock.available === 0 ? "yes" : "no"})`);
    const join = async (user: string, kind: string) => {
      this.ledger.waitlisted.add(user); // a join that got no answer may still have put them on the waitlist
      const headers = await this.auth(user);
      const reply = await call(this.ledger, "waitlist scene join", () =>
        this.client.request("POST", `/api/skus/${sku}/waitlist`, { headers, body: { quantity: 1 } }),
      );
      this.faults.count(`waitlist joins ${kind} answered ${reply?.status ?? 0} ${errorCode(reply?.json) ?? ""}`.trim());
      return reply?.status === 202;
    };
    for (const user of atLimit) await join(user, "at the perUserLimit");
    const waiters = [`${prefix}-n0`, `${prefix}-n1`, `${prefix}-n2`];
    // The line as a model: who waits, in order (joins refused at the limit do not wait). The middle
    // one leaves and joins again, last. Every read must match the model (invariant 14).
    const line: string[] = [];
    for (const user of waiters) if (await join(user, "within the limit")) line.push(user);
    await this.#checkLine(sku, line, "after the joins");
    const [, leaver] = line;
    if (leaver && (await this.#leave(sku, leaver))) {
      line.splice(line.indexOf(leaver), 1);
      await this.#checkLine(sku, line, "after one left");
      if (await join(leaver, "again after leaving")) line.push(leaver);
      await this.#checkLine(sku, line, "after it joined again");
    }
    for (const user of cancellers) {
      await sleep(800);
      this.faults.count(
        "cancels releasing units to a line",
        await this.#cancelHolds(sku, new Set([user]), "waitlist scene cancel"),
      );
    }
    await sleep(3_000);
    // Units went to the line first come, first served (each wants 1): those still waiting are the
    // model's last ones, in its order, and the public view counts exactly them.
    await this.#checkLine(sku, line, "after the cancels", true);
    const after = await skuView(this.client, sku);
    this.faults.log(
      `waitlist scene ${sku}: after the cancels available ${after.stock.available}, held ${after.stock.held}, waitlist ${after.waitlist}`,
    );
  }

  /** Leaves the line (`DELETE`); then the caller's place must be gone. True when it left. */
  async #leave(sku: string, user: string): Promise<boolean> {
    const headers = await this.auth(user);
    const left = await call(this.ledger, "waitlist scene leave", () =>
      this.client.request("DELETE", `/api/skus/${sku}/waitlist`, { headers }),
    );
    if (left?.status !== 200) return false;
    const place = await call(this.ledger, "waitlist scene place", () =>
      this.client.request("GET", `/api/skus/${sku}/waitlist`, { headers }),
    );
    if (place?.status !== 404)
      this.fail(14, `${sku}: ${user} left the line (200), yet its place answers ${place?.status}`);
    return true;
  }

  /**
   * Reads every modelled waiter's place (`GET /api/skus/:sku/waitlist`) and the public view's
   * `waiting`, and compares them with the model `line` (each entry wants 1 unit): the k-th waiting is
   * at position k with k - 1 units ahead. `served`: units were released, so a prefix of the line
   * may have been served (404, a hold granted); the rest must still be 1..n in order. Read again up to
   * three times (a grant landing between two reads is not a violation), then reported.
   */
  async #checkLine(sku: string, line: readonly string[], when: string, served = false): Promise<void> {
    let problem: string | null = null;
    for (let attempt = 0; attempt < 3; attempt++) {
      const places = await Promise.all(
        line.map(async (user) => {
          const headers = await this.auth(user);
          const reply = await call(this.ledger, "waitlist scene place", () =>
            this.client.request("GET", `/api/skus/${sku}/waitlist`, { headers }),
          );
          return reply;
        }),
      );
      const view = await skuView(this.client, sku);
      const waiting = places.flatMap((reply, i) =>
        reply?.status === 200 ? [{ user: line[i], json: reply.json }] : [],
      );
      const gone = places.length - waiting.length;
      const expected = line.slice(served ? gone : 0);
      problem = null;
      if (places.some((reply) => reply?.status !== 200 && reply?.status !== 404))
        problem = `a place read answered ${places.map((r) => r?.status ?? 0).join(",")}`;
      else if (!served && gone > 0)
        problem = `${gone} of ${line.length} waiting shoppers have no place, with nothing released`;
      else if (waiting.some((w, i) => w.user !== expected[i]))
        problem = `waiting ${waiting.map((w) => w.user).join(",")}, not the line's last ${expected.join(",")}`;
      else {
        for (const [i, w] of waiting.entries()) {
          const position = field(w.json, "position");
          const ahead = field(w.json, "unitsAhead");
          if (position !== i + 1 || ahead !== i)
            problem = `${w.user} at position ${show(position)} with ${show(ahead)} units ahead, expected ${i + 1} and ${i}`;
        }
        if (!problem && view.waitlist !== waiting.length)
          problem = `the public view says ${view.waitlist} waiting, ${waiting.length} places answer`;
      }
      if (!problem) break;
      await sleep(1_000);
    }
    this.checked.lineReads++;
    if (problem) this.fail(14, `${sku} ${when}: ${problem}`);
  }

  summary14(): string {
    return `${this.checked.lineReads} reads of every place in a line (joins, a leave, a rejoin, grants after cancels) matched a model of the line`;
  }

  // ---- (d) a stranger asking about SKUs never configured

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

  // ---- (e) money on a sharded SKU

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
    return `${c.refusedCompared} refused PUTs compared before/after (admin view and every shard), ${c.resized200 + c.resized409} resizes raced by reservations checked on every shard (${c.resized200} answered 200, ${c.resized409} 409), ${c.oldTokens} tokens minted before a refused change tried after it`;
  }
}
