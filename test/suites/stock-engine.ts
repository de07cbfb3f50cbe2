import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { isoTime } from "../../durable-objects/engine/ledger";
import { rankEntrants } from "../../durable-objects/engine/opening-draw";
import { StockEngine } from "../../durable-objects/engine/stock-engine";
import { type EngineStorage, isOnSale, type Outcome, type Reservation } from "../../durable-objects/engine/types";
import { OrderEventSchema } from "../../durable-objects/shared/order-events";

/**
 * Random operation sequences against the synchronous engine, checking the invariants of
 * docs/ARCHITECTURE.md after every step. Seeded, so a failure replays; fast-check shrinks it to the
 * shortest failing sequence.
 *
 * One suite, run twice: over SQLite in Node (test/stock-engine.unit.test.ts, the fast tier) and
 * inside a Durable Object in workerd (test/suites/stock-engine-workerd.ts), so both SQLite builds are
 * held to the same answers.
 */

/** A stock object's storage, as much of it as the engine and these tests use. */
export interface TestStorage extends EngineStorage {
  deleteAll(): Promise<void>;
}

/** Runs `body` with the storage of a stock object named `name`, emptied first. */
export type StoragePlace = <T>(name: string, body: (storage: TestStorage) => Promise<T> | T) => Promise<T>;

const USERS = ["u0", "u1", "u2", "u3", "u4"];
const T0 = 1_900_000_000_000;

type Ask = { user: number; nonce: number; quantity: number };
type Op =
  | { kind: "reserve"; user: number; nonce: number; quantity: number }
  | { kind: "batch"; asks: Ask[] }
  | { kind: "cancel"; pick: number; asOwner: boolean }
  | { kind: "advance"; ms: number }
  | { kind: "reconfigure"; total: number; status: "on_sale" | "paused"; window: "open" | "ended" | "later" }
  | { kind: "pay"; pick: number; succeeded: boolean; eventId: number };

const askArb = fc.record({ user: fc.nat(4), nonce: fc.nat(9), quantity: fc.integer({ min: 1, max: 3 }) });

const opArb: fc.Arbitrary<Op> = fc.oneof(
  // Several requests in one transaction (the group commit's batches), nonces repeated within one too.
  {
    weight: 2,
    arbitrary: fc.record({
      kind: fc.constant("batch" as const),
      asks: fc.array(askArb, { minLength: 2, maxLength: 6 }),
    }),
  },
  {
    weight: 5,
    arbitrary: fc.record({
      kind: fc.constant("reserve" as const),
      user: fc.nat(4),
      nonce: fc.nat(9),
      quantity: fc.integer({ min: 1, max: 3 }),
    }),
  },
  { weight: 2, arbitrary: fc.record({ kind: fc.constant("cancel" as const), pick: fc.nat(), asOwner: fc.boolean() }) },
  { weight: 2, arbitrary: fc.record({ kind: fc.constant("advance" as const), ms: fc.nat(150_000) }) },
  {
    weight: 1,
    arbitrary: fc.record({
      kind: fc.constant("reconfigure" as const),
      total: fc.nat(12),
      status: fc.constantFrom("on_sale" as const, "paused" as const),
      window: fc.constantFrom("open" as const, "ended" as const, "later" as const),
    }),
  },
  {
    weight: 2,
    arbitrary: fc.record({
      kind: fc.constant("pay" as const),
      pick: fc.nat(),
      succeeded: fc.boolean(),
      eventId: fc.nat(5),
    }),
  },
);

const scenarioArb = fc.record({
  total: fc.nat(10),
  perUserLimit: fc.integer({ min: 1, max: 3 }),
  holdSeconds: fc.integer({ min: 10, max: 100 }),
  ops: fc.array(opArb, { minLength: 1, maxLength: 25 }),
});

/** Next legal status of a reservation after `from` (the order state machine). */
const NEXT: Record<string, string[]> = {
  held: ["paid", "expired", "cancelled"],
  expired: ["paid", "refund_required"],
  cancelled: ["paid", "refund_required"],
  paid: [],
  refund_required: [],
};

/** Checks the invariants: one expect a step, over a list of what broke (1,600 runs make many steps). */
function checkInvariants(engine: StockEngine, sql: SqlStorage, limit: number): void {
  expect(invariantBreaks(engine, sql, limit)).toEqual([]);
}

/** Each invariant that does not hold, with its figures (none when all hold). */
function invariantBreaks(engine: StockEngine, sql: SqlStorage, limit: number): string[] {
  const breaks: string[] = [];
  const check = (holds: boolean, what: () => string) => {
    if (!holds) breaks.push(what());
  };
  const state = engine.configuration.state();
  if (!state) throw new Error("not configured");
  const { total, available, held, sold } = state.stock;
  // 1. Stock adds up and nothing is negative.
  check(available + held + sold === total, () => `available ${available} + held ${held} + sold ${sold} != ${total}`);
  check(Math.min(available, held, sold) >= 0, () => `negative stock ${available}/${held}/${sold}`);
  const sums = sql
    .exec<{ status: string; q: number }>("SELECT status, SUM(quantity) AS q FROM reservations GROUP BY status")
    .toArray();
  const sum = (status: string) => sums.find((s) => s.status === status)?.q ?? 0;
  check(held === sum("held"), () => `held ${held} != held rows ${sum("held")}`);
  check(sold === sum("paid"), () => `sold ${sold} != paid rows ${sum("paid")}`);
  // 2. Per-user active quantity = held + paid, within the limit.
  const perUser = sql
    .exec<{ user_id: string; q: number }>(
      "SELECT user_id, SUM(quantity) AS q FROM reservations WHERE status IN ('held', 'paid') GROUP BY user_id",
    )
    .toArray();
  const quota = sql.exec<{ user_id: string; active: number }>("SELECT user_id, active FROM user_quota").toArray();
  for (const user of USERS) {
    const active = perUser.find((p) => p.user_id === user)?.q ?? 0;
    const counted = quota.find((q) => q.user_id === user)?.active ?? 0;
    check(counted === active, () => `${user}: quota ${counted} != active rows ${active}`);
    check(active <= limit, () => `${user}: active ${active} over the limit ${limit}`);
  }
  // 5. Every reservation's events follow the state machine; its status is its last event's.
  const events = engine.outbox.pendingEvents(10_000);
  const byReservation = new Map<string, string[]>();
  let lastSeq = 0;
  for (const { event } of events) {
    check(event.seq > lastSeq, () => `event seq ${event.seq} after ${lastSeq}`);
    lastSeq = event.seq;
    const list = byReservation.get(event.reservationId) ?? [];
    list.push(event.type.slice("reservation.".length));
    byReservation.set(event.reservationId, list);
  }
  for (const [id, statuses] of byReservation) {
    check(statuses[0] === "held", () => `${id}: first event ${statuses[0]}`);
    for (let i = 1; i < statuses.length; i++) {
      const [from, to] = [statuses[i - 1] ?? "", statuses[i] ?? ""];
      check(NEXT[from]?.includes(to) === true, () => `${id}: ${from} -> ${to}`);
    }
    const status = engine.holds.reservation(id)?.status;
    check(status === statuses.at(-1), () => `${id}: status ${status}, last event ${statuses.at(-1)}`);
  }
  return breaks;
}

/**
 * Runs a scenario, checking the invariants after every step; returns every answer in order. With
 * `restarts`, a new engine is made from the storage before every step, as an object restarted
 * between any two requests would be: its memory is read again from SQLite.
 */
async function runScenario(
  storage: TestStorage,
  scenario: { total: number; perUserLimit: number; holdSeconds: number; ops: Op[] },
  restarts = false,
): Promise<unknown[]> {
  await storage.deleteAll();
  let ids = 0;
  const newId = () => `00000000-0000-4000-8000-${String(++ids).padStart(12, "0")}`;
  let engine = new StockEngine(storage, newId);
  const transcript: unknown[] = [];
  let now = T0;
  const configure = (total: number, status: "on_sale" | "paused", window: "open" | "ended" | "later") =>
    engine.configuration.configure({
      sku: "prop",
      shard: 0,
      shards: 1,
      totalStock: total,
      perUserLimit: scenario.perUserLimit,
      holdSeconds: scenario.holdSeconds,
      status,
      startsAt: window === "later" ? now + 60_000 : null,
      endsAt: window === "ended" ? now - 1 : null,
    });
  expect(configure(scenario.total, "on_sale", "open").ok).toBe(true);
  const reservations: Reservation[] = [];
  const firstAnswerOfNonce = new Map<string, Reservation>();
  /** What each payment event id said first: its reservation and type. */
  const paymentEvents = new Map<string, string>();

  const checkAnswer = (
    answer: Outcome<{ reservation: Reservation; replayed: boolean }>,
    ask: Ask,
    available: number,
  ) => {
    const nonce = `n${ask.nonce}`;
    const first = firstAnswerOfNonce.get(nonce);
    const seen = answer.ok
      ? `${answer.value.replayed ? "replayed" : "held"} ${answer.value.reservation.id}`
      : (answer.code as string);
    // 3. A used nonce never holds again: a replay of its first hold, or a mismatch. A new nonce
    // holds, or is refused for a reason the state before the request justifies.
    const allowed = first
      ? [`replayed ${first.id}`, "IDEMPOTENCY_MISMATCH"]
      : [...(answer.ok ? [`held ${answer.value.reservation.id}`] : []), ...justifiedRefusals(available, ask.quantity)];
    expect(seen).toBeOneOf(allowed);
    // A refusal for the limit or the sale window carries the figures it was decided by (the edge
    // explains it with them, asking nothing more); no other answer carries them.
    expect(carriesItsFigures(answer, ask.quantity, scenario.perUserLimit, now)).toBe(true);
    outcomesSeen.add(`reserve ${first ? "used" : "new"} ${seen.split(" ")[0]}`);
    if (answer.ok && !first) {
      firstAnswerOfNonce.set(nonce, answer.value.reservation);
      reservations.push(answer.value.reservation);
    }
  };

  type Stock = NonNullable<ReturnType<StockEngine["configuration"]["state"]>>["stock"];
  /** One step per kind of operation; each checks its answer against the state before it. */
  const steps: { [K in Op["kind"]]: (op: Extract<Op, { kind: K }>, before: Stock) => void } = {
    reserve: (op, before) => reserveAsks([op], before),
    batch: (op, before) => reserveAsks(op.asks, before),
    cancel: (op) => {
      if (reservations.length === 0) return;
      const target = reservations[op.pick % reservations.length] as Reservation;
      const prior = engine.holds.reservation(target.id)?.status;
      const answer = engine.holds.cancel(target.id, op.asOwner ? target.userId : "stranger", now);
      transcript.push(answer);
      const seen = answer.ok ? "ok" : answer.code;
      // A stranger's cancel finds nothing; the owner's releases a live hold; anything else is a
      // repeat (200 unchanged) or a finished reservation (INVALID_STATE).
      const live = prior === "held" && target.expiresAt > now;
      expect(seen).toBeOneOf(!op.asOwner ? ["RESERVATION_NOT_FOUND"] : live ? ["ok"] : ["ok", "INVALID_STATE"]);
      outcomesSeen.add(`cancel ${op.asOwner ? (live ? "live" : "finished") : "stranger"} ${seen}`);
    },
    advance: (op) => {
      now += op.ms;
      transcript.push(engine.holds.expireDue(now));
      expect(engine.holds.nextExpiry() ?? Number.POSITIVE_INFINITY).toBeGreaterThan(now);
    },
    reconfigure: (op, before) => {
      const answer = configure(op.total, op.status, op.window);
      transcript.push(answer);
      expect(answer.ok).toBe(op.total >= before.held + before.sold);
    },
    pay: (op, before) => {
      if (reservations.length === 0) return;
      const target = reservations[op.pick % reservations.length] as Reservation;
      const eventId = `evt_${op.eventId}`;
      const type = op.succeeded ? "payment.succeeded" : "payment.failed";
      const answer = engine.payments.apply({ eventId, type, reservationId: target.id }, now);
      transcript.push(answer);
      // 6. A payment event id takes effect once, and is one event: saying something else, it is refused.
      const said = `${target.id} ${type}`;
      const first = paymentEvents.get(eventId);
      const seen = answer.ok ? (answer.value.replayed ? "replayed" : "applied") : answer.code;
      const wanted = first === undefined ? "applied" : first === said ? "replayed" : "IDEMPOTENCY_MISMATCH";
      // Only an applied event may move stock; a replay or a refusal leaves it as it was.
      const stock = engine.configuration.state()?.stock;
      expect({ seen, stock: seen === "applied" ? "may move" : stock }).toEqual({
        seen: wanted,
        stock: wanted === "applied" ? "may move" : before,
      });
      outcomesSeen.add(`pay ${seen}`);
      if (first === undefined) paymentEvents.set(eventId, said);
    },
  };
  const reserveAsks = (asks: Ask[], before: Stock) => {
    const answers = engine.holds.reserve(
      asks.map((a) => ({ userId: USERS[a.user] ?? "u0", nonce: `n${a.nonce}`, quantity: a.quantity })),
      now,
    );
    expect(answers).toHaveLength(asks.length);
    let available = before.available;
    asks.forEach((ask, i) => {
      const answer = answers[i];
      if (!answer) throw new Error("no answer");
      checkAnswer(answer, ask, available);
      if (answer.ok && !answer.value.replayed) available -= ask.quantity;
    });
    transcript.push(answers);
  };

  for (const op of scenario.ops) {
    if (restarts) engine = new StockEngine(storage, newId);
    const before = engine.configuration.state()?.stock;
    if (!before) throw new Error("not configured");
    (steps[op.kind] as (op: Op, before: Stock) => void)(op, before);
    checkInvariants(engine, storage.sql, scenario.perUserLimit);
    transcript.push(engine.configuration.state(), engine.holds.nextExpiry());
  }
  return transcript;
}

/** The refusals the state before a request justifies (the limit and the sale window by the figures they carry). */
function justifiedRefusals(available: number, quantity: number): string[] {
  return [
    "SALE_NOT_ACTIVE",
    "LIMIT_EXCEEDED",
    ...(available === 0 ? ["SOLD_OUT"] : []),
    ...(available > 0 && available < quantity ? ["INSUFFICIENT_STOCK"] : []),
  ];
}

/** A refusal's figures: the limit and the user's holding for LIMIT_EXCEEDED, the sale for SALE_NOT_ACTIVE. */
function carriesItsFigures(answer: Outcome<unknown>, quantity: number, perUserLimit: number, now: number): boolean {
  const code = answer.ok ? undefined : answer.code;
  const limit = answer.ok ? undefined : answer.limit;
  const sale = answer.ok ? undefined : answer.sale;
  const limitShown =
    code === "LIMIT_EXCEEDED"
      ? limit?.perUserLimit === perUserLimit && limit.held <= perUserLimit && limit.held + quantity > perUserLimit
      : limit === undefined;
  const saleShown = code === "SALE_NOT_ACTIVE" ? sale !== undefined && !isOnSale(sale, now) : sale === undefined;
  return limitShown && saleShown;
}

/** Every kind of answer the sequences produced: the branches above must all be exercised. */
const outcomesSeen = new Set<string>();
const EXERCISED = [
  "cancel finished INVALID_STATE",
  "cancel finished ok",
  "cancel live ok",
  "cancel stranger RESERVATION_NOT_FOUND",
  "pay IDEMPOTENCY_MISMATCH",
  "pay applied",
  "pay replayed",
  "reserve new INSUFFICIENT_STOCK",
  "reserve new LIMIT_EXCEEDED",
  "reserve new SALE_NOT_ACTIVE",
  "reserve new SOLD_OUT",
  "reserve new held",
  "reserve used IDEMPOTENCY_MISMATCH",
  "reserve used replayed",
];

/**
 * How many seeded sequences each property runs. Both builds of SQLite run the same stream from the
 * same seed: Node runs all of it, workerd the first tenth (the same code over its SQLite; the rest
 * would repeat the unit tier's work at workerd's cost, issue #56).
 */
export const RUNS = { sequences: 1_000, restarts: 300 };
export const WORKERD_RUNS = { sequences: 100, restarts: 30 };

/** The whole suite, with the stock objects' storage `place` gives. */
export function stockEngineSuite(place: StoragePlace, runs = RUNS): void {
  engineSequences(place, runs.sequences);
  engineRestarts(place, runs.restarts);
  engineUnits(place);
}

// The two long property runs are parts of their own, so the unit tier can run them on two cores.

export function engineSequences(place: StoragePlace, numRuns = RUNS.sequences): void {
  describe("stock engine, random operation sequences", () => {
    it(`keeps the invariants after every step of ${numRuns.toLocaleString("en")} seeded sequences`, async () => {
      await place("engine-property", async (storage) => {
        await fc.assert(
          fc.asyncProperty(scenarioArb, async (scenario) => void (await runScenario(storage, scenario))),
          { numRuns, seed: 20261129, endOnFailure: false },
        );
      });
      // The checks above depend on the model's state: each kind of answer must have come up.
      expect([...outcomesSeen].sort()).toEqual(EXERCISED);
    }, 120_000);
  });
}

export function engineRestarts(place: StoragePlace, numRuns = RUNS.restarts): void {
  describe("stock engine, random operation sequences", () => {
    it("decides the same when its memory is read again from SQLite before every step (a restart)", async () => {
      await place("engine-restarts", async (storage) => {
        await fc.assert(
          fc.asyncProperty(scenarioArb, async (scenario) => {
            const kept = await runScenario(storage, scenario);
            const restarted = await runScenario(storage, scenario, true);
            expect(restarted).toEqual(kept);
          }),
          { numRuns, seed: 20261130, endOnFailure: false },
        );
      });
    }, 120_000);
  });
}

export function engineUnits(place: StoragePlace): void {
  describe("stock engine memory", () => {
    it("forgets what a transaction that threw had decided: memory stays what SQLite holds", async () => {
      await place("engine-rollback", async (storage) => {
        let ids = 0;
        const newId = () => `00000000-0000-4000-8000-${String(++ids).padStart(12, "0")}`;
        const engine = new StockEngine(storage, newId);
        engine.configuration.configure({ sku: "rb", shard: 0, shards: 1, totalStock: 5, perUserLimit: 1 });
        expect(engine.holds.reserve([{ userId: "a", nonce: "na", quantity: 1 }], T0)[0]?.ok).toBe(true);
        const before = engine.configuration.state();
        // The next hold's id is taken already (as a bug would make it): its INSERT fails at the commit.
        const next = `rb.0.00000000000040008000${String(ids + 1).padStart(12, "0")}`;
        storage.sql.exec(
          "INSERT INTO reservations (id, user_id, quantity, status, nonce, created_at, expires_at, updated_at, seq) VALUES (?, 'x', 1, 'paid', NULL, 0, 0, 0, 0)",
          next,
        );
        expect(() => engine.holds.reserve([{ userId: "b", nonce: "nb", quantity: 1 }], T0)).toThrow();
        // Nothing of the failed batch stays in memory: counts, seq, quota, nonce and expiry as before.
        expect(engine.configuration.state()).toEqual(before);
        expect(engine.configuration.state()).toEqual(new StockEngine(storage, newId).configuration.state());
        const quota = storage.sql.exec("SELECT COUNT(*) AS n FROM user_quota WHERE user_id = 'b'").one().n;
        expect(quota).toBe(0);
        storage.sql.exec("DELETE FROM reservations WHERE id = ?", next);
        // The same request is decided afresh: held once, and user b's limit counts that one hold only.
        const again = engine.holds.reserve([{ userId: "b", nonce: "nb", quantity: 1 }], T0)[0];
        expect(again).toMatchObject({ ok: true, value: { replayed: false } });
        expect(engine.holds.reserve([{ userId: "b", nonce: "nb2", quantity: 1 }], T0)[0]).toMatchObject({
          ok: false,
          code: "LIMIT_EXCEEDED",
        });
        expect(engine.configuration.state()?.stock).toMatchObject({ held: 2, available: 3 });
        expect(engine.holds.nextExpiry()).toBe(T0 + 900_000);
      });
    });
  });

  describe("stock engine quotas", () => {
    it("reads each batch's users' quotas from SQLite: a user who bought before is over the limit", async () => {
      await place("engine-quotas", async (storage) => {
        const engine = new StockEngine(storage, () => crypto.randomUUID());
        engine.configuration.configure({ sku: "q", shard: 0, shards: 1, totalStock: 10, perUserLimit: 1 });
        // As a pruned sale leaves a buyer: no reservation row, a quota row (and the unit sold).
        storage.sql.exec("INSERT INTO user_quota (user_id, active) VALUES ('buyer-1', 1)");
        storage.sql.exec("UPDATE sku SET sold = 1 WHERE id = 1");
        engine.forget();
        const answers = engine.holds.reserve(
          [
            { userId: "buyer-1", nonce: "q1", quantity: 1 },
            { userId: "new-1", nonce: "q2", quantity: 1 },
          ],
          T0,
        );
        expect(answers.map((a) => (a.ok ? "ok" : a.code))).toEqual(["LIMIT_EXCEEDED", "ok"]);
      });
    });
  });

  describe("stock engine retention", () => {
    it("forgets a decided draw's tokens once they expired, and keeps its entries", async () => {
      await place("engine-draw-tokens", async (storage) => {
        const engine = new StockEngine(storage, () => crypto.randomUUID());
        const start = T0 + 60_000;
        const window = 2_000;
        engine.configuration.configure(
          { sku: "dt", shard: 0, shards: 1, totalStock: 1, perUserLimit: 1, startsAt: start, openingWindowMs: window },
          T0,
        );
        const tokens = ["t1", "t2", "t3"].map((nonce, i) => ({ userId: `u${i % 2}`, nonce, quantity: 1 }));
        expect(engine.holds.reserve(tokens, start + 1).map((a) => (a.ok ? "ok" : a.code))).toEqual([
          "DRAW_PENDING",
          "DRAW_PENDING",
          "DRAW_PENDING",
        ]);
        const seed = engine.draw.seedForDecision(start) ?? "";
        engine.drawDecision.decide(
          start,
          rankEntrants(seed, "dt", engine.drawDecision.close(start, start + window)),
          start + window,
        );
        const prune = (replayableSince: number) =>
          engine.retention.prune({ watermark: 0, replayableSince, expiredBefore: 0, now: replayableSince, limit: 10 });
        const digest = (since: number) => engine.retention.spentNonces(since, 0).nonces.length;
        // Until the window closed a token lifetime ago, its tokens may come back: kept, and spent.
        expect(prune(start + window).drawTokens).toBe(0);
        expect(digest(start + window)).toBeGreaterThanOrEqual(3);
        // After it they have expired: gone, and the draw still shows its 2 entrants.
        expect(prune(start + window + 1).drawTokens).toBe(3);
        expect(storage.sql.exec("SELECT COUNT(*) AS n FROM draw_tokens").one().n).toBe(0);
        expect(engine.draw.info()).toMatchObject({ entrants: 2, decidedAt: start + window });
      });
    });
  });

  describe("stock engine statements", () => {
    // Small batches bind each value, large ones a JSON array (ledger.ts, bindsEach): both must decide
    // and store the same. The large batch passes every limit (150 nonces, 120 users, over 11 holds).
    it("decides and stores a batch the same whether its values are bound one by one or as JSON", async () => {
      const first = Array.from({ length: 140 }, (_, i) => ({
        userId: `b${i % 120}`,
        nonce: `n${i}`,
        quantity: 1 + (i % 2),
      }));
      // Then five replays of earlier requests, and five of their nonces used by another user.
      const again = first.slice(0, 10).map((a, i) => (i < 5 ? a : { ...a, userId: `other-${i}` }));
      const asks = [...first, ...again];
      const decide = (name: string, size: number) =>
        place(name, async (storage) => {
          let n = 0;
          const engine = new StockEngine(storage, () => `id-${++n}`);
          engine.configuration.configure({ sku: "bind", shard: 0, shards: 1, totalStock: 170, perUserLimit: 2 });
          const answers: string[] = [];
          for (let i = 0; i < asks.length; i += size) {
            for (const a of engine.holds.reserve(asks.slice(i, i + size), T0 + i)) {
              answers.push(a.ok ? `${a.value.reservation.id}:${a.value.replayed}` : a.code);
            }
          }
          const rows = (query: string) => storage.sql.exec(query).toArray();
          return {
            answers,
            reservations: rows("SELECT id, user_id, quantity, status, nonce, seq FROM reservations ORDER BY id"),
            quotas: rows("SELECT user_id, active FROM user_quota ORDER BY user_id"),
            stock: engine.configuration.state()?.stock,
          };
        });
      const one = await decide("bind-each", 5);
      const json = await decide("bind-json", 150);
      const count = (code: string) => one.answers.filter((a) => a.endsWith(code)).length;
      expect([count(":true"), count("IDEMPOTENCY_MISMATCH")]).toEqual([5, 5]);
      expect(count("LIMIT_EXCEEDED")).toBeGreaterThan(0);
      expect(count("INSUFFICIENT_STOCK") + count("SOLD_OUT")).toBeGreaterThan(0);
      expect(json).toEqual(one);
    });
  });

  describe("stock engine event times", () => {
    it("formats them as toISOString does, for times in the same second as the last two and not", () => {
      const near = fc
        .integer({ min: 0, max: 4_102_444_800_000 })
        .chain((ms) => fc.tuple(fc.constant(ms), fc.nat(2_500)));
      fc.assert(
        fc.property(near, fc.double({ min: 0, max: 4.1e12, noNaN: true }), ([ms, later], fractional) => {
          for (const t of [ms, ms + later, ms, fractional]) expect(isoTime(t)).toBe(new Date(t).toISOString());
        }),
        { seed: 31, numRuns: 2_000 },
      );
    });
  });

  describe("stock engine outbox", () => {
    it("keeps a transaction's events in one row (up to a message's 32), sends them in order, and forgets a row once all of it is sent", async () => {
      await place("engine-outbox", async (storage) => {
        const engine = new StockEngine(storage, () => crypto.randomUUID());
        engine.configuration.configure({ sku: "ob", shard: 0, shards: 1, totalStock: 10, perUserLimit: 5 });
        engine.outbox.markSent(engine.outbox.pendingEvents(100).at(-1)?.seq ?? 0); // the configuration's own event
        const ask = (user: string, nonce: string) => ({ userId: user, nonce, quantity: 1 });
        engine.holds.reserve([ask("a", "n1"), ask("b", "n2"), ask("c", "n3")], T0);
        engine.holds.reserve([ask("d", "n4"), ask("e", "n5")], T0);
        const rows = () => storage.sql.exec("SELECT COUNT(*) AS n FROM outbox_events").one().n;
        expect(rows()).toBe(2);
        const all = engine.outbox.pendingEvents(100);
        expect(all.map((e) => e.event.userId)).toEqual(["a", "b", "c", "d", "e"]);
        expect(all.map((e) => e.seq)).toEqual([...all.map((e) => e.seq)].sort((x, y) => x - y));
        // Whole rows: asking for one event gives the first transaction's three.
        expect(engine.outbox.pendingEvents(1).map((e) => e.event.userId)).toEqual(["a", "b", "c"]);
        // Part of a row sent: the row stays, to be sent whole again (at least once).
        const seqOf = (i: number) => all[i]?.seq ?? 0;
        engine.outbox.markSent(seqOf(1));
        expect(engine.outbox.pendingEvents(100)).toHaveLength(5);
        engine.outbox.markSent(seqOf(2));
        expect(engine.outbox.pendingEvents(100).map((e) => e.event.userId)).toEqual(["d", "e"]);
        engine.outbox.markSent(seqOf(4));
        expect([engine.outbox.pendingEvents(100), rows()]).toEqual([[], 0]);
      });
    });

    it('says the size held on a sized SKU\'s events, leaves it out without sizes, and reads "variant": null', async () => {
      await place("engine-variant-null", async (storage) => {
        const plain = new StockEngine(storage, () => crypto.randomUUID());
        plain.configuration.configure({ sku: "vn", shard: 0, shards: 1, totalStock: 5, perUserLimit: 5 });
        plain.holds.reserve([{ userId: "a", nonce: "na", quantity: 1 }], T0);
        const events = plain.outbox.pendingEvents(100).filter((e) => e.event.type === "reservation.held");
        // Left out: the release before this one refuses null (docs/DEPLOY.md, events in the queue).
        expect(events.map((e) => "variant" in e.event)).toEqual([false]);
        // Taken as no size once a later release writes it (API.md v1.4: "variant": id | null).
        const withNull = events.map((e) => ({ ...e.event, variant: null }));
        expect(withNull.map((e) => OrderEventSchema.safeParse(e).success)).toEqual([true]);
      });
      await place("engine-variant-size", async (storage) => {
        const sized = new StockEngine(storage, () => crypto.randomUUID());
        sized.configuration.configure({
          sku: "vs",
          shard: 0,
          shards: 1,
          perUserLimit: 5,
          variants: [{ id: "m", totalStock: 2 }],
        });
        sized.holds.reserve([{ userId: "a", nonce: "na", quantity: 1, variants: ["m"] }], T0);
        const events = sized.outbox.pendingEvents(100).filter((e) => e.event.type === "reservation.held");
        expect(events.map((e) => e.event.variant)).toEqual(["m"]);
      });
    });

    it("dates every event after a hold's with the hold's time, so D1 keeps it as the order's createdAt whichever comes first", async () => {
      await place("engine-held-at", async (storage) => {
        const engine = new StockEngine(storage, () => crypto.randomUUID());
        engine.configuration.configure({ sku: "ha", shard: 0, shards: 1, totalStock: 10, perUserLimit: 5 });
        engine.outbox.markSent(engine.outbox.pendingEvents(100).at(-1)?.seq ?? 0);
        const [answer] = engine.holds.reserve([{ userId: "a", nonce: "n1", quantity: 1 }], T0);
        const id = answer?.ok ? answer.value.reservation.id : "";
        expect(engine.holds.cancel(id, "a", T0 + 5_000).ok).toBe(true);
        const events = engine.outbox.pendingEvents(100).map((e) => e.event);
        expect(events.map((e) => [e.type, e.occurredAt, e.heldAt])).toEqual([
          ["reservation.held", new Date(T0).toISOString(), undefined],
          ["reservation.cancelled", new Date(T0 + 5_000).toISOString(), new Date(T0).toISOString()],
        ]);
      });
    });

    /** A configured object with an empty outbox, for planting the outbox tables of objects from before. */
    const withEmptyOutbox = (name: string, fn: (storage: TestStorage) => void) =>
      place(name, async (storage) => {
        new StockEngine(storage, () => crypto.randomUUID()).configuration.configure({
          sku: name,
          shard: 0,
          shards: 1,
          totalStock: 10,
          perUserLimit: 5,
        });
        storage.sql.exec("DELETE FROM outbox_events");
        storage.sql.exec("DROP TABLE schema_version"); // objects from before numbered steps have none
        fn(storage);
      });

    it("moves events of the per-event outbox (objects from before) into one row, in order", async () => {
      await withEmptyOutbox("engine-outbox-migration", (storage) => {
        const sql = storage.sql;
        sql.exec("CREATE TABLE outbox (seq INTEGER PRIMARY KEY, event TEXT NOT NULL)");
        for (const seq of [7, 5, 6])
          sql.exec("INSERT INTO outbox (seq, event) VALUES (?, ?)", seq, JSON.stringify({ seq }));
        const engine = new StockEngine(storage, () => crypto.randomUUID());
        expect(engine.outbox.pendingEvents(100).map((e) => [e.seq, e.event.seq])).toEqual([
          [5, 5],
          [6, 6],
          [7, 7],
        ]);
        expect(sql.exec("SELECT COUNT(*) AS n FROM sqlite_master WHERE name = 'outbox'").one().n).toBe(0);
      });
    });

    it("splits rows of the per-transaction outbox (objects from before) into rows of a message's events, in order", async () => {
      await withEmptyOutbox("engine-outbox-batch-migration", (storage) => {
        const sql = storage.sql;
        sql.exec(
          "CREATE TABLE outbox_batch (first_seq INTEGER PRIMARY KEY, last_seq INTEGER NOT NULL, events TEXT NOT NULL)",
        );
        // Two transactions: seqs 1–70 (more than two messages' worth) and 71–72.
        const row = (from: number, to: number) =>
          JSON.stringify(Array.from({ length: to - from + 1 }, (_, i) => [from + i, { seq: from + i }]));
        sql.exec("INSERT INTO outbox_batch VALUES (1, 70, ?), (71, 72, ?)", row(1, 70), row(71, 72));
        const engine = new StockEngine(storage, () => crypto.randomUUID());
        expect(engine.outbox.pendingEvents(1000).map((e) => e.seq)).toEqual(
          Array.from({ length: 72 }, (_, i) => i + 1),
        );
        expect(engine.outbox.pendingRows(1000).map((r) => [r.count, r.lastSeq])).toEqual([
          [32, 32],
          [32, 64],
          [6, 70],
          [2, 72],
        ]);
        expect(sql.exec("SELECT COUNT(*) AS n FROM sqlite_master WHERE name = 'outbox_batch'").one().n).toBe(0);
      });
    });
  });
}
