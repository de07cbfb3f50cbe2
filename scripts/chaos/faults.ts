/**
 * Fault injection on the seeded schedule: the consumer fault switch and stock-object aborts through the
 * chaos-only routes (src/harness/chaos-routes.ts), the redis-server killed and restarted on its port (the bridge
 * stays up and reconnects), reconciliation re-emits and dead-letter replays mid-traffic (duplicate and
 * late deliveries), restocks, and an operator changing totals, pausing and resizing while the sale runs.
 * The actors of ./actors.ts play the rest: refused PUTs and a stranger asking about SKUs never
 * configured. The stock objects' own scenes (resizes raced by reservations, the line, sizes, early
 * access) are the simulator's (docs/SIMULATOR.md), which replays them by seed.
 * Webhook replays/reordering, late payments and Stripe's delayed payments are done by the shoppers;
 * late payments across a resize and double payments on a sharded SKU by the money actor.
 * The shop's webhook receiver fails, drops, goes down and stalls through ./hooks.ts.
 * The gatherers of the sharded SKUs (GATHER = "sharded") are aborted mid-batch, slowed and restarted.
 */
import { type RedisServer, startRedis } from "../../tools/redis-server";
import { Actors } from "./actors";
import { GatherWitness } from "./gather-witness";
import type { ShopHooks } from "./hooks";
import { type Client, num, sleep, str } from "./http";
import { readAsOwner } from "./invariants";
import { describeFault, type Fault, type Scheduled, type SkuPlan } from "./schedule";
import { type Ledger, newLedger } from "./shoppers";

export class RedisControl {
  constructor(public server: RedisServer) {}
  down = false;

  async kill(): Promise<void> {
    this.down = true;
    this.server.process.kill("SIGKILL");
    await new Promise<void>((resolve) => {
      if (this.server.process.exitCode !== null || this.server.process.signalCode !== null) resolve();
      else this.server.process.once("exit", () => resolve());
    });
    await this.server.stop(); // removes its data directory: the mirror comes back empty
  }

  async restart(): Promise<void> {
    this.server = await startRedis({ port: this.server.port });
    this.down = false;
  }
}

/** The summary's name for each gatherer and receiver fault. */
const COUNTED = {
  slow: "gatherer slow windows",
  restart: "gatherer restarts",
  "abort-mid-batch": "gatherer mid-batch aborts armed",
  "receiver-window": "webhook receiver fail/drop windows",
  "receiver-outage": "webhook receiver outages (503 past the retry schedule)",
  "receiver-stall": "webhook receiver stalls (answers past the 10-s timeout)",
} as const;

export class FaultInjector {
  readonly injected = new Map<string, number>();
  readonly errors: string[] = [];
  /**
   * Per SKU, the `totalStock` of the last PUT that answered 200 (invariant 8: the SKU's total is that),
   * or null once a PUT got no answer at all (its outcome unknown). PUTs of one SKU are sent one after
   * another (`#operators`), so "last" is the order of their answers.
   */
  readonly lastPut = new Map<string, number | null>();
  #operators = new Map<string, Promise<unknown>>();
  #pending: Promise<void>[] = [];
  readonly actors: Actors;
  /** Reserves through each gatherer aborted mid-batch (./gather-witness.ts). */
  readonly witness: GatherWitness;
  /** The shop's webhook receiver, which the `receiver-*` faults reach. */
  hooks: ShopHooks | null = null;
  /** Restarts the whole Worker over its state (`worker-restart`): run.ts's wrangler dev. */
  restartWorker: (() => Promise<void>) | null = null;
  /** Acknowledged reservations read back after each restart, and the restarts (invariant 15). */
  readonly restarts = { count: 0, readBack: 0, contradicted: 0 };
  /** The consumer fault window in force: the switch lives in the Worker's isolates, so a restart loses it. */
  #consumerFaults: Record<string, number> | null = null;

  constructor(
    readonly client: Client,
    readonly redis: RedisControl,
    readonly log: (line: string) => void,
    /** The SKUs as configured; a successful resize updates its plan's `shards`. */
    readonly skus: SkuPlan[] = [],
    /** Where the actors record what they were told (the shoppers' ledger, for the invariants). */
    readonly ledger: Ledger = newLedger(),
    seed = 1,
  ) {
    for (const plan of skus) this.lastPut.set(plan.sku, plan.totalStock);
    this.actors = new Actors(this, ledger, seed);
    this.witness = new GatherWitness(this, ledger, seed);
  }

  /** Counts `n` of a kind of fault for the summary. */
  count(kind: string, n = 1): void {
    this.injected.set(kind, (this.injected.get(kind) ?? 0) + n);
  }

  /** Fires every scheduled fault at its time (from `start`); resolves when all have run. */
  async run(schedule: Scheduled[], start: number): Promise<void> {
    for (const item of schedule) {
      const wait = start + item.atMs - Date.now();
      if (wait > 0) await sleep(wait);
      this.log(`fault t+${Math.round(item.atMs / 1000)}s: ${describeFault(item.fault)}`);
      // Redis downtime runs in the background so the schedule keeps its times.
      const done = this.apply(item.fault).catch((err: unknown) => {
        this.errors.push(`${item.fault.kind}: ${String(err)}`);
      });
      this.#pending.push(done);
    }
    await Promise.all(this.#pending);
  }

  async apply(fault: Fault): Promise<void> {
    switch (fault.kind) {
      case "consumer": {
        const { failRate, duplicateRate, maxDelaySeconds, seed } = fault;
        this.#consumerFaults = { failRate, duplicateRate, maxDelaySeconds, seed };
        await this.#expectOk(this.client.admin("PUT", "/chaos/consumer-faults", this.#consumerFaults));
        this.count("consumer fault windows");
        return;
      }
      case "consumer-off":
        return this.consumerOff();
      case "redis-kill":
        if (this.redis.down) return;
        await this.redis.kill();
        this.count("redis kills");
        await sleep(fault.downMs);
        await this.redis.restart();
        this.log(`redis-server restarted on port ${this.redis.server.port}`);
        return;
      case "abort":
        await this.#expectOk(this.client.admin("POST", `/chaos/stock/${fault.sku}/${fault.shard}/abort`));
        this.count("stock object aborts");
        return;
      case "reconcile": {
        const reply = await this.client.admin("POST", "/admin/reconcile");
        this.count("mid-traffic reconciliations");
        const differences = (reply.json as { differences?: unknown[] } | null)?.differences?.length ?? 0;
        this.count("mid-traffic reconcile differences", differences);
        return;
      }
      case "dead-letter-replay":
        this.count("dead letters replayed mid-traffic", await this.replayDeadLetters());
        return;
      case "restock": {
        const reply = await this.put(fault.sku, (total) => ({ totalStock: total + fault.add }));
        if (reply !== 200) throw new Error(`restock answered ${reply}`);
        this.count("restocks");
        return;
      }
      case "operator":
        return this.#operator(fault);
      case "refused-put":
        return this.actors.refusedPut(fault);
      case "stranger":
        return this.actors.stranger(fault);
      case "money":
        return this.actors.moneyScene(fault);
      case "gatherer": {
        const { sku, shard, kind: _kind, ...body } = fault;
        await this.#expectOk(this.client.admin("POST", `/chaos/gatherer/${sku}/${shard}`, body));
        this.count(COUNTED[fault.fault]);
        const shards = this.skus.find((plan) => plan.sku === sku)?.shards ?? 1;
        if (fault.fault === "abort-mid-batch" && shard < shards) await this.witness.reserve(sku, shard, shards);
        return;
      }
      case "worker-restart":
        return this.#restart();
      case "receiver-window":
      case "receiver-outage":
      case "receiver-stall":
        if (!this.hooks) throw new Error("no shop webhook receiver");
        await this.hooks.apply(fault);
        this.count(COUNTED[fault.kind]);
        return;
    }
  }

  /**
   * Invariant 15: the Worker restarted (every isolate and object new, storage kept) while shoppers,
   * operators and payments go on; then every reservation acknowledged before it is read back by its
   * owner. None may be unknown, and none told final (paid, cancelled, expired) may be held again.
   */
  async #restart(): Promise<void> {
    if (!this.restartWorker) throw new Error("no Worker to restart");
    const told = [...this.ledger.acked.values()].map((a) => ({ acked: a, status: a.lastKnown }));
    const began = Date.now();
    await this.restartWorker();
    this.restarts.count++;
    if (this.#consumerFaults) {
      await this.#expectOk(this.client.admin("PUT", "/chaos/consumer-faults", this.#consumerFaults));
    }
    this.log(`Worker restarted in ${((Date.now() - began) / 1000).toFixed(1)} s; reading back ${told.length} holds`);
    for (let i = 0; i < told.length; i += 16) {
      await Promise.all(
        told.slice(i, i + 16).map(async ({ acked, status }) => {
          const reply = await readAsOwner(this.client, acked.id, acked.userId);
          this.restarts.readBack++;
          const now = str(reply.json, "status");
          const problem =
            reply.status !== 200
              ? `answered ${reply.status} ${reply.text.slice(0, 100)}`
              : status === "paid" && now !== "paid"
                ? `was paid, now ${now}`
                : (status === "cancelled" || status === "expired") && now === "held"
                  ? `was ${status}, now held again`
                  : null;
          if (!problem) return;
          this.restarts.contradicted++;
          this.ledger.violations.push({
            invariant: 15,
            message: `after a Worker restart, reservation ${acked.id} (${acked.sku}, ${acked.userId}) ${problem}`,
          });
          this.log(`VIOLATION (invariant 15): reservation ${acked.id} ${problem} after a Worker restart`);
        }),
      );
    }
  }

  /** Invariant 15's line of the summary. */
  summary15(): string {
    const { count, readBack, contradicted } = this.restarts;
    return `${count} Worker restarts mid-traffic; ${readBack} acknowledged reservations read back after them, ${contradicted} contradicted`;
  }

  async #operator(fault: Extract<Fault, { kind: "operator" }>): Promise<void> {
    const { sku } = fault;
    if (fault.action === "total") {
      const status = await this.put(sku, (total) => ({ totalStock: Math.max(0, total + fault.delta) }));
      this.count(`operator totals answered ${status}`);
      return;
    }
    if (fault.action === "pause") {
      const paused = await this.put(sku, (total) => ({ totalStock: total, status: "paused" }));
      await sleep(fault.pauseMs);
      const resumed = await this.put(sku, (total) => ({ totalStock: total, status: "on_sale" }));
      this.count(`operator pause/resume answered ${paused}/${resumed}`);
      return;
    }
    const status = await this.put(sku, (total) => ({ totalStock: total, shards: fault.shards }));
    this.count(`operator resizes answered ${status}`);
    if (status === 200) {
      const plan = this.skus.find((p) => p.sku === sku);
      if (plan) plan.shards = fault.shards; // the harness reads every shard of the new count
    }
  }

  /**
   * Runs `work` in the SKU's operator turn: after every PUT of that SKU sent before has answered, and
   * before any sent later, so that nothing but shoppers changes the SKU meanwhile.
   */
  exclusive<T>(sku: string, work: () => Promise<T>): Promise<T> {
    const previous = this.#operators.get(sku) ?? Promise.resolve();
    const next = previous.then(work);
    this.#operators.set(
      sku,
      next.catch(() => undefined),
    );
    return next;
  }

  /**
   * `PUT /admin/skus/:sku` with a body made from the last total set, after the SKU's previous PUT has
   * answered. A 5xx or a lost answer is sent again (a PUT is absolute, so repeating it is harmless)
   * until it answers 200 or 4xx. Returns the final status (0: never answered).
   */
  put(sku: string, body: (lastTotal: number) => Record<string, unknown>): Promise<number> {
    return this.exclusive(sku, () => this.putNow(sku, body).then((reply) => reply.status));
  }

  /**
   * The PUT of {@link put} at once: only inside {@link exclusive} of the same SKU. Answers the final
   * reply (status 0 when it never answered, or when the last total is unknown and nothing was sent);
   * a 200 records the body's `totalStock` as the SKU's last total (invariant 8).
   */
  async putNow(
    sku: string,
    body: (lastTotal: number) => Record<string, unknown>,
  ): Promise<{ status: number; text: string; json: unknown }> {
    const last = this.lastPut.get(sku);
    if (last === null || last === undefined) return { status: 0, text: "", json: null }; // unknown: leave it alone
    const sent = body(last);
    const said: string[] = [];
    for (let attempt = 0; attempt < 8; attempt++) {
      const reply = await this.client.admin("PUT", `/admin/skus/${sku}`, sent).catch((error: unknown) => {
        said.push(String(error).slice(0, 80));
        return null;
      });
      if (reply && reply.status < 500) {
        if (reply.status === 200) this.lastPut.set(sku, num(sent, "totalStock") ?? last);
        return reply;
      }
      if (reply) said.push(`${reply.status} ${reply.text.slice(0, 80)}`);
      await sleep(500 * (attempt + 1));
    }
    // Invariant 8 then cannot be judged: what each attempt got says why.
    this.errors.push(`PUT ${sku} ${JSON.stringify(sent)}: no answer in 8 attempts: ${said.join(" | ")}`);
    this.lastPut.set(sku, null);
    return { status: 0, text: "", json: null };
  }

  async consumerOff(): Promise<void> {
    this.#consumerFaults = null;
    await this.#expectOk(this.client.admin("PUT", "/chaos/consumer-faults", { failRate: 0, duplicateRate: 0 }));
  }

  /** Replays every pending dead letter; returns how many were replayed. */
  async replayDeadLetters(): Promise<number> {
    const list = await this.client.admin("GET", "/admin/dead-letters?pending=true");
    const letters = (list.json as { deadLetters?: { id: string }[] } | null)?.deadLetters ?? [];
    let replayed = 0;
    for (const letter of letters) {
      const reply = await this.client.admin("POST", `/admin/dead-letters/${encodeURIComponent(letter.id)}/replay`);
      if (reply.status === 200) replayed++;
      else this.errors.push(`dead letter ${letter.id} replay answered ${reply.status}: ${reply.text.slice(0, 200)}`);
    }
    return replayed;
  }

  async #expectOk(pending: Promise<{ status: number; text: string }>): Promise<void> {
    const reply = await pending;
    if (reply.status !== 200) throw new Error(`answered ${reply.status}: ${reply.text.slice(0, 200)}`);
  }
}
