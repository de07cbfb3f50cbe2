import { homeShard } from "../../durable-objects/shared/shard-name";
import { GATHER_GROUPS } from "../../src/edge/gather-name";
import { MAX_BATCH } from "../../src/edge/group-commit";
import { seededRandom } from "../../src/harness/seeded-random";

/**
 * A discrete-event simulation of a reservation spike on Cloudflare: shoppers arrive at isolates in
 * colos, each isolate coalesces reservations per stock shard as src/edge/group-commit.ts does (one
 * RPC in flight per shard per isolate; when it answers, the next batch takes whatever queued, up to
 * MAX_BATCH), and each stock object serves its calls one at a time at a + b·batch µs, never faster
 * than the documented requests/s per object. Pure TypeScript and seeded, so the unit test runs it in
 * workerd and the bench, the report and `npm run capacity` all get the same figures from one input.
 */

/** group-commit.ts's MAX_WAIT_MS: a reservation not answered by then answers 503 BUSY. */
export const MAX_WAIT_MS = 10_000;

/** The stock object's cost per call, and the edge's per request, in µs of one thread. */
export interface Costs {
  /** Fixed cost of one reserve RPC, whatever its batch. */
  aUs: number;
  /** Cost of each reservation in it. */
  bUs: number;
  /** Edge work per reservation before it joins the shard's queue (JWT, token, checks, the response). */
  edgeUs: number;
  /** Calls/s one object takes at most (Cloudflare's documented soft limit); Infinity for none. */
  maxCallsPerSec: number;
}

/** Colo-to-object round trips: lognormal per colo (median, p99), times a lognormal jitter per call. */
export interface Rtt {
  medianMs: number;
  p99Ms: number;
  /** σ of the per-call multiplier (ln scale): queueing and routing noise on one colo's path. */
  jitterSigma: number;
}

export interface Spike {
  shoppers: number;
  /** The spike's length: arrivals are Poisson at shoppers ÷ seconds for that long. */
  seconds: number;
  isolates: number;
  colos: number;
  shards: number;
  rtt: Rtt;
  seed: number;
  /** The gathering tier between the isolates and the stock objects (absent: isolates call the objects). */
  tier?: Tier | undefined;
}

/**
 * The gathering tier (issue 44): one gatherer object per shard and group of colos, between the
 * isolates and the stock object. Isolates still coalesce their own requests, one call in flight per
 * gatherer; each gatherer coalesces the calls of all its isolates into batches to the stock object,
 * one in flight, as group-commit.ts does (it never splits an isolate's call across two batches).
 */
export interface Tier {
  /** Gatherers per shard: colo c sends to gatherer c mod this (the gatherer sits at colo g's place). */
  perShard: number;
  /** Isolate-to-gatherer round trips (lognormal per colo, times the per-call jitter). */
  rtt: Rtt;
  /** The gatherer's thread per call it receives, a + b·reservations µs, and per batch it sends, µs. */
  inUs: number;
  inPerReservationUs: number;
  outUs: number;
  /** Calls/s one gatherer takes at most (it is a Durable Object too). */
  maxCallsPerSec: number;
}

export interface BatchStats {
  calls: number;
  mean: number;
  p50: number;
  p99: number;
  max: number;
  /** Calls by batch size, in buckets 1, 2–3, 4–7, 8–15, 16–31, 32–63, 64. */
  histogram: { bucket: string; calls: number }[];
}

export interface SpikeResult {
  shards: number;
  offeredPerSec: number;
  /** Holds answered per second while the spike lasts (its second half, once batches have formed). */
  sustainedPerSec: number;
  /** Time from the request reaching the edge to its hold there; 503s count as never (∞). */
  holdP50Ms: number | null;
  holdP99Ms: number | null;
  holdMaxMs: number | null;
  busy: number;
  batch: BatchStats;
  /** The busiest object's share of the spike's second half spent serving calls. */
  objectBusyMaxPct: number;
  /** The longest a batch was out (group-commit.ts forgets one after MAX_WAIT_MS; not modelled, so shown). */
  maxFlightMs: number;
  /** The gathering tier's side, when the spike has one. */
  tier: TierStats | null;
}

export interface TierStats {
  /** Calls the gatherers received from isolates, and their mean reservations. */
  callsIn: number;
  meanIn: number;
  /** The busiest gatherer's share of the spike's second half spent on its calls. */
  busyMaxPct: number;
}

function normal(rand: () => number): number {
  const u = 1 - rand();
  return Math.sqrt(-2 * Math.log(u)) * Math.cos(2 * Math.PI * rand());
}

/** z of the 99th percentile of the standard normal. */
const Z99 = 2.3263;

function quantile(sorted: ArrayLike<number>, q: number): number {
  if (sorted.length === 0) return Number.NaN;
  return sorted[Math.min(sorted.length - 1, Math.floor(q * sorted.length))] as number;
}

const BUCKETS = [1, 2, 4, 8, 16, 32, 64, 65];
function batchStats(sizes: Int32Array): BatchStats {
  const sorted = Int32Array.from(sizes).sort();
  const histogram = BUCKETS.slice(0, -1).map((lo, i) => {
    const hi = (BUCKETS[i + 1] as number) - 1;
    return { bucket: lo === hi ? String(lo) : `${lo}–${hi}`, calls: sizes.filter((s) => s >= lo && s <= hi).length };
  });
  return {
    calls: sizes.length,
    mean: sizes.reduce((s, x) => s + x, 0) / Math.max(1, sizes.length),
    p50: quantile(sorted, 0.5),
    p99: quantile(sorted, 0.99),
    max: sorted[sorted.length - 1] ?? 0,
    histogram,
  };
}

/** User ids of a spike's shoppers, made once per (seed, count): the runs of one scenario share them. */
const userIds = new Map<string, string[]>();
function shoppersOf(seed: number, n: number): string[] {
  const key = `${seed}:${n}`;
  let ids = userIds.get(key);
  if (!ids) {
    ids = Array.from({ length: n }, (_, i) => `u${seed}-${i}`);
    userIds.set(key, ids);
  }
  return ids;
}

/**
 * The spike: open-loop arrivals; an isolate's own thread is taken as never the bottleneck (its edge
 * work is latency only). Calls are kept as columns of typed arrays and queues as linked lists through
 * them, so a run of 300,000 shoppers allocates almost nothing per event.
 *
 * Servers are serial FIFOs: the stock objects (one per shard) and, with the tier, the gatherers. A
 * call is an isolate's batch (level 1, to its gatherer or, without the tier, to the object) or a
 * gatherer's batch (level 2, a run of level-1 calls, to the object). Each call goes through three
 * events: it reaches its server, the server is done with it, its answer is back with the sender.
 */
export function simulateSpike(spike: Spike, costs: Costs): SpikeResult {
  const rand = seededRandom(spike.seed);
  const { shoppers: n, shards, isolates, tier } = spike;
  const ids = shoppersOf(spike.seed, n);
  const spanUs = spike.seconds * 1e6;
  const waitUs = MAX_WAIT_MS * 1e3;
  const lognormal = (rtt: Rtt) => {
    const sigma = Math.log(rtt.p99Ms / rtt.medianMs) / Z99;
    return Array.from({ length: spike.colos }, () => rtt.medianMs * 1e3 * Math.exp(sigma * normal(rand)));
  };
  const coloRttUs = lognormal(spike.rtt);
  // Drawn only with the tier, so a spike without it draws exactly the numbers it always did.
  const gatherRttUs = tier ? lognormal(tier.rtt) : [];
  const perCap = (cap: number) => (Number.isFinite(cap) ? 1e6 / cap : 0);
  const minCallUs = perCap(costs.maxCallsPerSec);
  const gatherMinCallUs = tier ? perCap(tier.maxCallsPerSec) : 0;
  const perShard = tier ? Math.max(1, Math.min(tier.perShard, spike.colos)) : 0;

  // Shoppers: when each reached the edge, its hold time, and the next shopper in its queue.
  const arrival = new Float64Array(n);
  const hold = new Float64Array(n).fill(Number.POSITIVE_INFINITY);
  const nextShopper = new Int32Array(n).fill(-1);
  // One queue per (isolate, shard), as group-commit.ts keeps one per shard in each isolate.
  const queues = isolates * shards;
  const qHead = new Int32Array(queues).fill(-1);
  const qTail = new Int32Array(queues).fill(-1);
  const inFlight = new Uint8Array(queues);
  // Calls: at most one per shopper at each level.
  const maxCalls = tier ? 2 * n : n;
  const cT = new Float64Array(maxCalls);
  const cKind = new Uint8Array(maxCalls); // 0: reaches its server, 1: the server is done, 2: the answer is back
  const cLevel = new Uint8Array(maxCalls); // 1: an isolate's, 2: a gatherer's
  const cFrom = new Int32Array(maxCalls); // the isolate's queue, or the gatherer
  const cServer = new Int32Array(maxCalls); // < shards: that shard's object; else shards + gatherer
  const cFirst = new Int32Array(maxCalls); // first shopper (level 1) or first level-1 call (level 2)
  const cCount = new Int32Array(maxCalls); // reservations in it
  const cParts = new Int32Array(maxCalls); // level 2: level-1 calls in it
  const cRtt = new Float64Array(maxCalls);
  const cSent = new Float64Array(maxCalls);
  const cNext = new Int32Array(maxCalls).fill(-1); // the next call in its server's queue, or its gatherer's
  let calls = 0;
  // Servers: the objects, then the gatherers (shard × perShard), each a FIFO of the calls that
  // reached it while it served another.
  const gatherers = shards * perShard;
  const servers = shards + gatherers;
  const sHead = new Int32Array(servers).fill(-1);
  const sTail = new Int32Array(servers).fill(-1);
  const sBusy = new Uint8Array(servers);
  const sBusyUs = new Float64Array(servers);
  // Each gatherer's line of level-1 calls waiting for its next batch, and whether a batch is out.
  const gHead = new Int32Array(gatherers).fill(-1);
  const gTail = new Int32Array(gatherers).fill(-1);
  const gInFlight = new Uint8Array(gatherers);
  let callsIn = 0;
  let reservationsIn = 0;
  // The pending call events, a binary min-heap of call ids by cT.
  const heap = new Int32Array(maxCalls);
  let heapSize = 0;
  const push = (c: number) => {
    const t = cT[c] as number;
    let i = heapSize++;
    while (i > 0) {
      const p = (i - 1) >> 1;
      const pc = heap[p] as number;
      if ((cT[pc] as number) <= t) break;
      heap[i] = pc;
      i = p;
    }
    heap[i] = c;
  };
  const pop = (): number => {
    const top = heap[0] as number;
    const last = heap[--heapSize] as number;
    const t = cT[last] as number;
    let i = 0;
    for (;;) {
      const l = 2 * i + 1;
      if (l >= heapSize) break;
      const r = l + 1;
      const c = r < heapSize && (cT[heap[r] as number] as number) < (cT[heap[l] as number] as number) ? r : l;
      const cc = heap[c] as number;
      if ((cT[cc] as number) >= t) break;
      heap[i] = cc;
      i = c;
    }
    heap[i] = last;
    return top;
  };
  let busy = 0;
  let maxFlightUs = 0;
  const sizes = new Int32Array(n);
  let objectCalls = 0;
  const at = (c: number, t: number, kind: number) => {
    cT[c] = t;
    cKind[c] = kind;
    push(c);
  };

  const serve = (c: number, now: number) => {
    const s = cServer[c] as number;
    sBusy[s] = 1;
    const count = cCount[c] as number;
    let cost: number;
    if (s < shards) cost = Math.max(costs.aUs + costs.bUs * count, minCallUs);
    else if (cLevel[c] === 1)
      cost = Math.max((tier as Tier).inUs + (tier as Tier).inPerReservationUs * count, gatherMinCallUs);
    else cost = (tier as Tier).outUs; // the gatherer sending its batch
    // Busy time inside the spike's second half only, so a backlog drained after it does not count.
    const overlap = Math.min(now + cost, spanUs) - Math.max(now, spanUs / 2);
    if (overlap > 0) sBusyUs[s] = (sBusyUs[s] as number) + overlap;
    at(c, now + cost, 1);
  };
  const arrive = (c: number, now: number) => {
    const s = cServer[c] as number;
    if (sBusy[s]) {
      if ((sTail[s] as number) >= 0) cNext[sTail[s] as number] = c;
      else sHead[s] = c;
      sTail[s] = c;
    } else serve(c, now);
  };
  // A gatherer's batch: the calls waiting in its line, whole, up to MAX_BATCH reservations (at least
  // one call). Sending it takes the gatherer's thread first, so it queues there like a call.
  const gather = (g: number, now: number) => {
    const first = gHead[g] as number;
    let last = first;
    let count = cCount[first] as number;
    let parts = 1;
    for (let k = cNext[last] as number; k >= 0 && count + (cCount[k] as number) <= MAX_BATCH; k = cNext[k] as number) {
      count += cCount[k] as number;
      parts++;
      last = k;
    }
    gHead[g] = cNext[last] as number;
    if (gHead[g] < 0) gTail[g] = -1;
    cNext[last] = -1;
    gInFlight[g] = 1;
    const c = calls++;
    sizes[objectCalls++] = count;
    const colo = g % perShard; // the gatherer sits where its first colo is
    cLevel[c] = 2;
    cFrom[c] = g;
    cServer[c] = shards + g;
    cFirst[c] = first;
    cCount[c] = count;
    cParts[c] = parts;
    cRtt[c] = (coloRttUs[colo] as number) * Math.exp(spike.rtt.jitterSigma * normal(rand));
    cSent[c] = now;
    cNext[c] = -1;
    arrive(c, now);
  };
  // group-commit.ts's #sendBatch: whatever waits, up to MAX_BATCH; who waited past MAX_WAIT_MS has left (503).
  const send = (q: number, now: number) => {
    let s = qHead[q] as number;
    while (s >= 0 && now - (arrival[s] as number) - costs.edgeUs >= waitUs) {
      busy++;
      s = nextShopper[s] as number;
    }
    if (s < 0) {
      qHead[q] = qTail[q] = -1;
      return;
    }
    const first = s;
    let count = 1;
    while (count < MAX_BATCH && (nextShopper[s] as number) >= 0) {
      s = nextShopper[s] as number;
      count++;
    }
    qHead[q] = nextShopper[s] as number;
    if (qHead[q] < 0) qTail[q] = -1;
    nextShopper[s] = -1;
    inFlight[q] = 1;
    const c = calls++;
    const shard = q % shards;
    const colo = Math.floor(q / shards) % spike.colos;
    let rttUs: number;
    if (tier) {
      rttUs = (gatherRttUs[colo] as number) * Math.exp(tier.rtt.jitterSigma * normal(rand));
      cServer[c] = shards + shard * perShard + (colo % perShard);
    } else {
      sizes[objectCalls++] = count;
      rttUs = (coloRttUs[colo] as number) * Math.exp(spike.rtt.jitterSigma * normal(rand));
      cServer[c] = shard;
    }
    cLevel[c] = 1;
    cFrom[c] = q;
    cFirst[c] = first;
    cCount[c] = count;
    cRtt[c] = rttUs;
    cSent[c] = now;
    cNext[c] = -1;
    at(c, now + rttUs / 2, 0);
  };

  let next = 0;
  const meanGapUs = spanUs / n;
  let nextAt = -Math.log(1 - rand()) * meanGapUs;
  for (;;) {
    if (next < n && (heapSize === 0 || nextAt <= (cT[heap[0] as number] as number))) {
      // A shopper reaches an isolate; after the edge's own work, it joins its home shard's queue.
      const i = next++;
      arrival[i] = nextAt;
      const isolate = Math.floor(rand() * isolates);
      const q = isolate * shards + homeShard(ids[i] as string, shards);
      const now = nextAt + costs.edgeUs;
      nextAt += -Math.log(1 - rand()) * meanGapUs;
      if ((qTail[q] as number) >= 0) nextShopper[qTail[q] as number] = i;
      else qHead[q] = i;
      qTail[q] = i;
      if (!inFlight[q]) send(q, now);
      continue;
    }
    if (heapSize === 0) break;
    const c = pop();
    const now = cT[c] as number;
    const kind = cKind[c];
    if (kind === 0) arrive(c, now);
    else if (kind === 1) {
      const s = cServer[c] as number;
      sBusy[s] = 0;
      const queued = sHead[s] as number;
      if (queued >= 0) {
        sHead[s] = cNext[queued] as number;
        if (sHead[s] < 0) sTail[s] = -1;
        cNext[queued] = -1;
        serve(queued, now);
      }
      if (s < shards)
        at(c, now + (cRtt[c] as number) / 2, 2); // the object's answer goes back
      else if (cLevel[c] === 2) {
        // The gatherer's batch leaves for the object.
        cServer[c] = Math.floor((s - shards) / perShard);
        at(c, now + (cRtt[c] as number) / 2, 0);
      } else {
        // An isolate's call joins its gatherer's line; the gatherer sends it if nothing is out.
        const g = s - shards;
        callsIn++;
        reservationsIn += cCount[c] as number;
        if ((gTail[g] as number) >= 0) cNext[gTail[g] as number] = c;
        else gHead[g] = c;
        gTail[g] = c;
        if (!gInFlight[g]) gather(g, now);
      }
    } else if (cLevel[c] === 2) {
      // The object's answers are back at the gatherer: each isolate's call gets its own.
      let k = cFirst[c] as number;
      for (let p = 0; p < (cParts[c] as number); p++) {
        const nk = cNext[k] as number;
        cNext[k] = -1;
        at(k, now + (cRtt[k] as number) / 2, 2);
        k = nk;
      }
      const g = cFrom[c] as number;
      gInFlight[g] = 0;
      if ((gHead[g] as number) >= 0) gather(g, now);
    } else {
      maxFlightUs = Math.max(maxFlightUs, now - (cSent[c] as number));
      let s = cFirst[c] as number;
      for (let k = 0; k < (cCount[c] as number); k++) {
        const took = now - (arrival[s] as number);
        // A waiter whose own timer ran out answered 503 (its hold may still have been made).
        if (took < waitUs + costs.edgeUs) hold[s] = took;
        else busy++;
        s = nextShopper[s] as number;
      }
      const q = cFrom[c] as number;
      inFlight[q] = 0;
      if ((qHead[q] as number) >= 0) send(q, now);
    }
  }

  // The sustained rate: holds answered in the spike's second half (batches formed, backlog included).
  let inWindow = 0;
  for (let i = 0; i < n; i++) {
    const done = (arrival[i] as number) + (hold[i] as number);
    if (done >= spanUs / 2 && done < spanUs) inWindow++;
  }
  hold.sort();
  let maxHold = Number.NaN;
  for (let i = n - 1; i >= 0; i--)
    if (Number.isFinite(hold[i])) {
      maxHold = hold[i] as number;
      break;
    }
  let objectBusy = 0;
  let gatherBusy = 0;
  for (let s = 0; s < servers; s++)
    if (s < shards) objectBusy = Math.max(objectBusy, sBusyUs[s] as number);
    else gatherBusy = Math.max(gatherBusy, sBusyUs[s] as number);
  return {
    shards,
    offeredPerSec: n / spike.seconds,
    sustainedPerSec: inWindow / (spike.seconds / 2),
    holdP50Ms: ms(quantile(hold, 0.5)),
    holdP99Ms: ms(quantile(hold, 0.99)),
    holdMaxMs: ms(maxHold),
    busy,
    batch: batchStats(sizes.subarray(0, objectCalls)),
    objectBusyMaxPct: (100 * objectBusy) / (spanUs / 2),
    maxFlightMs: maxFlightUs / 1e3,
    tier: tier
      ? { callsIn, meanIn: reservationsIn / Math.max(1, callsIn), busyMaxPct: (100 * gatherBusy) / (spanUs / 2) }
      : null,
  };
}

/** µs to ms; a hold that never came (a 503) is null, which JSON keeps (it turns Infinity into null anyway). */
function ms(us: number): number | null {
  return Number.isFinite(us) ? us / 1e3 : null;
}

export interface ClosedLoop {
  connections: number;
  seconds: number;
  /** Client-to-Worker round trip (wrk on loopback: ≈ 0). */
  clientRttUs: number;
  /** σ (ln scale) of each job's cost around its mean: a real thread's noise (GC, JIT), so batches do not lock step. */
  jitterSigma: number;
  seed: number;
}

export interface ClosedLoopResult {
  perSec: number;
  holdP50Ms: number;
  holdP99Ms: number;
  batch: BatchStats;
}

/**
 * This machine as the bench measures it: wrk's connections in a closed loop (each sends its next
 * request when the last one answers) to one workerd, where the Worker's isolate and the stock object
 * share one event-loop thread, so edge work and object calls queue for that thread in FIFO order.
 */
export function simulateClosedLoop(loop: ClosedLoop, costs: Costs): ClosedLoopResult {
  type Job = { edge: number } | { call: number[] };
  const jobs: Job[] = [];
  let jobHead = 0;
  const waiting: number[] = []; // connections whose edge work is done, waiting for the next batch
  let inFlight = false;
  const sentAt = new Float64Array(loop.connections);
  const holds: number[] = [];
  const sizes: number[] = [];
  const endUs = loop.seconds * 1e6;
  const warmUs = endUs / 4;
  let answered = 0;
  // Requests on their way in from the client: (time, connection), in time order (all take clientRttUs).
  const incoming: { t: number; conn: number }[] = [];
  let incomingHead = 0;
  for (let c = 0; c < loop.connections; c++) incoming.push({ t: loop.clientRttUs / 2, conn: c });

  const rand = seededRandom(loop.seed);
  // Lognormal around 1 with mean 1, so the mean cost stays the measured one.
  const noise = () => Math.exp(loop.jitterSigma * normal(rand) - (loop.jitterSigma * loop.jitterSigma) / 2);
  let now = 0;
  const sendBatch = () => {
    const batch = waiting.splice(0, MAX_BATCH);
    if (batch.length === 0) return;
    inFlight = true;
    sizes.push(batch.length);
    jobs.push({ call: batch });
  };
  while (now < endUs) {
    // Whatever has reached workerd by now is queued behind what is already there.
    while (incomingHead < incoming.length && (incoming[incomingHead] as { t: number }).t <= now) {
      const r = incoming[incomingHead++] as { t: number; conn: number };
      sentAt[r.conn] = r.t;
      jobs.push({ edge: r.conn });
    }
    const job = jobs[jobHead];
    if (!job) {
      const r = incoming[incomingHead];
      if (!r) break;
      now = r.t; // the thread idles until the next request arrives
      continue;
    }
    jobHead++;
    if ("edge" in job) {
      now += costs.edgeUs * noise();
      waiting.push(job.edge);
      if (!inFlight) sendBatch();
    } else {
      now += (costs.aUs + costs.bUs * job.call.length) * noise();
      for (const c of job.call) {
        if (now >= warmUs) {
          answered++;
          holds.push(now - (sentAt[c] as number));
        }
        incoming.push({ t: now + loop.clientRttUs, conn: c });
      }
      inFlight = false;
      sendBatch();
    }
    if (jobHead > 4096) {
      jobs.splice(0, jobHead);
      jobHead = 0;
    }
  }
  const sorted = Float64Array.from(holds).sort();
  return {
    perSec: answered / ((endUs - warmUs) / 1e6),
    holdP50Ms: quantile(sorted, 0.5) / 1e3,
    holdP99Ms: quantile(sorted, 0.99) / 1e3,
    batch: batchStats(Int32Array.from(sizes.slice(Math.floor(sizes.length / 4)))),
  };
}

// ---------------------------------------------------------------------------------------------
// The scenario the bench prints and stores: costs from this run's figures, the shard table at the
// target, the shards the target needs, how that moves with the assumptions, and the check on this
// machine.

/** Reservations/s on one SKU the shards are sized for (issue 15), and the time-to-hold it must keep. */
export const TARGET = { perSec: 100_000, p99Ms: 1_000 };
export const SHARD_ROWS = [1, 2, 4, 8, 16, 32, 64];

/**
 * Colo-to-object round trips. Cloudflare publishes user-to-colo figures (its network is within about
 * 50 ms of 95% of the Internet-connected population), not colo-to-object ones; an object lives in one
 * place (near its first caller, or where a location hint puts it), so a sale's shoppers reach it from
 * colos across its region and a few from other continents. Assumed: lognormal, median 25 ms, p99 150 ms.
 */
export const RTT: Rtt & { source: string } = {
  medianMs: 25,
  p99Ms: 150,
  jitterSigma: 0.1,
  source:
    "assumption: colos of the object's region at 5–50 ms, other continents at 100–250 ms (https://www.cloudflare.com/network/ gives user-to-colo: ~50 ms for 95% of users; https://developers.cloudflare.com/durable-objects/reference/data-location/: an object runs in one location)",
};

/**
 * Isolates the spike lands on: Cloudflare does not publish isolate counts. One isolate is one thread,
 * so at this bench's ~0.5–1 ms of edge CPU per reservation 100,000/s need at least ~100; a regional
 * spike reaches a few dozen colos with several machines each. Assumed 400 over 40 colos (250
 * reservations/s each); the sensitivity rows show 100 and 1,600.
 */
export const SPREAD = { isolates: 400, colos: 40, seconds: 3 };

/** The isolate counts the issue sizes for (issue 44): where a spike lands on 400, 1,600 or 6,400. */
export const ISOLATE_ROWS = [400, 1_600, 6_400];
/** The most shards a SKU may have (engine/configuration.ts): the isolate table searches no further. */
export const MAX_SHARDS = 64;

/**
 * The gathering tier as it is built (src/edge/gather-name.ts): GATHER_GROUPS gatherers per shard,
 * a colo's isolates all sending to the one its name hashes to, so a stock object has at most that
 * many batches coming, however many isolates and colos a spike lands on. A gatherer runs near its
 * group's first caller, not near each colo of the group, so its round trip is taken as the object's.
 */
export const GATHER_RTT: Rtt & { source: string } = {
  ...RTT,
  source:
    "assumption: as colo-to-object; a gatherer runs near its first caller (https://developers.cloudflare.com/durable-objects/reference/data-location/) and its group's colos are picked by hash, not by place",
};
/** The spread of a spike the tier must also hold: Cloudflare's 300+ colos, every one with isolates. */
export const WIDE = { isolates: 6_400, colos: 300 };

const SEED = 31;

/** Defaults when this run did not measure a figure: issue 31's figures (object alone, state on tmpfs). */
const DEFAULTS = {
  /** An RPC doing nothing (floor_rpc_noop), µs of workerd CPU per call. */
  rpcNoopCpuUs: 88,
  batch1CpuUs: 400,
  batch64CpuUs: 29,
  hotCpuUsPerRequest: 512,
  hotPerSec: 1924,
};

interface EngineFigure {
  batch: number;
  cpuUsPerReservation: number;
}
interface PointFigure {
  rps: number;
  cpuUsPerRequest: number;
  p50Ms: number;
  p99Ms: number;
}

export interface SimInputs {
  aUs: number;
  bUs: number;
  /** Where a and b come from: the two engine-core figures, and which of them are defaults. */
  from: { batch: number; cpuUsPerReservation: number; figure: string }[];
  maxCallsPerSec: number;
  /** Edge CPU per reservation: the hot-SKU point's CPU per request less the object's share in it. */
  edgeUs: number;
  notes: string[];
}

/** The gatherer's costs and where they come from. */
export interface TierInputs extends Omit<Tier, "rtt"> {
  rtt: typeof GATHER_RTT;
  from: string;
  notes: string[];
}

/** The shards the target needs at one isolate count, with and without the tier. */
export interface IsolateRow {
  isolates: number;
  colos: number;
  without: number | null;
  with: number | null;
  /** The spike at the tier's answer (or at 64 shards when none passes), for its batches and gatherers. */
  withTier: SpikeResult;
}

export interface Sensitivity {
  label: string;
  isolates: number;
  capped: boolean;
  rttMedianMs: number;
  rttP99Ms: number;
  shards: number | null;
}

export interface Validation {
  point: string;
  connections: number;
  /** CPU µs per request the point measured, and the rate it measured. */
  measuredCpuUsPerRequest: number;
  measuredPerSec: number;
  measuredP50Ms: number;
  measuredP99Ms: number;
  predicted: ClosedLoopResult;
  ratio: number;
  within25Pct: boolean;
}

export interface CapacitySimulation {
  target: typeof TARGET;
  spread: typeof SPREAD;
  rtt: typeof RTT;
  maxBatch: number;
  maxWaitMs: number;
  seed: number;
  inputs: SimInputs;
  rows: SpikeResult[];
  /** Fewest shards holding TARGET.perSec with p99 under TARGET.p99Ms and no 503 (null: none up to 256). */
  shardsForTarget: number | null;
  sensitivity: Sensitivity[];
  validation: Validation | null;
  tier: TierInputs;
  /** Shards for the target at ISOLATE_ROWS isolates, without and with the tier (null: none up to MAX_SHARDS). */
  isolateRows: IsolateRow[];
}

const finite = (v: unknown): v is number => typeof v === "number" && Number.isFinite(v);

/** a and b from two engine-core figures: a call of n costs n × (CPU per reservation at n) = a + b·n. */
export function objectCosts(figures: Record<string, unknown>): Pick<SimInputs, "aUs" | "bUs" | "from" | "notes"> {
  const notes: string[] = [];
  const pick = (key: string, batch: number, fallback: number) => {
    const f = figures[key] as EngineFigure | undefined;
    if (f && finite(f.cpuUsPerReservation) && finite(f.batch))
      return { batch: f.batch, cpuUsPerReservation: f.cpuUsPerReservation, figure: key };
    notes.push(
      `${key} not in this run: ${fallback} µs per reservation in batches of ${batch} (issue 31's figure) instead`,
    );
    return { batch, cpuUsPerReservation: fallback, figure: `default (no ${key})` };
  };
  const one = pick("engine_core_batch1", 1, DEFAULTS.batch1CpuUs);
  const many = pick("engine_core", 64, DEFAULTS.batch64CpuUs);
  const cost = (f: { batch: number; cpuUsPerReservation: number }) => f.batch * f.cpuUsPerReservation;
  let bUs = (cost(many) - cost(one)) / (many.batch - one.batch);
  if (!(bUs >= 0)) {
    notes.push("the batch-1 figure costs less per call than a share of the batch-64 one: b taken as 0");
    bUs = 0;
  }
  const aUs = Math.max(0, cost(one) - bUs * one.batch);
  return { aUs, bUs, from: [one, many], notes };
}

/**
 * The gatherer's costs: a + b·n per call it receives from the gatherer figures when this run has
 * them (bench/scenarios/gather-core.ts, measured as the engine core is), else an RPC doing nothing
 * (floor_rpc_noop) per call in and per batch out, with b assumed.
 */
export function gathererCosts(figures: Record<string, unknown>, maxCallsPerSec: number): TierInputs {
  const notes: string[] = [];
  const one = figures.gather_core_batch1 as EngineFigure | undefined;
  const many = figures.gather_core as EngineFigure | undefined;
  const base = { perShard: GATHER_GROUPS, rtt: GATHER_RTT, maxCallsPerSec };
  if (one && many && finite(one.cpuUsPerReservation) && finite(many.cpuUsPerReservation) && many.batch > one.batch) {
    const b = Math.max(0, (many.batch * many.cpuUsPerReservation - one.cpuUsPerReservation) / (many.batch - 1));
    const a = Math.max(0, one.cpuUsPerReservation - b);
    // A call of one through the gatherer is one in and one out: half of a to each side.
    return {
      ...base,
      inUs: a / 2,
      inPerReservationUs: b,
      outUs: a / 2,
      from: `gather_core_batch1 ${n1(one.cpuUsPerReservation)} µs, gather_core ${n1(many.cpuUsPerReservation)} µs per reservation at batch ${many.batch}`,
      notes,
    };
  }
  const noop = figures.floor_rpc_noop as { cpuUsPerCall?: number } | undefined;
  const rpcUs = finite(noop?.cpuUsPerCall) ? noop.cpuUsPerCall : DEFAULTS.rpcNoopCpuUs;
  notes.push(
    `gatherer not measured in this run: ${n0(rpcUs)} µs per call in and per batch out (${finite(noop?.cpuUsPerCall) ? "floor_rpc_noop, an RPC doing nothing" : "issue 31's floor_rpc_noop"}), 3 µs per reservation assumed; to be measured (gather_core)`,
  );
  return { ...base, inUs: rpcUs, inPerReservationUs: 3, outUs: rpcUs, from: "floor_rpc_noop", notes };
}

function passes(r: SpikeResult): boolean {
  return (
    r.busy === 0 && r.holdP99Ms !== null && r.holdP99Ms < TARGET.p99Ms && r.sustainedPerSec >= 0.98 * r.offeredPerSec
  );
}

function spikeAt(shards: number, over: Partial<Spike> = {}): Spike {
  return {
    shoppers: TARGET.perSec * SPREAD.seconds,
    seconds: SPREAD.seconds,
    isolates: SPREAD.isolates,
    colos: SPREAD.colos,
    shards,
    rtt: RTT,
    seed: SEED,
    ...over,
  };
}

/**
 * The fewest shards that pass: doubling from `from` (a bound no fewer shards can beat) up to 256
 * until one passes, then bisection below it, to within `tolerance` × the answer (`known` are results
 * already simulated with these settings).
 */
function shardsNeeded(
  run: (shards: number) => SpikeResult,
  from: number,
  known: Map<number, SpikeResult> = new Map(),
  tolerance = 0,
  max = 256,
): number | null {
  const at = (s: number) => {
    let r = known.get(s);
    if (!r) {
      r = run(s);
      known.set(s, r);
    }
    return r;
  };
  let lo = from - 1;
  for (let s = from; lo < max; s = Math.min(2 * s, max)) {
    if (passes(at(s))) {
      let hi = s;
      while (hi - lo > Math.max(1, tolerance * hi)) {
        const mid = (lo + hi) >> 1;
        if (passes(at(mid))) hi = mid;
        else lo = mid;
      }
      return hi;
    }
    lo = s;
  }
  return null;
}

/** The hot-SKU point measured on the Worker's own socket, which the closed-loop mode is checked against. */
const VALIDATION_POINT = "hot_sku_direct";

export function capacitySimulation(
  figures: Record<string, unknown>,
  points: Record<string, unknown>,
  maxCallsPerSec: number,
): CapacitySimulation {
  const { aUs, bUs, from, notes } = objectCosts(figures);
  const hot = points[VALIDATION_POINT] as PointFigure | undefined;
  const measured = hot && finite(hot.cpuUsPerRequest) && finite(hot.rps) ? hot : null;
  if (!measured)
    notes.push(
      `${VALIDATION_POINT} not in this run: ${DEFAULTS.hotCpuUsPerRequest} µs per request at ${DEFAULTS.hotPerSec}/s (issue 31's figure) for the edge cost; no validation`,
    );
  const cpuPerRequest = measured?.cpuUsPerRequest ?? DEFAULTS.hotCpuUsPerRequest;

  // Locally the point's CPU per request is the edge's plus the object's share at the batch it ran
  // with; that batch is the closed loop's own, so solve for the edge cost by a few rounds of it.
  const connections = 50;
  const local = (edgeUs: number) =>
    simulateClosedLoop(
      { connections, seconds: 8, clientRttUs: 0, jitterSigma: 0.25, seed: SEED },
      { aUs, bUs, edgeUs, maxCallsPerSec: Number.POSITIVE_INFINITY },
    );
  let edgeUs = Math.max(0, cpuPerRequest - (aUs / (connections / 2) + bUs));
  let predicted = local(edgeUs);
  for (let i = 0; i < 3; i++) {
    edgeUs = Math.max(0, cpuPerRequest - (aUs / predicted.batch.mean + bUs));
    predicted = local(edgeUs);
  }
  const validation: Validation | null = measured
    ? {
        point: VALIDATION_POINT,
        connections,
        measuredCpuUsPerRequest: measured.cpuUsPerRequest,
        measuredPerSec: measured.rps,
        measuredP50Ms: measured.p50Ms,
        measuredP99Ms: measured.p99Ms,
        predicted,
        ratio: predicted.perSec / measured.rps,
        within25Pct: Math.abs(predicted.perSec / measured.rps - 1) <= 0.25,
      }
    : null;

  const capped = { aUs, bUs, edgeUs, maxCallsPerSec };
  const uncapped = { ...capped, maxCallsPerSec: Number.POSITIVE_INFINITY };
  const rows = SHARD_ROWS.map((shards) => simulateSpike(spikeAt(shards), capped));
  const known = new Map(rows.map((r) => [r.shards, r]));
  // No fewer shards can hold the target than it takes at full batches, each object flat out.
  const perShardMax = (1e6 * MAX_BATCH) / Math.max(aUs + bUs * MAX_BATCH, 1e6 / maxCallsPerSec);
  const floor = Math.max(1, Math.ceil(TARGET.perSec / perShardMax));
  const shardsForTarget = shardsNeeded((s) => simulateSpike(spikeAt(s), capped), floor, known);

  const rtt = { rttMedianMs: RTT.medianMs, rttP99Ms: RTT.p99Ms };
  const variants: Omit<Sensitivity, "shards">[] = [
    { label: "fewer isolates", isolates: 100, capped: true, ...rtt },
    { label: "more isolates", isolates: 1_600, capped: true, ...rtt },
    { label: "no requests/s cap (object CPU only)", isolates: SPREAD.isolates, capped: false, ...rtt },
  ];
  const sensitivity = variants.map((v) => ({
    ...v,
    shards: shardsNeeded(
      (s) =>
        simulateSpike(
          spikeAt(s, {
            isolates: v.isolates,
            colos: Math.min(SPREAD.colos, v.isolates),
            rtt: { ...RTT, medianMs: v.rttMedianMs, p99Ms: v.rttP99Ms },
          }),
          v.capped ? capped : uncapped,
        ),
      floor,
      new Map(),
      // To within 10%: these rows show how the answer moves, and spikes of 100+ shards cost the most.
      0.1,
    ),
  }));

  // Issue 44: the isolates a spike lands on, with and without the gathering tier, up to the most
  // shards a SKU may have. Colos stay as above: only the isolates vary.
  const tier = gathererCosts(figures, maxCallsPerSec);
  const spreads = [...ISOLATE_ROWS.map((isolates) => ({ isolates, colos: SPREAD.colos })), WIDE];
  const isolateRows = spreads.map(({ isolates, colos }) => {
    const over = { isolates, colos };
    const withoutKnown =
      isolates === SPREAD.isolates && colos === SPREAD.colos ? known : new Map<number, SpikeResult>();
    const withKnown = new Map<number, SpikeResult>();
    const tiered = (s: number) => simulateSpike(spikeAt(s, { ...over, tier }), capped);
    const without = shardsNeeded((s) => simulateSpike(spikeAt(s, over), capped), floor, withoutKnown, 0, MAX_SHARDS);
    const withTier = shardsNeeded(tiered, floor, withKnown, 0, MAX_SHARDS);
    const at = withTier ?? MAX_SHARDS;
    return { isolates, colos, without, with: withTier, withTier: withKnown.get(at) ?? tiered(at) };
  });

  return {
    target: TARGET,
    spread: SPREAD,
    rtt: RTT,
    maxBatch: MAX_BATCH,
    maxWaitMs: MAX_WAIT_MS,
    seed: SEED,
    inputs: { aUs, bUs, from, maxCallsPerSec, edgeUs, notes },
    rows,
    shardsForTarget,
    sensitivity,
    validation,
    tier,
    isolateRows,
  };
}

const n0 = (v: number | null | undefined) =>
  v === null || v === undefined || !Number.isFinite(v) ? "∞" : Math.round(v).toLocaleString("en-US");
const n1 = (v: number | null | undefined) =>
  v === null || v === undefined || !Number.isFinite(v) ? "∞" : v.toFixed(1);

/** The simulation as plain lines: for the bench's output and `npm run capacity`. */
export function simulationLines(sim: CapacitySimulation): string[] {
  const { inputs: i, spread, rtt } = sim;
  const lines = [
    `simulated spike on one SKU: ${n0(sim.target.perSec)} shoppers/s (Poisson) for ${spread.seconds} s at ${spread.isolates} isolates over ${spread.colos} colos; colo-to-object RTT lognormal, median ${rtt.medianMs} ms, p99 ${rtt.p99Ms} ms (${rtt.source})`,
    `  each isolate: one call in flight per shard, the next batch takes what queued (≤ ${sim.maxBatch}); 503 after ${sim.maxWaitMs / 1000} s`,
    `  each object: serial, a + b·batch = ${n0(i.aUs)} + ${n1(i.bUs)}·batch µs (${i.from.map((f) => `${n1(f.cpuUsPerReservation)} µs/reservation at batch ${f.batch}: ${f.figure}`).join("; ")}), at most ${n0(i.maxCallsPerSec)} calls/s; edge ${n0(i.edgeUs)} µs per reservation`,
    ...i.notes.map((n) => `  note: ${n}`),
    "  shards  sustained/s  hold p50 ms  hold p99 ms  503s  batch mean/p50/p99/max  busiest object",
    ...sim.rows.map(
      (r) =>
        `  ${String(r.shards).padStart(6)}  ${n0(r.sustainedPerSec).padStart(11)}  ${n0(r.holdP50Ms).padStart(11)}  ${n0(r.holdP99Ms).padStart(11)}  ${n0(r.busy).padStart(4)}  ${`${n1(r.batch.mean)}/${r.batch.p50}/${r.batch.p99}/${r.batch.max}`.padStart(22)}  ${n0(r.objectBusyMaxPct)}%`,
    ),
    `  shards for ${n0(sim.target.perSec)}/s with p99 < ${n0(sim.target.p99Ms)} ms: ${sim.shardsForTarget ?? "none up to 256"}`,
    ...sim.sensitivity.map(
      (s) =>
        `    ${s.label} (${n0(s.isolates)} isolates${s.capped ? "" : ", no calls/s cap"}, RTT median ${s.rttMedianMs} ms, p99 ${s.rttP99Ms} ms): ${s.shards ?? "none up to 256"}`,
    ),
  ];
  const t = sim.tier;
  lines.push(
    `  with the gathering tier: ${t.perShard} gatherers per shard, colo c's isolates to gatherer c mod ${t.perShard}; isolate-to-gatherer RTT lognormal, median ${t.rtt.medianMs} ms, p99 ${t.rtt.p99Ms} ms (${t.rtt.source})`,
    `    each gatherer: serial, ${n0(t.inUs)} + ${n1(t.inPerReservationUs)}·n µs per call in, ${n0(t.outUs)} µs per batch out (${t.from}), at most ${n0(t.maxCallsPerSec)} calls/s; one batch in flight to its object`,
    ...t.notes.map((n) => `    note: ${n}`),
    `    shards for ${n0(sim.target.perSec)}/s with p99 < ${n0(sim.target.p99Ms)} ms, without and with the tier (with it, at that count: hold p50/p99 ms, object batch mean, gatherer calls' mean, busiest gatherer):`,
    ...sim.isolateRows.map((r) => {
      const w = r.withTier;
      const none = `none ≤ ${MAX_SHARDS}`;
      return `    ${n0(r.isolates).padStart(6)} isolates, ${String(r.colos).padStart(3)} colos: ${String(r.without ?? none).padStart(9)}  ${String(r.with ?? none).padStart(9)}  (${n0(w.holdP50Ms)}/${n0(w.holdP99Ms)}, ${n1(w.batch.mean)}, ${n1(w.tier?.meanIn)}, ${n0(w.tier?.busyMaxPct)}%)`;
    }),
  );
  const v = sim.validation;
  lines.push(
    v
      ? `  check on this machine (${v.point}: 1 isolate sharing workerd's thread with the object, RTT 0, ${v.connections} closed-loop connections): predicted ${n0(v.predicted.perSec)}/s (hold p50 ${n1(v.predicted.holdP50Ms)} ms, p99 ${n1(v.predicted.holdP99Ms)} ms, batch mean ${n1(v.predicted.batch.mean)}), measured ${n0(v.measuredPerSec)}/s (p50 ${n1(v.measuredP50Ms)} ms, p99 ${n1(v.measuredP99Ms)} ms): ratio ${v.ratio.toFixed(2)}, ${v.within25Pct ? "within" : "NOT within"} 25%`
      : "  check on this machine: no hot-SKU point in this run",
  );
  return lines;
}
