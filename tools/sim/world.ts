import { migrate } from "../../durable-objects/engine/schema";
import { SaleLog } from "../../durable-objects/log/sale-log";
import { SkuStock } from "../../durable-objects/stock/sku-stock";
import { type NodeStorage, type SchemaImage, sqliteStorage } from "../sqlite-storage";

/**
 * The simulator's world (docs/SIMULATOR.md): one virtual clock, one seeded random source, and the
 * stock objects of one SKU, each a real `SkuStock` over its own SQLite database, reached through a
 * network that delays, reorders and drops calls and answers. Nothing here waits on real time: work
 * runs when the world pumps it, in an order that depends on the seed alone.
 */

/** Every error the world makes starts so; any other error from the code under test is its own. */
export const SIM_ERROR = "sim: ";

export interface Faults {
  /** Chance that a call is lost before it reaches its object. */
  dropCall: number;
  /** Chance that an answer is lost after the object ran the call (and committed). */
  dropAnswer: number;
  /** Chance that the queue refuses a `sendBatch`. */
  queueFails: number;
  /** The most a call or an answer takes on the way, in virtual ms. */
  maxDelayMs: number;
}

export const NO_FAULTS: Faults = { dropCall: 0, dropAnswer: 0, queueFails: 0, maxDelayMs: 2 };

interface Timer {
  at: number;
  order: number;
  run: () => void;
}

/** One queue event as the outbox sent it (the fields the model of D1 and the checks read). */
export interface SentEvent {
  id: string;
  type: string;
  reservationId: string;
  userId: string;
  quantity: number;
  seq: number;
  variant?: string;
}

let stockSchemaImage: SchemaImage | undefined;

/**
 * The stock object's schema, made once per process: what `migrate` (engine/schema.ts) leaves in an
 * empty database, and the first statement it runs. A stock shard's storage starts empty, as in
 * production, and becomes a copy of it when its first configure starts `migrate`, which runs on and
 * finds its tables made: a third of the CPU of a seed was those statements, shard by shard.
 */
function stockSchema(): SchemaImage {
  if (!stockSchemaImage) {
    const storage = sqliteStorage();
    let first: string | undefined;
    const sql = new Proxy(storage.sql, {
      get: (target, key) =>
        key === "exec"
          ? (query: string, ...bindings: unknown[]) => {
              first ??= query;
              return target.exec(query, ...bindings);
            }
          : Reflect.get(target, key),
    });
    storage.transactionSync(() => migrate(sql));
    if (first === undefined) throw new Error("migrate ran no statement");
    stockSchemaImage = { first, image: storage.export() };
  }
  return stockSchemaImage;
}

/** What the world runs of an object: its RPC methods and its alarm. */
type Alarmed = { alarm(): Promise<void> };

/**
 * The world's name of a SKU's sale log (`SALE_LOG.getByName(sku)`): apart from the stock objects'
 * names (`<sku>#<shard>`), as the two namespaces are apart in workerd.
 */
export const logName = (sku: string) => `log:${sku}`;

/**
 * The sim's own log key (scripts/log-key.ts made it; it signs nothing outside the sim), and the
 * verifier key that `GET /api/log/key` would serve for it.
 */
export const SIM_LOG_KEY = "PRIVATE+KEY+flashgate-sim+56d8f4f4+ASEGweONEWVjFaGxv7JQ0d+EF9KL26niOfYRxdBsiCx3";
export const SIM_LOG_VERIFIER = "flashgate-sim+56d8f4f4+AbHo72OvMpPgw3KtzlYqjgvFlMNPqe/5F7TFIXd4+YN1";

/**
 * An object's place in the world (a stock shard, or a SKU's sale log): its storage and alarm
 * outlive the instances built over them.
 */
export class SimObject<T extends Alarmed = SkuStock> {
  readonly name: string;
  readonly storage: NodeStorage;
  alarmAt: number | null = null;
  alarmRunning = false;
  alarmFailures = 0;
  instance!: T;
  #alive = { value: true };
  readonly #world: World;

  constructor(world: World, name: string) {
    this.#world = world;
    this.name = name;
    this.storage = name.startsWith(logName("")) ? sqliteStorage() : sqliteStorage(undefined, stockSchema());
    this.build();
  }

  /** A new instance over the same storage; the old one's storage calls throw from now on, as workerd's do. */
  build(): void {
    this.#alive.value = false;
    const alive = { value: true };
    this.#alive = alive;
    const ctx = this.#ctx(alive);
    const env = this.#world.env as unknown as Env;
    this.instance = (this.name.startsWith(logName(""))
      ? new SaleLog(ctx, env)
      : new SkuStock(ctx, env)) as unknown as T;
    this.#world.onBuild?.(this as unknown as SimObject<Alarmed>);
  }

  #ctx(alive: { value: boolean }): DurableObjectState {
    const { storage, name } = this;
    const world = this.#world;
    const live = () => {
      if (!alive.value) throw new Error(`${SIM_ERROR}${name} was reset`);
    };
    const sql = {
      exec: (query: string, ...bindings: unknown[]) => {
        live();
        return storage.sql.exec(query, ...bindings);
      },
      get databaseSize() {
        return storage.sql.databaseSize;
      },
    };
    let depth = 0;
    const durable = {
      sql,
      transactionSync: <T>(fn: () => T): T => {
        live();
        depth++;
        let committed = false;
        try {
          const result = storage.transactionSync(fn);
          committed = true;
          return result;
        } finally {
          depth--;
          if (depth === 0) world.onCommit?.(name, committed);
        }
      },
      getAlarm: async () => {
        live();
        return this.alarmAt;
      },
      setAlarm: async (at: number | Date) => {
        live();
        this.alarmAt = typeof at === "number" ? at : at.getTime();
      },
      deleteAlarm: async () => {
        live();
        this.alarmAt = null;
      },
    };
    return {
      id: { name, toString: () => name, equals: () => false },
      storage: durable,
      waitUntil: (work: Promise<unknown>) => world.background(work, name),
      blockConcurrencyWhile: <T>(fn: () => Promise<T>) => fn(),
    } as unknown as DurableObjectState;
  }
}

export class World {
  now: number;
  readonly random: () => number;
  faults: Faults = NO_FAULTS;
  readonly objects = new Map<string, SimObject<Alarmed>>();
  /** What the queue took, in order, and the model of D1's orders: each reservation's event of the highest seq. */
  readonly sent: SentEvent[] = [];
  readonly orders = new Map<string, SentEvent>();
  /** Errors of the code under test that were not the world's (background work included). */
  readonly foreign: string[] = [];
  readonly env: Record<string, unknown>;
  /** Alarms fired and calls made, for the trace. */
  alarms = 0;
  calls = 0;
  /**
   * The checks' view of the objects' inner moments (tools/sim/answer-checks.ts): an instance just
   * built (a first use or a reset), an outermost transaction ended (committed or rolled back), and
   * a call's answer as its object gave it, before the network carries it back (`sentAt`: its call's start).
   */
  onBuild?: (object: SimObject<Alarmed>) => void;
  onCommit?: (name: string, committed: boolean) => void;
  onAnswer?: (name: string, method: string, args: unknown[], value: unknown, sentAt: number) => void;
  readonly #timers: Timer[] = [];
  #order = 0;

  constructor(start: number, random: () => number) {
    this.now = start;
    this.random = random;
    this.env = {
      PURCHASE_TOKEN_TTL_SECONDS: "300",
      SKU_STOCK: { getByName: (name: string) => this.stub(name) },
      // The SKU's public log, kept as production keeps it: each shard's outbox appends its events
      // (durable-objects/log/sale-log-client.ts), the operator's changes their configuration entries.
      SALE_LOG: { getByName: (sku: string) => this.stub(logName(sku)) },
      LOG_SIGNING_KEY: SIM_LOG_KEY,
      ORDER_EVENTS: { sendBatch: (messages: { body: string }[]) => this.#enqueue(messages) },
    };
  }

  /** The object named `name`, made on first use (as a Durable Object is). */
  object<T extends Alarmed = SkuStock>(name: string): SimObject<T> {
    let object = this.objects.get(name);
    if (!object) {
      object = new SimObject<T>(this, name);
      this.objects.set(name, object);
    }
    return object as SimObject<T>;
  }

  /** A stock shard's object if it was ever made (read in place by the checks, not over the network). */
  shard(name: string): SimObject<SkuStock> | undefined {
    return this.objects.get(name) as SimObject<SkuStock> | undefined;
  }

  /** A stub whose every method call goes over the simulated network. */
  stub<Face>(name: string): Face {
    return new Proxy({} as object, {
      get: (_target, method) =>
        method === "then" || typeof method !== "string"
          ? undefined
          : (...args: unknown[]) => this.call(name, method, args),
    }) as Face;
  }

  /** A call over the network: delayed, maybe lost on the way there or back. */
  call<T>(name: string, method: string, args: unknown[]): Promise<T> {
    const { faults } = this;
    this.calls++;
    const lostCall = this.random() < faults.dropCall;
    const there = this.#delay();
    const sentAt = this.now;
    return new Promise<T>((resolve, reject) => {
      this.at(this.now + there, () => {
        if (lostCall) return reject(new Error(`${SIM_ERROR}call ${method} to ${name} lost`));
        const answer = (async () => {
          const target = this.object(name).instance as unknown as Record<string, (...a: unknown[]) => unknown>;
          const fn = target[method];
          if (typeof fn !== "function") throw new Error(`${name} has no method ${method}`);
          return (await fn.apply(target, copy(args))) as T;
        })();
        answer.then(
          (value) => {
            this.onAnswer?.(name, method, args, value, sentAt);
            this.#reply(name, method, reject, () => resolve(copy(value)));
          },
          (error: unknown) => this.#reply(name, method, reject, () => reject(error)),
        );
      });
    });
  }

  /** The answer on its way back: delayed, maybe lost (the caller then hears of a broken connection). */
  #reply(name: string, method: string, reject: (error: Error) => void, deliver: () => void): void {
    const lost = this.random() < this.faults.dropAnswer;
    this.at(this.now + this.#delay(), () =>
      lost ? reject(new Error(`${SIM_ERROR}answer of ${method} from ${name} lost`)) : deliver(),
    );
  }

  #delay(): number {
    return Math.floor(this.random() * (this.faults.maxDelayMs + 1));
  }

  /** Runs `run` when the clock reaches `at`. */
  at(at: number, run: () => void): void {
    const timer = { at: Math.max(at, this.now), order: this.#order++, run };
    let i = this.#timers.length;
    while (i > 0 && (this.#timers[i - 1] as Timer).at > timer.at) i--;
    this.#timers.splice(i, 0, timer);
  }

  /** workerd's `scheduler.wait`, on the virtual clock. */
  wait(ms: number): Promise<void> {
    return new Promise((resolve) => this.at(this.now + Math.max(0, ms), resolve));
  }

  /** Background work of an object (`ctx.waitUntil`): its failures are noted, never thrown. */
  background(work: Promise<unknown>, name: string): void {
    work.catch((error: unknown) => this.noteError(error, `${name} background`));
  }

  /** Notes an error that the world did not make (a reset's or a lost call's are the world's). */
  noteError(error: unknown, where: string): void {
    const message = error instanceof Error ? error.message : String(error);
    if (!message.includes(SIM_ERROR)) this.foreign.push(`${where}: ${message}`);
  }

  async #enqueue(messages: { body: string }[]): Promise<void> {
    if (this.random() < this.faults.queueFails) throw new Error(`${SIM_ERROR}queue refused a batch`);
    for (const { body } of messages) {
      const { events } = JSON.parse(body) as { events: SentEvent[] };
      for (const event of events) {
        this.sent.push(event);
        const known = this.orders.get(event.reservationId);
        if (!known || known.seq < event.seq) this.orders.set(event.reservationId, event);
      }
    }
  }

  /**
   * Frees every object's database (sql.js keeps each in WebAssembly memory, which a process never gets
   * back otherwise: a sweep of a thousand seeds ran out of it). Its timers are dropped; nothing runs after.
   */
  close(): void {
    this.#timers.length = 0;
    for (const object of this.objects.values()) object.storage.close();
  }

  /** Lets every promise that can settle now settle (no real I/O runs, so this is deterministic). */
  settle(): Promise<void> {
    return new Promise((resolve) => setImmediate(resolve));
  }

  /** The next thing due: a timer or an object's alarm, whichever is first (timers first on a tie). */
  #next(): { at: number; run: () => void } | null {
    const timer = this.#timers[0];
    let alarm: SimObject<Alarmed> | null = null;
    for (const object of this.objects.values()) {
      if (object.alarmAt === null || object.alarmRunning) continue;
      if (!alarm || object.alarmAt < (alarm.alarmAt as number)) alarm = object;
    }
    if (alarm && (!timer || (alarm.alarmAt as number) < timer.at)) {
      const object = alarm;
      return { at: object.alarmAt as number, run: () => this.#fireAlarm(object) };
    }
    if (!timer) return null;
    return {
      at: timer.at,
      run: () => {
        this.#timers.shift();
        timer.run();
      },
    };
  }

  /** Runs the alarm as workerd does: cleared as it starts, retried with backoff when it throws. */
  #fireAlarm(object: SimObject<Alarmed>): void {
    this.alarms++;
    object.alarmAt = null;
    object.alarmRunning = true;
    const instance = object.instance;
    instance.alarm().then(
      () => {
        object.alarmRunning = false;
        object.alarmFailures = 0;
      },
      (error: unknown) => {
        object.alarmRunning = false;
        this.noteError(error, `${object.name} alarm`);
        object.alarmFailures++;
        if (object.alarmAt === null) object.alarmAt = this.now + 1000 * 2 ** Math.min(object.alarmFailures, 6);
      },
    );
  }

  /** Runs everything due up to `until`, then leaves the clock there. */
  async runUntil(until: number): Promise<void> {
    await this.settle();
    for (;;) {
      const next = this.#next();
      if (!next || next.at > until) break;
      this.now = Math.max(this.now, next.at);
      next.run();
      await this.settle();
    }
    this.now = Math.max(this.now, until);
  }
}

/** What a copy runs into that only structuredClone copies (it then copies the whole value). */
const UNPLAIN = Symbol("unplain");

/**
 * An RPC's arguments or answer copied as `structuredClone` copies them: plain objects and arrays
 * (shared and circular references kept) here, at a fraction of its cost; a value holding anything
 * else (a Date, a buffer, a Map, a class's instance, an array with holes) by `structuredClone` itself.
 */
export function copy<T>(value: T): T {
  try {
    return copyPlain(value, new Map()) as T;
  } catch (error) {
    if (error === UNPLAIN) return structuredClone(value);
    throw error;
  }
}

function copyPlain(value: unknown, seen: Map<object, unknown>): unknown {
  if (typeof value !== "object" || value === null) {
    if (typeof value === "function" || typeof value === "symbol") throw UNPLAIN;
    return value;
  }
  const known = seen.get(value);
  if (known !== undefined) return known;
  const proto = Object.getPrototypeOf(value);
  if (proto === Array.prototype) {
    const array = value as unknown[];
    const out = new Array<unknown>(array.length);
    seen.set(value, out);
    let own = 0;
    for (let i = 0; i < array.length; i++) {
      if (!(i in array)) throw UNPLAIN;
      out[i] = copyPlain(array[i], seen);
      own++;
    }
    if (Object.keys(array).length !== own) throw UNPLAIN; // properties besides its items
    return out;
  }
  if (proto !== Object.prototype && proto !== null) throw UNPLAIN;
  const out: Record<string, unknown> = {};
  seen.set(value, out);
  for (const key of Object.keys(value)) {
    if (key === "__proto__") throw UNPLAIN; // an own property there is not made by assigning it
    out[key] = copyPlain((value as Record<string, unknown>)[key], seen);
  }
  return out;
}
