import {
  type AccessTier,
  isOnSale,
  type Outcome,
  type Reservation,
  type ReserveOutcome,
  type ReserveRequest,
  type SkuState,
  sumShards,
} from "../../durable-objects/engine/types";
import type { WaitlistEntry, WaitlistPlace } from "../../durable-objects/engine/waitlist";
import type { SaleLog } from "../../durable-objects/log/sale-log";
import { homeShard, shardName } from "../../durable-objects/shared/shard-name";
import type { SkuChange } from "../../durable-objects/stock/sku-change";
import type { PaymentVerdict } from "../../durable-objects/stock/stock-faces";
import { accessCodeHash, admittedTier } from "../../src/edge/early-access";
import { seededRandom } from "../../src/harness/seeded-random";
import { ApiError } from "../../src/http/errors";
import {
  Broken,
  checkDrawBuyers,
  checkDrawOutcomes,
  checkDrawPage,
  type DrawHolds,
  type DrawnEntry,
  type Entry,
  leafHash,
  levelsOf,
  openCheckpoint,
  parseVerifier,
  replay,
  treeHash,
} from "../sale-verifier";
import type { NodeStorage } from "../sqlite-storage";
import { type ShardView, stockViolations } from "../stock-invariants";
import { AnswerChecks } from "./answer-checks";
import { simulatedSubtle } from "./subtle";
import { simulateIds } from "./uuid";
import { type Faults, logName, NO_FAULTS, SIM_ERROR, SIM_LOG_VERIFIER, World } from "./world";

/**
 * One seed of the simulator (docs/SIMULATOR.md): a SKU's stock objects in a {@link World}, shoppers
 * and an operator acting through the objects' faces only, and every invariant checked after each step.
 */
export interface SimOptions {
  seed: number;
  steps: number;
  /** The SKU's shards at its creation (resizes move it between 1 and 4 after). */
  shards: number;
  /** Each step's line as it is written (the trace is also returned whole). */
  onLine?: (line: string) => void;
  /** A line of every shard's counts after each step (for reading a replay). */
  states?: boolean;
}

export interface SimReport {
  seed: number;
  /** Steps run (the failing step's number when one failed). */
  steps: number;
  failure: { step: number; message: string } | null;
  trace: string[];
}

const SKU = "sim";
const START = Date.UTC(2026, 0, 1);
const MAX_SHARDS = 4;
/** Faults while shoppers act; the world runs without them to settle at the end. */
const FAULTS: Faults = { dropCall: 0.03, dropAnswer: 0.03, queueFails: 0.05, maxDelayMs: 40 };
/** The chance per step of a lull (see {@link Sim.run}). */
const LULL_CHANCE = 0.03;
/** The chance per step that a stock object is reset (rebuilt over its storage). */
const RESET_CHANCE = 0.03;
/** An operator's roll that changes the sale's end (see {@link Sim.#operate}). */
const END_ROLL = 0.9;
/** An operator's roll that changes the stock: the total, or a size's (see {@link Sim.#operate}). */
const RESTOCK_ROLL = 0.4;

/** What a shopper was told of a reservation. */
interface Acked {
  id: string;
  /** The shard its id names. */
  shard: number;
  userId: string;
  quantity: number;
  variant: string | undefined;
  expiresAt: number;
  /** A status the object answered that must stay (paid, cancelled), else null. */
  final: string | null;
}

class Violation extends Error {}

/** A shard as the checks read it: its state, whether its outbox has events to send, its reservations by id. */
type View = ShardView & { state: SkuState; pending: boolean; rows: Map<string, Row> };

/** A reservation row as the checks read it. */
type Row = {
  id: string;
  user_id: string;
  quantity: number;
  status: string;
  variant: string | null;
  seq: number;
  created_at: number;
  expires_at: number;
  updated_at: number;
};

/** The settings the operator changes mid-sale, each as the values that may be in force on some shard. */
type Settings = { perUserLimit: Set<number>; holdSeconds: Set<number>; endsAt: Set<number | null> };
const SETTINGS = ["perUserLimit", "holdSeconds", "endsAt"] as const;

/** A reservation that holds or bought its units (the limit's count). */
const isActive = (row: Row) => row.status === "held" || row.status === "paid";

export async function simulate(options: SimOptions): Promise<SimReport> {
  const random = seededRandom(options.seed);
  const world = new World(START, random);
  const restore = enterWorld(world, random);
  const sim = new Sim(world, random, options);
  try {
    return await sim.run();
  } finally {
    await world.settle(); // what the last step left in flight, before its databases go
    world.close();
    restore();
  }
}

/**
 * Time, randomness and ids from the world while it runs (and the objects' log lines kept quiet);
 * the function it returns gives them back. For tests that drive a {@link World} themselves.
 */
export function enterWorld(world: World, random: () => number): () => void {
  const g = globalThis as unknown as { scheduler?: unknown };
  const realNow = Date.now;
  const hadScheduler = "scheduler" in g;
  const realScheduler = g.scheduler;
  const realConsole = Object.fromEntries(CONSOLE_LEVELS.map((level) => [level, console[level]]));
  const webCrypto = (globalThis as unknown as { crypto: Record<string, unknown> }).crypto;
  const bytes = (array: Uint8Array) => {
    for (let i = 0; i < array.length; i++) array[i] = Math.floor(random() * 256);
    return array;
  };
  let ids = 0;
  Date.now = () => world.now;
  g.scheduler = { wait: (ms: number) => world.wait(ms) };
  webCrypto.getRandomValues = <T extends ArrayBufferView | null>(array: T) => {
    if (array) bytes(new Uint8Array(array.buffer, array.byteOffset, array.byteLength));
    return array;
  };
  webCrypto.randomUUID = () => uuidOf("4", bytes(new Uint8Array(16)));
  const realSubtle = webCrypto.subtle as SubtleCrypto;
  Object.defineProperty(webCrypto, "subtle", { value: simulatedSubtle(realSubtle), configurable: true });
  // Time-ordered as v7 is: the virtual time, then a counter.
  simulateIds(() => {
    const time = world.now.toString(16).padStart(12, "0");
    const count = (ids++).toString(16).padStart(18, "0");
    return `${time.slice(0, 8)}-${time.slice(8)}-7${count.slice(0, 3)}-8${count.slice(3, 6)}-${count.slice(6)}`;
  });
  // workerd has Promise.withResolvers (the draw's waiters use it); Node before 22 has not.
  const P = Promise as unknown as { withResolvers?: unknown };
  const hadResolvers = "withResolvers" in P;
  if (!hadResolvers)
    P.withResolvers = <T>() => {
      let resolve!: (value: T) => void;
      let reject!: (error: unknown) => void;
      const promise = new Promise<T>((yes, no) => {
        resolve = yes;
        reject = no;
      });
      return { promise, resolve, reject };
    };
  const quiet = () => undefined;
  Object.assign(console, Object.fromEntries(CONSOLE_LEVELS.map((level) => [level, quiet])));
  return () => {
    Date.now = realNow;
    if (hadScheduler) g.scheduler = realScheduler;
    else delete g.scheduler;
    delete webCrypto.getRandomValues;
    delete webCrypto.randomUUID;
    delete webCrypto.subtle;
    simulateIds(null);
    if (!hadResolvers) delete P.withResolvers;
    Object.assign(console, realConsole);
  };
}

/** The console's methods the objects log through, kept quiet while a world runs. */
const CONSOLE_LEVELS = ["log", "info", "warn", "error", "debug"] as const;

function uuidOf(version: string, b: Uint8Array): string {
  const hex = Array.from(b, (x) => x.toString(16).padStart(2, "0")).join("");
  return `${hex.slice(0, 8)}-${hex.slice(8, 12)}-${version}${hex.slice(13, 16)}-8${hex.slice(17, 20)}-${hex.slice(20, 32)}`;
}

class Sim {
  readonly #world: World;
  readonly #random: () => number;
  readonly #options: SimOptions;
  readonly trace: string[] = [];
  #step = 0;
  readonly #users: string[];
  readonly #limit: number;
  readonly #holdMs: number;
  /**
   * perUserLimit, holdSeconds and endsAt, each as every value that may be in force on some shard: a
   * PUT adds its value when sent; shard 0 hands it to the siblings after it (or its alarm does), so
   * the older ones stay until every shard reads one value and no PUT is pending ({@link #settleSettings}).
   */
  #settings: Settings;
  /** The largest limit and hold lifetime ever set (the count check's limit; a lull outlasts every hold). */
  #mostLimit: number;
  #longestHoldMs: number;
  /** A PUT of endsAt sent (#join's check reads whether one was sent while it waited). */
  #endsSent = 0;
  /** Reservations the shoppers or the provider asked to end (a cancel or a payment.failed sent): others stay held until they expire. */
  readonly #released = new Set<string>();
  /**
   * The line on shard 0 at the last check (entry id to its buyer and quantity); the buyers with a leave
   * on its way, and those whose leave ended since the last check (it ran, or never will).
   */
  #waiting = new Map<string, { userId: string; quantity: number }>();
  readonly #leaving = new Map<string, number>();
  readonly #leftSince = new Set<string>();
  /** Sizes of the SKU (null: none), with the totals an operator set (a set of candidates while a PUT's answer was lost). */
  #sizes: Map<string, Set<number>> | null;
  #totals: Set<number>;
  /** Sizes given to the SKU without them by a PUT not answered yet (or whose outcome is not known): each size's total. */
  #converting: Map<string, number> | null = null;
  #shards: number;
  /** The most shards the SKU ever had: every one keeps its reservations. */
  #shardsEver: number;
  #archived = false;
  /** An archive was sent: until it is answered, it may have applied (and cleared the line). */
  #archiveSent = false;
  readonly #acked = new Map<string, Acked>();
  readonly #nonces = new Map<string, string>();
  readonly #tokens: ReserveRequest[] = [];
  readonly #payments = new Map<string, string>();
  #operatorBusy = false;
  readonly #aliases = new Map<string, string>();
  /**
   * Early access (a third of the seeds): the public start, the tiers (one by access codes, maybe one
   * by a JWT claim), the codes the operator added (text, to its hash), the claims of each shopper,
   * and per code the shoppers shard 0 admitted by it (one at most: invariant 10).
   */
  #startsAt: number | null = null;
  /** The fair opening's window (0: none): each opening's arrivals in it are drawn in a seeded order. */
  #windowMs = 0;
  /** The window is set by a PUT moments before the public opening, not at creation ({@link #setWindowLate}). */
  #windowLate = false;
  #tiers: AccessTier[] = [];
  readonly #codes: string[] = [];
  readonly #claims = new Map<string, Record<string, unknown>>();
  readonly #admitted = new Map<string, Set<string>>();
  /** 11 and 12, judged at the moments they happen (the line's grants, SOLD_OUT answers). */
  readonly #answers: AnswerChecks;

  constructor(world: World, random: () => number, options: SimOptions) {
    this.#world = world;
    this.#answers = new AnswerChecks(world, SKU, START, FAULTS.maxDelayMs, MAX_SHARDS);
    this.#random = random;
    this.#options = options;
    this.#users = Array.from({ length: 4 + this.#int(10) }, (_, i) => `u${i}`);
    this.#limit = 1 + this.#int(3);
    this.#holdMs = (20 + this.#int(100)) * 1000;
    this.#settings = {
      perUserLimit: new Set([this.#limit]),
      holdSeconds: new Set([this.#holdMs / 1000]),
      endsAt: new Set([null]),
    };
    this.#mostLimit = this.#limit;
    this.#longestHoldMs = this.#holdMs;
    this.#shards = options.shards;
    this.#shardsEver = options.shards;
    const total = 2 + this.#int(12);
    if (this.#random() < 0.5) {
      const ids = ["a", "b", "c"].slice(0, 2 + this.#int(2));
      this.#sizes = new Map(ids.map((id) => [id, new Set([1 + this.#int(5)])]));
      this.#totals = new Set([sumMax(this.#sizes)]);
    } else {
      this.#sizes = null;
      this.#totals = new Set([total]);
    }
    if (this.#random() < 1 / 3) {
      this.#startsAt = START + (120 + this.#int(240)) * 1000;
      this.#tiers.push({ name: "codes", startsAt: START + (10 + this.#int(90)) * 1000 });
      if (this.#random() < 0.5) {
        const claim = { name: "member", value: "yes" };
        this.#tiers.push({ name: "members", startsAt: START + (30 + this.#int(60)) * 1000, claim });
        for (const user of this.#users) if (this.#random() < 0.3) this.#claims.set(user, { member: "yes" });
      }
      // Half of these open by draws (every opening's window apart from the next, as the catalog asks).
      const windowMs = (5 + this.#int(10)) * 1000;
      const openings = [...this.#tiers.map((t) => t.startsAt), this.#startsAt].sort((a, b) => a - b);
      const apart = openings.every((at, i) => i === 0 || at - (openings[i - 1] as number) >= windowMs);
      // A tenth more set it late, moments before the public opening (seeds below 0.5 run as they did).
      const drawn = this.#random();
      if (drawn < 0.6 && apart) this.#windowMs = windowMs;
      this.#windowLate = drawn >= 0.5 && this.#windowMs > 0;
      const codes = 1 + this.#int(this.#users.length);
      for (let i = 0; i < codes; i++) this.#codes.push(`CODE${i}`);
    }
  }

  /** Whether a fair opening's window is open, or opens within `ahead` ms (its rush, see {@link run}). */
  #opening(ahead: number): boolean {
    if (this.#windowMs === 0 || this.#startsAt === null) return false;
    const now = this.#world.now;
    return [this.#startsAt, ...this.#tiers.map((t) => t.startsAt)].some(
      (at) => now >= at - ahead && now < at + this.#windowMs,
    );
  }

  #int(n: number): number {
    return Math.floor(this.#random() * n);
  }

  #pick<T>(items: readonly T[]): T | undefined {
    return items[this.#int(items.length)];
  }

  #line(text: string): void {
    const t = ((this.#world.now - START) / 1000).toFixed(3);
    const line = `#${this.#step} t=${t} ${text}`;
    this.trace.push(line);
    this.#options.onLine?.(line);
  }

  /** Short names for reservation ids in the trace (r1, r2, ... in order of appearance). */
  #alias(id: string): string {
    let alias = this.#aliases.get(id);
    if (!alias) {
      alias = `r${this.#aliases.size + 1}`;
      this.#aliases.set(id, alias);
    }
    return alias;
  }

  async run(): Promise<SimReport> {
    const { seed, steps } = this.#options;
    const sizes = this.#sizes ? [...this.#sizes].map(([id, t]) => `${id}:${[...t][0]}`).join(",") : "none";
    this.#line(
      `seed ${seed}: ${this.#users.length} shoppers, limit ${this.#limit}, hold ${this.#holdMs / 1000}s, ${this.#shards} shards, total ${[...this.#totals][0]}, sizes ${sizes}`,
    );
    if (this.#startsAt !== null)
      this.#line(
        `early access: start t=${(this.#startsAt - START) / 1000}, ${this.#tiers.map((t) => `${t.name} t=${(t.startsAt - START) / 1000}`).join(", ")}, ${this.#codes.length} codes, ${this.#claims.size} members${this.#windowMs > 0 ? `, draws of ${this.#windowMs / 1000}s${this.#windowLate ? " set late" : ""}` : ""}`,
      );
    try {
      await this.#create();
      this.#world.faults = FAULTS;
      // Sizes given to a third of the SKUs without them as the sale opens, racing its first shoppers:
      // once a unit is held or sold the PUT is refused, so later it seldom applies.
      if (!this.#sizes && this.#random() < 1 / 3) this.#operate(0.3, true);
      for (this.#step = 1; this.#step <= steps; this.#step++) {
        // Now and then a lull: nobody buys for longer than a hold lasts, then the operator resizes
        // (a resize waits until nothing is held), so resizes land between sales, not only before them.
        // An opening's rush: around a fair opening's window, steps a tenth as long (and no lull), so its
        // buyers reserve, join the line, cancel and restock inside the window.
        const rush = this.#opening(10_000);
        const lull = this.#random() < LULL_CHANCE && !this.#opening(this.#longestHoldMs + 20_000);
        if (lull) this.#line("lull");
        else this.#act(rush);
        const pace = lull ? this.#longestHoldMs + 10_000 : this.#int(4) * this.#int(3_000) + this.#int(500);
        await this.#world.runUntil(this.#world.now + (rush ? Math.floor(pace / 10) : pace));
        if (lull && !this.#operatorBusy) this.#operate(0);
        if (this.#options.states) this.#line(`state: ${this.#summary()}`);
        this.#check(false);
      }
      this.#step = steps;
      this.#world.faults = NO_FAULTS;
      const world = this.#world;
      this.#line(`settle: no faults, 10 virtual minutes (so far ${world.calls} calls, ${world.alarms} alarms)`);
      // The sale on again (and without an end), unless archived: the line's invariant (9) is checked
      // on a sale that is on.
      if (!this.#archived && !this.#operatorBusy) {
        const change: SkuChange = { sku: SKU, assumedTotal: 0, status: "on_sale" };
        const ends = [...this.#settings.endsAt].some((at) => at !== null);
        if (ends) change.endsAt = null;
        this.#change(change, ends ? "resume, no end" : "resume");
      }
      await world.runUntil(world.now + 10 * 60_000);
      this.#check(true);
      await this.#verifySale();
      this.#line(`ok (${world.calls} calls, ${world.alarms} alarms, ${world.sent.length} events sent)`);
      return { seed, steps, failure: null, trace: this.trace };
    } catch (error) {
      if (!(error instanceof Violation)) throw error;
      this.#line(`FAIL ${error.message}`);
      this.#line(`state: ${this.#summary()}; operator set total ${[...this.#totals].join(" or ")}`);
      return { seed, steps: this.#step, failure: { step: this.#step, message: error.message }, trace: this.trace };
    }
  }

  async #create(): Promise<void> {
    const change: SkuChange = {
      sku: SKU,
      shards: this.#shards,
      assumedTotal: 0,
      name: "Simulated",
      perUserLimit: this.#limit,
      holdSeconds: this.#holdMs / 1000,
      status: "on_sale",
      totalStock: [...this.#totals][0] as number,
      ...(this.#startsAt !== null ? { startsAt: this.#startsAt, access: this.#tiers } : {}),
      ...(this.#windowMs > 0 && !this.#windowLate ? { openingWindowMs: this.#windowMs } : {}),
      ...(this.#sizes
        ? { variants: [...this.#sizes].map(([id, t]) => ({ id, name: id, totalStock: [...t][0] as number })) }
        : {}),
    };
    const done = this.#put(change);
    await this.#world.runUntil(this.#world.now + 1000);
    const outcome = await done;
    if (!outcome.ok) throw new Violation(`creating the SKU answered ${outcome.code}`);
    if (this.#windowLate && this.#startsAt !== null)
      this.#world.at(this.#startsAt - this.#int(60), () => this.#setWindowLate());
    if (this.#codes.length > 0) {
      // The operator's codes (POST /admin/skus/:sku/access-codes): shard 0 keeps their hashes.
      const hashes = await Promise.all(this.#codes.map((code) => accessCodeHash(code)));
      const added = this.#call<boolean>(0, "addAccessCodes", "codes", hashes);
      await this.#world.runUntil(this.#world.now + 1000);
      if (!(await added)) throw new Violation("shard 0 refused the access codes");
    }
  }

  /**
   * The catalog's PUT (src/catalog/configure-sku.ts), as far as the stock objects see it: shard 0's
   * `putSku` (which sends the SKU's configuration entry to its log), then every shard's state.
   */
  async #put(change: SkuChange): Promise<Outcome<SkuState>> {
    const outcome = await this.#call<Outcome<SkuState>>(0, "putSku", change);
    if (!outcome.ok) return outcome;
    const first = await this.#state(0);
    if (!first) throw new Violation("shard 0 has no state after a PUT it answered");
    await Promise.all(Array.from({ length: first.shards - 1 }, (_, i) => this.#state(i + 1)));
    return outcome;
  }

  // ---- Acting ----

  /** Starts this step's actions: they run on while the world runs (their answers come when they come). */
  #act(rush = false): void {
    if (this.#random() < RESET_CHANCE) {
      const names = [...this.#world.objects.keys()];
      const name = this.#pick(names);
      if (name) {
        this.#world.object(name).build();
        this.#line(`reset ${name}`);
      }
    }
    const n = 1 + this.#int(2);
    for (let i = 0; i < n; i++) {
      const roll = this.#random();
      const user = this.#pick(this.#users) as string;
      if (roll < 0.4) this.#start(`${user} reserve`, () => this.#reserve(user));
      else if (roll < 0.47) this.#start(`${user} replay`, () => this.#replay());
      else if (roll < 0.57) this.#start("cancel", () => this.#cancel());
      else if (roll < 0.7) this.#start("provider pay", () => this.#pay(false));
      else if (roll < 0.75) this.#start("provider pay late", () => this.#pay(true));
      else if (roll < 0.82) this.#start(`${user} join line`, () => this.#join(user));
      else if (roll < 0.86) this.#start(`${user} leave line`, () => this.#leave(user));
      // An operator soon opens an ended sale again: half its changes then are of the end.
      // In an opening's rush the operator restocks (a total, or a size's).
      else if (roll < 0.93 && !this.#operatorBusy)
        this.#operate(
          rush ? RESTOCK_ROLL : this.#ended(this.#world.now) && this.#random() < 0.5 ? END_ROLL : undefined,
        );
    }
  }

  /** Runs an action in the background; its answer is a trace line, and a broken invariant stops the run. */
  #start(what: string, action: () => Promise<string>): void {
    action().then(
      (answer) => this.#line(`${what} -> ${answer}`),
      (error: unknown) => {
        if (error instanceof Violation) return this.#fail(error);
        const message = error instanceof Error ? error.message : String(error);
        if (message.includes(SIM_ERROR)) this.#line(`${what} -> ${message.slice(SIM_ERROR.length)}`);
        else this.#fail(new Violation(`${what} threw: ${message}`));
      },
    );
  }

  #failure: Violation | null = null;

  #fail(error: Violation): void {
    this.#failure ??= error;
  }

  #call<T>(shard: number, method: string, ...args: unknown[]): Promise<T> {
    return this.#world.call<T>(shardName(SKU, shard), method, args);
  }

  /** A shard's state as a caller reads it, over the network. */
  #state(shard: number): Promise<SkuState | null> {
    return this.#call<SkuState | null>(shard, "state");
  }

  async #reserve(userId: string): Promise<string> {
    // The edge's purchase token: the shard count as shard 0 tells it, the user's home shard by it;
    // before the public start, the tier a code or a claim admits the user to (src/routes/shopper.ts).
    const code = this.#startsAt !== null && this.#random() < 0.5 ? this.#pick(this.#codes) : undefined;
    const claims = this.#claims.get(userId) ?? {};
    const read =
      code === undefined
        ? { state: await this.#state(0), codeTier: null, claimTier: undefined }
        : await this.#call<{ state: SkuState | null; codeTier: string | null; claimTier?: string; soldOut?: boolean }>(
            0,
            "tokenState",
            userId,
            await accessCodeHash(code),
            claims,
          );
    const lead = read.state;
    if (lead?.status !== "on_sale") return `no token (${lead?.status ?? "no SKU"})`;
    if (lead.reconfiguring) return "no token (reconfiguring)";
    const now = this.#world.now;
    let tier: string | undefined;
    try {
      tier = isOnSale(lead, now)
        ? undefined
        : admittedTier(lead, now, claims, { given: code !== undefined, tier: read.codeTier ?? read.claimTier ?? null });
    } catch (error) {
      if (error instanceof ApiError) return `no token (${error.code}${code ? ` with ${code}` : ""})`;
      throw error;
    }
    // Shard 0 judged the stock before it took the code: a code is taken, and admits, only with a token.
    if (read.codeTier !== null && read.soldOut) return `no token (SOLD_OUT with ${code})`;
    if (code !== undefined && read.codeTier !== null && tier !== undefined) this.#admit(code, userId);
    const listed = this.#sizes ? this.#preferences() : undefined;
    const request: ReserveRequest = {
      userId,
      nonce: `n${this.#tokens.length}`,
      quantity: this.#random() < 0.75 ? 1 : 2,
      shards: lead.shards,
      tokenExpiresAt: this.#world.now + 300_000,
      ...(tier ? { tier } : {}),
      ...(listed ? { variants: listed } : {}),
    };
    this.#tokens.push(request);
    return this.#send(request);
  }

  /** Shard 0 admitted `userId` by `code`: a code admits one shopper, the first (invariant 10). */
  #admit(code: string, userId: string): void {
    const users = this.#admitted.get(code) ?? new Set<string>();
    users.add(userId);
    this.#admitted.set(code, users);
    if (users.size > 1) throw new Violation(`access code ${code} admitted ${[...users].join(" and ")} (invariant 10)`);
  }

  #preferences(): string[] {
    const ids = [...(this.#sizes?.keys() ?? [])];
    const listed = ids.filter(() => this.#random() < 0.6);
    if (listed.length === 0) listed.push(this.#pick(ids) as string);
    return this.#random() < 0.5 ? listed.reverse() : listed;
  }

  async #send(request: ReserveRequest): Promise<string> {
    const home = homeShard(request.userId, request.shards ?? 1);
    let [answer] = await this.#call<ReserveOutcome[]>(home, "reserve", [request]);
    if (!answer) throw new Violation(`reserve of ${request.nonce} answered nothing`);
    // The fair opening: not decided on arrival; the edge waits for the draw (src/edge/reserve.ts).
    const drawn = !answer.ok && answer.code === "DRAW_PENDING";
    if (drawn) answer = await this.#call<ReserveOutcome>(home, "awaitDraw", request);
    if (!answer.ok) return `${answer.code}${drawn ? " (drawn)" : ""}`;
    const r = answer.value.reservation;
    const first = this.#nonces.get(request.nonce);
    if (first && first !== r.id)
      throw new Violation(
        `token ${request.nonce} answered ${this.#alias(first)} then ${this.#alias(r.id)} (invariant 3)`,
      );
    this.#nonces.set(request.nonce, r.id);
    if (r.userId !== request.userId || r.quantity !== request.quantity)
      throw new Violation(`${request.userId} asked ${request.quantity}, was answered ${r.userId} x${r.quantity}`);
    if (request.variants && (!r.variant || !request.variants.includes(r.variant)))
      throw new Violation(`${request.userId} listed ${request.variants.join(",")}, was held ${r.variant}`);
    // Before the public start, only a token of a tier that had opened holds (invariant 10).
    if (this.#startsAt !== null && r.createdAt < this.#startsAt && !answer.value.replayed) {
      const opened = this.#tiers.find((t) => t.name === request.tier && t.startsAt <= r.createdAt);
      if (!opened)
        throw new Violation(
          `${request.userId} held ${this.#alias(r.id)} at t=${(r.createdAt - START) / 1000} before the start with ${request.tier ? `tier ${request.tier}, not open yet` : "no tier"} (invariant 10)`,
        );
    }
    if (!this.#acked.has(r.id)) {
      this.#acked.set(r.id, {
        id: r.id,
        shard: shardOf(r.id),
        userId: r.userId,
        quantity: r.quantity,
        variant: r.variant,
        expiresAt: r.expiresAt,
        final: null,
      });
    }
    const size = r.variant ? ` ${r.variant} of ${request.variants?.join(",")}` : "";
    const tier = `${request.tier ? ` by tier ${request.tier}` : ""}${drawn ? " (drawn)" : ""}`;
    return `${answer.value.replayed ? "replayed" : "held"} ${this.#alias(r.id)} x${r.quantity}${size} on #${home}${tier}`;
  }

  async #replay(): Promise<string> {
    const token = this.#pick(this.#tokens);
    if (!token) return "no token yet";
    return `${token.nonce}: ${await this.#send(token)}`;
  }

  #someAcked(late: boolean): Acked | undefined {
    const now = this.#world.now;
    const all = [...this.#acked.values()].filter((a) => a.final === null && a.expiresAt < now === late);
    return this.#pick(all);
  }

  async #cancel(): Promise<string> {
    const a = this.#someAcked(false);
    if (!a) return "nothing held";
    this.#released.add(a.id);
    const outcome = await this.#call<Outcome<Reservation>>(shardOf(a.id), "cancel", a.id, a.userId);
    if (!outcome.ok) return `${a.userId} ${this.#alias(a.id)} ${outcome.code}`;
    if (outcome.value.status === "cancelled") a.final = "cancelled";
    return `${a.userId} ${this.#alias(a.id)} ${outcome.value.status}`;
  }

  async #pay(late: boolean): Promise<string> {
    // A provider sends an event again now and then, as it was: the same id must get the same answer.
    let command = this.#random() < 0.15 ? this.#pick(this.#events) : undefined;
    if (!command) {
      const a = this.#someAcked(late) ?? (late ? undefined : this.#someAcked(true));
      if (!a) return "nothing to pay";
      const type = this.#random() < 0.1 ? "payment.failed" : "payment.succeeded";
      command = { eventId: `e${this.#events.length}`, type, reservationId: a.id };
      this.#events.push(command);
      if (type === "payment.failed") this.#released.add(a.id);
    }
    const { eventId, reservationId } = command;
    const outcome = await this.#call<Outcome<PaymentVerdict>>(shardOf(reservationId), "applyPayment", command);
    const said = outcome.ok
      ? `${outcome.value.outcome} ${outcome.value.status}${outcome.value.reason ? ` ${outcome.value.reason}` : ""}`
      : outcome.code;
    // BUSY decided nothing (the provider sends it again); every decided answer is the first one.
    const first = this.#payments.get(eventId);
    if (first !== undefined && said !== "BUSY" && first !== said)
      throw new Violation(`payment ${eventId} answered "${first}", then "${said}" (invariant 6)`);
    if (said !== "BUSY") this.#payments.set(eventId, said);
    const paid = this.#acked.get(reservationId);
    // A hold still live when the answer came (nobody cancelled it) is bought, whatever the limit or the
    // end since (another payment of it may have bought it first: refunded, the hold paid all the same).
    if (
      outcome.ok &&
      command.type === "payment.succeeded" &&
      paid &&
      this.#world.now < paid.expiresAt &&
      !this.#released.has(reservationId) &&
      outcome.value.status !== "paid"
    )
      throw new Violation(`payment ${eventId} of live hold ${this.#alias(reservationId)} answered "${said}"`);
    if (outcome.ok && outcome.value.reservation.status === "paid" && paid) paid.final = "paid";
    return `${eventId} ${command.type.slice(8)} ${this.#alias(reservationId)} of ${paid?.userId}: ${said}`;
  }

  readonly #events: { eventId: string; type: "payment.succeeded" | "payment.failed"; reservationId: string }[] = [];

  async #join(userId: string): Promise<string> {
    // The edge's route (src/routes/shopper.ts, readSkuState): shard 0's state, then the shards its count
    // names, summed; a sale not on refused first; the best available of the sizes listed that the SKU has, else the SKU's available.
    const first = await this.#state(0);
    if (!first || first.status === "archived") return "no SKU";
    const rest = await Promise.all(Array.from({ length: first.shards - 1 }, (_, i) => this.#state(i + 1)));
    const state = sumShards([first, ...rest.filter((s) => s !== null)]);
    const wanted = this.#sizes ? this.#preferences() : undefined;
    const quantity = this.#random() < 0.8 ? 1 : 2;
    if (!isOnSale(state, this.#world.now)) return "SALE_NOT_ACTIVE"; // said first, as the route does
    const listed = wanted && state.variants?.filter((v) => wanted.includes(v.id));
    const best = listed ? Math.max(0, ...listed.map((v) => v.stock.available)) : undefined;
    if (best !== undefined ? best >= quantity : state.shards === 1 && state.stock.available > 0)
      return "STOCK_AVAILABLE";
    // Once the sale has ended (every end that may be in force has come), nobody joins its line.
    const ended = this.#ended(this.#world.now);
    const ends = this.#endsSent;
    const outcome = await this.#call<Outcome<WaitlistEntry>>(
      0,
      "joinWaitlist",
      userId,
      quantity,
      undefined,
      best ?? state.stock.available,
      wanted,
    );
    if (outcome.ok && ended && ends === this.#endsSent)
      throw new Violation(`${userId} joined the line after the sale ended`);
    return outcome.ok ? `waits x${quantity}${wanted ? ` for ${wanted.join(",")}` : ""}` : outcome.code;
  }

  async #leave(userId: string): Promise<string> {
    this.#leaving.set(userId, (this.#leaving.get(userId) ?? 0) + 1);
    try {
      const left = await this.#call<WaitlistPlace | null>(0, "leaveWaitlist", userId);
      return left ? "left" : "was not waiting";
    } finally {
      this.#leaving.set(userId, (this.#leaving.get(userId) ?? 1) - 1);
      this.#leftSince.add(userId);
    }
  }

  /** The operator: one change at a time, each a PUT through shard 0 (or its archive). */
  #operate(roll = this.#random(), sizing = false): void {
    // As the edge sends it: the shard count only when it changes (shard 0 keeps the one in force).
    const change: SkuChange = { sku: SKU, assumedTotal: 0 };
    let what: string;
    if (this.#archived) return;
    if (roll < 0.3) {
      const shards = 1 + this.#int(MAX_SHARDS);
      if (shards === this.#shards) return;
      change.shards = shards;
      what = `resize to ${shards}`;
    } else if (roll < 0.55) {
      if (this.#sizes) {
        const ids = [...this.#sizes.keys()];
        const id = this.#random() < 0.2 && ids.length < 4 ? "d" : (this.#pick(ids) as string);
        const total = this.#int(6);
        change.variants = [{ id, name: id, totalStock: total }];
        what = `size ${id} total ${total}`;
      } else if (sizing || this.#random() < 0.25) {
        // Sizes given to the SKU (fenced as a resize when sharded): refused while any shard holds or sold a unit.
        const given = ["a", "b"].slice(0, 1 + this.#int(2)).map((id) => ({ id, name: id, totalStock: this.#int(6) }));
        change.variants = given;
        what = `sizes ${given.map((v) => `${v.id} ${v.totalStock}`).join(", ")}`;
      } else {
        change.totalStock = this.#int(16);
        what = `total ${change.totalStock}`;
      }
    } else if (roll < 0.78) {
      change.status = this.#random() < 0.5 ? "paused" : "on_sale";
      what = change.status === "paused" ? "pause" : "resume";
    } else if (roll < 0.83) {
      // The limit, raised or lowered: a lower one revokes no hold, it refuses the next (API.md).
      const limit = 1 + this.#int(4);
      if (only(this.#settings.perUserLimit) === limit) return;
      change.perUserLimit = limit;
      what = `limit ${limit}`;
    } else if (roll < 0.88) {
      // The hold's lifetime: holds made after it last so long, those before keep their expiry.
      const seconds = 20 + this.#int(101);
      if (only(this.#settings.holdSeconds) === seconds) return;
      change.holdSeconds = seconds;
      what = `hold ${seconds}s`;
    } else if (roll < 0.95) {
      // The end: a little ahead (after the public start: the edge refuses an end before it), or none.
      const now = this.#world.now;
      const ends = [...this.#settings.endsAt].some((at) => at !== null);
      if (ends && this.#random() < (this.#ended(now) ? 0.7 : 0.5)) {
        change.endsAt = null;
        what = "no end";
      } else {
        change.endsAt = Math.max(now, this.#startsAt ?? 0) + (5 + this.#int(56)) * 1000;
        what = `end at t=${(change.endsAt - START) / 1000}`;
      }
    } else {
      if (this.#step < this.#options.steps * 0.8) return;
      change.status = "archived";
      what = "archive";
    }
    this.#change(change, what);
  }

  /**
   * The fair opening's window set by a PUT sent 0 to 60 ms before the public opening (the tiers,
   * opened before, get no draw): shard 0 may refuse it, taken after the opening, and its copy may
   * reach a sibling after it (the rest of the window is still drawn there). It sets no setting the
   * checks follow, so it runs beside the operator's other changes, sent again after a lost answer.
   */
  #setWindowLate(): void {
    const change: SkuChange = { sku: SKU, assumedTotal: 0, openingWindowMs: this.#windowMs };
    this.#start(`operator window ${this.#windowMs / 1000}s`, async () => {
      for (let attempt = 1; ; attempt++) {
        try {
          const outcome = await this.#put(change);
          return `${outcome.ok ? "200" : outcome.code}${attempt > 1 ? ` (attempt ${attempt})` : ""}`;
        } catch (error) {
          if (attempt >= 5 || !(error instanceof Error) || !error.message.includes(SIM_ERROR)) throw error;
        }
      }
    });
  }

  /** Whether every end that may be in force on some shard had come by `at` (the sale is over there). */
  #ended(at: number): boolean {
    return [...this.#settings.endsAt].every((end) => end !== null && end <= at);
  }

  /** Sends the operator's change: the PUT, again after a lost answer, as an operator does after a 5xx. */
  #change(change: SkuChange, what: string): void {
    if (change.endsAt !== undefined) this.#endsSent++;
    if (change.status === "archived") this.#archiveSent = true;
    this.#operatorBusy = true;
    this.#start(`operator ${what}`, async () => {
      try {
        // An unanswered PUT may have applied: until one is answered, both totals are possible.
        const refused = this.#snapshot();
        this.#expect(change, false);
        // A PUT that answered no status (its call or answer lost) is sent again, as an operator
        // does after a 5xx (an attempt whose answer was lost may have applied: its entry is in the log).
        for (let attempt = 1; ; attempt++) {
          try {
            const outcome = await this.#put(change);
            // A refusal after a lost attempt says nothing of that one, which may have applied.
            if (outcome.ok) this.#expect(change, true);
            else if (attempt === 1) refused();
            const read = !outcome.ok && this.#converting ? `; ${await this.#readSizes()}` : "";
            return `${outcome.ok ? "200" : outcome.code}${attempt > 1 ? ` (attempt ${attempt}${read})` : ""}`;
          } catch (error) {
            if (!(error instanceof Error) || !error.message.includes(SIM_ERROR)) throw error;
            if (attempt < 5) continue;
            // Given up: sizes that an attempt of it may have given are read back, as after a refusal.
            if (!this.#converting) throw error;
            return `${error.message.slice(SIM_ERROR.length)} (attempt 5; ${await this.#readSizes()})`;
          }
        }
      } finally {
        this.#operatorBusy = false;
      }
    });
  }

  #expect(change: SkuChange, answered: boolean): void {
    // The settings: possible from the PUT on, alone in force once every shard reads them (#settleSettings).
    if (change.perUserLimit !== undefined) {
      this.#settings.perUserLimit.add(change.perUserLimit);
      this.#mostLimit = Math.max(this.#mostLimit, change.perUserLimit);
    }
    if (change.holdSeconds !== undefined) {
      this.#settings.holdSeconds.add(change.holdSeconds);
      this.#longestHoldMs = Math.max(this.#longestHoldMs, change.holdSeconds * 1000);
    }
    if (change.endsAt !== undefined) this.#settings.endsAt.add(change.endsAt);
    if (!this.#sizes && change.variants) {
      const given = new Map(change.variants.map((v) => [v.id, v.totalStock ?? 0]));
      this.#converting = answered ? null : given;
      if (answered) {
        this.#sizes = new Map([...given].map(([id, t]) => [id, new Set([t])]));
        this.#totals = new Set([sumMax(this.#sizes)]);
      }
      return;
    }
    if (!answered) {
      if (change.totalStock !== undefined) this.#totals.add(change.totalStock);
      for (const v of change.variants ?? []) {
        if (v.totalStock === undefined) continue;
        const known = this.#sizes?.get(v.id) ?? new Set<number>();
        if (!this.#sizes?.has(v.id)) known.add(0);
        known.add(v.totalStock);
        this.#sizes?.set(v.id, known);
      }
      return;
    }
    if (change.totalStock !== undefined) this.#totals = new Set([change.totalStock]);
    for (const v of change.variants ?? [])
      if (v.totalStock !== undefined) this.#sizes?.set(v.id, new Set([v.totalStock]));
    if (this.#sizes) this.#totals = new Set([sumMax(this.#sizes)]);
    if (change.shards !== undefined && change.shards !== this.#shards) {
      this.#shards = change.shards;
      this.#shardsEver = Math.max(this.#shardsEver, change.shards);
    }
    if (change.status === "archived") this.#archived = true;
  }

  /** What the operator may have set, kept before a PUT: a PUT answered with a refusal changed nothing. */
  #snapshot(): () => void {
    const totals = new Set(this.#totals);
    const sizes = this.#sizes && new Map([...this.#sizes].map(([id, t]) => [id, new Set(t)]));
    const converting = this.#converting;
    const { perUserLimit, holdSeconds, endsAt } = this.#settings;
    const settings = {
      perUserLimit: new Set(perUserLimit),
      holdSeconds: new Set(holdSeconds),
      endsAt: new Set(endsAt),
    };
    return () => {
      this.#totals = totals;
      this.#sizes = sizes;
      this.#converting = converting;
      this.#settings = settings;
    };
  }

  /**
   * Sizes were given and the PUT's outcome is not known (an attempt's answer was lost, then a later
   * one was refused, or every attempt was lost): the lost one may have applied. The operator reads the
   * SKU (GET /admin/skus/:sku, from shard 0) until it knows which, a second apart while the reads are
   * lost (the faults stop when the run settles, so one answers by the settled checks).
   */
  async #readSizes(): Promise<string> {
    const given = this.#converting as Map<string, number>;
    for (let read = 1; ; read++) {
      let state: SkuState | null;
      try {
        state = await this.#state(0);
      } catch (error) {
        if (!(error instanceof Error) || !error.message.includes(SIM_ERROR)) throw error;
        await this.#world.wait(1000);
        continue;
      }
      const ids = (state?.variants ?? []).map((v) => v.id).join(",");
      if (ids && ids !== [...given.keys()].join(","))
        throw new Violation(`shard 0 has sizes ${ids}, the operator gave ${[...given.keys()].join(",")}`);
      this.#converting = null;
      const variants = [...given].map(([id, totalStock]) => ({ id, name: id, totalStock }));
      if (ids) this.#expect({ sku: SKU, assumedTotal: 0, variants }, true);
      return `${ids ? "the sizes applied" : "no sizes"}${read > 1 ? ` at read ${read}` : ""}`;
    }
  }

  // ---- Checking ----

  /**
   * Every shard this SKU ever had, as its object has it now (read in place, not over the network):
   * its state, whether its outbox has events to send, and its reservations by id.
   */
  #views(): View[] {
    const views: View[] = [];
    for (let shard = 0; shard < MAX_SHARDS; shard++) {
      const object = this.#world.shard(shardName(SKU, shard));
      if (!object) continue;
      const state = object.instance.state();
      if (!state) continue;
      const { rows, active } = this.#reservations(shard, object.storage);
      views.push({ shard, state, active, pending: object.instance.engine.outbox.hasPending(), rows });
    }
    return views;
  }

  /** Each shard's reservations as last read, and its storage's count of changes then. */
  readonly #read = new Map<number, { storage: NodeStorage; changes: number } & Pick<View, "rows" | "active">>();

  /**
   * Since the last check: the buyers who gained units (a new hold, or a payment after the hold's
   * expiry, which took a unit again), and the reservations new on their shard.
   */
  readonly #gained = new Set<string>();
  readonly #fresh: Row[] = [];

  /** A shard's reservations by id and each buyer's held + paid, read again only when its storage changed. */
  #reservations(shard: number, storage: NodeStorage): Pick<View, "rows" | "active"> {
    const last = this.#read.get(shard);
    if (last?.storage === storage && last.changes === storage.changes) return last;
    const changes = storage.changes;
    const rows = new Map<string, Row>();
    const active = new Map<string, number>();
    for (const row of storage.sql
      .exec<Row>(
        "SELECT id, user_id, quantity, status, variant, seq, created_at, expires_at, updated_at FROM reservations",
      )
      .toArray()) {
      rows.set(row.id, row);
      const was = last?.rows.get(row.id);
      if (!was) this.#fresh.push(row);
      if (!isActive(row)) continue;
      active.set(row.user_id, (active.get(row.user_id) ?? 0) + row.quantity);
      if (
        !was ||
        !isActive(was) ||
        (was.status === "held" && row.status === "paid" && row.updated_at >= row.expires_at)
      )
        this.#gained.add(row.user_id);
    }
    const read = { storage, changes, rows, active: [...active].map(([userId, quantity]) => ({ userId, quantity })) };
    this.#read.set(shard, read);
    return read;
  }

  /** Each shard's counts (total/available/held/sold, and each size's), for a failure's last line. */
  #summary(): string {
    const counts = (c: { total: number; available: number; held: number; sold: number }) =>
      `${c.total}/${c.available}/${c.held}/${c.sold}`;
    return this.#views()
      .map(({ shard, state }) => {
        const sizes = (state.variants ?? []).map((v) => ` ${v.id} ${counts(v.stock)}`).join("");
        return `#${shard}(${state.shards}) ${counts(state.stock)}${sizes}`;
      })
      .join(", ");
  }

  #check(settled: boolean): void {
    if (this.#failure) throw this.#failure;
    if (this.#answers.violation) throw new Violation(this.#answers.violation);
    const foreign = this.#world.foreign[0];
    if (foreign) throw new Violation(`the code under test threw: ${foreign}`);
    const views = this.#views();
    const converting = this.#converting ? [...this.#converting.values()].reduce((a, b) => a + b, 0) : 0;
    const bound = {
      total: this.#sizes ? sumMax(this.#sizes) : Math.max(...this.#totals, converting),
      variants: this.#sizes
        ? new Map([...this.#sizes].map(([id, t]) => [id, Math.max(...t)]))
        : (this.#converting ?? undefined),
    };
    const broken = stockViolations(views, this.#mostLimit, bound);
    if (broken[0]) throw new Violation(broken[0]);
    this.#checkLine();
    this.#checkGained(views);
    this.#settleSettings(views);
    this.#checkAcked(views);
    this.#checkOutbox(views, settled);
    if (settled) this.#checkSettled(views);
  }

  /**
   * 9: an entry leaves the line served (a hold made with its id, on a sharded SKU; a new hold of its
   * buyer and quantity, made in the same transaction, on one shard), left (its buyer asked), lapsed (an
   * end that may be in force has come) or archived, never otherwise. Before {@link #checkGained}, which
   * takes the new holds.
   */
  #checkLine(): void {
    const line = new Map(
      (
        this.#world
          .shard(shardName(SKU, 0))
          ?.storage.sql.exec<{ id: string; user_id: string; quantity: number }>(
            "SELECT id, user_id, quantity FROM waitlist",
          )
          .toArray() ?? []
      ).map((r) => [r.id, { userId: r.user_id, quantity: r.quantity }]),
    );
    const lapsed =
      this.#archiveSent || [...this.#settings.endsAt].some((end) => end !== null && end <= this.#world.now);
    const fresh = new Set(this.#fresh.map((row) => `${row.user_id} x${row.quantity}`));
    const heldFor = (entryId: string) =>
      Array.from({ length: this.#shardsEver }, (_, shard) => this.#world.shard(shardName(SKU, shard))).some(
        (object) => object?.storage.sql.exec("SELECT 1 FROM reservations WHERE nonce = ?", entryId).toArray().length,
      );
    for (const [id, { userId, quantity }] of this.#waiting) {
      if (line.has(id) || lapsed || fresh.has(`${userId} x${quantity}`)) continue;
      if ((this.#leaving.get(userId) ?? 0) > 0 || this.#leftSince.has(userId) || heldFor(id)) continue;
      throw new Violation(
        `${userId} lost their place in the line (x${quantity}), neither served nor leaving (invariant 9)`,
      );
    }
    this.#waiting = line;
    this.#leftSince.clear();
  }

  /**
   * What changed since the last check, under the settings that may have been in force meanwhile
   * (the sets before {@link #settleSettings} narrows them): each new reservation lasts a hold's
   * lifetime and none was made once the sale had ended everywhere.
   */
  #checkGained(views: View[]): void {
    // 2, strict and sound: a buyer who gained units since the last check holds at most the largest limit
    // in force meanwhile (held over it from before a lowered limit is theirs; gaining more is not).
    const most = Math.max(...this.#settings.perUserLimit);
    for (const user of this.#gained) {
      const own = views.reduce((n, v) => n + (v.active.find((a) => a.userId === user)?.quantity ?? 0), 0);
      if (own > most)
        throw new Violation(`${user} gained units and holds or bought ${own}, over the limit ${most} (invariant 2)`);
    }
    this.#gained.clear();
    const fresh = this.#fresh.splice(0);
    for (const row of fresh) {
      const lasts = (row.expires_at - row.created_at) / 1000;
      if (!this.#settings.holdSeconds.has(lasts))
        throw new Violation(
          `${this.#alias(row.id)} of ${row.user_id} was held for ${lasts}s, the operator set ${[...this.#settings.holdSeconds].join(" or ")}s`,
        );
      if (this.#ended(row.created_at))
        throw new Violation(
          `${this.#alias(row.id)} of ${row.user_id} was held at t=${(row.created_at - START) / 1000}, after the sale ended at t=${[...this.#settings.endsAt].map((at) => ((at ?? 0) - START) / 1000).join(" or ")}`,
        );
    }
  }

  /**
   * A setting every shard of the SKU reads alike while no PUT is pending is the one in force: the others
   * go from the sets. Shard 0 takes a change first, so its value is always one the operator may have set.
   */
  #settleSettings(views: View[]): void {
    const lead = views.find((v) => v.shard === 0)?.state;
    if (!lead) return;
    const own = views.filter((v) => v.shard < lead.shards);
    for (const key of SETTINGS) {
      const value = lead[key];
      const values = this.#settings[key] as Set<number | null>;
      if (!values.has(value))
        throw new Violation(`shard 0 has ${key} ${value}, the operator set ${[...values].join(" or ")}`);
      if (!this.#operatorBusy && values.size > 1 && own.every((v) => v.state[key] === value)) {
        values.clear();
        values.add(value);
      }
    }
  }

  /** Every acknowledged reservation is on its shard as it was told, and a paid or cancelled one stays so. */
  #checkAcked(views: View[]): void {
    const byShard: (Map<string, Row> | undefined)[] = [];
    for (const v of views) byShard[v.shard] ??= v.rows;
    for (const a of this.#acked.values()) {
      const row = byShard[a.shard]?.get(a.id);
      if (!row) throw new Violation(`acknowledged ${this.#alias(a.id)} (${a.userId}) is not on its shard`);
      if (row.user_id !== a.userId || row.quantity !== a.quantity || (row.variant ?? undefined) !== a.variant)
        throw new Violation(`acknowledged ${this.#alias(a.id)} reads ${row.user_id} x${row.quantity} ${row.variant}`);
      // Paid stays paid; a cancelled hold never holds again (a payment may still buy it, or be refunded).
      if (a.final && !(a.final === "paid" ? PAID : ENDED).includes(row.status))
        throw new Violation(`${this.#alias(a.id)} was answered ${a.final}, now reads ${row.status}`);
      // A hold nobody asked to end holds (or is paid) until it expires: a lower limit or an end revokes none.
      if (!a.final && !this.#released.has(a.id) && this.#world.now < a.expiresAt && !isActive(row))
        throw new Violation(`${this.#alias(a.id)} of ${a.userId} reads ${row.status} before its expiry`);
    }
  }

  /**
   * Outbox events for every decision: on a shard with nothing left to send, every reservation's latest
   * change reached the queue (the model of D1 has it at its seq and status); settled, every shard so.
   */
  #checkOutbox(views: View[], settled: boolean): void {
    for (const { shard, pending, rows } of views) {
      if (pending) {
        if (settled) throw new Violation(`shard ${shard} still has outbox events after settling`);
        continue;
      }
      for (const row of rows.values()) {
        const order = this.#world.orders.get(row.id);
        if (
          !order ||
          order.seq !== row.seq ||
          order.type !== `reservation.${row.status}` ||
          order.quantity !== row.quantity
        )
          throw new Violation(
            `${this.#alias(row.id)} on shard ${shard} is ${row.status} at seq ${row.seq}; the queue's last event: ${order ? `${order.type} seq ${order.seq}` : "none"}`,
          );
      }
    }
  }

  /**
   * `npm run verify-sale`'s checks on the SKU's log once settled (tools/sale-verifier.ts): a head
   * recorded and signed, the root and the level-0 tiles rebuilt from the entries, the signature checked
   * with the verifier key, then every entry replayed under the sale's rules (nothing is still on its
   * way: every outbox is empty, so no excess is excused as unsettled), and a revealed draw's entries
   * in the order its seed gives.
   */
  async #verifySale(): Promise<void> {
    const object = this.#world.objects.get(logName(SKU));
    if (!object) throw new Violation("the SKU has no log");
    const log = object.instance as unknown as SaleLog;
    const head = log.recordHead();
    const rows = object.storage.sql.exec<{ data: string }>("SELECT data FROM entries ORDER BY idx").toArray();
    const bytes = rows.map((r) => Buffer.from(r.data, "utf8"));
    try {
      if (head.size !== rows.length) throw new Broken(`the head has ${head.size} entries, the log ${rows.length}`);
      const levels = levelsOf(bytes.map(leafHash));
      const root = treeHash(levels, head.size);
      if (!root.equals(head.root)) throw new Broken("the entries' root is not the head's");
      for (let n = 0; n * 256 < head.size; n++) {
        const width = Math.min(256, head.size - n * 256);
        const tile = log.tile(0, n, width);
        if (!tile || !Buffer.from(tile).equals(Buffer.concat(levels[0]?.slice(n * 256, n * 256 + width) ?? [])))
          throw new Broken(`hash tile 0/${n} does not match the entries`);
      }
      const note = await log.checkpoint(ORIGIN);
      if (!note) throw new Broken("the log signs no checkpoint");
      const signed = openCheckpoint(note, parseVerifier(SIM_LOG_VERIFIER), "the checkpoint");
      if (signed.size !== head.size || !signed.root.equals(root))
        throw new Broken("the signed checkpoint is not the head");
      const reveals = new Map<string, string>();
      const draws = new Map<string, DrawHolds>();
      const summary = replay(
        rows.map((r) => JSON.parse(r.data) as Entry),
        reveals,
        { now: this.#world.now, settleMs: 0, decideMs: 0, draws },
      );
      if (summary.settled !== true) throw new Broken(String(summary.unsettled));
      const shard0 = this.#world.shard(shardName(SKU, 0));
      const openings = shard0?.instance.engine.draw.info()?.openings ?? [];
      let drawHeld = 0;
      for (const [i, opening] of openings.entries()) {
        if (!shard0 || opening.seed === null || opening.seedHash === null) continue;
        const at = `the draw at t=${(opening.opensAt - START) / 1000}`;
        if (reveals.get(opening.seedHash) !== opening.seed)
          throw new Broken(`${at}: its seed ${opening.seedHash.slice(0, 12)}… is not the one the log revealed`);
        // Its entries in its seed's order, positions 1 to its entrants: the public draw's as a buyer
        // pages them (drawEntries), a tier's as shard 0 keeps them (no face pages an earlier draw).
        const entries =
          i === openings.length - 1
            ? shard0.instance.drawEntries(0, 10_000)
            : shard0.storage.sql
                .exec<DrawnEntry>(
                  `SELECT entry_id AS entryId, position, quantity, coalesce(code, 'PENDING') AS result
                   FROM draw_entrants WHERE opening = ? AND position IS NOT NULL ORDER BY position`,
                  opening.opensAt,
                )
                .toArray();
        try {
          checkDrawPage(opening.seed, entries, 0);
          // Its results against the log: every held entry's hold names its position, nothing else does.
          const outcomes = checkDrawOutcomes(entries, draws.get(opening.seedHash), this.#world.now, 0);
          if (outcomes.unproven) throw new Broken(outcomes.unproven);
          // Salted ids (the sim keeps a log): the holds are the entries' own buyers'.
          if (opening.entryIdPrefix !== "salt") throw new Broken("its entry ids are not salted");
          checkDrawBuyers(entries, draws.get(opening.seedHash), opening.entryIdPrefix);
          drawHeld += outcomes.held;
        } catch (error) {
          throw error instanceof Broken ? new Broken(`${at}: ${error.message}`) : error;
        }
        if (entries.length !== opening.entrants)
          throw new Broken(`${at}: ${entries.length} entries in its order, ${opening.entrants} entrants`);
      }
      this.#line(
        `verify-sale: ${head.size} entries, root and signature match, replay ok (${summary.held} held, ${summary.sold} sold${reveals.size > 0 ? `, ${reveals.size} draws revealed and in their seed's order, their ${drawHeld} held entries each named by its hold` : ""})`,
      );
    } catch (error) {
      if (!(error instanceof Broken)) throw error;
      throw new Violation(`verify-sale: ${error.message}`);
    }
  }

  /** Once settled: the total is the operator's, nothing is held past its expiry, and no waiting buyer is stranded. */
  #checkSettled(views: View[]): void {
    // 8: the total (each size's) is one an operator PUT may have set: the last answered, or one unanswered since.
    const states = views.map((v) => v.state);
    const total = summed(states, "total");
    const sizeTotal = (id: string) => summed(states, "total", id);
    // Sizes given by a PUT whose answer was lost: the operator read back whether they applied (#readSizes).
    if (this.#converting)
      throw new Violation(
        `the operator never learned whether sizes ${[...this.#converting.keys()].join(",")} applied (the simulator's own gap)`,
      );
    // Every one of the SKU's shards (as many as shard 0 says) has sizes when the operator gave them, none else.
    const count = views.find((v) => v.shard === 0)?.state.shards ?? 0;
    const sized = views.filter((v) => v.shard < count && v.state.variants?.length);
    if (sized.length !== (this.#sizes ? count : 0))
      throw new Violation(
        `${sized.length} of ${count} shards have sizes, the operator gave ${this.#sizes ? [...this.#sizes.keys()].join(",") : "none"} (invariant 8)`,
      );
    if (!this.#sizes && !this.#totals.has(total))
      throw new Violation(
        `the shards hold ${total} in total, the operator set ${[...this.#totals].join(" or ")} (invariant 8)`,
      );
    for (const [id, totals] of this.#sizes ?? []) {
      const n = sizeTotal(id);
      if (!totals.has(n))
        throw new Violation(
          `size ${id}: the shards hold ${n}, the operator set ${[...totals].join(" or ")} (invariant 8)`,
        );
    }
    for (const view of views) {
      const overdue = [...view.rows.values()].filter(
        (r) => r.status === "held" && r.expires_at < this.#world.now - 60_000,
      );
      if (overdue.length > 0)
        throw new Violation(`shard ${view.shard} keeps ${overdue.length} holds past their expiry`);
    }
    // 8 too: every shard of the SKU has shard 0's settings (its follow plan ended).
    const lead = views.find((v) => v.shard === 0)?.state;
    for (const view of views.filter((v) => lead && v.shard < lead.shards))
      for (const key of SETTINGS)
        if (lead && view.state[key] !== lead[key])
          throw new Violation(`shard ${view.shard} has ${key} ${view.state[key]}, shard 0 ${lead[key]} (invariant 8)`);
    // The line (9) is served on a sale that is on and has not ended.
    if (lead?.status !== "on_sale" || (lead.endsAt !== null && lead.endsAt <= this.#world.now)) return;
    // 9 too: no shard of a sharded SKU without sizes keeps newcomers off for its line (waitlist mode 1)
    // while the SKU has units available.
    const available = summed(states, "available");
    for (const view of views) {
      const mode = this.#world.shard(shardName(SKU, view.shard))?.instance.engine.waitlist.mode;
      if (lead.shards > 1 && !lead.variants && view.shard < lead.shards && mode === 1 && available > 0)
        throw new Violation(
          `shard ${view.shard} holds newcomers off for the line while ${available} are available (invariant 9)`,
        );
    }
    const waiting = this.#world
      .shard(shardName(SKU, 0))
      ?.storage.sql.exec<{ user_id: string; quantity: number; variants: string | null }>(
        "SELECT user_id, quantity, variants FROM waitlist ORDER BY position",
      )
      .toArray();
    for (const w of waiting ?? []) {
      const own = views.reduce((n, v) => n + (v.active.find((a) => a.userId === w.user_id)?.quantity ?? 0), 0);
      if (own + w.quantity > lead.perUserLimit) continue; // at the limit: the line cannot serve them
      const listed = w.variants ? (JSON.parse(w.variants) as string[]) : null;
      const fits = listed
        ? listed.some((id) => summed(states, "available", id) >= w.quantity)
        : summed(states, "available") >= w.quantity;
      if (fits)
        throw new Violation(
          `${w.user_id} waits for ${w.quantity}${listed ? ` of ${listed.join(",")}` : ""} while the units are available (invariant 9)`,
        );
    }
  }
}

/** The statuses an acknowledged reservation answered paid, or cancelled, may read later. */
const PAID = ["paid"];
const ENDED = ["cancelled", "paid", "refund_required"];

/** The origin line of the sim's checkpoints, as `logOrigin` makes it for a gateway at sim.example. */
const ORIGIN = `sim.example/api/skus/${SKU}/log`;

/** The shard a reservation id names (`<sku>.<shard>.<hex>`). */
function shardOf(reservationId: string): number {
  return Number(reservationId.split(".")[1]);
}

/** One count summed over shards' states: the SKU's, or size `id`'s (none where a shard lacks it). */
function summed(states: readonly (SkuState | null)[], count: "total" | "available", id?: string): number {
  let n = 0;
  for (const s of states) {
    const stock = id === undefined ? s?.stock : s?.variants?.find((v) => v.id === id)?.stock;
    n += stock?.[count] ?? 0;
  }
  return n;
}

/** A setting's one value in force on every shard, or undefined while a change of it may be under way. */
function only<T>(values: Set<T>): T | undefined {
  return values.size === 1 ? [...values][0] : undefined;
}

function sumMax(sizes: Map<string, Set<number>>): number {
  let n = 0;
  for (const totals of sizes.values()) n += Math.max(...totals);
  return n;
}
