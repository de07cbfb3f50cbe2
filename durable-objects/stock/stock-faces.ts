/**
 * The stock object as each caller sees it: one typed interface per caller, so a stub reaches only
 * what its holder needs. `SkuStock` implements all three; what only its own parts use (the host in
 * stock-host.ts) is private and not reachable over RPC. This module imports no class, so both the
 * object and its callers depend on it and never on each other.
 */
import type { Audit, OpenWork } from "../engine/audit";
import type { SkuSettings } from "../engine/configuration";
import type { DrawInfo, DrawnEntry, DrawPlace, Entrant } from "../engine/opening-draw";
import type { GrantAnswer, PaymentAnswer, PaymentCommand, PaymentTotals, UnitClaim } from "../engine/payments";
import type { Pruned } from "../engine/retention";
import type { Outcome, Reservation, ReserveOutcome, ReserveRequest, SkuState, SpentDigest } from "../engine/types";
import type { WaitlistEntry, WaitlistMode, WaitlistPlace } from "../engine/waitlist";
import type { MirrorCheck } from "./mirror-publisher";
import type { SkuChange } from "./sku-change";

/** A stub of the stock object narrowed to one face (the brand is what `DurableObjectStub` requires). */
export type StockStub<Face> = DurableObjectStub<Face & Rpc.DurableObjectBranded>;

/** What the edge calls: the shopper's routes, the gatherer, the draw client, the SKU's state. */
export interface EdgeFace {
  state(): SkuState | null;
  /**
   * Shard 0: the state and, before a scheduled start, the tier an access code admits the user to,
   * or the claim tier that admits them already (`claimTier`: the code is then not taken). A code is
   * taken only for a SKU with a unit (`soldOut`: it has none, the code was judged and not taken).
   */
  tokenState(
    userId: string,
    codeHash: string,
    claims?: Record<string, unknown>,
  ): Promise<{ state: SkuState | null; codeTier: string | null; claimTier?: string; soldOut?: boolean; at?: number }>;
  reserve(requests: ReserveRequest[]): Promise<ReserveOutcome[]>;
  cancel(reservationId: string, userId: string, requestId?: string): Promise<Outcome<Reservation>>;
  reservation(reservationId: string): Reservation | null;
  /** The tokens this shard holds reservations for that can still be replayed (the sold-out memory's digest). */
  spentDigest(): SpentDigest;
  /** A user's held + sold on this shard (their home shard: where their limit is kept). */
  quotaOf(userId: string): number;
  awaitDraw(request: ReserveRequest): Promise<ReserveOutcome>;
  /** Shard 0: the draws (a sharded SKU's entrants counted on every shard from a window's opening until its draw is ordered). */
  drawInfo(): Promise<DrawInfo | null>;
  drawEntries(after: number, limit: number, opensAt?: number): DrawnEntry[];
  joinWaitlist(
    userId: string,
    quantity: number,
    requestId?: string,
    skuAvailable?: number,
    variants?: string[],
  ): Promise<Outcome<WaitlistEntry>>;
  /** Shard 0: the buyer's place in the line, with the units they hold themselves (`ownHeld`). */
  waitlistPlace(userId: string): Promise<WaitlistPlace | null>;
  leaveWaitlist(userId: string, requestId?: string): Promise<WaitlistPlace | null>;
  waitlistLength(): number;
}

/**
 * What reconciliation's `repair` did, and the shard's open work after it: reconciliation calls a
 * difference repaired only when this shows it gone, not because the repair was attempted.
 */
export interface RepairDone extends OpenWork {
  /** The reservations re-emitted, each with its new event's seq (sent if below `oldestUnsent`). */
  reemitted: { id: string; seq: number }[];
}

/**
 * A payment's answer as the stock object gives it to the webhooks: the SKU's currency and whether
 * its sale is a test, and for a payment refused for its money on a SKU with a price, what the
 * reservation costs (`expected`).
 */
export type PaymentVerdict = PaymentAnswer & {
  skuCurrency: string;
  skuTest?: boolean;
  expected?: { amount: number; currency: string };
};

/** What the operator's side calls: admin routes, the catalog, payments, reconciliation. */
export interface AdminFace extends Pick<EdgeFace, "state" | "drawInfo"> {
  putSku(change: SkuChange, requestId?: string): Promise<Outcome<SkuState>>;
  addAccessCodes(tier: string, hashes: string[]): boolean;
  accessCodeCounts(): { tier: string; codes: number; taken: number }[];
  applyPayment(command: PaymentCommand, finished?: Reservation): Promise<Outcome<PaymentVerdict>>;
  paymentTotals(): PaymentTotals;
  audit(afterSeq: number, limit: number): Audit | null;
  prune(watermark: number): Promise<Pruned>;
  repair(actions: { reemit: string[]; sweep: boolean; transfers: boolean }): Promise<RepairDone>;
  checkMirror(): Promise<MirrorCheck>;
}

/** What a sibling shard of the same SKU calls (the runners: pulls, waitlist, draw, changes, claims). */
export interface ShardFace extends Pick<EdgeFace, "state" | "quotaOf"> {
  /** The buyer's home shard, asked by shard 0 for the units they hold (the line's `held` leaves them out). */
  heldBy(userId: string): number;
  configure(settings: SkuSettings, requestId?: string): Promise<Outcome<SkuState>>;
  fence(changeId: string): Promise<Outcome<null>>;
  unfence(changeId: string): void;
  /** Shard 0: whether change `changeId` is still being made (a fenced sibling asks from its alarm). */
  changeRuns(changeId: string): boolean;
  setWaitlistMode(mode: WaitlistMode): void;
  serveWaitlist(): Promise<void>;
  holdForWaitlist(entryId: string, userId: string, quantity: number, variants?: string[]): Promise<ReserveOutcome>;
  /** Units given (null: fenced for a resize, nothing given; ask again). */
  giveStock(transferId: string, toShard: number, requested: number, variant?: string): Promise<number | null>;
  grantUnit(claim: UnitClaim): Promise<GrantAnswer>;
  closeDraw(opening: number, windowMs?: number): Promise<Entrant[]>;
  /** The entries this shard recorded for an opening whose entries are still open (its home users'). */
  drawEntriesHere(opening: number): number;
  decideDrawEntry(opening: number, userId: string, place: DrawPlace, seedHash?: string | null): Promise<ReserveOutcome>;
  recordDrawResults(opening: number, results: { userId: string; place: DrawPlace; code: string }[]): void;
  drawOver(opening: number): void;
  /** Shard 0, asked by a sibling whose requests wait past a window's close: decides a due draw now. */
  decideDraw(): void;
}
